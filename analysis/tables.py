"""Result tables as DataFrames, and small Markdown/LaTeX writers.

Every table function returns numbers (a DataFrame a notebook can sort or re-plot); the
``format_*`` helpers and `to_markdown` / `to_latex` turn them into text for the report. The
writers are local (about 60 lines) so the package needs neither ``tabulate`` nor ``jinja2``.

Tables: the paper's Table 1 (final accuracy per benchmark with a 95% interval over seeds and the
average over benchmarks), a suite summary (accuracy at start and end, compute spent), peak memory
normalised to the largest (paper Fig. 6), throughput, and rliable's IQM and probability of
improvement over seeds.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.stats import norm

from benchmarks.telemetry.metrics import (
    COMPUTE_FLOPS,
    COMPUTE_ROLLOUT_SAMPLES,
    COMPUTE_ROLLOUT_TOKENS,
    COMPUTE_WALL_S,
    LEGACY_MEMORY_PEAK_BYTES,
    MEMORY_PEAK_BYTES,
    MEMORY_PEAK_TENSOR_BYTES,
)

from ._common import (
    ACCURACY,
    AVERAGE,
    REFERENCE,
    SE_SUFFIX,
    dataset_label,
    order_algorithms,
    order_datasets,
)
from .claims import Claim
from .curves import final_scores, score_dict
from .gates import CEILING, claim_datasets, evaluate_gates, saturation, untestable
from .load import eval_points
from .protocol import (
    ClaimEstimate,
    area_difference,
    claim_p_value,
    compute_ratio,
    final_difference,
    holm,
    horizon_slope,
    resolved,
    verdict,
)
from .stats import bootstrap_ci, improvement_estimates, interval_estimates

__all__ = [
    "CLAIM_COLUMNS",
    "NOT_REJECTABLE",
    "NOT_TESTED",
    "NO_VERDICT",
    "accuracy_table",
    "claims_table",
    "describe_claims",
    "estimate_claim",
    "format_claims_table",
    "format_accuracy_table",
    "format_number",
    "improvement_table",
    "iqm_table",
    "memory_components_table",
    "memory_table",
    "summary_table",
    "throughput_table",
    "to_latex",
    "to_markdown",
]

_MIB = 2.0**20

logger = logging.getLogger(__name__)


# --- accuracy (paper Table 1) --------------------------------------------------------------


def _interval(
    values: np.ndarray, ses: np.ndarray, reps: int, confidence: float, seed: int
) -> tuple[float, float, float]:
    """Mean and interval over seeds; with one seed, the logged s.e. gives mean -/+ z * s.e."""
    mean = float(np.mean(values))
    if values.shape[0] > 1:
        _, lo, hi = bootstrap_ci(values, "mean", reps=reps, confidence=confidence, seed=seed)
        return mean, float(lo), float(hi)
    z = float(norm.ppf(0.5 + confidence / 2))
    se = float(np.sqrt(np.sum(np.square(ses)))) / max(ses.size, 1)
    return mean, mean - z * se, mean + z * se


def accuracy_table(
    points: pd.DataFrame,
    metric: str = ACCURACY,
    datasets: Sequence[str] | None = None,
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    scale: float = 100.0,
) -> pd.DataFrame:
    """Final accuracy per algorithm and benchmark, mean over seeds with a bootstrap interval.

    The ``Average`` row of each algorithm averages each run over the benchmarks first (as the
    paper does), then takes a stratified bootstrap over runs with benchmarks as strata. With a
    single seed the interval is mean -/+ 1.96 s.e. from the logged ``<metric>_se``.

    Returns:
        Long table: algorithm, dataset, label, mean, lo, hi, pm (half-width), n_runs; values
        multiplied by ``scale`` (100: percent, as in the paper).
    """
    finals = final_scores(points, metric, datasets)
    order = order_datasets(finals["dataset"].unique()) if datasets is None else list(datasets)
    rows = []
    for i, algo in enumerate(order_algorithms(finals["algorithm"].dropna().unique())):
        sub = finals[finals["algorithm"] == algo]
        for ds in order:
            cell = sub[sub["dataset"] == ds]
            if cell.empty:
                continue
            mean, lo, hi = _interval(
                cell["value"].to_numpy(float), cell["se"].to_numpy(float), reps, confidence, seed
            )
            rows.append((algo, ds, dataset_label(ds), mean, lo, hi, len(cell)))
        wide = sub.pivot_table(index="run_id", columns="dataset", values="value", aggfunc="last")
        wide = wide.reindex(columns=order).dropna()
        if len(order) > 1 and len(wide):
            scores = wide.to_numpy(float)
            if scores.shape[0] > 1:
                mean = float(scores.mean())
                _, lo, hi = bootstrap_ci(
                    scores, "mean", reps=reps, confidence=confidence, seed=seed + i
                )
                lo, hi = float(lo), float(hi)
            else:
                ses = sub.set_index("dataset").reindex(order)["se"].to_numpy(float)
                mean, lo, hi = _interval(scores.mean(axis=1), ses, reps, confidence, seed)
            rows.append((algo, AVERAGE, AVERAGE, mean, lo, hi, scores.shape[0]))
    out = pd.DataFrame(
        rows, columns=["algorithm", "dataset", "label", "mean", "lo", "hi", "n_runs"]
    )
    for col in ("mean", "lo", "hi"):
        out[col] = out[col] * scale
    out["pm"] = (out["hi"] - out["lo"]) / 2
    return out[["algorithm", "dataset", "label", "mean", "lo", "hi", "pm", "n_runs"]]


def format_accuracy_table(table: pd.DataFrame, digits: int = 1) -> pd.DataFrame:
    """The paper's Table 1 layout: one row per algorithm, one column per benchmark then
    ``Average``; cells ``mean ± half-width`` (just ``mean`` where no interval exists)."""

    def cell(row: pd.Series) -> str:
        if not np.isfinite(row["pm"]):
            return f"{row['mean']:.{digits}f}"
        return f"{row['mean']:.{digits}f} ± {row['pm']:.{digits}f}"

    if table.empty:
        return pd.DataFrame()
    text = table.assign(cell=table.apply(cell, axis=1))
    wide = text.pivot(index="algorithm", columns="label", values="cell")
    labels = list(dict.fromkeys(table["label"]))
    labels = [lbl for lbl in labels if lbl != AVERAGE] + ([AVERAGE] if AVERAGE in labels else [])
    wide = wide.reindex(index=order_algorithms(wide.index), columns=labels).fillna("–")
    wide.index.name = "algorithm"
    wide.columns.name = None
    return wide


# --- compute, memory, throughput -----------------------------------------------------------


def _run_finals(df: pd.DataFrame) -> pd.DataFrame:
    """Per run: the last value of every compute counter and the peak of memory/peak_bytes."""
    meta = df[["run_id", "algorithm"]].drop_duplicates("run_id").set_index("run_id")
    counters = df[df["metric"].str.startswith("compute/")]
    last = (
        counters.sort_values("step", kind="stable")
        .groupby(["run_id", "metric"])["value"]
        .last()
        .unstack("metric")
    )
    # Runs logged before the per-component accounting named the resident set memory/peak_bytes.
    rss = df["metric"].isin([MEMORY_PEAK_BYTES, LEGACY_MEMORY_PEAK_BYTES])
    mem = df[rss].groupby("run_id")["value"].max()
    out = meta.join(last, how="left").join(mem.rename(MEMORY_PEAK_BYTES), how="left")
    return out.reset_index()


def _col(frame: pd.DataFrame, name: str) -> pd.Series:
    return frame[name] if name in frame.columns else pd.Series(np.nan, index=frame.index)


def summary_table(
    df: pd.DataFrame, dataset: str | None = None, metric: str = ACCURACY
) -> pd.DataFrame:
    """The suite at a glance, one row per algorithm (means over seeds).

    Columns: algorithm, n_runs, start_acc, final_acc, final_acc_se (s.e. over seeds, or the
    logged s.e. with one seed), rollout_samples, rollout_tokens, flops, wall_s, peak_memory_mib.
    Accuracy is on ``dataset``, or averaged over all benchmarks per eval point when None.
    """
    finals = _run_finals(df)
    pts = eval_points(df, dataset)
    acc = pd.DataFrame(columns=["run_id", "start", "final", "final_se"])
    if not pts.empty and metric in pts.columns:
        se_col = metric + SE_SUFFIX
        pts = pts.assign(_se2=pts[se_col] ** 2 if se_col in pts.columns else np.nan)
        per = pts.groupby(["run_id", "eval_index"]).agg(
            value=(metric, "mean"), se2=("_se2", "mean"), n=(metric, "size")
        )
        per["se"] = np.sqrt(per["se2"] / per["n"])
        per = per.reset_index().sort_values("eval_index")
        grouped = per.groupby("run_id")
        acc = pd.DataFrame(
            {
                "start": grouped["value"].first(),
                "final": grouped["value"].last(),
                "final_se": grouped["se"].last(),
            }
        ).reset_index()
    runs = finals.merge(acc, on="run_id", how="left")
    rows = []
    for algo in order_algorithms(runs["algorithm"].dropna().unique()):
        sub = runs[runs["algorithm"] == algo]
        n = len(sub)
        final = sub["final"].astype(float)
        se = final.std(ddof=1) / math.sqrt(n) if n > 1 else float(sub["final_se"].iloc[0])
        rows.append(
            {
                "algorithm": algo,
                "n_runs": n,
                "start_acc": sub["start"].astype(float).mean(),
                "final_acc": final.mean(),
                "final_acc_se": se,
                "rollout_samples": _col(sub, COMPUTE_ROLLOUT_SAMPLES).mean(),
                "rollout_tokens": _col(sub, COMPUTE_ROLLOUT_TOKENS).mean(),
                "flops": _col(sub, COMPUTE_FLOPS).mean(),
                "wall_s": _col(sub, COMPUTE_WALL_S).mean(),
                "peak_memory_mib": _col(sub, MEMORY_PEAK_BYTES).mean() / _MIB,
            }
        )
    return pd.DataFrame(rows)


def memory_table(df: pd.DataFrame) -> pd.DataFrame:
    """Peak memory per algorithm (mean over seeds), and normalised to the largest (paper Fig. 6:
    SPPO's scalar prompt critic versus PPO's token critic and GRPO's G samples per prompt).

    Columns: algorithm, peak_memory_mib, normalised.
    """
    finals = _run_finals(df)
    peak = _col(finals, MEMORY_PEAK_BYTES).groupby(finals["algorithm"]).mean() / _MIB
    peak = peak.reindex(order_algorithms(peak.index))
    top = peak.max()
    return pd.DataFrame(
        {
            "algorithm": peak.index,
            "peak_memory_mib": peak.to_numpy(),
            "normalised": (peak / top).to_numpy() if top and np.isfinite(top) else np.nan,
        }
    )


#: Segments of the stacked memory bar, bottom to top: (label, metric names summed into it).
MEMORY_SEGMENTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("policy weights", ("memory/policy/params_bytes",)),
    ("policy grads", ("memory/policy/grads_bytes",)),
    ("policy Adam", ("memory/policy/optimizer_bytes",)),
    ("critic weights", ("memory/critic/params_bytes",)),
    ("critic grads + Adam", ("memory/critic/grads_bytes", "memory/critic/optimizer_bytes")),
    ("reference weights", ("memory/reference/params_bytes",)),
    ("peak activations", (MEMORY_PEAK_TENSOR_BYTES,)),
)


def memory_components_table(df: pd.DataFrame) -> pd.DataFrame:
    """Memory per component and algorithm (the CPU analogue of the paper's peak VRAM): per run
    the largest value each ``memory/<component>/<kind>_bytes`` and ``memory/peak_tensor_bytes``
    took, then the mean over seeds, in MiB. A run whose critic is smaller than its policy
    (``trainer.critic_model``) is its own row, ``<algorithm> (critic <ratio>x policy)``, or
    ``<algorithm> (critic <model>)`` when the frame has a ``critic_model`` column.

    Columns: algorithm, one per :data:`MEMORY_SEGMENTS` label, total_mib; empty when no run
    logged the accounting (runs from before it, or verl's).
    """
    names = {m for _, ms in MEMORY_SEGMENTS for m in ms}
    sub = df[df["metric"].isin(names)]
    labels = [label for label, _ in MEMORY_SEGMENTS]
    if sub.empty:
        return pd.DataFrame(columns=["algorithm", *labels, "total_mib"])
    per_run = sub.groupby(["run_id", "metric"])["value"].max().unstack("metric")
    cols = ["run_id", "algorithm"] + (["critic_model"] if "critic_model" in df.columns else [])
    meta = df[cols].drop_duplicates("run_id").set_index("run_id")
    meta = meta.reindex(per_run.index)
    if "critic_model" in meta.columns:
        named = meta["critic_model"].notna() & (meta["critic_model"].astype(str) != "")
        meta["algorithm"] = meta["algorithm"].where(
            ~named, meta["algorithm"] + " (critic " + meta["critic_model"].astype(str) + ")"
        )
    else:  # a critic smaller than the policy, recognised from the accounting itself
        pol = per_run.get("memory/policy/params_bytes")
        cri = per_run.get("memory/critic/params_bytes")
        if pol is not None and cri is not None:
            ratio = cri / pol
            # below 0.75: not the policy's own copy (at most its LM head lighter), a smaller model
            small = ratio < 0.75
            meta["algorithm"] = meta["algorithm"].where(
                ~small,
                meta["algorithm"] + " (critic " + ratio.map(lambda r: f"{r:.2g}") + "x policy)",
            )
    per_run = per_run.join(meta["algorithm"], how="left")
    out = pd.DataFrame(index=per_run.index)
    for label, ms in MEMORY_SEGMENTS:
        present = [m for m in ms if m in per_run.columns]
        out[label] = per_run[present].fillna(0.0).sum(axis=1) / _MIB if present else 0.0
    out["algorithm"] = per_run["algorithm"]
    table = out.groupby("algorithm")[labels].mean()
    base = order_algorithms({a.split(" (")[0] for a in table.index})
    table = table.loc[sorted(table.index, key=lambda a: (base.index(a.split(" (")[0]), a))]
    table["total_mib"] = table[labels].sum(axis=1)
    return table.reset_index()


def throughput_table(df: pd.DataFrame) -> pd.DataFrame:
    """Rollout throughput per algorithm: tokens and samples per wall-clock second (per-run
    ratios of the final counters, averaged over seeds).

    Columns: algorithm, rollout_tokens, rollout_samples, wall_s, tokens_per_s, samples_per_s.
    """
    finals = _run_finals(df)
    wall = _col(finals, COMPUTE_WALL_S).replace(0, np.nan)
    finals = finals.assign(
        tokens_per_s=_col(finals, COMPUTE_ROLLOUT_TOKENS) / wall,
        samples_per_s=_col(finals, COMPUTE_ROLLOUT_SAMPLES) / wall,
        rollout_tokens=_col(finals, COMPUTE_ROLLOUT_TOKENS),
        rollout_samples=_col(finals, COMPUTE_ROLLOUT_SAMPLES),
        wall_s=wall,
    )
    cols = ["rollout_tokens", "rollout_samples", "wall_s", "tokens_per_s", "samples_per_s"]
    out = finals.groupby("algorithm")[cols].mean()
    out = out.reindex(order_algorithms(out.index))
    out.index.name = "algorithm"
    return out.reset_index()


# --- rliable aggregates over seeds ---------------------------------------------------------


def iqm_table(
    points: pd.DataFrame,
    metric: str = ACCURACY,
    datasets: Sequence[str] | None = None,
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    starts: Mapping[str, object] | None = None,
) -> pd.DataFrame:
    """IQM and mean of final scores over runs x benchmarks, with stratified bootstrap intervals.

    ``starts`` (run id -> its warm start, e.g. from :func:`analysis.load_items`): resample starts,
    then runs within a start (:func:`analysis.stratified_bootstrap`'s hierarchical option), the
    resampling the claims' intervals use; default: runs stratified by algorithm.

    Columns: algorithm, iqm, iqm_lo, iqm_hi, mean, mean_lo, mean_hi, n_runs.
    """
    scores = score_dict(points, metric, datasets)
    kw = {
        "reps": reps,
        "confidence": confidence,
        "seed": seed,
        "starts": _run_starts(points, metric, datasets, starts),
    }
    q = interval_estimates(scores, "iqm", **kw).set_index("algorithm")
    m = interval_estimates(scores, "mean", **kw).set_index("algorithm")
    out = pd.DataFrame(
        {
            "iqm": q["estimate"],
            "iqm_lo": q["lo"],
            "iqm_hi": q["hi"],
            "mean": m["estimate"],
            "mean_lo": m["lo"],
            "mean_hi": m["hi"],
            "n_runs": q["n_runs"],
        }
    )
    out.index.name = "algorithm"
    return out.reset_index()


def improvement_table(
    points: pd.DataFrame,
    metric: str = ACCURACY,
    datasets: Sequence[str] | None = None,
    *,
    reference: str = REFERENCE,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    starts: Mapping[str, object] | None = None,
) -> pd.DataFrame:
    """P(reference > other) on final scores over seeds, task-averaged over benchmarks.

    Columns: algorithm_x, algorithm_y, probability, lo, hi, n_runs_x, n_runs_y, and
    ``resolved``: the interval excludes 0.5 (a coin flip), with two or more runs on each side.
    With one run a side the bootstrap has no spread to resample and its interval collapses onto
    the estimate, so a 1.0 from one seed each is not resolved. Without ``starts`` the interval
    resamples the two algorithms' runs independently (rliable's definition); with ``starts``
    (run id -> its warm start) it resamples starts, one draw for both algorithms, then each
    one's runs within a start: the claims' resampling, paired by start.
    """
    scores = score_dict(points, metric, datasets)
    table = improvement_estimates(
        scores,
        reference=reference,
        reps=reps,
        confidence=confidence,
        seed=seed,
        starts=_run_starts(points, metric, datasets, starts),
    )
    runs = {algo: int(np.asarray(s).shape[0]) for algo, s in scores.items()}
    n_x = table["algorithm_x"].map(runs).fillna(0).astype(int)
    n_y = table["algorithm_y"].map(runs).fillna(0).astype(int)
    enough = (n_x >= 2) & (n_y >= 2)
    outside = (table["lo"].astype(float) > 0.5) | (table["hi"].astype(float) < 0.5)
    return table.assign(n_runs_x=n_x, n_runs_y=n_y, resolved=(enough & outside).astype(bool))


def _run_starts(
    points: pd.DataFrame,
    metric: str,
    datasets: Sequence[str] | None,
    starts: Mapping[str, object] | None,
) -> dict[str, list] | None:
    """Per algorithm, the start of each row of :func:`analysis.curves.score_dict`'s array (its
    runs, in the same order); None without ``starts`` or when a run's start is unknown."""
    if starts is None:
        return None
    finals = final_scores(points, metric, datasets)
    order = order_datasets(finals["dataset"].unique()) if datasets is None else list(datasets)
    out = {}
    for algo in order_algorithms(finals["algorithm"].dropna().unique()):
        sub = finals[finals["algorithm"] == algo]
        wide = sub.pivot_table(index="run_id", columns="dataset", values="value", aggfunc="last")
        runs = wide.reindex(columns=order).dropna().index
        if len(runs):
            if any(r not in starts for r in runs):
                return None
            out[algo] = [starts[r] for r in runs]
    return out


# --- text writers --------------------------------------------------------------------------


def format_number(value: object, digits: int = 4) -> str:
    """Readable cell text: 3 significant digits in scientific notation for big or tiny numbers
    (FLOPs), thousands separators from 1,000 on, ``digits`` significant digits otherwise, ``–``
    for missing."""
    if value is None:
        return "–"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return f"{int(value):,}"
    if isinstance(value, float | np.floating):
        v = float(value)
        if not math.isfinite(v):
            return "–"
        if v == 0:
            return "0"
        if abs(v) >= 1e7 or abs(v) < 1e-3:
            mantissa, exp = f"{v:.3g}".split("e") if "e" in f"{v:.3g}" else (f"{v:.3g}", "0")
            return f"{mantissa}e{int(exp)}"
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.{digits}g}"
    return str(value)


def _cells(df: pd.DataFrame, index: bool, digits: int) -> tuple[list[str], list[list[str]]]:
    header = ([str(df.index.name or "")] if index else []) + [str(c) for c in df.columns]
    rows = []
    for idx, row in zip(df.index, df.itertuples(index=False), strict=True):
        cells = [format_number(v, digits) for v in row]
        rows.append(([str(idx)] if index else []) + cells)
    return header, rows


def _numeric(df: pd.DataFrame, index: bool) -> list[bool]:
    flags = [pd.api.types.is_numeric_dtype(df[c]) for c in df.columns]
    return ([False] if index else []) + flags


def to_markdown(df: pd.DataFrame, *, index: bool = False, digits: int = 4) -> str:
    """A GitHub-flavoured Markdown table (numbers right-aligned)."""
    header, rows = _cells(df, index, digits)
    align = ["---:" if n else ":---" for n in _numeric(df, index)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(header), "| " + " | ".join(align) + " |", *map(line, rows)]) + "\n"


_LATEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "–": "--",
    "×": r"$\times$",
}


def _latex_escape(text: str) -> str:
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in text)


def to_latex(
    df: pd.DataFrame,
    *,
    index: bool = False,
    digits: int = 4,
    caption: str | None = None,
    label: str | None = None,
) -> str:
    """A booktabs LaTeX table (``\\usepackage{booktabs}``), wrapped in a ``table`` float when a
    caption or label is given."""
    header, rows = _cells(df, index, digits)
    spec = "".join("r" if n else "l" for n in _numeric(df, index))
    body = [
        rf"\begin{{tabular}}{{{spec}}}",
        r"\toprule",
        " & ".join(_latex_escape(h) for h in header) + r" \\",
        r"\midrule",
        *(" & ".join(_latex_escape(c) for c in row) + r" \\" for row in rows),
        r"\bottomrule",
        r"\end{tabular}",
    ]
    if caption is None and label is None:
        return "\n".join(body) + "\n"
    wrapped = [r"\begin{table}[t]", r"\centering"]
    if caption is not None:
        wrapped.append(rf"\caption{{{_latex_escape(caption)}}}")
    if label is not None:
        wrapped.append(rf"\label{{{label}}}")
    return "\n".join([*wrapped, *body, r"\end{table}"]) + "\n"


