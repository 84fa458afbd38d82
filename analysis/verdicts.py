"""Verdicts with confidence: paired bootstrap over seeds for the suite's two headline claims.

These compare algorithms over the RL seeds of one run set; they take no account of the warm
start's variance or of the eval items. The claims' protocol (independent starts as the unit,
items resampled, Holm over the declared family, coverage measured by simulation) is
:mod:`analysis.protocol`; docs/statistics.md gives both.

Every algorithm of one seed starts from the same warm start (docs/design.md §3), so the seed is
a shared source of variance: a lucky warm start lifts every algorithm of that seed. Comparing
algorithms run by run therefore pairs them by seed. A *paired* bootstrap resamples seeds with
replacement and applies the same resample to both algorithms of a pair, so the shared per-seed
offset cancels in every replicate; an unpaired bootstrap (each algorithm's seeds resampled on
their own, as :func:`analysis.probability_of_improvement_ci` does) keeps it as noise and can miss
an effect that the pairing resolves (docs/design.md §8: "paired comparisons, and an interval and
a verdict on every printed comparison").

Two estimands:

* `paired_difference`: the mean over seeds of final(a) - final(b), final = the eval at the
  largest budget fraction, with its 95% percentile interval and the minimum detectable effect.
* `rollouts_to_match`: per seed, the compute at which a's curve first reaches b's final accuracy
  of the same seed (linear interpolation between eval points), over b's total compute at its
  final eval; the ratio of means over seeds with a paired interval. Seeds where a never reaches
  are censored (below).

`verdicts` turns them into one row per (claim, task) for the report's opening section; a claim
whose algorithms are not all present is skipped.

Verdicts: a difference claim "a >= b" *holds* when the interval's lower end is above 0, *does
not hold* when its upper end is below 0, else it is *not resolved at this power*. A ratio claim
"a needs less compute" holds when the upper end is below 1, does not hold when the lower end is
above 1, else a and b need *the same within noise* (not resolved when an end is unbounded, which
a censored seed causes). With fewer than two paired seeds there is no
interval (NaN): not resolved. With fewer than :data:`MIN_VERDICT_SEEDS` the interval is printed
but no verdict is drawn: the most extreme bootstrap mean is the most extreme seed, and all n
seeds fall on one side of 0 by chance with probability 2^-n (1 in 8 at 3 seeds), so no
interval over so few seeds can hold a 2.5% tail.

Intervals are Hesterberg's expanded percentile intervals (:func:`tail_probability`): the
bootstrap's tails are taken further out the fewer the seeds. On simulated normal seeds a
"95%" interval then covers the truth 90% of the time at 5 seeds and 93% at 10, where the plain
percentile interval covers 81% and 89% (``tests/analysis/test_verdicts.py``). Percentiles
are taken with ``method="lower"`` / ``"higher"`` (the replicate at or just outside
the nominal rank): the interval never interpolates between a finite replicate and an infinite one
(a censored ratio, below), and is at most one replicate wider than the interpolated one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.stats import norm
from scipy.stats import t as student_t

from benchmarks.telemetry.metrics import COMPUTE_ROLLOUT_SAMPLES, COMPUTE_ROLLOUT_TOKENS

from ._common import ACCURACY, BUDGET_FRACTION, REFERENCE, axis_label, dataset_horizon

__all__ = [
    "DOES_NOT_HOLD",
    "HOLDS",
    "MDE_FACTOR",
    "MIN_VERDICT_SEEDS",
    "NOT_RESOLVED",
    "SAME_WITHIN_NOISE",
    "VERDICT_COLUMNS",
    "PairedEstimate",
    "describe_verdicts",
    "difference_verdict",
    "difficulty_groups",
    "first_crossing",
    "format_ratio",
    "paired_difference",
    "paired_ratio_of_means",
    "mde_factor",
    "ratio_verdict",
    "rollouts_to_match",
    "tail_probability",
    "seed_curves",
    "seed_finals",
    "verdicts",
]

HOLDS = "holds"
DOES_NOT_HOLD = "does not hold"
NOT_RESOLVED = "not resolved at this power"
SAME_WITHIN_NOISE = "the same within noise"

#: Paired seeds a verdict needs; below it a claim is not resolved whatever its interval says.
MIN_VERDICT_SEEDS = 5

#: z_0.975 + z_0.8 = 1.960 + 0.842: the many-seed limit of :func:`mde_factor`.
MDE_FACTOR = float(norm.ppf(0.975) + norm.ppf(0.8))


def mde_factor(n: int) -> float:
    """Standard errors of the smallest effect a two-sided 5% test on ``n`` paired seeds detects
    with 80% power: t_0.975 + t_0.8 at n - 1 degrees of freedom (3.72 at 5 seeds). The normal
    quantiles (2.80) would claim 80% power where a t test over 5 seeds has 56%."""
    return float(student_t.ppf(0.975, n - 1) + student_t.ppf(0.8, n - 1))


#: ``<task>_<field><level>`` (Reasoning Gym's ``task.group_by`` groups, ``chain_sum_num_terms3``).
_GROUP_SUFFIX = re.compile(r"^[A-Za-z_]*?(?P<level>-?[0-9]+)$")


@dataclass(frozen=True, eq=False)
class PairedEstimate:
    """A paired comparison of two algorithms over seeds.

    Attributes:
        kind: ``"difference"`` (effect = mean of a - b) or ``"ratio"`` (effect = ratio of means).
        a, b: the algorithms compared; dataset: where.
        effect: the point estimate; NaN without a paired seed.
        lo, hi: the 95% paired bootstrap percentile interval; NaN with fewer than two seeds.
        n_seeds: paired seeds used.
        mde: the smallest effect (difference) or distance of the ratio from 1 that a two-sided 5%
            test detects with 80% power at this seed count (:func:`mde_factor`); NaN below two
            seeds.
        verdict: one of :data:`HOLDS`, :data:`DOES_NOT_HOLD`, :data:`NOT_RESOLVED`,
            :data:`SAME_WITHIN_NOISE` (ratios only).
        n_failed: ratios: seeds where the curve never reached its target (censored).
        per_seed: seed -> the per-seed difference or ratio (inf where a never reached).
    """

    kind: str
    a: str
    b: str
    dataset: str
    effect: float
    lo: float
    hi: float
    n_seeds: int
    mde: float
    verdict: str
    n_failed: int = 0
    per_seed: dict = field(default_factory=dict)


# --- verdict rules ---------------------------------------------------------------------------


def difference_verdict(lo: float, hi: float, n_seeds: int = MIN_VERDICT_SEEDS) -> str:
    """Verdict on "a >= b" from the interval of a - b over ``n_seeds`` paired seeds: holds
    above 0, does not hold below; not resolved below :data:`MIN_VERDICT_SEEDS` seeds."""
    if np.isnan(lo) or np.isnan(hi) or n_seeds < MIN_VERDICT_SEEDS:
        return NOT_RESOLVED
    if lo > 0:
        return HOLDS
    if hi < 0:
        return DOES_NOT_HOLD
    return NOT_RESOLVED


def ratio_verdict(lo: float, hi: float, n_seeds: int = MIN_VERDICT_SEEDS) -> str:
    """Verdict on "a needs less compute than b" from the interval of compute(a) / compute(b)
    over ``n_seeds`` paired seeds.

    Inside an interval with both ends finite and positive the two need the same compute within
    noise; an unbounded end (a censored seed: a curve that never reached its target) says
    nothing of the kind, so that is not resolved; nor is anything below
    :data:`MIN_VERDICT_SEEDS` seeds.
    """
    if np.isnan(lo) or np.isnan(hi) or n_seeds < MIN_VERDICT_SEEDS:
        return NOT_RESOLVED
    if hi < 1:
        return HOLDS
    if lo > 1:
        return DOES_NOT_HOLD
    if np.isinf(hi) or lo <= 0:
        return NOT_RESOLVED
    return SAME_WITHIN_NOISE


# --- per-seed values from eval points --------------------------------------------------------


def _order_key(points: pd.DataFrame) -> list[str]:
    """Sort eval points by budget fraction when every point has one (then step), else by step."""
    if BUDGET_FRACTION in points.columns and points[BUDGET_FRACTION].notna().all():
        return [BUDGET_FRACTION, "step"]
    return ["step"]


def _rows(points: pd.DataFrame, dataset: str, columns: Iterable[str]) -> pd.DataFrame:
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
    sub = _rows(points, dataset, dict.fromkeys([metric, value]))
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
    sub = _rows(points, dataset, dict.fromkeys([x, metric]))
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


# --- the bootstrap ---------------------------------------------------------------------------


def _resample(n: int, reps: int, seed: int | np.random.Generator) -> np.ndarray:
    """Seed indices of each replicate, array(reps, n): one resample shared by both algorithms."""
    return np.random.default_rng(seed).integers(0, n, size=(reps, n))


def tail_probability(n: int, confidence: float) -> float:
    """Each tail's probability for the percentile interval over ``n`` seeds: Hesterberg's
    expanded percentile interval. A plain 95% percentile interval of a mean spreads like a normal
    interval with the ddof=0 standard error, so over few seeds it is too narrow; taking the tails
    at z = sqrt(n / (n - 1)) t_{n-1} instead of z_0.975 gives it the t interval's width for
    normal values (0.1% tails at 5 seeds, 0.9% at 10)."""
    q = np.sqrt(n / (n - 1)) * student_t.ppf(0.5 + confidence / 2.0, n - 1)
    return float(norm.sf(q))


def _mean_interval(
    values: np.ndarray, reps: int, seed: int | np.random.Generator, confidence: float
) -> tuple[float, float, float, float]:
    """(mean, lo, hi, mde) of per-seed paired values; NaN interval and MDE below two seeds."""
    values = np.asarray(values, float)
    n = values.size
    if n == 0:
        return (float("nan"),) * 4
    mean = float(values.mean())
    if n < 2:
        return mean, float("nan"), float("nan"), float("nan")
    boot = values[_resample(n, reps, seed)].mean(axis=1)
    alpha = tail_probability(n, confidence)
    lo = float(np.percentile(boot, 100 * alpha, method="lower"))
    hi = float(np.percentile(boot, 100 * (1 - alpha), method="higher"))
    mde = mde_factor(n) * float(values.std(ddof=1)) / np.sqrt(n)
    return mean, lo, hi, mde


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
) -> tuple[float, float, float, float]:
    """Ratio of means sum(num) / sum(den) over seeds with a paired, censoring-aware interval.

    Each side is given per seed as bounds: an observed compute has lower == upper; a curve that
    never reached its target has lower = the compute it spent (it would need at least that) and
    upper = inf (it may never get there). The point estimate is sum(num_lower) / sum(den_lower),
    failures counted at the compute spent. The interval is conservative for both verdicts: its
    lower end is the percentile of sum(num_lower) / sum(den_upper) and its upper end that of
    sum(num_upper) / sum(den_lower), over the same resamples of seeds. Without a failure both are
    the (expanded) percentile interval of the ratio of means.

    Returns:
        (estimate, lo, hi, mde): ``mde`` is the smallest distance of the ratio from 1 that a
        two-sided 5% test detects with 80% power, by the delta method: se(R) = sd(num - R den)
        / (sqrt(n) mean(den)) on the point-estimate values. NaN interval and MDE below two seeds.
    """
    arrays = [np.asarray(a, float) for a in (num_lower, num_upper, den_lower, den_upper)]
    n = arrays[0].size
    if n == 0:
        return (float("nan"),) * 4
    nl, nu, dl, du = arrays
    estimate = float(_ratio(nl.sum(), dl.sum()))
    if n < 2:
        return estimate, float("nan"), float("nan"), float("nan")
    idx = _resample(n, reps, seed)
    low = _ratio(nl[idx].sum(axis=1), du[idx].sum(axis=1))
    high = _ratio(nu[idx].sum(axis=1), dl[idx].sum(axis=1))
    alpha = tail_probability(n, confidence)
    lo = float(np.nanpercentile(low, 100 * alpha, method="lower"))
    hi = float(np.nanpercentile(high, 100 * (1 - alpha), method="higher"))
    mde = float("nan")
    if np.isfinite(estimate) and dl.mean() > 0:
        se = float(np.std(nl - estimate * dl, ddof=1)) / (np.sqrt(n) * float(dl.mean()))
        mde = mde_factor(n) * se
    return estimate, lo, hi, mde


# --- the two estimands -----------------------------------------------------------------------


def _paired_values(points: pd.DataFrame, a: str, b: str, dataset: str, metric: str) -> pd.Series:
    """Per paired seed, final(a) - final(b)."""
    finals = seed_finals(points, dataset, metric)
    if a not in finals.columns or b not in finals.columns:
        return pd.Series(dtype=float)
    return (finals[a] - finals[b]).dropna()


def paired_difference(
    points: pd.DataFrame,
    a: str,
    b: str,
    dataset: str,
    metric: str = ACCURACY,
    *,
    reps: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
) -> PairedEstimate:
    """Mean over seeds of final(a) - final(b) with a paired bootstrap interval.

    Seeds are resampled with replacement, the same resample for a and b, so the interval is that
    of the mean per-seed difference. ``mde`` is the minimum detectable effect at this seed count,
    mde_factor(n) * sd(differences) / sqrt(n): the true difference a two-sided 5% t test
    would detect with 80% power (sd with ddof=1). Seeds where
    either algorithm has no final eval are left out. With fewer than two paired seeds the
    interval and the MDE are NaN and the verdict "not resolved at this power".
    """
    diffs = _paired_values(points, a, b, dataset, metric)
    mean, lo, hi, mde = _mean_interval(diffs.to_numpy(float), reps, seed, confidence)
    return PairedEstimate(
        kind="difference",
        a=a,
        b=b,
        dataset=dataset,
        effect=mean,
        lo=lo,
        hi=hi,
        n_seeds=int(diffs.size),
        mde=mde,
        verdict=difference_verdict(lo, hi, int(diffs.size)),
        per_seed=diffs.to_dict(),
    )


def rollouts_to_match(
    points: pd.DataFrame,
    a: str = REFERENCE,
    b: str = "grpo",
    dataset: str | None = None,
    x: str = COMPUTE_ROLLOUT_SAMPLES,
    metric: str = ACCURACY,
    *,
    reps: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
) -> PairedEstimate:
    """Compute a needs to reach b's final accuracy, as a fraction of b's total compute.

    Per paired seed: the compute at which a's curve first reaches b's final ``metric`` of the
    same seed (linear interpolation between eval points, as :func:`analysis.compute_to_target`
    does), over b's compute at its final eval. The effect is the ratio of means over seeds
    (sum of a's computes over sum of b's totals); below 1, a matched b with less compute.

    A seed where a never reaches b's final is a failure, censored (:func:`paired_ratio_of_means`):
    it enters the point estimate at the compute a spent (so the estimate is then a lower bound),
    the interval's lower end likewise, and its upper end as infinite compute, so a failure can
    never make the claim hold and only counts against it by what a is known to have spent.
    ``n_failed`` says how many; ``per_seed`` holds inf for them. Seeds where b's final compute
    is missing or zero are left out. ``mde``: the smallest distance of the ratio from 1
    detectable with 80% power (delta method, :func:`mde_factor`).
    """
    if dataset is None:
        present = sorted(points["dataset"].dropna().unique())
        if len(present) != 1:
            raise ValueError(f"several datasets present, pass dataset= one of {present}")
        dataset = present[0]
    finals = seed_finals(points, dataset, metric)
    totals = seed_finals(points, dataset, metric, column=x) if not finals.empty else finals
    curves = seed_curves(points, a, dataset, x, metric)
    num_lo, num_hi, den, per_seed = [], [], [], {}
    if b in finals.columns and b in totals.columns:
        for s, (xs, ys) in curves.items():
            if s not in finals.index:
                continue
            target, total = finals.at[s, b], totals.at[s, b]
            if not (np.isfinite(target) and np.isfinite(total) and total > 0):
                continue
            reached = first_crossing(xs, ys, target)
            spent = float(np.nanmax(xs)) if np.isfinite(xs).any() else float("nan")
            if np.isfinite(reached):
                num_lo.append(reached)
                num_hi.append(reached)
            elif np.isfinite(spent):
                num_lo.append(spent)
                num_hi.append(np.inf)
            else:
                continue
            den.append(float(total))
            per_seed[s] = num_hi[-1] / float(total)
    failed = int(np.isinf(num_hi).sum()) if num_hi else 0
    est, lo, hi, mde = paired_ratio_of_means(
        np.array(num_lo), np.array(num_hi), np.array(den), np.array(den),
        reps=reps, seed=seed, confidence=confidence,
    )  # fmt: skip
    return PairedEstimate(
        kind="ratio",
        a=a,
        b=b,
        dataset=dataset,
        effect=est,
        lo=lo,
        hi=hi,
        n_seeds=len(den),
        mde=mde,
        verdict=ratio_verdict(lo, hi, len(den)),
        n_failed=failed,
        per_seed=per_seed,
    )


# --- claims ----------------------------------------------------------------------------------


def difficulty_groups(datasets: Iterable[str]) -> dict[str, list[tuple[int, str]]]:
    """Per task, its difficulty-group datasets ordered by level: task -> [(level, dataset)].

    ``arith_h4`` is horizon 4 of ``arith`` (:func:`analysis._common.dataset_horizon`), whether or
    not ``arith`` itself was logged; ``chain_sum_num_terms3`` is level 3 of ``chain_sum`` when
    ``chain_sum`` is logged too (Reasoning Gym's ``task.group_by``). Other datasets are tasks of
    their own (their overall dataset).
    """
    names = list(dict.fromkeys(str(d) for d in datasets))
    present = set(names)
    groups: dict[str, list[tuple[int, str]]] = {}
    for name in names:
        h = dataset_horizon(name)
        if h is not None:
            groups.setdefault(name.rsplit("_h", 1)[0], []).append((h, name))
            continue
        parents = [t for t in present if t != name and name.startswith(t + "_")]
        for task in sorted(parents, key=len, reverse=True):
            m = _GROUP_SUFFIX.match(name[len(task) + 1 :])
            if m:
                groups.setdefault(task, []).append((int(m.group("level")), name))
                break
    return {t: sorted(g) for t, g in groups.items()}


def _overall_datasets(datasets: Iterable[str]) -> list[str]:
    names = list(dict.fromkeys(str(d) for d in datasets))
    grouped = {d for g in difficulty_groups(names).values() for _, d in g}
    return [d for d in names if d not in grouped]


def _fmt(v: float, digits: int = 3) -> str:
    return "–" if not np.isfinite(v) else f"{v:+.{digits}f}"


def _horizon_claim(
    points: pd.DataFrame,
    task: str,
    groups: Sequence[tuple[int, str]],
    a: str,
    b: str,
    metric: str,
    reps: int,
    seed: int,
    confidence: float,
) -> dict:
    """The paired difference a - b per group and the trend (longest minus shortest horizon)."""
    per_group = [
        (
            h,
            paired_difference(
                points, a, b, ds, metric, reps=reps, seed=seed, confidence=confidence
            ),
        )
        for h, ds in groups
    ]
    short, long_ = per_group[0][1], per_group[-1][1]
    trend = (
        pd.Series(long_.per_seed, dtype=float) - pd.Series(short.per_seed, dtype=float)
    ).dropna()
    mean, lo, hi, mde = _mean_interval(trend.to_numpy(float), reps, seed, confidence)
    detail = "; ".join(f"h{h} {_fmt(e.effect)} [{_fmt(e.lo)}, {_fmt(e.hi)}]" for h, e in per_group)
    return {
        "claim": f"{a} >= {b} as the horizon grows",
        "task": task,
        "kind": "trend",
        "a": a,
        "b": b,
        "dataset": f"{groups[0][1]} -> {groups[-1][1]}",
        "x": "horizon",
        "effect": mean,
        "lo": lo,
        "hi": hi,
        "n_seeds": int(trend.size),
        "n_failed": 0,
        "mde": mde,
        "verdict": difference_verdict(lo, hi, int(trend.size)),
        "detail": detail,
    }


VERDICT_COLUMNS = (
    "claim",
    "task",
    "kind",
    "a",
    "b",
    "dataset",
    "x",
    "effect",
    "lo",
    "hi",
    "n_seeds",
    "n_failed",
    "mde",
    "verdict",
    "detail",
)


def verdicts(
    points: pd.DataFrame,
    reference: str = REFERENCE,
    *,
    horizon_baseline: str = "ppo",
    rollout_baseline: str = "grpo",
    metric: str = ACCURACY,
    x_axes: Sequence[str] = (COMPUTE_ROLLOUT_SAMPLES, COMPUTE_ROLLOUT_TOKENS),
    reps: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """One row per (claim, task) with a paired effect, its interval, the MDE and a verdict.

    Claims (each only when its algorithms have eval points; skipped silently otherwise):

    (a) "<reference> >= <horizon_baseline> as the horizon grows", per task with two or more
        difficulty groups (:func:`difficulty_groups`): the paired difference at each group
        (``detail``) and the trend, the paired difference at the longest horizon minus at the
        shortest, per seed; verdict on the trend being >= 0.
    (b) "<reference> reaches <rollout_baseline>'s final accuracy with fewer <x>", per overall
        dataset and compute axis in ``x_axes`` that was logged: :func:`rollouts_to_match`.

    Columns: :data:`VERDICT_COLUMNS`; ``effect``/``lo``/``hi`` are a difference (trend) or a
    ratio (kind ``ratio``); ``mde`` the smallest detectable trend, or distance of the ratio
    from 1, at this seed count.
    """
    if points.empty or metric not in points.columns:
        return pd.DataFrame(columns=list(VERDICT_COLUMNS))
    present = set(points["algorithm"].dropna())
    datasets = list(dict.fromkeys(points["dataset"].dropna().astype(str)))
    kw = {"reps": reps, "seed": seed, "confidence": confidence}
    rows = []
    if {reference, horizon_baseline} <= present:
        for task, groups in difficulty_groups(datasets).items():
            if len(groups) >= 2:
                rows.append(
                    _horizon_claim(points, task, groups, reference, horizon_baseline, metric, **kw)
                )
    if {reference, rollout_baseline} <= present:
        axes = [x for x in x_axes if x in points.columns and points[x].notna().any()]
        for ds in _overall_datasets(datasets):
            sub = points[points["dataset"] == ds]
            if not {reference, rollout_baseline} <= set(sub["algorithm"].dropna()):
                continue
            for x in axes:
                est = rollouts_to_match(points, reference, rollout_baseline, ds, x, metric, **kw)
                what = axis_label(x)
                rows.append(
                    {
                        "claim": f"{reference} reaches {rollout_baseline}'s final {metric} with "
                        f"fewer {what}",
                        "task": ds,
                        "kind": "ratio",
                        "a": reference,
                        "b": rollout_baseline,
                        "dataset": ds,
                        "x": x,
                        "effect": est.effect,
                        "lo": est.lo,
                        "hi": est.hi,
                        "n_seeds": est.n_seeds,
                        "n_failed": est.n_failed,
                        "mde": est.mde,
                        "verdict": est.verdict,
                        "detail": "",
                    }
                )
    return pd.DataFrame(rows, columns=list(VERDICT_COLUMNS))


def format_ratio(v: float) -> str:
    """A ratio for a sentence: two decimals, more where two would round a ratio that is not 1
    to a bare "1.00" that hides which side is ahead (1.004 -> "1.004", 0.99996 -> "0.99996")."""
    if not np.isfinite(v):
        return "∞" if v > 0 else "–"
    digits = 2
    while v != 1.0 and f"{v:.{digits}f}" == "1." + "0" * digits and digits < 12:
        digits += 1
    return f"{v:.{digits}f}"


def describe_verdicts(table: pd.DataFrame) -> list[str]:
    """One Markdown bullet per row of :func:`verdicts`: effect, 95% paired interval over seeds,
    verdict, and the smallest effect this seed count could detect."""
    lines = []
    for _, r in table.iterrows():
        n = int(r["n_seeds"])
        seeds = f"{n} seed{'s' if n != 1 else ''}"
        if np.isfinite(r["lo"]) or np.isfinite(r["hi"]):
            if r["kind"] == "ratio":
                interval = f"95% paired interval [{format_ratio(r['lo'])}, {format_ratio(r['hi'])}]"
            else:
                interval = f"95% paired interval [{_fmt(r['lo'])}, {_fmt(r['hi'])}]"
            interval += f" over {seeds}"
        else:
            interval = f"no interval: {seeds} paired (two or more needed)"
        what = "distance of the ratio from 1" if r["kind"] == "ratio" else "effect"
        if np.isfinite(r["mde"]):
            mde = f"smallest {what} detectable at {seeds}: {abs(r['mde']):.3f} (80% power)"
        else:
            mde = f"smallest detectable {what}: – (two or more seeds needed)"
        if r["kind"] == "ratio":
            what = axis_label(r["x"])
            effect = f"{r['a']} needs {format_ratio(r['effect'])} of {r['b']}'s {what}"
            if r["n_failed"]:
                effect += (
                    f" ({int(r['n_failed'])} of {seeds} never reached it: counted at the "
                    "compute spent, infinite for the upper end)"
                )
        else:
            effect = f"trend of the paired difference {r['a']} − {r['b']} {_fmt(r['effect'])}"
        verdict = f"**{r['verdict']}**"
        if 2 <= n < MIN_VERDICT_SEEDS:
            verdict += (
                f" (a verdict needs {MIN_VERDICT_SEEDS} seeds: with no effect at all, {n} seeds "
                f"fall on one side of it by chance 1 time in {2 ** (n - 1)})"
            )
        line = f"- **{r['claim']}** ({r['task']}): {effect}; {interval}: {verdict}; {mde}."
        if r["detail"]:
            line += f" Per horizon ({r['a']} − {r['b']}, 95% paired): {r['detail']}."
        lines.append(line)
    return lines
