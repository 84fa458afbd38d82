"""One call from a tidy frame to a directory a reader can open: figures, tables, report.md.

`write_report` is what ``sppo-bench report`` and the end of ``sppo-bench run`` call. Figures are
drawn on off-screen ``Figure`` objects (Agg), never through pyplot, so a report can be written from
a worker thread or a headless CI job and nothing leaks between calls. Every table is written three
ways: CSV (the numbers, for re-use), Markdown (embedded in report.md) and LaTeX (for a paper).
`log_report_to_mlflow` attaches the directory to a run, normally the suite's parent run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.metrics import (
    COMPUTE_AXES,
    COMPUTE_FLOPS,
    COMPUTE_ROLLOUT_SAMPLES,
    COMPUTE_ROLLOUT_TOKENS,
    COMPUTE_WALL_S,
    CRITIC_EXPLAINED_VAR,
    TRAIN_ENTROPY,
    TRAIN_SCORE_MEAN,
)

from ._common import ACCURACY, REFERENCE, axis_label, order_algorithms, order_datasets
from .calibration import (
    CALIBRATION_ARTIFACT,
    calibration_bins,
    calibration_trajectory,
    expected_calibration_error,
    load_calibration,
    plot_calibration,
    plot_calibration_trajectory,
)
from .claims.gates import claim_datasets, per_start_finals
from .claims.protocol import final_difference
from .claims.spec import CLAIMS_PARAM, Claim, claims_from_param
from .claims.table import claims_table, describe_claims, format_claims_table
from .curves import compute_to_target, describe_compute_to_target
from .fit import fit_curves
from .horizon import horizon_table, plot_accuracy_vs_horizon
from .leaderboard import (
    LEADERBOARD_INTERVAL,
    format_leaderboard,
    leaderboard_datasets,
    leaderboard_table,
    per_start_scores,
    plot_performance_profile,
    run_scores,
)
from .load import ITEM_TABLE_COLUMNS, eval_points, load_items, run_params
from .plots import plot_memory, plot_panels, plot_training_curves
from .tables import (
    accuracy_table,
    format_accuracy_table,
    improvement_table,
    iqm_table,
    memory_components_table,
    memory_table,
    summary_table,
    throughput_table,
    to_latex,
    to_markdown,
)

__all__ = ["log_report_to_mlflow", "write_report"]

logger = logging.getLogger(__name__)


def _short(column: str) -> str:
    return column.split("/")[-1]


class _Writer:
    """Collects report sections and writes each table/figure to disk as it goes."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.lines: list[str] = []
        self.files: list[Path] = []

    def figure(
        self, name: str, caption: str, draw: Callable[[Figure], object], size: tuple
    ) -> None:
        fig = Figure(figsize=size, layout="constrained")
        draw(fig)
        for ext in ("png", "pdf"):
            path = self.out / f"{name}.{ext}"
            fig.savefig(path, dpi=150 if ext == "png" else None)
            self.files.append(path)
            # The layout (in inches) is the same for both files; solving it again for the PDF
            # would double the report's largest cost.
            fig.set_layout_engine("none")
        self.lines += [f"![{caption}]({name}.png)", "", f"*{caption}* ([PDF]({name}.pdf))", ""]

    def table(
        self,
        name: str,
        caption: str,
        numbers: pd.DataFrame,
        text: pd.DataFrame | None = None,
        *,
        index: bool = False,
    ) -> None:
        shown = numbers if text is None else text
        md = to_markdown(shown, index=index)
        tex = to_latex(shown, index=index, caption=caption, label=f"tab:{name}")
        numbers.to_csv(self.out / f"{name}.csv", index=False)
        (self.out / f"{name}.md").write_text(md)
        (self.out / f"{name}.tex").write_text(tex)
        self.files += [self.out / f"{name}.{ext}" for ext in ("csv", "md", "tex")]
        self.lines += [
            f"*{caption}*",
            "",
            md,
            f"Files: [{name}.csv]({name}.csv) · [{name}.md]({name}.md) · [{name}.tex]({name}.tex)",
            "",
        ]

    def section(self, title: str, *text: str) -> None:
        self.lines += [f"## {title}", "", *[t for t in text], *([""] if text else [])]