# --- declared claims: the verdict table ----------------------------------------------------

#: Columns of :func:`claims_table`.
CLAIM_COLUMNS = (
    "claim",
    "statement",
    "estimand",
    "a",
    "b",
    "direction",
    "margin",
    "datasets",
    "family",
    "family_size",
    "n_starts",
    "n_seeds",
    "effect",
    "lo",
    "hi",
    "level",
    "p_value",
    "alpha_adj",
    "lo_adj",
    "hi_adj",
    "p_adj",
    "mde",
    "mde_alpha",
    "conditional",
    "censored",
    "verdict",
    "gates",
    "note",
    "ratio",
    "ratio_censored",
    "ratio_starts",
    "sensitivity",
)
#: The protocol's direction for each declared one (:data:`analysis.claims.DIRECTIONS`).
_DIRECTION = {
    "a >= b": "greater",
    "a > b": "greater",
    "a <= b": "less",
    "a < b": "less",
    "a ~= b": "equivalent",
    "a needs less compute": "less",
    "a needs more compute": "greater",
}
_ESTIMATORS = {
    "horizon_slope": horizon_slope,
    "area_difference": area_difference,
    "compute_ratio": compute_ratio,
    "final_difference": final_difference,
}
NOT_TESTED = "not tested"
NO_VERDICT = "no verdict: conditional on one start"
#: How an untested member of a family (gates fail, no estimate) is shown in Holm's column.
NOT_REJECTABLE = "p = 1, not rejectable"


