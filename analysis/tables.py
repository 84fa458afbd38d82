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

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.stats import norm

from analysis.metrics import (
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
from .curves import final_scores, score_dict
from .load import eval_points
from .stats import bootstrap_ci, improvement_estimates, interval_estimates

__all__ = [
    "accuracy_table",
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
