"""The protocol's array path (analysis/claims/protocol.py: ``ratio_intervals``, ``area_intervals`` and
``linear_intervals(method="bootstrap")``), which the coverage simulations run instead of the
item-table functions the report calls. Each is checked against what it stands for: the array
functions against the item-table functions on the same suite, batched suites against each suite
alone, and the bootstrap against a loop written from its docstring. Small simulated suites:
fast, so these run in the mutation scope (docs/mutation.md)."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.claims.protocol import (
    _curve_arrays,
    area_difference,
    area_intervals,
    compute_ratio,
    linear_intervals,
    ratio_intervals,
)
from analysis.simulate import Design, simulate_items

FIELDS = ("effect", "lo", "hi", "p_value", "se", "df", "censored")


def _suite(seed: int, **kw: object) -> object:
    """4 starts x 2 seeds, 3 groups of 12 items, 5 evals. Seeds 4 and 9 (and 46 with
    ``alg_item_sd=2``) are suites where b's isotonic fit reaches the plain mean of its own tail
    evals exactly; on most others float rounding leaves it 1 ulp short somewhere, which
    compute_ratio's slack absorbs (``test_b_reaches_its_own_target``)."""
    design = Design(
        n_starts=4, n_seeds=2, horizons=(1.0, 2.0, 3.0), items=12, evals=5, **kw
    )  # fmt: skip
    return simulate_items(design, seed=seed)


class _Dense:
    """The item table's fold sums as the array functions take them: (S, R, ...) with each
    start's own seeds (the table numbers seeds across starts, so (start, seed) is sparse)."""

    def __init__(self, items, estimand: str, folds: int) -> None:
        arr = _curve_arrays(items, "sppo", "grpo", None, folds, 0, estimand)
        take = [np.flatnonzero(row) for row in arr.runs]
        assert len({t.size for t in take}) == 1  # every start has as many seeds
        self.s = np.stack([arr.s[i, t] for i, t in enumerate(take)])
        self.n = np.stack([arr.n[i, t] for i, t in enumerate(take)])
        self.x = np.stack([arr.x[i, t] for i, t in enumerate(take)])
        self.fractions = arr.fractions
        assert np.isfinite(self.x).all() and (self.n.sum(-1) > 0).all()


def _arrays(items, estimand: str, folds: int = 4) -> _Dense:
    return _Dense(items, estimand, folds)


def _same(est, iv, i: tuple = ()) -> None:
    """The item-table estimate ``est`` and the array intervals ``iv`` (at index ``i``) agree."""
    assert float(iv.effect[i]) == pytest.approx(est.effect, rel=1e-12, abs=1e-15)
    assert float(iv.lo[i]) == pytest.approx(est.lo, rel=1e-12, abs=1e-15)
    assert float(iv.hi[i]) == pytest.approx(est.hi, rel=1e-12, abs=1e-15)
    assert float(iv.p_value[i]) == pytest.approx(est.p_value, rel=1e-9, abs=1e-15)
    assert float(iv.se[i]) == pytest.approx(est.se, rel=1e-12)
    assert float(iv.df[i]) == pytest.approx(est.df, rel=1e-12)
    assert int(iv.censored[i]) == est.censored


@pytest.mark.parametrize("denominator", ["crossing", "budget"])
def test_ratio_intervals_is_compute_ratio_on_arrays(denominator: str) -> None:
    """On one suite of 4 starts x 2 seeds, the array function gives the item-table function's
    effect, interval, p-value, se, df and censored count; at 90% too; and a censored suite (a
    never reaches b: its upper end infinite, its p-value one-sided) the same way."""
    items = _suite(4, speed=0.5, shift=1.0)
    arr = _arrays(items, "compute_ratio")
    for conf in (0.95, 0.9):
        est = compute_ratio(
            items, "sppo", "grpo", folds=4, confidence=conf, denominator=denominator
        )
        iv = ratio_intervals(
            arr.s, arr.n, arr.x, arr.fractions, confidence=conf, denominator=denominator
        )
        assert iv.effect.shape == ()
        _same(est, iv)
    assert est.censored == 0 and np.isfinite(est.hi)
    slow = _suite(9, speed=3.0, shift=-1.0)
    est = compute_ratio(slow, "sppo", "grpo", folds=4, denominator=denominator)
    arr = _arrays(slow, "compute_ratio")
    iv = ratio_intervals(arr.s, arr.n, arr.x, arr.fractions, denominator=denominator)
    assert est.censored >= 1 and est.hi == np.inf == float(iv.hi)
    _same(est, iv)