#: ``write_report``'s default for ``claims``: read them from the runs' params.
_FROM_STORE = object()


def _items(df: pd.DataFrame, uri: str | None) -> pd.DataFrame:
    """The item table, or an empty one when the store cannot be read."""
    if uri is None or df.empty:
        return pd.DataFrame(columns=list(ITEM_TABLE_COLUMNS))
    try:
        return load_items(df, uri)
    except Exception as err:  # an unreadable artifact store must not cost the whole report
        logger.warning("per-item scores not read from %s: %s", uri, err)
        return pd.DataFrame(columns=list(ITEM_TABLE_COLUMNS))


@dataclass(frozen=True, eq=False)
class _Report:
    """What every section reads: the arguments of `write_report`, resolved once."""

    df: pd.DataFrame
    points: pd.DataFrame
    metric: str
    x_axes: tuple[str, ...]
    fit_x: str | None
    reference: str
    reps: int
    fit_reps: int
    seed: int
    uri: str | None
    claims: list[Claim] | None
    items: pd.DataFrame
    declared_starts: int | None = None

    @property
    def has_points(self) -> bool:
        return not self.points.empty and self.metric in self.points.columns


def write_report(
    df: pd.DataFrame,
    out_dir: str | Path,
    title: str = "sppo-bench report",
    *,
    metric: str = ACCURACY,
    x_axes: Sequence[str] | None = None,
    fit_x: str | None = None,
    reference: str = REFERENCE,
    reps: int = 2000,
    fit_reps: int = 100,
    seed: int = 0,
    tracking_uri: str | None = None,
    calibration: pd.DataFrame | None = None,
    claims: list[Claim] | None | object = _FROM_STORE,
    items: pd.DataFrame | None = None,
    declared_starts: int | None = None,
) -> Path:
    """Write figures (PNG, PDF), tables (CSV, Markdown, LaTeX) and ``report.md`` into out_dir.

    Args:
        df: tidy frame from :func:`analysis.load_runs`.
        out_dir: created if missing; existing files of the same names are overwritten.
        title: heading of report.md.
        metric: eval metric leaf to report (``accuracy``; ``avg@16`` for the paper's Table 1).
        x_axes: compute axes to plot; default every ``compute/*`` axis the runs logged.
        fit_x: axis of the saturating fit's table; default FLOPs when logged, else the first axis.
        reference: the algorithm ratios and improvement probabilities are relative to.
        reps: bootstrap replicates of the accuracy, IQM and improvement intervals.
        fit_reps: bootstrap replicates of the fit intervals (each one is a refit).
        seed: seeds every bootstrap.
        tracking_uri: store of the runs' calibration tables; default ``df.attrs["tracking_uri"]``.
        calibration: the calibration tables (:func:`analysis.load_calibration`) instead of
            reading them from the store.
        claims: the declared claims (:func:`analysis.claims.spec.parse_claims`); default: those the
            runs logged (their ``claims`` param); None: none declared (no verdicts).
        items: the item table (:func:`analysis.load_items`) instead of reading it from the store.
        declared_starts: the starts the suite declared; over fewer a claim is interim, no verdict.

    Figures, each when its data is present: accuracy versus every compute axis (one panel per
    benchmark), training dynamics (success rate, entropy, critic explained variance versus
    rollout samples), final accuracy versus horizon (``suite=horizon``: two or more horizons),
    prompt-critic calibration (runs that logged ``critic_calibration.json``), peak memory.

    Returns:
        Path of report.md.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    w = _Writer(out)
    r = _prepare(df, metric, x_axes, fit_x, reference, reps, fit_reps, seed, tracking_uri,
                 claims, items, declared_starts)  # fmt: skip
    _header_section(w, r, title)
    _evaluation_sections(w, r)
    _dynamics_section(w, df, reps, seed)
    _calibration_sections(w, r, calibration)
    _resources_section(w, r)
    return _files_section(w)


def _prepare(
    df: pd.DataFrame,
    metric: str,
    x_axes: Sequence[str] | None,
    fit_x: str | None,
    reference: str,
    reps: int,
    fit_reps: int,
    seed: int,
    tracking_uri: str | None,
    claims: list[Claim] | None | object,
    items: pd.DataFrame | None,
    declared_starts: int | None,
) -> _Report:
    """Defaults that depend on the data (the axes, the fit's axis, the store's claims and items)
    are settled once here, so that every section agrees on them."""
    points = eval_points(df)
    has_points = not points.empty and metric in points.columns
    if x_axes is None:
        x_axes = (
            [x for x in COMPUTE_AXES if x in points.columns and points[x].notna().any()]
            if has_points
            else []
        )
    x_axes = tuple(x_axes)
    if fit_x is None and x_axes:
        fit_x = COMPUTE_FLOPS if COMPUTE_FLOPS in x_axes else x_axes[0]
    uri = tracking_uri or df.attrs.get("tracking_uri")
    if claims is _FROM_STORE:
        claims = _declared_claims(df.drop_duplicates("run_id")["run_id"], uri)
    if items is None:
        items = _items(df, uri)
    return _Report(
        df, points, metric, x_axes, fit_x, reference, reps, fit_reps, seed, uri, claims, items,
        declared_starts,
    )  # fmt: skip


def _header_section(w: _Writer, r: _Report, title: str) -> None:
    """A reader must know what was compared (runs, seeds, tasks, models, benchmarks) and how
    intervals are drawn before reading any number."""
    points = r.points
    runs = r.df.drop_duplicates("run_id")
    algos = order_algorithms(runs["algorithm"].dropna().unique())
    seeds = runs.groupby("algorithm")["run_id"].nunique().reindex(algos)
    w.lines += [f"# {title}", ""]
    w.lines += [
        f"- runs: {runs['run_id'].nunique()}; algorithms (runs each): "
        + ", ".join(f"{a} ({int(seeds[a])})" for a in algos),
        f"- tasks: {', '.join(sorted(map(str, runs['task'].dropna().unique()))) or '–'}; "
        f"models: {', '.join(sorted(map(str, runs['model'].dropna().unique()))) or '–'}",
        f"- benchmarks: {', '.join(order_datasets(points['dataset'].unique())) if r.has_points else '–'}"
        f"; metric: `{r.metric}`; intervals after the claims: 95% stratified bootstrap over "
        "seeds (±1.96 s.e. of the eval with one seed)",
        "",
    ]


def _evaluation_sections(w: _Writer, r: _Report) -> None:
    """The declared claims come first and alone carry verdicts; every evaluation section after
    them is exploratory, and all of them need eval points."""
    if not r.has_points:
        w.section("Accuracy", f"No `eval/*/{r.metric}` points were logged: nothing to plot.")
        return
    _claims_section(w, r.claims, r.items, r.df, r.seed, r.declared_starts)
    w.lines += [
        "Everything after the claims is exploratory: comparisons not declared before the "
        "run, with no multiplicity control.",
        "",
    ]
    _accuracy_vs_compute_section(w, r)
    _horizon_section(w, r.points, r.metric, r.reps, r.seed)
    _final_accuracy_section(w, r)
    _leaderboard_section(w, r.points, r.items, r.metric, r.reps, r.seed)
    _fit_section(w, r)
    _compute_to_target_section(w, r)
    _aggregates_section(w, r)


def _accuracy_vs_compute_section(w: _Writer, r: _Report) -> None:
    """The benchmark's central question is accuracy per unit of compute, and the answer can
    differ by axis (FLOPs, tokens, wall-clock): one figure per axis the runs logged."""
    points, metric = r.points, r.metric
    n_ds = points["dataset"].nunique()
    ncols = min(3, n_ds)
    size = (4.6 * ncols, 3.5 * int(np.ceil(n_ds / ncols)))
    w.section("Accuracy versus compute")
    fits: dict[str, pd.DataFrame] = {}
    for x in r.x_axes:
        fits[x] = fit_curves(points, x, None, metric, reps=0)
        dashed = "; dashed: saturating fit" if len(fits[x]) else ""
        scale = "; log scale past the start point" if x == COMPUTE_FLOPS else ""
        w.figure(
            f"accuracy_vs_{_short(x)}",
            f"{metric} versus {axis_label(x)}: mean over seeds with 95% band{dashed}{scale}",
            lambda fig, x=x: plot_panels(
                points, x, metric=metric, fit=fits[x], ncols=ncols, fig=fig, reps=r.reps
            ),
            size,
        )


def _final_accuracy_section(w: _Writer, r: _Report) -> None:
    """The end-of-budget numbers in the paper's Table 1 layout, for a direct comparison."""
    w.section("Final accuracy (paper Table 1 layout)")
    acc = accuracy_table(r.points, r.metric, reps=r.reps, seed=r.seed)
    w.table(
        "accuracy",
        f"Final {r.metric} (%), mean over seeds ± half-width of the 95% interval",
        acc,
        format_accuracy_table(acc),
        index=True,
    )


