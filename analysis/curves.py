"""Accuracy-versus-compute curves over seeds, score arrays, and compute-to-target.

The harness evaluates every run at the same fractions of its budget, so the eval points of the
seeds of one algorithm line up by ``budget_fraction`` (or, for runs logged without it, by eval
index). `aligned_curves` stacks them into array(runs, points) per algorithm, with the x-position of
each point the mean over seeds of the chosen compute counter (budgets in tokens make FLOPs or
wall-clock differ slightly per seed). `score_dict` gives the rliable shape
array(runs, datasets) of final scores. `compute_to_target` answers "SPPO reaches GRPO's final
accuracy with x times fewer rollout tokens" by linear interpolation on the mean curves, with a
paired interval over seeds (:func:`paired_ratio_of_means`) so that a ratio within noise is never told
as a win. That interval is exploratory and labelled with the coverage it reaches
(:data:`TARGET_INTERVAL`): a per-seed bootstrap at nominal 95% that covers about 90% in
simulation; the declared claims' verdicts come from :mod:`analysis.claims.protocol` instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import norm
from scipy.stats import t as student_t

from analysis.metrics import (
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

__all__ = [
    "MIN_VERDICT_SEEDS",
    "TARGET_INTERVAL",
    "Curve",
    "aligned_curves",
    "compute_to_target",
    "describe_compute_to_target",
    "final_scores",
    "first_crossing",
    "format_ratio",
    "paired_ratio_of_means",
    "score_dict",
    "seed_curves",
    "seed_finals",
    "tail_probability",
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


# --- per-seed curves and the paired ratio of means over seeds --------------------------------

#: Paired seeds a compute-to-target sentence needs to say "fewer" or "more"; below it the ratio
#: is not resolved whatever its interval says: the most extreme bootstrap mean is the most
#: extreme seed, and all n seeds fall on one side of 1 by chance with probability 2^-n (1 in 8
#: at 3 seeds), so no interval over so few seeds can hold a 2.5% tail.
MIN_VERDICT_SEEDS = 5


def _order_key(points: pd.DataFrame) -> list[str]:
    """Sort eval points by budget fraction when every point has one (then step), else by step."""
    if BUDGET_FRACTION in points.columns and points[BUDGET_FRACTION].notna().all():
        return [BUDGET_FRACTION, "step"]
    return ["step"]


def _rows(points: pd.DataFrame, dataset: str, columns: Sequence[str]) -> pd.DataFrame:
    if "seed" not in points.columns:  # no seed: nothing to pair
        return points.iloc[0:0]
    cols = [c for c in columns if c not in points.columns]
    if cols:
        raise ValueError(f"columns {cols} not in eval points; columns: {list(points.columns)}")
    sub = points[(points["dataset"] == dataset) & points["seed"].notna()]
    return sub.dropna(subset=list(columns))


def seed_finals(
    points: pd.DataFrame, dataset: str, metric: str = ACCURACY, column: str | None = None
) -> pd.DataFrame:
    """Final eval of every (algorithm, seed) on a dataset: array(seeds, algorithms).

    Final = the eval at the largest budget fraction (the last step when a point lacks one).
    ``column`` picks what is read at that eval (default: the metric; a compute column gives the
    compute spent at the final eval). Several runs of one (algorithm, seed) are averaged.
    """
    value = column or metric
    sub = _rows(points, dataset, list(dict.fromkeys([metric, value])))
    if sub.empty:
        return pd.DataFrame()
    last = sub.sort_values(_order_key(sub), kind="stable").groupby("run_id").tail(1)
    wide = last.pivot_table(index="seed", columns="algorithm", values=value, aggfunc="mean")
    wide.columns.name = None
    return wide.astype(float)


def seed_curves(
    points: pd.DataFrame, algorithm: str, dataset: str, x: str, metric: str = ACCURACY
) -> dict[object, tuple[np.ndarray, np.ndarray]]:
    """Per seed, one algorithm's curve on a dataset: seed -> (compute, metric), in eval order.

    Points of several runs of one seed at the same budget fraction are averaged.
    """
    out: dict[object, tuple[np.ndarray, np.ndarray]] = {}
    sub = _rows(points, dataset, list(dict.fromkeys([x, metric])))
    if sub.empty:  # no seed column (nothing to pair) or no point
        return out
    sub = sub[sub["algorithm"] == algorithm]
    key = _order_key(sub)[0]
    for s, cell in sub.groupby("seed", sort=True):
        curve = cell.groupby(key, sort=True)[[x, metric]].mean()
        out[s] = (curve[x].to_numpy(float), curve[metric].to_numpy(float))
    return out


def first_crossing(x: np.ndarray, y: np.ndarray, target: float) -> float:
    """Smallest x where the piecewise-linear curve (x, y) reaches target; NaN if it never does."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    hits = np.flatnonzero(y >= target)
    if hits.size == 0:
        return float("nan")
    i = int(hits[0])
    if i == 0:
        return float(x[0])
    x0, x1, y0, y1 = x[i - 1], x[i], y[i - 1], y[i]
    return float(x0 + (target - y0) * (x1 - x0) / (y1 - y0))