@pytest.mark.parametrize("folds", [2, 4])
def test_area_intervals_is_area_difference_on_arrays(folds: int) -> None:
    """The same for the area, with 4 item folds and with 2 (the fewest that make a jackknife), on
    a suite whose algorithm-by-item effects are large enough to widen the interval."""
    items = _suite(46, speed=0.5, shift=1.0, alg_item_sd=2.0)
    arr = _arrays(items, "area_difference", folds)
    for conf in (0.95, 0.8):
        est = area_difference(items, "sppo", "grpo", folds=folds, confidence=conf)
        iv = area_intervals(arr.s, arr.n, arr.x, confidence=conf)
        assert iv.effect.shape == ()
        _same(est, iv)
        assert est.censored == 0 and np.isfinite(est.hi)
    one = area_difference(items, "sppo", "grpo", folds=1)
    assert est.se > one.se  # the shared items' variance


def test_ratio_intervals_with_two_folds() -> None:
    items = _suite(46, speed=0.5, shift=1.0, alg_item_sd=2.0)
    arr = _arrays(items, "compute_ratio", 2)
    est = compute_ratio(items, "sppo", "grpo", folds=2)
    _same(est, ratio_intervals(arr.s, arr.n, arr.x, arr.fractions))
    assert est.se != pytest.approx(compute_ratio(items, "sppo", "grpo", folds=1).se, rel=1e-6)


def test_batched_suites_are_each_suite_alone() -> None:
    """A leading axis of suites: each suite's intervals are those it gets alone (the mean over
    seeds and the interval over starts run along their own axes, not across suites)."""
    suites = [_suite(s, speed=0.6, shift=shift) for s, shift in ((4, 0.0), (9, 0.4), (4, 0.8))]
    arrs = [_arrays(items, "compute_ratio") for items in suites]
    s = np.stack([a.s for a in arrs])
    n = np.stack([a.n for a in arrs])
    x = np.stack([a.x for a in arrs])
    ratio = ratio_intervals(s, n, x, arrs[0].fractions)
    area = area_intervals(s, n, x)
    for j, a in enumerate(arrs):
        alone = ratio_intervals(a.s, a.n, a.x, a.fractions)
        for f in FIELDS:
            assert getattr(ratio, f)[j] == pytest.approx(getattr(alone, f), rel=1e-12)
        alone = area_intervals(a.s, a.n, a.x)
        for f in FIELDS:
            assert getattr(area, f)[j] == pytest.approx(getattr(alone, f), rel=1e-12)
    assert ratio.effect.shape == area.effect.shape == (3,)
    assert len({round(float(v), 12) for v in area.effect}) == 3  # three different suites


def test_one_fold_gives_the_t_interval_over_starts_alone() -> None:
    """With a single item fold there is no jackknife: the interval is the t interval of the
    starts' effects (mean over seeds), for the area and for the log ratio."""
    items = _suite(4, speed=0.5)
    arr = _arrays(items, "area_difference", folds=1)
    iv = area_intervals(arr.s, arr.n, arr.x)
    est = area_difference(items, "sppo", "grpo", folds=1)
    _same(est, iv)
    per_start = np.asarray(est.per_start)
    sd = per_start.std(ddof=1) / np.sqrt(per_start.size)
    assert float(iv.effect) == pytest.approx(per_start.mean(), rel=1e-12)
    assert float(iv.se) == pytest.approx(sd, rel=1e-12) and float(iv.df) == 3
    riv = ratio_intervals(arr.s, arr.n, arr.x, arr.fractions)
    rest = compute_ratio(items, "sppo", "grpo", folds=1)
    _same(rest, riv)
    assert float(riv.df) == 3


# --- the bootstrap alternative ---------------------------------------------------------------