def _fit_section(w: _Writer, r: _Report) -> None:
    """A final accuracy depends on where the budget stopped; the fit's asymptote and midpoint
    separate how high an algorithm climbs from how fast."""
    if r.fit_x is None:
        return
    metric, fit_x = r.metric, r.fit_x
    w.section(
        "Saturating fit",
        "R(C) = R0 + (A − R0) / (1 + (C_mid / C)^B) (ScaleRL): A is the asymptotic "
        f"{metric}, B the steepness, C_mid the compute for half the gain; on "
        f"{axis_label(fit_x)}, 95% bootstrap intervals; whole tasks only (each group's "
        "final accuracy is in the horizon section).",
    )
    # Per-group datasets (arith_h4, chain_sum_num_terms3) have their own section; their
    # bootstrapped refits would multiply the report's cost for little information.
    whole = leaderboard_datasets(r.points)
    points = r.points[r.points["dataset"].isin(whole)]
    table = fit_curves(points, fit_x, None, metric, reps=r.fit_reps, seed=r.seed)
    if table.empty:
        w.lines += [
            "No fit: each algorithm needs at least three eval points past the start "
            "(four without one at zero compute); raise `budget.eval_fractions`.",
            "",
        ]
    else:
        w.table("fits", f"Saturating fit of {metric} versus {axis_label(fit_x)}", table)


