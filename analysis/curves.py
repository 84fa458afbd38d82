"""Accuracy-versus-compute curves over seeds, score arrays, and compute-to-target.

The harness evaluates every run at the same fractions of its budget, so the eval points of the
seeds of one algorithm line up by ``budget_fraction`` (or, for runs logged without it, by eval
index). `aligned_curves` stacks them into array(runs, points) per algorithm, with the x-position of
each point the mean over seeds of the chosen compute counter (budgets in tokens make FLOPs or
wall-clock differ slightly per seed). `score_dict` gives the rliable shape
array(runs, datasets) of final scores. `compute_to_target` answers "SPPO reaches GRPO's final
accuracy with x times fewer rollout tokens" by linear interpolation on the mean curves, with a
paired interval over seeds (:mod:`analysis.verdicts`) so that a ratio within noise is never told
as a win. That interval is exploratory and labelled with the coverage it reaches
(:data:`TARGET_INTERVAL`): a per-seed bootstrap at nominal 95% that covers about 90% in
simulation; the declared claims' verdicts come from :mod:`analysis.protocol` instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from benchmarks.telemetry.metrics import (
    COMPUTE_FLOPS,
    COMPUTE_PROMPTS,
    COMPUTE_ROLLOUT_SAMPLES,
    COMPUTE_ROLLOUT_TOKENS,
    COMPUTE_WALL_S,
)

from ._common import (
    ACCURACY,
    BUDGET_FRACTION,
    REFERENCE,
    SE_SUFFIX,
    axis_label,
    order_algorithms,
    order_datasets,
)
from .verdicts import (
    DOES_NOT_HOLD,
    HOLDS,
    MIN_VERDICT_SEEDS,
    first_crossing,
    format_ratio,
    paired_ratio_of_means,
    ratio_verdict,
    seed_curves,
    seed_finals,
)

__all__ = [
    "TARGET_INTERVAL",
    "Curve",
    "aligned_curves",
    "compute_to_target",
    "describe_compute_to_target",
    "final_scores",
    "score_dict",
]


@dataclass(frozen=True)
class Curve:
    """One algorithm's eval points over seeds.

    Attributes:
        x: array(points): mean over seeds of the compute column at each eval point.
        y: array(runs, points): the metric; NaN where a run has no such point.
        se: array(runs, points) of the logged standard error, or None when not logged.
        run_ids: the runs, in row order of ``y``.
    """

    x: np.ndarray
    y: np.ndarray
    se: np.ndarray | None
    run_ids: tuple[str, ...]

    @property
    def mean(self) -> np.ndarray:
        """Mean over seeds at each point (NaN-aware)."""
        with np.errstate(invalid="ignore"):
            return np.nanmean(self.y, axis=0)


def _single_dataset(points: pd.DataFrame, dataset: str | None) -> pd.DataFrame:
    present = order_datasets(points["dataset"].dropna().unique())
    if dataset is None:
        if len(present) != 1:
            raise ValueError(f"several datasets present, pass dataset= one of {present}")
        dataset = present[0]
    if dataset not in present:
        raise ValueError(f"no eval points for dataset {dataset!r}; present: {present}")
    return points[points["dataset"] == dataset]


def _align_key(points: pd.DataFrame) -> str:
    """Align seeds on budget fraction when every point has one, else on the eval index."""
    if BUDGET_FRACTION in points.columns and points[BUDGET_FRACTION].notna().all():
        return BUDGET_FRACTION
    return "eval_index"


def _wide(sub: pd.DataFrame, values: str) -> pd.DataFrame:
    """``values`` as array(run_id, _key), the last logged value of each cell, as
    ``pivot_table(aggfunc="last")`` gives it. In plain numpy: the report calls this hundreds of
    times on a few hundred rows, where pandas' per-call overhead made it the report's largest
    cost."""
    run = sub["run_id"].to_numpy()
    key = sub["_key"].to_numpy(float)
    val = sub[values].to_numpy(float)
    ok = ~np.isnan(val) & ~np.isnan(key)
    runs = sorted(set(run[ok].tolist()))
    keys = sorted(set(key[ok].tolist()))
    r_at = {r: i for i, r in enumerate(runs)}
    k_at = {k: j for j, k in enumerate(keys)}
    out = np.full((len(runs), len(keys)), np.nan)
    for r, k, v in zip(run[ok].tolist(), key[ok].tolist(), val[ok].tolist(), strict=True):
        out[r_at[r], k_at[k]] = v  # rows in logged order: the last one wins
    return pd.DataFrame(
        out, index=pd.Index(runs, name="run_id"), columns=pd.Index(keys, name="_key")
    )


def aligned_curves(
    points: pd.DataFrame,
    x: str = COMPUTE_ROLLOUT_TOKENS,
    dataset: str | None = None,
    metric: str = ACCURACY,
) -> dict[str, Curve]:
    """Per algorithm, the eval points of all seeds stacked as array(runs, points).

    Args:
        points: output of :func:`analysis.eval_points`.
        x: the compute column for the x-axis (any ``compute/*`` column, or ``step``).
        dataset: the dataset; may be omitted when only one is present.
        metric: the eval metric leaf (``accuracy``, ``avg@16``, ...).
    """
    pts = _single_dataset(points, dataset)
    for col in (x, metric):
        if col not in pts.columns:
            raise ValueError(f"column {col!r} not in eval points; columns: {list(pts.columns)}")
    key = _align_key(pts)
    pts = pts.assign(_key=pts[key].round(6) if key == BUDGET_FRACTION else pts[key])
    se_col = metric + SE_SUFFIX
    curves: dict[str, Curve] = {}
    for algo in order_algorithms(pts["algorithm"].dropna().unique()):
        sub = pts[pts["algorithm"] == algo]
        y = _wide(sub, metric)
        xs = _wide(sub, x).reindex(index=y.index, columns=y.columns)
        se = None
        if se_col in sub.columns and sub[se_col].notna().any():
            se = _wide(sub, se_col).reindex(index=y.index, columns=y.columns).to_numpy(float)
        with np.errstate(invalid="ignore"):
            x_mean = np.nanmean(xs.to_numpy(float), axis=0)
        curves[algo] = Curve(
            x=x_mean, y=y.to_numpy(float), se=se, run_ids=tuple(str(r) for r in y.index)
        )
    return curves


def final_scores(
    points: pd.DataFrame, metric: str = ACCURACY, datasets: Sequence[str] | None = None
) -> pd.DataFrame:
    """The last eval point of every run and dataset.

    Columns: run_id, algorithm, seed, dataset, value, se (NaN when no ``<metric>_se`` logged).
    """
    pts = points if datasets is None else points[points["dataset"].isin(list(datasets))]
    if metric not in pts.columns:
        raise ValueError(f"metric {metric!r} not in eval points; columns: {list(pts.columns)}")
    last = pts.sort_values("step", kind="stable").groupby(["run_id", "dataset"]).tail(1)
    se_col = metric + SE_SUFFIX
    out = pd.DataFrame(
        {
            "run_id": last["run_id"],
            "algorithm": last["algorithm"],
            "seed": last["seed"] if "seed" in last.columns else np.nan,
            "dataset": last["dataset"],
            "value": last[metric].astype(float),
            "se": last[se_col].astype(float) if se_col in last.columns else np.nan,
        }
    )
    return out.sort_values(["algorithm", "dataset", "run_id"]).reset_index(drop=True)


def score_dict(
    points: pd.DataFrame,
    metric: str = ACCURACY,
    datasets: Sequence[str] | None = None,
    *,
    complete: bool = True,
) -> dict[str, np.ndarray]:
    """Final scores in rliable's shape: ``{algorithm: array(runs, datasets)}``.

    Datasets are ordered as in the paper's Table 1. With ``complete`` runs missing a dataset are
    dropped (IQM and probability of improvement need full arrays); otherwise they hold NaN.
    """
    finals = final_scores(points, metric, datasets)
    order = order_datasets(finals["dataset"].unique()) if datasets is None else list(datasets)
    out: dict[str, np.ndarray] = {}
    for algo in order_algorithms(finals["algorithm"].dropna().unique()):
        sub = finals[finals["algorithm"] == algo]
        wide = sub.pivot_table(index="run_id", columns="dataset", values="value", aggfunc="last")
        wide = wide.reindex(columns=order)
        if complete:
            wide = wide.dropna()
        if len(wide):
            out[algo] = wide.to_numpy(float)
    return out


#: What the compute-to-target interval is and the coverage it reaches: Hesterberg's expanded
#: percentile bootstrap over seeds (:func:`analysis.verdicts.paired_ratio_of_means`), which
#: ignores the start's variance and the items and covers about 90% in simulation
#: (docs/statistics.md), not the 95% it is computed at.
TARGET_INTERVAL = "per-seed bootstrap, coverage about 90% in simulation, not 95%"


def compute_to_target(
    points: pd.DataFrame,
    x: str = COMPUTE_ROLLOUT_TOKENS,
    dataset: str | None = None,
    metric: str = ACCURACY,
    *,
    target: float | None = None,
    reference: str = REFERENCE,
    reps: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Compute each algorithm needs for its mean-over-seeds accuracy to first reach a target.

    The target defaults to the best final mean accuracy among the algorithms other than the
    reference (the baselines): "how much compute does SPPO need to match the best baseline".
    Between eval points the mean curve is interpolated linearly.

    The ratio to the reference also gets a paired interval over seeds (every algorithm of a seed
    shares its warm start): per seed present for both, each curve's own crossing of the target
    (with the default target, the target baseline's final of that seed), and the ratio of means
    over seeds resampled together (:func:`analysis.verdicts.paired_ratio_of_means`; a seed whose
    curve never reaches the target is censored: counted at the compute it spent for one end of
    the interval and as infinite for the other, so it widens the interval towards "unknown").

    Returns:
        One row per algorithm: dataset, algorithm, target, target_source (the baseline that set
        the default target, else ``"given"``), compute (NaN if never reached), reached,
        ``ratio_to_reference`` = compute / reference's compute on the mean curves: the reference
        reaches the target with that many times less compute (NaN without a reference crossing);
        ``ratio_paired``, ``ratio_lo``, ``ratio_hi``: the per-seed ratio of means and its
        paired bootstrap interval at ``confidence`` (NaN with fewer than two paired seeds, and on
        the reference's row); ``interval``: what that interval is and the coverage it reaches
        (:data:`TARGET_INTERVAL`: about 90% at a nominal 95%; empty without one); ``n_seeds``
        paired, ``n_unreached`` of them where either curve never reached the target;
        ``resolved``: the interval excludes 1 (None on the reference's row).
    """
    curves = aligned_curves(points, x=x, dataset=dataset, metric=metric)
    ds = _single_dataset(points, dataset)["dataset"].iloc[0]
    source = "given"
    if target is None:
        finals = {a: c.mean[~np.isnan(c.mean)][-1] for a, c in curves.items() if a != reference}
        finals = {a: v for a, v in finals.items() if np.isfinite(v)}
        if not finals:
            raise ValueError("no baseline besides the reference to take a default target from")
        source = max(finals, key=finals.__getitem__)
        target = float(finals[source])
    crossings = {a: first_crossing(c.x, c.mean, target) for a, c in curves.items()}
    ref = crossings.get(reference, float("nan"))
    rows = []
    for i, (algo, c) in enumerate(crossings.items()):
        paired = {**_PAIRED_NONE, "resolved": None} if algo == reference else _PAIRED_NONE
        if algo != reference and reference in curves:
            paired = _paired_ratio(
                points, x, ds, metric, algo, reference, target, source,
                reps=reps, seed=seed + i, confidence=confidence,
            )  # fmt: skip
        rows.append(
            {
                "dataset": ds,
                "algorithm": algo,
                "x": x,
                "target": target,
                "target_source": source,
                "compute": c,
                "reached": bool(np.isfinite(c)),
                "ratio_to_reference": c / ref if np.isfinite(ref) and ref > 0 else float("nan"),
                **paired,
            }
        )
    return pd.DataFrame(rows)


_PAIRED_NONE: dict[str, object] = {
    "ratio_paired": float("nan"),
    "ratio_lo": float("nan"),
    "ratio_hi": float("nan"),
    "interval": "",
    "n_seeds": 0,
    "n_unreached": 0,
    "resolved": False,
}


def _bounds(xs: np.ndarray, ys: np.ndarray, target: float) -> tuple[float, float] | None:
    """(lower, upper) compute to reach target on one seed's curve: the crossing twice, or the
    compute spent and inf when it never reaches; None for a curve without compute."""
    c = first_crossing(xs, ys, target)
    if np.isfinite(c):
        return c, c
    finite = xs[np.isfinite(xs)]
    return (float(finite.max()), float("inf")) if finite.size else None


def _paired_ratio(
    points: pd.DataFrame,
    x: str,
    dataset: str,
    metric: str,
    algo: str,
    reference: str,
    target: float,
    source: str,
    *,
    reps: int,
    seed: int,
    confidence: float,
) -> dict[str, object]:
    """compute(algo) / compute(reference) to the target, per seed, as a paired ratio of means."""
    other = seed_curves(points, algo, dataset, x, metric)
    ref = seed_curves(points, reference, dataset, x, metric)
    per_seed_target: pd.Series | None = None
    if source != "given":
        finals = seed_finals(points, dataset, metric)
        per_seed_target = finals[source] if source in finals.columns else pd.Series(dtype=float)
    num_lo, num_hi, den_lo, den_hi, unreached = [], [], [], [], 0
    for s, (xs, ys) in other.items():
        if s not in ref:
            continue
        t = target if per_seed_target is None else float(per_seed_target.get(s, np.nan))
        if not np.isfinite(t):
            continue
        num, den = _bounds(xs, ys, t), _bounds(*ref[s], t)
        if num is None or den is None:
            continue
        num_lo.append(num[0])
        num_hi.append(num[1])
        den_lo.append(den[0])
        den_hi.append(den[1])
        unreached += int(np.isinf(num[1]) or np.isinf(den[1]))
    est, lo, hi, _ = paired_ratio_of_means(
        np.array(num_lo), np.array(num_hi), np.array(den_lo), np.array(den_hi),
        reps=reps, seed=seed, confidence=confidence,
    )  # fmt: skip
    n = len(num_lo)
    return {
        "ratio_paired": est,
        "ratio_lo": lo,
        "ratio_hi": hi,
        "interval": TARGET_INTERVAL if n >= 2 and np.isfinite(lo) else "",
        "n_seeds": n,
        "n_unreached": unreached,
        # the reference needs less (lo > 1) or more (hi < 1) compute than algo, beyond noise
        "resolved": ratio_verdict(lo, hi, n) in (HOLDS, DOES_NOT_HOLD),
    }


#: How a sentence names an amount of each compute counter, and whether it is counted.
_AMOUNTS: dict[str, tuple[str, str]] = {
    COMPUTE_ROLLOUT_TOKENS: ("rollout tokens", "fewer"),
    COMPUTE_ROLLOUT_SAMPLES: ("rollout samples", "fewer"),
    COMPUTE_PROMPTS: ("prompts", "fewer"),
    COMPUTE_FLOPS: ("FLOPs", "fewer"),
    COMPUTE_WALL_S: ("wall-clock time", "less"),
}


def _number(row: pd.Series, column: str, default: float = float("nan")) -> float:
    value = row.get(column, default)
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def describe_compute_to_target(table: pd.DataFrame, reference: str = REFERENCE) -> list[str]:
    """One sentence per baseline, e.g. "sppo reaches 0.450 accuracy on math500 (grpo's final)
    with 2.7x fewer rollout tokens than grpo (paired interval over 5 seeds, per-seed bootstrap,
    coverage about 90% in simulation, not 95%: 1.9x to 3.6x)": the interval is labelled with the
    coverage it reaches (:data:`TARGET_INTERVAL`).

    A ratio is told as a win or a loss only when its paired interval over seeds
    (:func:`compute_to_target`) excludes 1; inside it the sentence says "the same ... within
    noise", and without an interval (fewer than two paired seeds) it is marked "not resolved"
    with the mean curves' ratio as a point estimate. No ratio is printed as a bare "1.00x".
    """
    if reference not in set(table["algorithm"]):
        return [f"No {reference} runs: no compute-to-target ratios."]
    lines = []
    for _, row in table.iterrows():
        if row["algorithm"] == reference:
            continue
        other = row["algorithm"]
        what, fewer = _AMOUNTS.get(row["x"], (axis_label(row["x"]), "fewer"))
        goal = f"{row['target']:.3g} accuracy on {row['dataset']}"
        if row["target_source"] != "given":
            goal += f" ({row['target_source']}'s final)"
        ratio = row["ratio_to_reference"]
        if not np.isfinite(ratio):
            same = (table["dataset"] == row["dataset"]) & (table["x"] == row["x"])
            ref_row = table[same & (table["algorithm"] == reference)]
            if ref_row.empty or not bool(ref_row["reached"].iloc[0]):
                lines.append(f"{reference} does not reach {goal}.")
            else:
                lines.append(f"{other} does not reach {goal}; {reference} does.")
            continue
        lo, hi = _number(row, "ratio_lo"), _number(row, "ratio_hi")
        n = int(_number(row, "n_seeds", 0.0))
        if n >= 2 and not (np.isnan(lo) or np.isnan(hi)):
            paired = _number(row, "ratio_paired", ratio)
            seeds = f"paired interval over {n} seeds, {TARGET_INTERVAL}"
            missed = int(_number(row, "n_unreached", 0.0))
            if missed:
                seeds += f", {missed} where a curve never reached the target"
            few = n < MIN_VERDICT_SEEDS  # as the verdicts: too few seeds to tell either way
            if not few and lo > 1:
                lines.append(
                    f"{reference} reaches {goal} with {format_ratio(paired)}x {fewer} {what} "
                    f"than {other} ({seeds}: {format_ratio(lo)}x to {format_ratio(hi)}x)."
                )
            elif not few and hi < 1:
                lines.append(
                    f"{reference} needs {format_ratio(1 / paired)}x more {what} than {other} "
                    f"to reach {goal} ({seeds}: {format_ratio(1 / hi)}x to "
                    f"{format_ratio(1 / lo) + 'x' if lo > 0 else 'unbounded'})."
                )
            elif few or np.isinf(hi) or lo <= 0:  # or a censored seed: the interval is unbounded
                why = f" (a verdict needs {MIN_VERDICT_SEEDS} seeds)" if few else ""
                lines.append(
                    f"not resolved at this power{why}: the {what} {reference} and {other} need "
                    f"to reach {goal} "
                    f"(ratio {other}/{reference} {format_ratio(paired)}, {seeds}: "
                    f"{format_ratio(lo)} to {format_ratio(hi)})."
                )
            else:
                lines.append(
                    f"{reference} and {other} need the same {what} to reach {goal} within "
                    f"noise (ratio {other}/{reference} {format_ratio(paired)}, {seeds}: "
                    f"{format_ratio(lo)} to {format_ratio(hi)})."
                )
            continue
        why = "one curve per algorithm" if n == 1 else "no paired seeds"
        head = f"not resolved (no interval: {why}): on the mean curves"
        if abs(ratio - 1) < 0.005:
            lines.append(
                f"{head} {reference} and {other} need about the same {what} to reach {goal}."
            )
        elif ratio > 1:
            lines.append(
                f"{head} {reference} reaches {goal} with {format_ratio(ratio)}x {fewer} {what} "
                f"than {other}."
            )
        else:
            lines.append(
                f"{head} {reference} needs {format_ratio(1 / ratio)}x more {what} than {other} "
                f"to reach {goal}."
            )
    return list(dict.fromkeys(lines))  # "sppo does not reach" once, not once per baseline