def _bootstrap_by_loop(sa, sb, n, h, scale, confidence, reps, seed):
    """The hierarchical paired percentile bootstrap of ``linear_intervals``' docstring, one
    replicate at a time: fold weights (a multinomial draw of K folds) shared by every start and
    both algorithms, then starts drawn with replacement; per start the effect of the
    reweighted sums (mean over groups of a - b, or its weighted slope over the horizons)."""
    rng = np.random.default_rng(seed)
    u, g, k = sa.shape
    weights = rng.multinomial(k, np.full(k, 1 / k), size=reps).astype(float)
    starts = rng.integers(0, u, size=(reps, u))

    def per_start(ta, tb, tn):
        pa, pb = ta / tn, tb / tn
        if scale == "logit":
            eps = 0.5 / np.maximum(tn, 1)
            pa, pb = np.clip(pa, eps, 1 - eps), np.clip(pb, eps, 1 - eps)
            d = np.log(pa / (1 - pa)) - np.log(pb / (1 - pb))
        else:
            d = pa - pb
        if h is None:
            return d.mean()
        hbar = (tn * h).sum() / tn.sum()
        return (tn * (h - hbar) * d).sum() / (tn * (h - hbar) ** 2).sum()

    full = np.array([per_start(sa[i].sum(-1), sb[i].sum(-1), n[i].sum(-1)) for i in range(u)])
    boot = np.empty(reps)
    for r in range(reps):
        w = weights[r]
        vals = [per_start(sa[i] @ w, sb[i] @ w, n[i] @ w) for i in starts[r]]
        boot[r] = np.nanmean(vals)
    alpha = (1 - confidence) / 2
    lo, hi = np.nanquantile(boot, [alpha, 1 - alpha])
    p = min(1.0, 2 * min((boot <= 0).mean(), (boot >= 0).mean()))
    return np.nanmean(full), lo, hi, p, np.nanstd(boot, ddof=1)


@pytest.mark.parametrize(
    ("horizons", "scale", "confidence"),
    [(None, "accuracy", 0.95), ((1.0, 2.0, 4.0), "accuracy", 0.9), ((1.0, 2.0, 4.0), "logit", 0.8)],
)
def test_linear_bootstrap_is_the_documented_resample(horizons, scale, confidence) -> None:
    rng = np.random.default_rng(11)
    u, g, k = 5, 3, 4
    n = rng.integers(2, 5, size=(u, g, k)).astype(float)
    sa = rng.binomial(n.astype(int), 0.6).astype(float)
    sb = rng.binomial(n.astype(int), 0.4).astype(float)
    h = None if horizons is None else np.asarray(horizons)
    iv = linear_intervals(
        sa, sb, n, h, scale=scale, confidence=confidence, method="bootstrap", reps=300, seed=9
    )
    effect, lo, hi, p, se = _bootstrap_by_loop(sa, sb, n, h, scale, confidence, 300, 9)
    assert float(iv.effect) == pytest.approx(effect, rel=1e-12)
    assert (float(iv.lo), float(iv.hi)) == pytest.approx((lo, hi), rel=1e-12)
    assert float(iv.p_value) == pytest.approx(p, rel=1e-12)
    assert float(iv.se) == pytest.approx(se, rel=1e-12)
    assert np.isnan(iv.df) and float(iv.censored) == 0
    assert lo < effect < hi
    # the t interval on the same sums is another interval around the same effect
    t = linear_intervals(sa, sb, n, h, scale=scale, confidence=confidence)
    assert float(t.effect) == pytest.approx(effect, rel=1e-12)
    assert (float(t.lo), float(t.hi)) != pytest.approx((lo, hi), rel=1e-6)
    # the caller's seed and replicate count are used
    other = linear_intervals(sa, sb, n, h, scale=scale, method="bootstrap", reps=300, seed=10)
    assert (float(other.lo), float(other.hi)) != (float(iv.lo), float(iv.hi))
    more = linear_intervals(sa, sb, n, h, scale=scale, method="bootstrap", reps=301, seed=9)
    assert float(more.se) != float(iv.se)


def test_linear_bootstrap_leaves_out_a_drawn_start_without_data() -> None:
    """A start with no items (its effect NaN in every replicate that draws it) is left out of
    that replicate's mean over starts, as the documented loop does."""
    rng = np.random.default_rng(12)
    u, g, k = 5, 3, 4
    n = rng.integers(2, 5, size=(u, g, k)).astype(float)
    sa = rng.binomial(n.astype(int), 0.6).astype(float)
    sb = rng.binomial(n.astype(int), 0.4).astype(float)
    n[1], sa[1], sb[1] = 0.0, 0.0, 0.0
    iv = linear_intervals(sa, sb, n, method="bootstrap", reps=300, seed=4)
    with np.errstate(invalid="ignore"):  # the loop's 0 / 0 for the start without data
        effect, lo, hi, p, se = _bootstrap_by_loop(sa, sb, n, None, "accuracy", 0.95, 300, 4)
    got = tuple(float(v) for v in (iv.effect, iv.lo, iv.hi, iv.p_value, iv.se))
    assert got == pytest.approx((effect, lo, hi, p, se), rel=1e-12)