def _targets(r: _Report) -> list[pd.DataFrame]:
    """Compute to target on every axis and benchmark where it is defined (rollout tokens first,
    the axis of the paper's efficiency claim)."""
    targets = []
    for x in [a for a in (COMPUTE_ROLLOUT_TOKENS, *r.x_axes) if a in r.x_axes]:
        for ds in order_datasets(r.points["dataset"].unique()):
            try:
                targets.append(
                    compute_to_target(
                        r.points, x, ds, r.metric, reference=r.reference, reps=r.reps, seed=r.seed
                    )
                )
            except ValueError as err:
                logger.info("no compute-to-target on %s / %s: %s", ds, x, err)
    return targets


def _compute_to_target_section(w: _Writer, r: _Report) -> None:
    """The paper's efficiency claims are about the compute needed to reach a baseline's accuracy,
    not accuracy at a fixed budget."""
    targets = _targets(r)
    if not targets:
        return
    table = pd.concat(targets, ignore_index=True).drop_duplicates(["dataset", "algorithm", "x"])
    # Sentences for the paper's two efficiency claims (rollout tokens, wall-clock); the
    # table below has every axis.
    told = table[table["x"].isin([COMPUTE_ROLLOUT_TOKENS, COMPUTE_WALL_S])]
    sentences = describe_compute_to_target(told if len(told) else table, r.reference)
    w.section(
        "Compute to target (exploratory)",
        "Compute at which the mean over seeds first reaches the target (default: the best "
        "final accuracy among the baselines), interpolated linearly between eval points. "
        "A ratio is told as fewer or more only when its paired bootstrap interval over "
        "seeds (each seed's curves, the target baseline's final of that seed; nominal 95%, "
        "coverage about 90% in simulation) excludes 1 "
        "(`resolved` in the table); a seed whose curve never reaches the target counts "
        "at the compute it spent for one end of the interval and as infinite for the other.",
        *[f"- {s}" for s in sentences],
    )
    w.table("compute_to_target", f"Compute to target, relative to {r.reference}", table)