def tail_probability(n: int, confidence: float) -> float:
    """Each tail's probability for the percentile interval over ``n`` seeds: Hesterberg's
    expanded percentile interval. A plain 95% percentile interval of a mean spreads like a normal
    interval with the ddof=0 standard error, so over few seeds it is too narrow; taking the tails
    at z = sqrt(n / (n - 1)) t_{n-1} instead of z_0.975 gives it the t interval's width for
    normal values (0.1% tails at 5 seeds, 0.9% at 10)."""
    q = np.sqrt(n / (n - 1)) * student_t.ppf(0.5 + confidence / 2.0, n - 1)
    return float(norm.sf(q))


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den elementwise; 0 / 0 (both met the target with no compute at all) counts as 1."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.asarray(num, float) / np.asarray(den, float)
    both_zero = (np.asarray(num) == 0) & (np.asarray(den) == 0)
    return np.where(both_zero, 1.0, r)


def paired_ratio_of_means(
    num_lower: np.ndarray,
    num_upper: np.ndarray,
    den_lower: np.ndarray,
    den_upper: np.ndarray,
    *,
    reps: int = 10_000,
    seed: int | np.random.Generator = 0,
    confidence: float = 0.95,
) -> tuple[float, float, float]:
    """Ratio of means sum(num) / sum(den) over seeds with a paired, censoring-aware interval.

    Each side is given per seed as bounds: an observed compute has lower == upper; a curve that
    never reached its target has lower = the compute it spent (it would need at least that) and
    upper = inf (it may never get there). The point estimate is sum(num_lower) / sum(den_lower),
    failures counted at the compute spent. The interval is conservative both ways: its lower end
    is the percentile of sum(num_lower) / sum(den_upper) and its upper end that of
    sum(num_upper) / sum(den_lower), over the same resamples of seeds (``reps`` draws of n seed
    indices with replacement from ``default_rng(seed)``, shared by both sides). Without a failure
    both are the percentile interval of the ratio of means, with Hesterberg's expanded tails
    (:func:`tail_probability`) taken at the replicate at or just outside the nominal rank
    (``method="lower"`` / ``"higher"``), so that an end never interpolates between a finite
    replicate and an infinite one.

    Returns:
        (estimate, lo, hi): NaN throughout without a seed; NaN interval with one.
    """
    arrays = [np.asarray(a, float) for a in (num_lower, num_upper, den_lower, den_upper)]
    n = arrays[0].size
    if n == 0:
        return (float("nan"),) * 3
    nl, nu, dl, du = arrays
    estimate = float(_ratio(nl.sum(), dl.sum()))
    if n < 2:
        return estimate, float("nan"), float("nan")
    idx = np.random.default_rng(seed).integers(0, n, size=(reps, n))
    low = _ratio(nl[idx].sum(axis=1), du[idx].sum(axis=1))
    high = _ratio(nu[idx].sum(axis=1), dl[idx].sum(axis=1))
    alpha = tail_probability(n, confidence)
    lo = float(np.nanpercentile(low, 100 * alpha, method="lower"))
    hi = float(np.nanpercentile(high, 100 * (1 - alpha), method="higher"))
    return estimate, lo, hi


def format_ratio(v: float) -> str:
    """A ratio for a sentence: two decimals, more where two would round a ratio that is not 1
    to a bare "1.00" that hides which side is ahead (1.004 -> "1.004", 0.99996 -> "0.99996")."""
    if not np.isfinite(v):
        return "∞" if v > 0 else "–"
    digits = 2
    while v != 1.0 and f"{v:.{digits}f}" == "1." + "0" * digits and digits < 12:
        digits += 1
    return f"{v:.{digits}f}"


#: What the compute-to-target interval is and the coverage it reaches: Hesterberg's expanded
#: percentile bootstrap over seeds (:func:`paired_ratio_of_means`), which
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
    over seeds resampled together (:func:`paired_ratio_of_means`; a seed whose
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
    est, lo, hi = paired_ratio_of_means(
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
        # the reference needs less (lo > 1) or more (hi < 1) compute than algo, beyond noise,
        # over enough seeds to tell
        "resolved": bool(n >= MIN_VERDICT_SEEDS and (lo > 1 or hi < 1)),
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
            few = n < MIN_VERDICT_SEEDS  # too few seeds to tell either way
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
