"""The verdict protocol's statistics: claim estimands over independent starts, their intervals,
Holm's step-down adjustment over a declared family, and the verdict rule.

Input is an *item table* (:data:`ITEM_COLUMNS`): one row per (run, eval, item) with the item's
score ``correct`` in [0, 1]. A run is a (``start``, ``seed``, ``algorithm``); every run of a start
begins from the same warm start and is evaluated on the same item ids, so algorithms are compared
*paired*: by start, by RL seed within the start, and item by item.

Estimands (one value per start, the effect the mean over starts):

* :func:`horizon_slope`: the weighted least-squares slope, over the groups' horizons, of the
  paired accuracy difference a - b at the final eval (mean over the start's seeds, then over the
  items of each group), weighted by items per group. ``scale="logit"`` takes the difference of
  the groups' logit accuracies instead (a check that the slope is not an artefact of the floor
  or the ceiling).
* :func:`area_difference`: the paired difference a - b of the normalised area under the
  accuracy-versus-compute curve: per run, the trapezoid mean of its accuracy over its evals on
  the compute axis (x divided by the budget; with the start eval at 0 and the last at the
  budget, the mean accuracy over the budget), per start the mean over its RL seeds. Uncensored,
  and linear in the item scores like the two below: claim (b)'s primary estimand.
* :func:`compute_ratio`: per (start, seed), the compute at which a's isotonic curve reaches b's
  end-of-budget accuracy (the mean of b's evals in the last quarter of the budget) over the
  compute at which b's own isotonic curve reaches it; analysed as a log ratio, the effect is the
  geometric mean ratio. Censored where a never reaches the target: printed beside the area as
  a description, "≥ x×" when a start is censored.
* :func:`final_difference`: the paired final accuracy difference, the mean over datasets of the
  mean over items.

The unit of replication is the start. Variance has three sources: starts (and the RL seeds and
items nested in each), and the eval items, which every start shares, so an algorithm-by-item
effect is common to all starts and a spread over starts alone misses it. The interval is a t
interval over per-start effects with the shared-item variance added:

    V = var(start effects) / S + V_items

``V_items`` comes from a delete-a-fold jackknife over items (items of each dataset dealt into
``folds`` folds; a fold's items are left out of every start and both algorithms at once). The
jackknife of the mean over starts counts each item's shared effect plus 1/S of its per-start
noise; the per-start jackknives count the noise in full, so

    V_items = S / (S - 1) * (V_joint - mean(v_start) / S)

(floored at 0) is the shared part alone, which the spread over starts does not already hold.
These are the mean squares of the crossed (starts x folds) layout of jackknife pseudo-values:
V = var(start effects) / S + V_joint - v_res with v_res = (mean(v_start) - V_joint) / (S - 1),
three independent pieces with S - 1, folds - 1 and (S - 1)(folds - 1) degrees of freedom. The
interval's degrees of freedom are Satterthwaite's over them, never fewer than the starts' S - 1.
With one start the interval is over RL seeds (the same formula with seeds as units) or, with one
seed, items alone (``v_start``, folds - 1 degrees of freedom), and is *conditional on that
start*: no verdict.

``level`` on every estimate is the coverage the interval reaches in the simulation of the shipped
design (:mod:`analysis.simulate`, ``scripts/coverage_table.py``, docs/statistics.md), which the
tests hold within two points of it at 5 and 10 starts.

Claims and verdicts (:func:`claim_p_value`, :func:`verdict`): a claim is superiority (a > b: the
interval must lie above 0), non-inferiority with a margin m (a >= b: above -m), or equivalence
with a margin m (a ~= b: inside [-m, m], two one-sided tests); each p-value is that of the point
the claim's decision turns on (0, -m, or the nearer of -m and m), so Holm rejects a claim exactly
when its interval at the Holm-adjusted level resolves it one way or the other.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

__all__ = [
    "CONDITIONAL",
    "DIRECTIONS",
    "DOES_NOT_HOLD",
    "EQUIVALENT",
    "ESTIMANDS",
    "ITEM_COLUMNS",
    "NON_INFERIOR",
    "NOT_RESOLVED",
    "RESOLVED",
    "SUPERIOR",
    "ClaimEstimate",
    "HolmRow",
    "area_difference",
    "area_intervals",
    "claim_p_value",
    "compute_ratio",
    "final_difference",
    "final_items",
    "Intervals",
    "holm",
    "horizon_slope",
    "linear_intervals",
    "ratio_intervals",
    "reached_level",
    "resolved",
    "trapezoid_weights",
    "verdict",
]

log = logging.getLogger(__name__)

ITEM_COLUMNS = (
    "start",
    "seed",
    "algorithm",
    "dataset",
    "horizon",
    "item",
    "budget_fraction",
    "compute",
    "correct",
)
ESTIMANDS = ("horizon_slope", "area_difference", "compute_ratio", "final_difference")

#: Verdicts. A claim with a margin names it after the verdict: "non-inferior (margin 0.02)".
SUPERIOR = "superior"
NON_INFERIOR = "non-inferior"
EQUIVALENT = "equivalent"
DOES_NOT_HOLD = "does not hold"
NOT_RESOLVED = "not resolved at this power"
CONDITIONAL = "conditional on one start: no verdict"
#: The verdicts that resolve a claim (one way or the other).
RESOLVED = (SUPERIOR, NON_INFERIOR, EQUIVALENT, DOES_NOT_HOLD)

#: Item folds of the jackknife (fewer when a dataset has fewer items).
FOLDS = 20
#: The share of the budget whose evals give b's end-of-budget accuracy (compute_ratio's target).
TAIL = 0.25
#: How far below compute_ratio's target a fit may sit and still reach it: float64 rounding only.
#: The target is a mean of b's tail evals and b's isotonic fit a difference of cumulative sums
#: over the same evals, so a fit that is the tail's mean can differ from the target by a few
#: E x eps (E evals of accuracies in [0, 1], eps = 2.2e-16: about 1e-14 for a hundred evals) and
#: land 1 ulp below it, so that b would "never reach" its own end-of-budget accuracy. 1e-9 is
#: orders above that rounding for any eval count up to a million, and orders below the smallest
#: difference two accuracies can show (a 0/1 item score over at most 10^5 items and seeds,
#: >= 1e-5), so it turns only a rounding miss into the hit it is.
_REACH_SLACK = 1e-9
#: The protocol's directions: the claimed sign of the effect (a ratio: ratio > 1 or < 1), and
#: equivalence (a margin either side of no effect).
DIRECTIONS = ("greater", "less", "equivalent")


# --- the estimate ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimEstimate:
    """One claim's estimate over starts.

    Attributes:
        estimand: one of :data:`ESTIMANDS`.
        a, b: the algorithms compared (the effect is a against b).
        effect: the mean over starts of the per-start effects (for ``compute_ratio`` the
            geometric mean ratio, exp of the mean log ratio).
        lo, hi: the interval at ``confidence`` (a ratio's ``hi`` is inf when a start never
            reached its target: censored).
        level: the coverage this interval reaches in the simulation at this many starts.
        p_value: two-sided, for effect 0 (ratio 1).
        n_starts: starts with a paired estimate; n_seeds: the smallest count of paired RL seeds
            in a start.
        mde: the smallest effect (for a ratio: |log ratio|) a two-sided test at the nominal level
            detects with 80% power at this design; :meth:`mde_at` gives it at another level (a
            claim's Holm-adjusted alpha, the level its verdict is read at).
        conditional: True with one start: the interval is over its RL seeds and items only, and
            no verdict is drawn.
        per_start: the per-start effects (ratios for ``compute_ratio``).
        se, df: the standard error (log scale for a ratio) and degrees of freedom of the interval.
        confidence: the nominal level ``lo``/``hi`` were computed at.
        censored: starts where a never reached the target (``compute_ratio`` only).
        scale: ``"accuracy"`` or ``"logit"`` (horizon_slope), ``"log"`` (compute_ratio).
    """

    estimand: str
    a: str
    b: str
    effect: float
    lo: float
    hi: float
    level: float
    p_value: float
    n_starts: int
    n_seeds: int
    mde: float
    conditional: bool
    per_start: tuple[float, ...]
    se: float = float("nan")
    df: float = float("nan")
    confidence: float = 0.95
    censored: int = 0
    scale: str = "accuracy"

    @property
    def null(self) -> float:
        """The effect of no difference: 1 for a ratio, else 0."""
        return 1.0 if self.estimand == "compute_ratio" else 0.0

    def interval(self, alpha: float) -> tuple[float, float]:
        """The interval at level 1 - alpha (e.g. a Holm-adjusted alpha)."""
        return _interval(self.estimand, self.effect, self.se, self.df, alpha, self.censored)

    def mde_at(self, alpha: float) -> float:
        """The smallest effect (a ratio: |log ratio|; a margin claim: distance from the margin)
        a two-sided test at level ``alpha`` detects with 80% power:
        (t(1 - alpha/2) + t(0.8)) x se at the interval's degrees of freedom."""
        return _mde(self.se, self.df, alpha)


def _mde(se: float, df: float, alpha: float) -> float:
    if not (0 < alpha < 1):
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not (np.isfinite(se) and np.isfinite(df) and df > 0):
        return float("nan")
    return float((student_t.ppf(1 - alpha / 2, df) + student_t.ppf(0.8, df)) * se)


def _interval(
    estimand: str, effect: float, se: float, df: float, alpha: float, censored: int
) -> tuple[float, float]:
    if not (0 < alpha < 1):
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not (np.isfinite(se) and np.isfinite(df) and df > 0):
        return float("nan"), float("nan")
    half = float(student_t.ppf(1 - alpha / 2, df)) * se
    if estimand == "compute_ratio":
        centre = np.log(effect)
        hi = float("inf") if censored else float(np.exp(centre + half))
        return float(np.exp(centre - half)), hi
    return effect - half, effect + half


#: Coverage a nominal 95% interval reaches in the simulation (scripts/coverage_table.py,
#: docs/statistics.md), by estimand and starts: the level every simulated design reaches, to
#: the point, within 2 points of each. The horizon slope over 3 starts covers 97.5-98%
#: (conservative: its t has 2 degrees of freedom). The area difference over 3 starts covers
#: 92.7-95.1% (``python -m analysis.simulate``: the shared items weigh more in a mean over eight
#: evals, and with 2 degrees of freedom for the starts' part the interval runs short), so 0.94.
#: The compute ratio's coverage has no truth under censoring; its entry is the level whose alpha
#: bounds its null rejection rate.
_REACHED_95 = {
    "horizon_slope": {3: 0.97, 5: 0.95, 10: 0.95},
    "final_difference": {3: 0.95, 5: 0.95, 10: 0.95},
    "area_difference": {3: 0.94, 5: 0.95, 10: 0.95},
    "compute_ratio": {3: 0.95, 5: 0.95, 10: 0.95},
}


def reached_level(
    n_starts: int, confidence: float = 0.95, estimand: str = "final_difference"
) -> float:
    """The coverage printed for an interval at ``confidence`` over ``n_starts`` starts.

    At 0.95 and 3 or more starts it is the level measured in the simulation for the estimand
    (docs/statistics.md), at the largest measured count at or below ``n_starts``; at other
    confidences, and below 3 starts (not simulated; one start is conditional), the nominal level.
    """
    if estimand not in _REACHED_95:
        raise ValueError(f"estimand must be one of {list(_REACHED_95)}, got {estimand!r}")
    table = _REACHED_95[estimand]
    if confidence != 0.95 or n_starts < min(table):
        return confidence
    return table[max(n for n in table if n <= n_starts)]


# --- the item table ----------------------------------------------------------------------------


def _check(items: pd.DataFrame, a: str, b: str) -> None:
    missing = [c for c in ITEM_COLUMNS if c not in items.columns]
    if missing:
        raise ValueError(f"item table lacks columns {missing}; needs {list(ITEM_COLUMNS)}")
    present = sorted(items["algorithm"].dropna().unique())
    for name, algo in (("a", a), ("b", b)):
        if algo not in present:
            raise ValueError(f"{name}={algo!r} has no rows; algorithms present: {present}")
    if a == b:
        raise ValueError(f"a and b must differ, got {a!r} twice")


def final_items(items: pd.DataFrame) -> pd.DataFrame:
    """The rows at each run's final eval (its largest budget fraction)."""
    run = ["start", "seed", "algorithm"]
    last = items.groupby(run, sort=False)["budget_fraction"].transform("max")
    return items[items["budget_fraction"] == last]


def _select(items: pd.DataFrame, a: str, b: str, datasets: Sequence[str] | None) -> pd.DataFrame:
    _check(items, a, b)
    sub = items[items["algorithm"].isin([a, b])]
    if datasets is not None:
        datasets = list(datasets)
        present = sorted(sub["dataset"].unique())
        unknown = [d for d in datasets if d not in present]
        if unknown:
            raise ValueError(f"datasets {unknown} have no rows; datasets present: {present}")
        sub = sub[sub["dataset"].isin(datasets)]
    return sub


def _fold_of(sub: pd.DataFrame, folds: int, seed: int) -> tuple[pd.Series, int]:
    """Each row's item fold (the same fold for an item id in every start and run) and the
    number of folds: items of each dataset dealt round-robin after a seeded shuffle."""
    rng = np.random.default_rng(seed)
    per = sub.groupby("dataset", sort=True)["item"].unique()
    k = min(folds, min(len(v) for v in per))  # the callers refuse a table without items
    fold = {}
    for ds, ids in per.items():
        ids = np.sort(ids.astype(str))
        for pos, i in enumerate(rng.permutation(ids)):
            fold[(ds, i)] = pos % k if k else 0
    keys = list(zip(sub["dataset"], sub["item"].astype(str), strict=True))
    return pd.Series([fold[key] for key in keys], index=sub.index), max(k, 1)


def _codes(values: pd.Series) -> tuple[np.ndarray, list]:
    cat = pd.Categorical(values)
    return cat.codes.astype(int), list(cat.categories)


# --- the interval ------------------------------------------------------------------------------


def _jackknife(x: np.ndarray) -> np.ndarray:
    """Delete-a-fold jackknife variance over the last axis (folds)."""
    k = x.shape[-1]
    dev = x - x.mean(axis=-1, keepdims=True)
    return (k - 1) / k * (dev**2).sum(axis=-1)


def _summary(e: np.ndarray, e_del: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, se, df) over units of per-unit effects, batched over leading axes.

    e: (..., U) per-unit effects; e_del: (..., U, K) the same with each item fold left out
    (K < 2: no item variance). NaN units (no paired data) are left out.
    """
    units = np.isfinite(e).sum(axis=-1)
    k = e_del.shape[-1]
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices: no unit, one unit
        mean = np.nanmean(e, axis=-1) if e.size else np.full(e.shape[:-1], np.nan)
        if k >= 2:
            v_unit = _jackknife(e_del)  # (..., U)
            v_joint = _jackknife(np.nanmean(e_del, axis=-2))  # (..., )
            v_items_unit = np.nanmean(v_unit, axis=-1)
        else:
            v_joint = np.full(mean.shape, np.nan)
            v_items_unit = np.full(mean.shape, np.nan)
        many = units >= 2
        u = np.where(many, units, 2)
        v_start = np.nanvar(e, axis=-1, ddof=1) / u if e.shape[-1] >= 2 else np.nan * mean
        v_shared = np.maximum(0.0, u / (u - 1) * (v_joint - v_items_unit / u))
        v_shared = np.where(np.isfinite(v_shared), v_shared, 0.0)
        v = v_start + v_shared
        if k >= 2:
            # Satterthwaite over the crossed (units x folds) layout's mean squares, which are
            # independent: v = v_start + v_joint - v_res, v_res = (mean v_unit - v_joint) / (u - 1)
            v_res = (v_items_unit - v_joint) / (u - 1)
            shared = v_shared > 0
            denom = v_start**2 / (u - 1) + np.where(
                shared, v_joint**2 / (k - 1) + v_res**2 / ((u - 1) * (k - 1)), 0.0
            )
            df_many = np.maximum(v**2 / denom, u - 1)
        else:
            df_many = (u - 1).astype(float)
        df_many = np.where(v > 0, df_many, u - 1)
        se = np.where(many, np.sqrt(v), np.sqrt(v_items_unit))
        df = np.where(many, df_many, k - 1 if k >= 2 else np.nan)
    return mean, se, df


@dataclass(frozen=True)
class Intervals:
    """Estimates of one estimand batched over leading axes (arrays of one shape): ``effect``
    (a ratio for ``compute_ratio``), its interval ``lo``/``hi`` at ``confidence``, the two-sided
    ``p_value`` for no effect, ``se``/``df`` of the t interval (log scale for a ratio) and
    ``censored`` (starts that never reached the target; 0 for differences)."""

    effect: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    p_value: np.ndarray
    se: np.ndarray
    df: np.ndarray
    censored: np.ndarray


def _intervals(
    ratio: bool, e: np.ndarray, e_del: np.ndarray, confidence: float, censored: np.ndarray
) -> Intervals:
    if not (0 < confidence < 1):
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    mean, se, df = _summary(e, e_del)
    censored = np.broadcast_to(np.asarray(censored, int), mean.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        half = student_t.ppf(0.5 + confidence / 2, df) * se
        tstat = np.where(se > 0, mean / se, np.sign(mean) * np.inf)
        two = np.minimum(1.0, 2 * student_t.sf(np.abs(tstat), df))
        upper = np.minimum(1.0, 2 * student_t.sf(tstat, df))
    # censored values are lower bounds: only the upper tail gives a valid test
    p_value = np.where(censored > 0, upper, two)
    if ratio:
        effect, lo = np.exp(mean), np.exp(mean - half)
        hi = np.where(censored > 0, np.inf, np.exp(mean + half))
    else:
        effect, lo, hi = mean, mean - half, mean + half
    return Intervals(effect, lo, hi, p_value, se, df, censored)


def _finish(
    estimand: str,
    a: str,
    b: str,
    per_unit: np.ndarray,
    per_unit_del: np.ndarray,
    n_starts: int,
    n_seeds: int,
    confidence: float,
    censored: int = 0,
    scale: str = "accuracy",
) -> ClaimEstimate:
    ratio = estimand == "compute_ratio"
    est = _intervals(ratio, per_unit, per_unit_del, confidence, censored)
    se, df = float(est.se), float(est.df)
    mde = _mde(se, df, 1 - confidence)
    conditional = n_starts == 1
    # One value per start; with one start the units are its seeds, whose mean is that start's.
    starts = np.asarray(per_unit, float) if n_starts >= 2 else np.mean(per_unit, keepdims=True)
    per_start = np.exp(starts) if ratio else starts
    return ClaimEstimate(
        estimand=estimand,
        a=a,
        b=b,
        effect=float(est.effect),
        lo=float(est.lo),
        hi=float(est.hi),
        level=confidence if conditional else reached_level(n_starts, confidence, estimand),
        p_value=float(est.p_value),
        n_starts=n_starts,
        n_seeds=n_seeds,
        mde=mde,
        conditional=conditional,
        per_start=tuple(float(v) for v in per_start),
        se=se,
        df=df,
        confidence=confidence,
        censored=censored,
        scale=scale,
    )


# --- claim (a) and the final difference: linear in the items ----------------------------------


def _contrast(ma: np.ndarray, mb: np.ndarray, scale: str, n: np.ndarray) -> np.ndarray:
    if scale == "accuracy":
        return ma - mb
    # logit of a group mean, clipped half an item inside (0, 1) so a group at floor or ceiling
    # stays finite
    eps = 0.5 / np.maximum(n, 1)
    pa, pb = np.clip(ma, eps, 1 - eps), np.clip(mb, eps, 1 - eps)
    return np.log(pa / (1 - pa)) - np.log(pb / (1 - pb))


def _slope(d: np.ndarray, w: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Weighted least-squares slope of d over h along the last axis (groups)."""
    hbar = (w * h).sum(axis=-1, keepdims=True) / w.sum(axis=-1, keepdims=True)
    dx = h - hbar
    return (w * dx * d).sum(axis=-1) / (w * dx * dx).sum(axis=-1)


def _linear_effects(
    sa: np.ndarray, sb: np.ndarray, n: np.ndarray, h: np.ndarray | None, scale: str
) -> tuple[np.ndarray, np.ndarray]:
    """Per-unit effects, in full and with each item fold left out.

    sa, sb: (..., U, G, K) per fold the sum over items of a's and b's final score (each a mean
    over the unit's seeds); n: (..., U, G, K) items per fold. h: (G,) the groups' horizons
    (slope) or None (mean over groups). Returns e (..., U) and e_del (..., U, K).
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        fa, fb, fn = sa.sum(-1), sb.sum(-1), n.sum(-1)  # (..., U, G)
        da = np.swapaxes(fa[..., None] - sa, -1, -2)  # (..., U, K, G)
        db = np.swapaxes(fb[..., None] - sb, -1, -2)
        dn = np.swapaxes(fn[..., None] - n, -1, -2)

        def effect(ta, tb, tn):
            d = _contrast(ta / tn, tb / tn, scale, tn)
            if h is None:
                return d.mean(axis=-1)
            return _slope(d, tn, h)

        return effect(fa, fb, fn), effect(da, db, dn)


def linear_intervals(
    sa: np.ndarray,
    sb: np.ndarray,
    n: np.ndarray,
    horizons: np.ndarray | None = None,
    *,
    scale: str = "accuracy",
    confidence: float = 0.95,
    method: str = "t",
    reps: int = 1000,
    seed: int | np.random.Generator = 0,
) -> Intervals:
    """:func:`horizon_slope` (``horizons`` given) or :func:`final_difference` (None) on arrays,
    batched over leading axes (the simulation's path; the item-table functions call the same).

    sa, sb: (..., S, G, K) per start, dataset (group) and item fold, the sum over the fold's
    items of a's and b's final score (each a mean over the start's seeds); n: (..., S, G, K) the
    fold's item count. horizons: (G,).

    ``method="t"``: the protocol's interval (module docstring). ``method="bootstrap"``: the
    alternative it was chosen over, a hierarchical paired percentile bootstrap: each of ``reps``
    replicates resamples starts with replacement and, independently, the item folds (the same
    folds for every start and both algorithms), and recomputes the effect; ``se``/``df`` are then
    the replicates' standard deviation and NaN, and ``p_value`` twice the smaller share of
    replicates on either side of 0.
    """
    h = None if horizons is None else np.asarray(horizons, float)
    if method == "bootstrap":
        return _linear_bootstrap(sa, sb, n, h, scale, confidence, reps, seed)
    if method != "t":
        raise ValueError(f"method must be 't' or 'bootstrap', got {method!r}")
    e, e_del = _linear_effects(sa, sb, n, h, scale)
    return _intervals(False, e, e_del, confidence, 0)


def _linear_bootstrap(sa, sb, n, h, scale, confidence, reps, seed) -> Intervals:
    rng = np.random.default_rng(seed)
    u, k = sa.shape[-3], sa.shape[-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        full = _linear_effects(sa, sb, n, h, scale)[0]
        effect = np.nanmean(full, axis=-1)
        weights = rng.multinomial(k, np.full(k, 1 / k), size=reps).astype(float)  # (B, K)
        starts = rng.integers(0, u, size=(reps, u))  # (B, U)

        def resample(x):  # (..., U, G, K) -> (..., B, U, G)
            w = np.einsum("...ugk,bk->...bug", x, weights)
            idx = np.broadcast_to(starts[:, :, None], w.shape[:-2] + (u, w.shape[-1]))
            return np.take_along_axis(w, idx, axis=-2)

        ta, tb, tn = resample(sa), resample(sb), resample(n)
        d = _contrast(ta / tn, tb / tn, scale, tn)
        per = d.mean(axis=-1) if h is None else _slope(d, tn, h)
        boot = np.nanmean(per, axis=-1)  # (..., B)
        alpha = (1 - confidence) / 2
        lo, hi = np.nanquantile(boot, [alpha, 1 - alpha], axis=-1)
        below, above = (boot <= 0).mean(axis=-1), (boot >= 0).mean(axis=-1)
        p_value = np.minimum(1.0, 2 * np.minimum(below, above))
        se = np.nanstd(boot, axis=-1, ddof=1)
    return Intervals(effect, lo, hi, p_value, se, np.full(se.shape, np.nan), np.zeros(se.shape))


def ratio_intervals(
    s: np.ndarray,
    n: np.ndarray,
    x: np.ndarray,
    fractions: np.ndarray,
    *,
    confidence: float = 0.95,
    denominator: str = "crossing",
) -> Intervals:
    """:func:`compute_ratio` on arrays, batched over leading axes.

    s: (..., S, R, 2, G, E, K) per start, seed, algorithm (a, then b), dataset, eval and item
    fold the sum of scores; n: the matching item counts; x: (..., S, R, 2, E) the compute at
    each eval; fractions: (E,) the evals' budget fractions. Every (start, seed) must have every
    eval.
    """
    lr, never = _ratio_effects(s, n, x, np.asarray(fractions, float), denominator)
    unit = lr.mean(axis=-2)  # (..., S, K+1): mean over the start's seeds
    return _intervals(
        True, unit[..., 0], unit[..., 1:], confidence, never.any(axis=-1).sum(axis=-1)
    )


def _final_arrays(
    items: pd.DataFrame, a: str, b: str, datasets: Sequence[str] | None, folds: int, seed: int
) -> dict:
    """The final evals as fold sums per unit (start, or seed when there is one start)."""
    sub = final_items(_select(items, a, b, datasets))
    wide = sub.pivot_table(
        index=["start", "seed", "dataset", "item"],
        columns="algorithm",
        values="correct",
        aggfunc="mean",
    )
    wide = wide[[a, b]].dropna().reset_index()
    if wide.empty:
        raise ValueError(f"no item has a final eval of both {a!r} and {b!r}")
    n_starts = wide["start"].nunique()
    n_seeds = int(wide.groupby("start")["seed"].nunique().min())
    unit = "start" if n_starts >= 2 else "seed"
    if unit == "start":  # mean over the start's seeds, item by item
        wide = wide.groupby(["start", "dataset", "item"], as_index=False)[[a, b]].mean()
    fold, k = _fold_of(wide, folds, seed)
    u, units = _codes(wide[unit])
    g, groups = _codes(wide["dataset"])
    shape = (len(units), len(groups), k)
    sa, sb, n = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    idx = (u, g, fold.to_numpy())
    np.add.at(sa, idx, wide[a].to_numpy(float))
    np.add.at(sb, idx, wide[b].to_numpy(float))
    np.add.at(n, idx, 1.0)
    horizon = sub.groupby("dataset")["horizon"].first().reindex(groups).to_numpy(float)
    return {
        "sa": sa,
        "sb": sb,
        "n": n,
        "groups": groups,
        "horizon": horizon,
        "n_starts": n_starts,
        "n_seeds": n_seeds,
    }


def horizon_slope(
    items: pd.DataFrame,
    a: str,
    b: str,
    datasets: Sequence[str] | None = None,
    *,
    confidence: float = 0.95,
    reps: int | None = None,
    seed: int = 0,
    scale: str = "accuracy",
    folds: int = FOLDS,
) -> ClaimEstimate:
    """Claim (a): the slope over the groups' horizons of the paired final difference a - b.

    Per start: the weighted least-squares slope, over the ``horizon`` of each dataset (group),
    of the paired accuracy difference at the final eval (mean over the start's seeds, then over
    the group's items), weighted by items per group; ``scale="logit"`` uses the difference of
    the groups' logit accuracies. ``datasets``: the groups (default: every dataset with a
    horizon). ``reps`` is unused (the interval is analytic) and kept for callers that pass it;
    ``seed`` deals the item folds.
    """
    del reps
    if scale not in ("accuracy", "logit"):
        raise ValueError(f"scale must be 'accuracy' or 'logit', got {scale!r}")
    if datasets is None:
        _check(items, a, b)
        datasets = sorted(items.loc[items["horizon"].notna(), "dataset"].unique())
    arr = _final_arrays(items, a, b, datasets, folds, seed)
    h = arr["horizon"]
    if np.isnan(h).any() or len(np.unique(h)) < 2:
        raise ValueError(
            f"horizon_slope needs two or more datasets with distinct horizons; datasets "
            f"{arr['groups']} have horizons {h.tolist()}"
        )
    e, e_del = _linear_effects(arr["sa"], arr["sb"], arr["n"], h, scale)
    return _finish(
        "horizon_slope", a, b, e, e_del, arr["n_starts"], arr["n_seeds"], confidence,
        scale=scale,
    )  # fmt: skip


def final_difference(
    items: pd.DataFrame,
    a: str,
    b: str,
    datasets: Sequence[str] | None = None,
    *,
    confidence: float = 0.95,
    reps: int | None = None,
    seed: int = 0,
    folds: int = FOLDS,
) -> ClaimEstimate:
    """The paired final accuracy difference a - b: per start, the mean over ``datasets`` (default
    all) of the mean over items of the final score (each a mean over the start's seeds).
    ``reps`` is unused (the interval is analytic); ``seed`` deals the item folds."""
    del reps
    arr = _final_arrays(items, a, b, datasets, folds, seed)
    e, e_del = _linear_effects(arr["sa"], arr["sb"], arr["n"], None, "accuracy")
    return _finish(
        "final_difference", a, b, e, e_del, arr["n_starts"], arr["n_seeds"], confidence,
    )  # fmt: skip


# --- claim (b): compute to reach b's end-of-budget accuracy -----------------------------------


def _isotonic(y: np.ndarray) -> np.ndarray:
    """Least-squares non-decreasing fit along the last axis (equal weights), batched:
    fit_j = max_{i <= j} min_{k >= j} mean(y_i..y_k), the min-max formula."""
    e = y.shape[-1]
    c = np.concatenate([np.zeros(y.shape[:-1] + (1,)), np.cumsum(y, axis=-1)], axis=-1)
    i, k = np.meshgrid(np.arange(e), np.arange(e), indexing="ij")
    with np.errstate(invalid="ignore", divide="ignore"):
        means = (c[..., k + 1] - c[..., i]) / (k - i + 1)  # (..., E, E): mean of y[i..k]
    means = np.where(k >= i, means, np.inf)
    rmin = np.flip(np.minimum.accumulate(np.flip(means, -1), axis=-1), -1)  # min over k >= j
    return np.where(i <= k, rmin, -np.inf).max(axis=-2)  # rows i <= j (k plays j here)


def _crossing(fit: np.ndarray, x: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Compute where a non-decreasing curve (fit over x, last axis) first reaches target,
    linear between evals; NaN where it never does. A fit within float64 rounding below the
    target (``_REACH_SLACK``) reaches it, at that eval."""
    hits = fit >= target[..., None] - _REACH_SLACK
    j = np.argmax(hits, axis=-1)
    reached = hits.any(axis=-1)
    jp = np.maximum(j - 1, 0)
    take = lambda arr, idx: np.take_along_axis(arr, idx[..., None], axis=-1)[..., 0]  # noqa: E731
    x1, x0, f1, f0 = take(x, j), take(x, jp), take(fit, j), take(fit, jp)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(j > 0, np.minimum((target - f0) / (f1 - f0), 1.0), 0.0)  # <= 1: slack
    out = x0 + frac * (x1 - x0)
    out = np.where(j > 0, out, x1)
    return np.where(reached, out, np.nan)


def _ratio_effects(
    s: np.ndarray, n: np.ndarray, x: np.ndarray, fractions: np.ndarray, denominator: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per (unit, seed) log ratios, in full and with each item fold left out.

    s: (..., U, R, 2, G, E, K) per fold the sum of scores (algorithm a first, then b), n: the
    matching item counts, x: (..., U, R, 2, E) compute at each eval, fractions: (E,) the evals'
    budget fractions. Returns log ratios (..., U, R, K + 1) (variant 0: all items), and the
    censored mask (..., U, R) (a never reached, full data; its value is then a lower bound).
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        full_s, full_n = s.sum(-1, keepdims=True), n.sum(-1, keepdims=True)
        vs = np.concatenate([full_s, full_s - s], axis=-1)  # (..., 2, G, E, K+1)
        vn = np.concatenate([full_n, full_n - n], axis=-1)
        acc = (vs / vn).mean(axis=-3)  # (..., U, R, 2, E, K+1): mean over datasets
        acc = np.moveaxis(acc, -1, -3)  # (..., U, R, K+1, 2, E)
        fit = _isotonic(acc)
        tail = fractions >= (1 - TAIL) * fractions.max() - 1e-12
        target = acc[..., 1, :][..., tail].mean(axis=-1)  # (..., U, R, K+1)
        xv = np.broadcast_to(x[..., None, :, :], fit.shape)  # (..., U, R, K+1, 2, E)
        cross_a = _crossing(fit[..., 0, :], xv[..., 0, :], target)
        if denominator == "crossing":
            den = _crossing(fit[..., 1, :], xv[..., 1, :], target)
        else:
            den = xv[..., 1, -1]
        floor = np.where(xv > 0, xv, np.inf).min(axis=(-1, -2))  # smallest positive compute
        den = np.maximum(den, floor)
        never = np.isnan(cross_a)
        num = np.where(never, xv[..., 0, -1], np.maximum(cross_a, floor))
        lr = np.log(num / den)
    return lr, never[..., 0]


def compute_ratio(
    items: pd.DataFrame,
    a: str,
    b: str,
    datasets: Sequence[str] | None = None,
    *,
    confidence: float = 0.95,
    reps: int | None = None,
    seed: int = 0,
    folds: int = FOLDS,
    denominator: str = "crossing",
) -> ClaimEstimate:
    """Claim (b): compute a needs to reach b's end-of-budget accuracy, over b's.

    Per (start, seed), on ``datasets`` (default all; accuracy the mean over datasets of the mean
    over items): the target is b's accuracy at the end of its budget, the mean of b's evals in
    the last quarter of the budget (fractions >= 0.75 of the largest); a's curve and b's are
    made monotone by an isotonic (least-squares non-decreasing) fit over compute; the ratio is
    the compute where a's fit first reaches the target (linear between evals; within float64
    rounding, ``_REACH_SLACK``, so that b's fit always reaches its own end-of-budget accuracy)
    over the compute where b's own fit does (``denominator="budget"``: b's compute at its final
    eval). Both sides use the same estimator, so with no difference between a and b the log
    ratio is centred on 0. The per-start effect is the mean over seeds of the log ratio; the effect is the geometric
    mean ratio. A seed where a never reaches the target is censored at the compute a spent (a
    lower bound): the interval's upper end is then infinite and the p-value one-sided (upper).
    """
    del reps
    if denominator not in ("crossing", "budget"):
        raise ValueError(f"denominator must be 'crossing' or 'budget', got {denominator!r}")
    arr = _curve_arrays(items, a, b, datasets, folds, seed, "compute_ratio")
    lr, never = _ratio_effects(
        arr.s, arr.n, np.nan_to_num(arr.x), np.asarray(arr.fractions, float), denominator
    )
    unit, e_del = arr.per_unit(lr)
    never = never & arr.runs
    censored = int(never.any(axis=1).sum()) if arr.n_starts >= 2 else int(never.any())
    return _finish(
        "compute_ratio", a, b, unit, e_del, arr.n_starts, arr.n_seeds, confidence,
        censored=censored, scale="log",
    )  # fmt: skip


@dataclass(frozen=True)
class _Curves:
    """Every eval of the runs of a and b as item-fold sums (:func:`_curve_arrays`).

    s, n: (U, R, 2, G, E, K) per start, seed, algorithm (a, then b), dataset, eval and item fold
    the sum of scores and the item count; x: (U, R, 2, E) the compute at each eval (NaN where a
    run has none); fractions: the evals' budget fractions; runs: (U, R) both algorithms present.
    """

    s: np.ndarray
    n: np.ndarray
    x: np.ndarray
    fractions: list
    runs: np.ndarray
    n_starts: int
    n_seeds: int

    def per_unit(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-unit effects and their fold-deleted copies from per-run values ``v`` (U, R, K+1):
        per start the mean over its seeds (several starts), else one start's seeds as units."""
        v = np.where(self.runs[..., None], v, np.nan)
        has = self.runs.any(axis=1)
        if self.n_starts >= 2:
            with warnings.catch_warnings():  # a seed code absent from a start: an all-NaN slice
                warnings.simplefilter("ignore", RuntimeWarning)
                unit = np.nanmean(v, axis=1)[has]  # (U, K+1): mean over the start's seeds
        else:
            unit = v[has][0][self.runs[has][0]]  # (R, K+1): seeds as units
        return unit[:, 0], unit[:, 1:]


def _curve_arrays(
    items: pd.DataFrame,
    a: str,
    b: str,
    datasets: Sequence[str] | None,
    folds: int,
    seed: int,
    estimand: str,
) -> _Curves:
    sub = _select(items, a, b, datasets)
    sub = sub[sub["correct"].notna()]
    if sub.empty:
        raise ValueError(f"no item of {a!r} or {b!r} has a score; {estimand} needs their curves")
    fold, k = _fold_of(sub, folds, seed)
    st, starts = _codes(sub["start"])
    sd, seeds = _codes(sub["seed"])
    al = (sub["algorithm"] == b).to_numpy(int)
    g, groups = _codes(sub["dataset"])
    ev, fractions = _codes(sub["budget_fraction"])
    shape = (len(starts), len(seeds), 2, len(groups), len(fractions), k)
    s, n = np.zeros(shape), np.zeros(shape)
    idx = (st, sd, al, g, ev, fold.to_numpy())
    np.add.at(s, idx, sub["correct"].to_numpy(float))
    np.add.at(n, idx, 1.0)
    x = np.full(shape[:3] + (len(fractions),), np.nan)
    comp = sub.groupby([st, sd, al, ev])["compute"].mean()
    x[tuple(np.array(comp.index.to_list()).T)] = comp.to_numpy(float)
    runs = (n.sum(axis=(-1, -2, -3)) > 0).all(axis=-1)  # (U, R): both algorithms present
    complete = (n.sum(-1) > 0).all(axis=(-1, -2)).all(-1) & np.isfinite(x).all(axis=(-1, -2))
    bad = runs & ~complete
    if bad.any():
        which = [(starts[i], seeds[j]) for i, j in zip(*np.nonzero(bad), strict=True)]
        raise ValueError(
            f"runs (start, seed) {which} lack an eval of some dataset or a compute value at "
            f"some budget fraction of {list(fractions)}; {estimand} needs every eval"
        )
    n_starts = int(runs.any(axis=1).sum())
    n_seeds = int(runs.sum(axis=1)[runs.any(axis=1)].min())
    return _Curves(s, n, x, list(fractions), runs, n_starts, n_seeds)


# --- claim (b): the area under the accuracy-versus-compute curve --------------------------------


def trapezoid_weights(x: np.ndarray) -> np.ndarray:
    """Weights along the last axis (evals) whose sum with a curve's values is its trapezoid mean
    over [x first, x last]: the area divided by the span (one eval: weight 1)."""
    if x.shape[-1] == 1:
        return np.ones_like(x)
    dx = np.diff(x, axis=-1)
    zero = np.zeros(x.shape[:-1] + (1,))
    w = 0.5 * (np.concatenate([zero, dx], axis=-1) + np.concatenate([dx, zero], axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return w / (x[..., -1:] - x[..., :1])


def _area_effects(s: np.ndarray, n: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per (unit, seed) area differences a - b, in full and with each item fold left out.

    s: (..., U, R, 2, G, E, K) per fold the sum of scores (algorithm a first, then b), n: the
    matching item counts, x: (..., U, R, 2, E) compute at each eval. Per run the accuracy at an
    eval is the mean over datasets of the mean over items; its normalised area is the trapezoid
    mean over the evals on the compute axis (x / budget, the budget the compute at the last eval
    over its budget fraction: the normalisation cancels in the mean). Returns (..., U, R, K + 1)
    (variant 0: all items).
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        full_s, full_n = s.sum(-1, keepdims=True), n.sum(-1, keepdims=True)
        vs = np.concatenate([full_s, full_s - s], axis=-1)  # (..., 2, G, E, K+1)
        vn = np.concatenate([full_n, full_n - n], axis=-1)
        acc = (vs / vn).mean(axis=-3)  # (..., U, R, 2, E, K+1): mean over datasets
    w = trapezoid_weights(x)  # (..., U, R, 2, E)
    area = (acc * w[..., None]).sum(axis=-2)  # (..., U, R, 2, K+1)
    return area[..., 0, :] - area[..., 1, :]


def area_difference(
    items: pd.DataFrame,
    a: str,
    b: str,
    datasets: Sequence[str] | None = None,
    *,
    confidence: float = 0.95,
    reps: int | None = None,
    seed: int = 0,
    folds: int = FOLDS,
) -> ClaimEstimate:
    """Claim (b): the paired difference a - b of the normalised area under the accuracy-versus-
    compute curve.

    Per run, on ``datasets`` (default all; accuracy the mean over datasets of the mean over
    items): the trapezoid mean of its accuracy over its evals, x the eval's compute (rollout
    samples) over the budget, so that with the start eval at 0 and the last at the budget (as
    the harness logs them) it is the run's mean accuracy over the budget. A curve that rises
    early scores above one that reaches the same end later; no threshold, so nothing is
    censored. Per start the mean over its seeds of a's area minus b's; the interval is the
    linear estimands' (a t interval over starts plus the shared items' jackknife variance).
    Every run needs every eval. ``reps`` is unused (the interval is analytic); ``seed`` deals
    the item folds.
    """
    del reps
    arr = _curve_arrays(items, a, b, datasets, folds, seed, "area_difference")
    unit, e_del = arr.per_unit(_area_effects(arr.s, arr.n, np.nan_to_num(arr.x)))
    return _finish(
        "area_difference", a, b, unit, e_del, arr.n_starts, arr.n_seeds, confidence
    )  # fmt: skip


def area_intervals(
    s: np.ndarray, n: np.ndarray, x: np.ndarray, *, confidence: float = 0.95
) -> Intervals:
    """:func:`area_difference` on arrays, batched over leading axes (the simulation's path).

    s: (..., S, R, 2, G, E, K) per start, seed, algorithm (a, then b), dataset, eval and item
    fold the sum of scores; n: the matching item counts; x: (..., S, R, 2, E) the compute at
    each eval. Every (start, seed) must have every eval.
    """
    d = _area_effects(s, n, x).mean(axis=-2)  # (..., S, K+1): mean over the start's seeds
    return _intervals(False, d[..., 0], d[..., 1:], confidence, 0)


# --- multiplicity and the verdict --------------------------------------------------------------


@dataclass(frozen=True)
class HolmRow:
    """Holm's step-down test of one hypothesis of a family.

    Attributes:
        p: its p-value; rank: 1 for the smallest of the family; alpha_adj: the level it is
        tested at, alpha / (m - rank + 1); p_adj: the adjusted p-value (the smallest family
        alpha at which it is rejected); rejected: whether it is.
    """

    p: float
    rank: int
    alpha_adj: float
    p_adj: float
    rejected: bool


def holm(
    p_values: Sequence[float], alpha: float = 0.05, family_size: int | None = None
) -> list[HolmRow]:
    """Holm-Bonferroni over a family of ``family_size`` hypotheses (default: those given).

    Hypotheses of the family missing here (``family_size`` > len(p_values)) count as p = 1,
    as does a NaN p-value (a claim with no estimate, or one whose gates fail): untested, they
    rank last and are never rejected. Ties are broken in favour of tested members (a tested
    p = 1 ranks before an untested one, so the level it is shown at is the one it was tested
    at), then by declaration order. The rows come back in the order of ``p_values``.
    Step-down: sorted ascending, the j-th (1-based) is tested at alpha / (m - j + 1), and
    testing stops at the first that fails.
    """
    if not (0 < alpha < 1):
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    p = np.asarray(p_values, float)
    if ((p < 0) | (p > 1)).any():
        raise ValueError(f"p-values must be in [0, 1], got {p.tolist()}")
    m = len(p) if family_size is None else int(family_size)
    if m < len(p):
        raise ValueError(f"family_size={m} is smaller than the {len(p)} p-values given")
    untested = np.isnan(p)
    p = np.where(untested, 1.0, p)
    order = np.lexsort((np.arange(len(p)), untested, p))  # by p, tested first, then declared
    rank = np.empty(len(p), int)
    rank[order] = np.arange(1, len(p) + 1)
    alpha_adj = alpha / (m - rank + 1)
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(len(p))) * p[order]))
    p_adj = np.empty(len(p))
    p_adj[order] = adjusted
    fails = p[order] > alpha_adj[order]
    first_fail = int(np.argmax(fails)) if fails.any() else len(p)
    rejected = rank <= first_fail
    return [
        HolmRow(float(p[i]), int(rank[i]), float(alpha_adj[i]), float(p_adj[i]), bool(rejected[i]))
        for i in range(len(p))
    ]


def _check_claim(est: ClaimEstimate, direction: str, margin: float | None) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {list(DIRECTIONS)}, got {direction!r}")
    if margin is None:
        if direction == "equivalent":
            raise ValueError("direction 'equivalent' needs a margin > 0 (the estimand's units)")
        return
    if not (np.isfinite(margin) and margin > 0):
        raise ValueError(f"margin must be a number > 0 (the estimand's units), got {margin!r}")
    if est.estimand == "compute_ratio":
        raise ValueError("compute_ratio takes no margin: its claims are superiority claims")


def _z(v: float, se: float) -> float:
    if se > 0:
        return v / se
    return float(np.sign(v) * np.inf)


def claim_p_value(est: ClaimEstimate, direction: str, margin: float | None = None) -> float:
    """The p-value a claim enters Holm with: that of the point its decision turns on.

    * no margin (superiority, ``"greater"``/``"less"``): the estimate's own test of no effect
      (:attr:`ClaimEstimate.p_value`: two-sided; one-sided for a censored ratio);
    * ``"greater"`` with margin m (non-inferiority, a >= b): the shifted null effect <= -m,
      p = 2 P(T >= (effect + m) / se) (two one-sided tails at the Holm level, as the two-sided
      interval is read), or, when the estimate lies below -m, the test of effect >= -m (the
      claim does not hold): together 2 P(T >= |effect + m| / se); ``"less"`` mirrors it at +m;
    * ``"equivalent"`` with margin m: the smaller of the two one-sided tests' p-value for
      |effect| >= m (2 max(P(T >= (effect + m)/se), P(T <= (effect - m)/se))) and that for
      |effect| <= m (the interval entirely outside [-m, m]).

    So p <= alpha exactly when the interval at level 1 - alpha resolves the claim one way or
    the other (:func:`verdict`). NaN when the estimate has no standard error.
    """
    _check_claim(est, direction, margin)
    if margin is None:
        return est.p_value
    se, df, e = est.se, est.df, est.effect
    if not (np.isfinite(se) and np.isfinite(df) and df > 0 and np.isfinite(e)):
        return float("nan")
    t = student_t
    if direction == "equivalent":
        inside = 2 * max(t.sf(_z(e + margin, se), df), t.cdf(_z(e - margin, se), df))
        outside = 2 * min(t.sf(_z(e - margin, se), df), t.cdf(_z(e + margin, se), df))
        return float(min(1.0, inside, outside))
    point = -margin if direction == "greater" else margin
    return float(min(1.0, 2 * t.sf(abs(_z(e - point, se)), df)))


def resolved(text: str) -> bool:
    """Whether a verdict's text resolves its claim (superior, non-inferior, equivalent, or does
    not hold; with or without its margin)."""
    return text.split(" (margin ")[0] in RESOLVED


def verdict(
    est: ClaimEstimate,
    alpha_adj: float,
    direction: str,
    *,
    margin: float | None = None,
    rejected: bool | None = None,
) -> str:
    """The verdict on a claim from the interval at level 1 - alpha_adj (its Holm level).

    ``direction``: ``"greater"`` (the claim is effect > 0, or ratio > 1; with a margin m,
    non-inferiority: effect > -m), ``"less"`` (effect < 0, or ratio < 1: e.g. "a needs less
    compute"; with a margin, effect < m) or ``"equivalent"`` (|effect| < m; needs a margin).
    Reading the interval [lo, hi] for ``"greater"`` (``"less"`` mirrors it):

    * :data:`SUPERIOR` when lo > 0;
    * ``"non-inferior (margin m)"`` when -m < lo <= 0;
    * ``"does not hold"`` when hi < 0 without a margin, ``"does not hold (margin m)"`` when
      hi < -m;
    * ``"not resolved at this power"`` (with its margin) otherwise.

    ``"equivalent"``: ``"equivalent (margin m)"`` when -m < lo and hi < m (two one-sided tests
    at the Holm level), ``"does not hold (margin m)"`` when the interval lies entirely outside
    [-m, m], else not resolved. An estimate over one start gets :data:`CONDITIONAL`.

    ``rejected``: Holm's decision for this claim (:attr:`HolmRow.rejected`, from
    :func:`claim_p_value`). Holm steps down and stops at the first failure, so a later claim can
    have an interval at its own adjusted level that resolves it and still not be rejected;
    ``rejected=False`` then gives not resolved whatever the interval says. Pass it whenever Holm
    ran.
    """
    _check_claim(est, direction, margin)
    if est.conditional:
        return CONDITIONAL
    tag = "" if margin is None else f" (margin {margin:g})"
    if rejected is False:
        return NOT_RESOLVED + tag
    lo, hi = est.interval(alpha_adj)
    if np.isnan(lo) or np.isnan(hi):
        return NOT_RESOLVED + tag
    null = est.null
    if direction == "equivalent":
        m = float(margin)  # type: ignore[arg-type]  # checked above
        if -m < lo and hi < m:
            return EQUIVALENT + tag
        if lo > m or hi < -m:
            return DOES_NOT_HOLD + tag
        return NOT_RESOLVED + tag
    m = 0.0 if margin is None else margin
    if direction == "greater":
        superior, non_inferior, against = lo > null, lo > null - m, hi < null - m
    else:
        superior, non_inferior, against = hi < null, hi < null + m, lo > null + m
    if superior:
        return SUPERIOR
    if margin is not None and non_inferior:
        return NON_INFERIOR + tag
    if against:
        return DOES_NOT_HOLD + tag
    return NOT_RESOLVED + tag