def _aggregates_section(w: _Writer, r: _Report) -> None:
    """Means over a handful of seeds are fragile; the IQM and the probability of improvement
    (rliable) are the aggregates robust to an outlying run."""
    w.section("Robust aggregates over seeds (rliable; exploratory)")
    items, metric, reference = r.items, r.metric, r.reference
    starts = (
        items.drop_duplicates("run_id").set_index("run_id")["start"].to_dict()
        if len(items) and "run_id" in items.columns
        else None
    )
    how = (
        "starts resampled, then runs within a start, as for the claims"
        if starts is not None
        else "runs resampled by algorithm"
    )
    w.table(
        "iqm",
        f"IQM and mean of final {metric} over runs × benchmarks, 95% bootstrap interval ({how})",
        iqm_table(r.points, metric, reps=r.reps, seed=r.seed, starts=starts),
    )
    improvement = improvement_table(
        r.points, metric, reference=reference, reps=r.reps, seed=r.seed, starts=starts
    )
    if improvement.empty:
        return
    pairing = (
        "starts resampled, one draw for both algorithms, then runs within a start"
        if starts is not None
        else "runs resampled independently"
    )
    w.table(
        "improvement",
        f"Probability of improvement P({reference} > other) on final {metric}, 95% "
        f"bootstrap interval ({pairing}); resolved: the interval excludes 0.5, with "
        "two or more runs a side",
        improvement,
    )


def _calibration_sections(w: _Writer, r: _Report, calibration: pd.DataFrame | None) -> None:
    """SPPO's premise is a prompt critic whose predicted success is calibrated: shown wherever
    the runs logged the predictions, read from the store when not given."""
    if calibration is None and r.uri is not None:
        try:
            calibration = load_calibration(r.df, r.uri)
        except Exception as err:  # an unreadable artifact store must not cost the whole report
            logger.warning("calibration tables not read from %s: %s", r.uri, err)
    if calibration is not None and not calibration.empty:
        _calibration_section(w, calibration)
    if not calibration_trajectory(r.df).empty:
        w.figure(
            "calibration_trajectory",
            "Critic calibration over training: Pearson correlation of each critic's prediction "
            "(prompt critic: sigmoid(v(x)); token critic: its value at the first response token) "
            "with the empirical success over k samples per held-out prompt, at every evaluation "
            "point (faint: seeds); dashed: the paper's 0.642 (Fig. 7)",
            lambda fig: plot_calibration_trajectory(r.df, fig.subplots()),
            (5.0, 3.6),
        )


def _resources_section(w: _Writer, r: _Report) -> None:
    """Accuracy per unit of compute is half the comparison; the other half is what each
    algorithm costs to run (compute, peak memory, throughput)."""
    df = r.df
    w.section("Compute, memory, throughput")
    w.table(
        "summary",
        f"Suite summary: means over seeds; {r.metric} averaged over benchmarks; compute at the end",
        summary_table(df, metric=r.metric),
    )
    components = memory_components_table(df)
    memory = memory_table(df)
    if not components.empty:
        w.figure(
            "memory",
            "Memory per component (mean over seeds of each run's peak, MiB): weights, gradients "
            "and Adam states of the policy and critic, the reference's weights, and the largest "
            "live tensor bytes of any phase on the profiled step (activations, temporaries and "
            "the gradients a backward allocates); a critic smaller than its policy is its own bar",
            lambda fig: plot_memory(df, ax=fig.subplots()),
            (6.2, 3.8),
        )
        w.table("memory_components", "Memory per component (MiB)", components)
        w.table("memory", "Peak resident set (MiB) and normalised to the largest", memory)
    elif memory["normalised"].notna().any():
        w.figure(
            "memory",
            "Peak memory per algorithm (mean over seeds), normalised to the largest, MiB on "
            "each bar; on CPU the process's resident set, interpreter and libraries included",
            lambda fig: plot_memory(df, ax=fig.subplots()),
            (5.0, 3.6),
        )
        w.table("memory", "Peak memory (MiB) and normalised to the largest", memory)
    w.table("throughput", "Rollout throughput (per wall-clock second)", throughput_table(df))