def test_linear_bootstrap_batched_and_its_defaults() -> None:
    """Batched suites get the same replicates each (one seed): each suite's result is its own
    alone; the defaults are 1,000 replicates from seed 0 at 95%; an unknown method is refused."""
    rng = np.random.default_rng(12)
    n = rng.integers(2, 5, size=(2, 4, 2, 3)).astype(float)
    sa = rng.binomial(n.astype(int), 0.55).astype(float)
    sb = rng.binomial(n.astype(int), 0.45).astype(float)
    both = linear_intervals(sa, sb, n, method="bootstrap", reps=200, seed=3)
    for j in range(2):
        alone = linear_intervals(sa[j], sb[j], n[j], method="bootstrap", reps=200, seed=3)
        for f in ("effect", "lo", "hi", "p_value", "se"):
            assert getattr(both, f)[j] == pytest.approx(float(getattr(alone, f)), rel=1e-12)
    default = linear_intervals(sa[0], sb[0], n[0], method="bootstrap")
    effect, lo, hi, p, se = _bootstrap_by_loop(sa[0], sb[0], n[0], None, "accuracy", 0.95, 1000, 0)
    assert (float(default.lo), float(default.hi), float(default.se)) == pytest.approx(
        (lo, hi, se), rel=1e-12
    )
    with pytest.raises(ValueError, match="method must be 't' or 'bootstrap', got 'jackknife'"):
        linear_intervals(sa, sb, n, method="jackknife")


# --- b reaches its own target ------------------------------------------------------------


def test_b_reaches_its_own_target() -> None:
    """b's fit reaches the target taken from b's own tail evals on every (start, seed), so the
    crossing denominator is finite wherever b ran. Simulate seed 1 is a suite where two seeds'
    isotonic fits sit 1 ulp below the plain mean of the same tail evals (checked below with the
    exact target): without the float64 slack those seeds "never reach" it, compute_ratio drops
    them and ratio_intervals gives their whole start NaN."""
    from analysis.claims.protocol import _REACH_SLACK, _crossing, _isotonic, _ratio_effects

    arr = _arrays(_suite(1, speed=0.5, shift=0.3), "compute_ratio")
    fractions = np.asarray(arr.fractions, float)
    # the defect's case is really there: b's fit against the exact tail mean misses on some seed
    acc = (arr.s.sum(-1) / arr.n.sum(-1)).mean(axis=-2)  # (S, R, 2, E): full data
    fit_b = _isotonic(acc[..., 1, :])
    exact = acc[..., 1, :][..., fractions >= 0.75 * fractions.max() - 1e-12].mean(axis=-1)
    missed = ~(fit_b >= exact[..., None]).any(axis=-1)  # the comparison without the slack
    assert missed.any()
    assert np.all(exact[missed] - fit_b[missed].max(axis=-1) <= 4 * np.finfo(float).eps)
    # with it, b's fit reaches the target at its first eval within rounding of it, that eval's
    # compute exactly (the interpolation stops at the eval, never past it)
    cross = _crossing(fit_b, arr.x[..., 1, :], exact)
    first = np.argmax(fit_b >= exact[..., None] - _REACH_SLACK, axis=-1)
    np.testing.assert_array_equal(
        cross[missed], np.take_along_axis(arr.x[..., 1, :], first[..., None], -1)[..., 0][missed]
    )
    assert 1e3 * np.finfo(float).eps < _REACH_SLACK < 1e-6  # above rounding, below any score step
    lr, _ = _ratio_effects(arr.s, arr.n, arr.x, fractions, "crossing")
    assert np.isfinite(lr).all()  # a censored seed of a counts at a's compute: finite too
    iv = ratio_intervals(arr.s, arr.n, arr.x, fractions)
    assert np.isfinite(iv.effect) and np.isfinite(iv.lo)  # every start counts
    assert int(iv.censored) == 1 and iv.hi == np.inf  # a's censored seed: a lower bound