def estimate_claim(claim: Claim, items: pd.DataFrame, *, seed: int = 0) -> ClaimEstimate:
    """One claim's estimate over starts on the datasets it uses (no gates, no Holm): what the
    verdict table and `sppo-bench power` both start from.

    Raises:
        ValueError: the claim's groups select too few datasets, or the item table cannot pair
            its algorithms.
    """
    used = claim_datasets(claim, items)
    need = 2 if claim.estimand == "horizon_slope" else 1
    if len(used) < need:
        raise ValueError(
            f"groups={claim.groups!r} selects {used or 'no datasets'}; {claim.estimand} "
            f"needs {'two or more groups with distinct horizons' if need == 2 else 'one'}"
        )
    return _ESTIMATORS[claim.estimand](items, claim.a, claim.b, used, seed=seed)


def claims_table(
    claims: Sequence[Claim],
    items: pd.DataFrame,
    df: pd.DataFrame | None = None,
    *,
    alpha: float = 0.05,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per declared claim: its gates, estimate, nominal and Holm-adjusted intervals and
    verdict (:mod:`analysis.protocol`), columns :data:`CLAIM_COLUMNS`.

    A claim is estimated when both its algorithms have items on the datasets it uses; it gets a
    verdict when every gate passes (:func:`analysis.gates.evaluate_gates`), else ``verdict``
    reads ``untestable on this testbed: ...``. ``p_value`` is the claim's own test
    (:func:`analysis.protocol.claim_p_value`: of no effect, or of the margin for a
    non-inferiority or equivalence claim). Holm's adjustment runs per family over its declared
    size: claims that are untestable, not estimated, or not in this store count as p = 1 and
    rank after every tested member; a claim Holm does not reject is not resolved whatever its
    own interval says. ``mde`` is the smallest detectable effect at the level the verdict is
    read at, ``mde_alpha`` (``alpha_adj``; for an untested member, alpha over the family's
    size: the most stringent level it could be read at). With one
    start (``conditional``) the intervals hold for that start and the verdict is
    :data:`NO_VERDICT`. An area claim carries the compute ratio of the same pair as a
    description (``ratio``: the geometric mean over starts, a lower bound when
    ``ratio_censored`` starts never reached the target; not tested).
    """
    rows: list[dict] = []
    estimates: list[ClaimEstimate | None] = []
    present = set(items["algorithm"].dropna()) if len(items) else set()
    for c in claims:
        row = dict.fromkeys(CLAIM_COLUMNS, float("nan"))
        row.update(
            claim=c.name,
            statement=c.sentence,
            estimand=c.estimand,
            a=c.a,
            b=c.b,
            direction=c.direction,
            margin=float("nan") if c.margin is None else c.margin,
            family=c.family.name,
            family_size=c.family.size,
            conditional=False,
            censored=0,
            gates="",
            note="",
            sensitivity="",
        )
        est = None
        absent = [x for x in (c.a, c.b) if x not in present]
        if items.empty:
            row["verdict"] = NOT_TESTED
            row["note"] = "the runs logged no per-item scores (eval_items/)"
        elif absent:
            row["verdict"] = NOT_TESTED
            row["note"] = f"{' and '.join(absent)}: no runs with item scores"
        else:
            used = claim_datasets(c, items)
            row["datasets"] = ", ".join(used)
            gates = evaluate_gates(c, items, df)
            row["gates"] = "; ".join(f"{g.text} {'ok' if g.passes else 'FAIL'}" for g in gates)
            try:
                est = estimate_claim(c, items, seed=seed)
            except ValueError as err:
                row["verdict"], row["note"] = NOT_TESTED, str(err)
            else:
                row.update(
                    n_starts=est.n_starts,
                    n_seeds=est.n_seeds,
                    effect=est.effect,
                    lo=est.lo,
                    hi=est.hi,
                    level=est.level,
                    p_value=claim_p_value(est, _DIRECTION[c.direction], c.margin),
                    conditional=est.conditional,
                    censored=est.censored,
                )
                if c.estimand == "area_difference":
                    row.update(_ratio_beside(items, c, used, seed))
                row["sensitivity"] = _without_saturated(c, items, seed)
                row["verdict"] = untestable(gates)
                if row["verdict"] is not None:
                    row["mde_alpha"] = alpha / c.family.size
                    row["mde"] = est.mde_at(row["mde_alpha"])
                    est = None  # untestable: no verdict, p = 1 in its family
        rows.append(row)
        estimates.append(est)
    for family in dict.fromkeys(c.family.name for c in claims):
        members = [i for i, c in enumerate(claims) if c.family.name == family]
        p = [rows[i]["p_value"] if estimates[i] is not None else float("nan") for i in members]
        for i, h in zip(members, holm(p, alpha, claims[members[0]].family.size), strict=True):
            rows[i].update(alpha_adj=h.alpha_adj, p_adj=h.p_adj)
            est = estimates[i]
            if est is None:
                continue
            c = claims[i]
            rows[i]["lo_adj"], rows[i]["hi_adj"] = est.interval(h.alpha_adj)
            rows[i]["mde"], rows[i]["mde_alpha"] = est.mde_at(h.alpha_adj), h.alpha_adj
            rows[i]["verdict"] = (
                NO_VERDICT
                if est.conditional
                else verdict(
                    est,
                    h.alpha_adj,
                    _DIRECTION[c.direction],
                    margin=c.margin,
                    rejected=h.rejected,
                )  # fmt: skip
            )
    return pd.DataFrame(rows, columns=list(CLAIM_COLUMNS))


def _without_saturated(claim: Claim, items: pd.DataFrame, seed: int) -> str:
    """The sensitivity line: the claim re-estimated without the starts that fail the saturation
    check (a and b end at or above the ceiling on every group it uses), labelled as not the
    verdict; empty when no start fails. Why: a saturated start contributes an effect near 0 by
    construction, which pulls an estimate toward "no difference" (toward non-inferiority); the
    line shows how much the verdict leans on such starts, without choosing starts after the
    fact for the verdict itself."""
    sat = saturation(claim, items)
    if sat.empty:
        return ""
    every = sat.groupby("start")["saturated"].all()
    dropped = sorted(every[every].index, key=str)
    if not dropped:
        return ""
    keep = sorted(every[~every].index, key=str)
    head = (
        f"sensitivity, not the verdict: without the {len(dropped)} start"
        f"{'s' if len(dropped) > 1 else ''} where {claim.a} and {claim.b} end >= {CEILING:g} on "
        f"every group used ({', '.join(map(str, dropped))})"
    )
    if len(keep) < 2:
        return f"{head}: {len(keep)} start left, no estimate over starts"
    try:
        e = estimate_claim(claim, items[items["start"].isin(keep)], seed=seed)
    except ValueError as err:
        return f"{head}: not estimated ({err})"
    ratio = claim.estimand == "compute_ratio"
    point = _ratio_point(e.effect, e.censored) if ratio else _signed(e.effect, False)
    return (
        f"{head}: {point}, {e.level:.0%} interval {_span(e.lo, e.hi, ratio)} over "
        f"{e.n_starts} starts"
    )


def _ratio_beside(items: pd.DataFrame, claim: Claim, used: list[str], seed: int) -> dict:
    """The compute ratio of an area claim's pair, as a description: the rollouts a needs to
    reach b's end-of-budget accuracy over b's (geometric mean over starts; a lower bound when
    a start is censored). Empty when it cannot be estimated."""
    try:
        r = compute_ratio(items, claim.a, claim.b, used, seed=seed)
    except ValueError as err:
        logger.info("no compute ratio beside %s: %s", claim.name, err)
        return {}
    return {"ratio": r.effect, "ratio_censored": r.censored, "ratio_starts": r.n_starts}


def _signed(v: float, ratio: bool) -> str:
    if not np.isfinite(v):
        return "∞" if v > 0 else "–"
    return f"{v:.3g}" if ratio else f"{v:+.3f}"


def _span(lo: float, hi: float, ratio: bool) -> str:
    if not (np.isfinite(lo) or np.isfinite(hi)):
        return "–"
    return f"[{_signed(lo, ratio)}, {_signed(hi, ratio)}]"


def _ratio_point(value: float, censored: float) -> str:
    """A compute ratio's point: "≥ 0.93×" when a start is censored (its value is then a lower
    bound), else "0.93×"."""
    text = f"{value:.3g}×"
    return f"≥ {text}" if np.isfinite(censored) and censored > 0 else text


def _effect_text(r: pd.Series) -> str:
    if r["estimand"] == "compute_ratio" and np.isfinite(r["effect"]):
        return _ratio_point(r["effect"], r["censored"])
    return _signed(r["effect"], r["estimand"] == "compute_ratio")


def _untested(r: pd.Series) -> bool:
    """A member Holm counts as p = 1: no estimate, or gates that fail."""
    return not (np.isfinite(r["lo_adj"]) or np.isfinite(r["hi_adj"])) and not r["conditional"]


def format_claims_table(table: pd.DataFrame) -> pd.DataFrame:
    """The verdict table as text: claim (with its margin), starts x seeds, effect (a censored
    ratio as "≥ x×"), interval (nominal, with the level it reaches) and Holm-adjusted (an
    untested member: "p = 1, not rejectable"), verdict, smallest detectable effect at the
    Holm level, gates."""
    out = []
    for _, r in table.iterrows():
        ratio = r["estimand"] == "compute_ratio"
        cond = bool(r["conditional"])
        nominal = _span(r["lo"], r["hi"], ratio)
        if nominal != "–":
            nominal += f" ({r['level']:.0%}" + (", conditional on one start)" if cond else ")")
        adjusted = _span(r["lo_adj"], r["hi_adj"], ratio)
        if adjusted != "–":
            adjusted += f" (α = {r['alpha_adj']:.4g}" + (", conditional)" if cond else ")")
        elif _untested(r):
            adjusted = NOT_REJECTABLE
        units = f"{int(r['n_starts'])} × {int(r['n_seeds'])}" if np.isfinite(r["n_starts"]) else "–"
        mde = "–"
        if np.isfinite(r["mde"]):
            mde = f"{r['mde']:.3g}" + (" (log)" if ratio else "") + f" at α = {r['mde_alpha']:.4g}"
        effect = _effect_text(r)
        if np.isfinite(r["ratio"]):
            effect += f"; ratio {_ratio_point(r['ratio'], r['ratio_censored'])} (descriptive)"
        out.append(
            {
                "claim": f"{r['claim']}: {r['statement']}",
                "starts × seeds": units,
                "effect": effect,
                "interval": nominal,
                "Holm-adjusted": adjusted,
                "verdict": r["verdict"] + (f" ({r['note']})" if r["note"] else ""),
                "smallest detectable": mde,
                "gates": r["gates"] or "–",
            }
        )
    return pd.DataFrame(out)


def describe_claims(table: pd.DataFrame) -> list[str]:
    """One sentence per row of :func:`claims_table`. A ratio is told as fewer or more compute
    only when the verdict rests on an interval that excludes 1 (never with one start), and as
    "≥ x×" when a start is censored; a difference is told as higher or lower only likewise.
    Every margin claim's sentence names its margin (in the claim, and in the verdict); the
    smallest detectable effect is the one at the claim's Holm level."""
    lines = []
    for _, r in table.iterrows():
        ratio = r["estimand"] == "compute_ratio"
        head = f"**{r['claim']}** (claim: {r['statement']}"
        head += f"; on {r['datasets']})" if isinstance(r["datasets"], str) else ")"
        if not np.isfinite(r["effect"]):
            holm_note = "; in Holm's family: " + NOT_REJECTABLE if np.isfinite(r["p_adj"]) else ""
            lines.append(
                f"- {head}: {r['verdict']}" + (f": {r['note']}" if r["note"] else "") + holm_note
                + "."
            )  # fmt: skip
            continue
        if ratio:
            effect = (
                f"{r['a']} needs {_ratio_point(r['effect'], r['censored'])} {r['b']}'s rollouts"
            )
            if r["censored"] > 0:
                effect += (
                    f" ({int(r['censored'])} censored start{'s' if r['censored'] > 1 else ''})"
                )
        elif r["estimand"] == "horizon_slope":
            effect = f"slope of {r['a']} − {r['b']} per horizon step {_signed(r['effect'], False)}"
        elif r["estimand"] == "area_difference":
            effect = (
                f"{r['a']} − {r['b']} in mean accuracy over the rollout budget (normalised area) "
                f"{_signed(r['effect'], False)}"
            )
        else:
            effect = f"final {r['a']} − {r['b']} {_signed(r['effect'], False)}"
        is_resolved = resolved(r["verdict"])
        if ratio and is_resolved:
            effect += f" ({'fewer' if r['hi_adj'] < 1 else 'more'})"
        cond = " conditional on one start" if r["conditional"] else ""
        interval = (
            f"{r['level']:.0%} interval {_span(r['lo'], r['hi'], ratio)}{cond} over "
            f"{int(r['n_starts'])} start{'s' if r['n_starts'] != 1 else ''} × "
            f"{int(r['n_seeds'])} seed{'s' if r['n_seeds'] != 1 else ''}"
        )
        tested = np.isfinite(r["alpha_adj"]) and np.isfinite(r["lo_adj"])
        adjusted = (
            f"Holm-adjusted (α = {r['alpha_adj']:.4g} in family {r['family']} of "
            f"{int(r['family_size'])}): {_span(r['lo_adj'], r['hi_adj'], ratio)}"
            if tested
            else f"in family {r['family']}'s tests: {NOT_REJECTABLE}"
        )
        if not is_resolved and tested:
            adjusted += (
                f"; it includes {1 if ratio else 0} (no difference)" if _covers(r, ratio) else ""
            )
        mde = _mde_text(r)
        described = ""
        if np.isfinite(r["ratio"]):
            described = (
                f" Descriptive, not tested: {r['a']} needs "
                f"{_ratio_point(r['ratio'], r['ratio_censored'])} {r['b']}'s rollouts to reach "
                f"{r['b']}'s end-of-budget accuracy (geometric mean over "
                f"{int(r['ratio_starts'])} start{'s' if r['ratio_starts'] != 1 else ''}"
                + (
                    f"; {int(r['ratio_censored'])} censored: a lower bound)"
                    if r["ratio_censored"] > 0
                    else ")"
                )
                + "."
            )
        sens = r.get("sensitivity")
        sensitivity = f" *{sens[0].upper()}{sens[1:]}.*" if isinstance(sens, str) and sens else ""
        lines.append(
            f"- {head}: {effect}; {interval}; {adjusted}: **{r['verdict']}**; {mde}. "
            f"Gates: {r['gates'] or 'none declared'}.{described}{sensitivity}"
        )
    return lines


def _mde_text(r: pd.Series) -> str:
    """The smallest detectable effect at the level the verdict is read at; for a margin claim
    also the effect at which its decision is reached with 80% power."""
    if not np.isfinite(r["mde"]):
        return "smallest detectable effect –"
    ratio = r["estimand"] == "compute_ratio"
    text = (
        f"smallest detectable effect {r['mde']:.3g}" + (" (log ratio)" if ratio else "")
        + f" at α = {r['mde_alpha']:.4g}"
    )  # fmt: skip
    m, mde = r["margin"], r["mde"]
    if not np.isfinite(m):
        return text
    if r["direction"] == "a >= b":
        return text + f" (non-inferior with 80% power at an effect of {mde - m:+.3f} or more)"
    if r["direction"] == "a <= b":
        return text + f" (non-inferior with 80% power at an effect of {m - mde:+.3f} or less)"
    return text + f" (equivalence needs the interval inside ±{m:g})"


def _covers(row: pd.Series, ratio: bool) -> bool:
    null = 1.0 if ratio else 0.0
    lo, hi = row["lo_adj"], row["hi_adj"]
    return bool(np.isfinite(lo) and lo <= null <= hi)