def _files_section(w: _Writer) -> Path:
    """A report directory is also read outside report.md (a paper, MLflow's artifact view): the
    closing list links every file it holds; then report.md itself is written."""
    w.section("Files", *[f"- [{p.name}]({p.name})" for p in w.files])
    report = w.out / "report.md"
    report.write_text("\n".join(w.lines).rstrip() + "\n")
    logger.info("wrote %s (%d files)", report, len(w.files) + 1)
    return report


def _leaderboard_section(
    w: _Writer, points: pd.DataFrame, items: pd.DataFrame, metric: str, reps: int, seed: int
) -> None:
    """Every algorithm ranked on each whole task, over independent starts: only where the runs
    span two or more starts and three or more algorithms (one start ranks a start, not the
    algorithms)."""
    if items.empty or items["start"].nunique() < 2 or points["algorithm"].nunique() < 3:
        return
    starts = items.drop_duplicates("run_id").set_index("run_id")["start"].to_dict()
    known = points[points["run_id"].isin(starts)]
    w.section(
        "Leaderboard",
        "Each algorithm over independent starts (its value at a start: the mean over the start's "
        f"RL seeds), {LEADERBOARD_INTERVAL}. area: the {metric} averaged over the budget (the "
        "normalised area under the curve); rank 1 is the best final; P(> ref): the share of "
        "starts at which it beats grpo (ties half). Costs are means per run. Exploratory: the "
        "declared claims above are the verdicts.",
    )
    for i, dataset in enumerate(leaderboard_datasets(known)):
        table = leaderboard_table(known, starts, dataset, metric=metric, reps=reps, seed=seed)
        suffix = "" if i == 0 else f"_{dataset}"
        w.table(
            f"leaderboard{suffix}",
            f"Leaderboard on {dataset}: final {metric}, IQM, area, rank and P(> grpo), "
            "each with its 95% interval over starts; cost per run",
            table,
            format_leaderboard(table),
        )
        per_start = per_start_scores(run_scores(known, dataset, metric), starts)
        w.figure(
            f"performance_profile{suffix}",
            f"Performance profile on {dataset}: the share of starts whose final {metric} (mean "
            "over the start's seeds) is at least τ; dotted: controls",
            lambda fig, p=per_start: plot_performance_profile(p, ax=fig.subplots()),
            (5.0, 3.6),
        )


def _declared_claims(run_ids: pd.Series, uri: str | None) -> list[Claim] | None:
    """The claims the runs declared (the ``claims`` param every run logs with its config);
    None when the store cannot say (no store, or runs logged before claims were declared)."""
    if uri is None or run_ids.empty:
        return None
    try:
        params = run_params(run_ids.astype(str).tolist()[:1], [CLAIMS_PARAM], uri)
        return claims_from_param(params[CLAIMS_PARAM].iloc[0])
    except Exception as err:  # a store that cannot be read must not cost the whole report
        logger.warning("declared claims not read from %s: %s", uri, err)
        return None


#: How the claims section reads its verdicts, printed at its head.
CLAIMS_RULES = (
    "The claims declared in the suite's config before it ran, and only those. Each is "
    "estimated with its starts as the unit of replication (the starts, then the RL seeds "
    "within a start, then the eval items, docs/statistics.md); the interval's level is the "
    "coverage it reaches in the simulation of this design. Holm's adjustment runs over each "
    "declared family (claims × tasks; members not in this store, and untestable ones, count "
    "as p = 1, not rejectable, and rank after the tested ones): a verdict reads the "
    "Holm-adjusted interval, and the smallest detectable effect is the one at that level. "
    'A claim "a >= b" is non-inferiority with the margin it declared before the run, in '
    "the estimand's units: superior when the interval lies above 0, non-inferior when it "
    'lies above −margin, does not hold when it lies below −margin; "a ~= b" is '
    "equivalent when it lies inside ±margin; anything else is not resolved at this power. "
    "A claim whose gates fail is untestable on this testbed, not a verdict. With one warm "
    "start shared by every seed the intervals are conditional on that start and no verdict "
    "is drawn."
)
#: Added where the suite declared its starts (a campaign read between shards).
INTERIM_RULE = (
    " The suite declared {n} starts before its first shard: a claim read over fewer is interim, "
    "with its estimate and intervals but no verdict, and stays out of Holm's step-down (p = 1), "
    "so reading a campaign shard by shard spends none of its error rate."
)


def _claims_section(
    w: _Writer,
    claims: list[Claim] | None,
    items: pd.DataFrame,
    df: pd.DataFrame,
    seed: int,
    declared_starts: int | None = None,
) -> None:
    """The report's opening: the declared claims' gates, estimates and verdicts."""
    if claims is None:
        w.section(
            "Claims",
            "These runs declared no claims (the `claims` node of their config): no verdict is "
            "drawn, and every comparison below is exploratory.",
        )
        return
    if not claims:
        w.section("Claims", "The config declares no claims (`claims: []`): nothing is tested.")
        return
    table = claims_table(claims, items, df, seed=seed, declared_starts=declared_starts)
    interim = "" if declared_starts is None else INTERIM_RULE.format(n=declared_starts)
    w.section("Claims", CLAIMS_RULES + interim, "", *describe_claims(table))
    w.table("claims", "Declared claims: the verdict table", table, format_claims_table(table))
    critics = per_start_finals(claims, items, df)
    if not critics.empty:
        wide = critics.pivot_table(
            index="start", columns=["algorithm", "metric"], values="value", aggfunc="first"
        )
        wide.columns = [f"{a} {m}" for a, m in wide.columns]
        w.table(
            "claims_gates_per_start",
            "The critics' gate statistics per start (each run's mean over the second half of "
            "the evals that logged it, then the mean over the start's RL seeds): the gate reads "
            "the prompt-level Pearson's one-sided 95% lower bound of the mean over starts; a "
            "token critic's held-out explained variance is shown beside it, not gated",
            critics,
            wide.reset_index(),
        )
    _exploratory_groups(w, claims, items, seed)


def _exploratory_groups(w: _Writer, claims: list[Claim], items: pd.DataFrame, seed: int) -> None:
    """Per group, the paired final difference of each horizon claim's pair: exploratory."""
    lines = []
    for c in claims:
        if c.estimand != "horizon_slope" or not {c.a, c.b} <= set(items["algorithm"]):
            continue
        cells = []
        for ds in claim_datasets(c, items):
            try:
                e = final_difference(items, c.a, c.b, [ds], seed=seed)
            except ValueError as err:
                logger.info("no per-group difference at %s: %s", ds, err)
                continue
            cond = ", conditional" if e.conditional else ""
            cells.append(f"{ds} {e.effect:+.3f} [{e.lo:+.3f}, {e.hi:+.3f}{cond}]")
        if cells:
            lines.append(f"- {c.a} − {c.b}, final, per group (95%): " + "; ".join(cells) + ".")
    if lines:
        w.lines += [
            "*Exploratory* (not declared, no multiplicity control): the per-group final "
            "differences behind the horizon claims.",
            "",
            *lines,
            "",
        ]


_DYNAMICS = (TRAIN_SCORE_MEAN, TRAIN_ENTROPY, CRITIC_EXPLAINED_VAR)


def _dynamics_section(w: _Writer, df: pd.DataFrame, reps: int, seed: int) -> None:
    present = [m for m in _DYNAMICS if (df["metric"] == m).any()]
    if not present:
        return
    x = COMPUTE_ROLLOUT_SAMPLES if (df["metric"] == COMPUTE_ROLLOUT_SAMPLES).any() else "step"
    where = ""
    horizons = df["horizon"].dropna().unique() if "horizon" in df.columns else []
    if len(horizons) > 1:  # a horizon grid: one horizon's runs, not seeds pooled over horizons
        longest = max(horizons)
        df = df[df["horizon"] == longest]
        where = f" at the longest horizon ({int(longest)} steps)"
    w.section(
        "Training dynamics",
        "Per optimizer step: the success rate of the sampled responses, the policy's entropy and "
        "the critic's explained variance (critic algorithms only), the paper's Fig. 4 view of "
        f"PPO's collapse versus SPPO{where}.",
    )
    w.figure(
        "training_curves",
        f"Training metrics versus {axis_label(x)}{where}: mean over seeds (95% band with several)",
        lambda fig: plot_training_curves(df, present, x, fig=fig, reps=min(reps, 1000), seed=seed),
        (4.4 * len(present), 3.4),
    )


def _horizon_section(w: _Writer, points: pd.DataFrame, metric: str, reps: int, seed: int) -> None:
    table = horizon_table(points, metric, reps=reps, seed=seed)
    if table["horizon"].nunique() < 2:
        return
    w.section(
        "Accuracy versus horizon (exploratory)",
        "Final accuracy at each horizon (reasoning steps per problem): the long-horizon "
        "credit-assignment test. Grey dashed: accuracy before RL.",
    )
    w.figure(
        "accuracy_vs_horizon",
        f"Final {metric} versus horizon: mean over seeds with 95% bars (±1.96 s.e. with one seed)",
        lambda fig: plot_accuracy_vs_horizon(points, fig.subplots(), metric=metric, reps=reps),
        (5.4, 3.8),
    )
    w.table("horizon", f"Final {metric} per algorithm and horizon", table)


def _calibration_section(w: _Writer, cal: pd.DataFrame) -> None:
    w.section(
        "Critic calibration",
        f"Prompt critics only (`{CALIBRATION_ARTIFACT}`, logged at the end of each run): "
        "predicted success sigmoid(v(x)) against the policy's success rate over k samples, per "
        "held-out prompt (the paper's Fig. 7). ECE: prompt-weighted mean |predicted − empirical| "
        "over 10 equal-width bins.",
    )
    w.figure(
        "calibration",
        "Reliability diagram of the prompt critic: bin means with 95% bars, dots = prompts, "
        "dashed = perfect calibration",
        lambda fig: plot_calibration(cal, fig.subplots()),
        (5.2, 5.0),
    )
    group = [c for c in ("algorithm", "horizon") if cal[c].notna().any()]
    rows = []
    for key, sub in cal.groupby(group, sort=False) if group else [((), cal)]:
        key = key if isinstance(key, tuple) else (key,)
        bins = calibration_bins(sub)
        rows.append(
            {
                **dict(zip(group, key, strict=True)),
                "runs": sub["run_id"].nunique(),
                "prompts": len(sub),
                "ece": expected_calibration_error(sub["predicted"], sub["empirical"]),
                "mean_predicted": float(sub["predicted"].mean()),
                "mean_empirical": float(sub["empirical"].mean()),
                "bins_used": len(bins),
            }
        )
    w.table("calibration", "Prompt-critic calibration per algorithm", pd.DataFrame(rows))


def log_report_to_mlflow(
    out_dir: str | Path,
    run_id: str,
    *,
    artifact_path: str = "report",
    tracking_uri: str | None = None,
) -> None:
    """Log every file of a report directory as artifacts of a run (the suite's parent run)."""
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri=tracking_uri).log_artifacts(run_id, str(out_dir), artifact_path)
