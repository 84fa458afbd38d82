"""The protocol's array path (analysis/claims/protocol.py: ``ratio_intervals``, ``area_intervals``,
``trapezoid_weights`` and ``linear_intervals``, its bootstrap among them), which the coverage
simulations run instead of the item-table functions the report calls. Each is checked against what
it stands for: the array functions against the item-table functions on the same suite, batched
suites against each suite alone, the ratio on hand-built arrays (each algorithm's compute axis, the
mean over groups, b's whole tail) and at its edges (a crossing at the first eval, censored starts
counted per suite), the item table read into curves (which runs and evals; the isotonic fit, the
crossing and the trapezoid weights on their own), and the bootstrap against a loop written from
its docstring (ties at no effect, a start without data).
Small simulated suites: fast, so these run in the mutation scope (docs/mutation.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.claims.protocol import (
    ITEM_COLUMNS,
    _curve_arrays,
    area_difference,
    area_intervals,
    compute_ratio,
    linear_intervals,
    ratio_intervals,
    trapezoid_weights,
)
from analysis.simulate import Design, simulate_items
from testkit.protocol import TOL, B
from testkit.protocol import curves as _curves
from testkit.protocol import no_warnings as _no_warnings

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


def test_linear_intervals_batched_with_horizons_are_each_suite_alone() -> None:
    rng = np.random.default_rng(5)
    n = rng.integers(3, 6, size=(3, 5, 3, 2)).astype(float)
    sa = rng.binomial(n.astype(int), 0.6).astype(float)
    sb = rng.binomial(n.astype(int), 0.4).astype(float)
    h = (1.0, 2.0, 6.0)
    both = linear_intervals(sa, sb, n, h)
    for j in range(3):
        alone = linear_intervals(sa[j], sb[j], n[j], h)
        for f in ("effect", "lo", "hi", "p_value", "se", "df"):
            assert getattr(both, f)[j] == pytest.approx(float(getattr(alone, f)), rel=1e-12)


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


# --- the compute ratio on hand-built arrays: compute axes, groups, b's tail, censoring -------


def test_the_ratio_reads_each_algorithm_on_its_own_compute_axis() -> None:
    """Three runs (a batch) of one eval group, 10 items, evals at budget fractions 0.25 .. 1, b
    ending at 0.5 (the target, its tail's mean). Run 0: a (compute 0, 0.5, 1, 2) crosses 0.5
    halfway between 0.4 and 0.6, at 0.75, b (compute 0, 0.25, 0.5, 1) reaches it at 0.5: 1.5.
    Run 1 (compute x4 for b, x8 for a): a is at the target from its first eval, at compute 0,
    which counts at the run's smallest positive compute (1): 1 / 2. Run 2: a never reaches it,
    censored at its own spent compute, 8 / 2 = 4 (a lower bound: the upper end infinite). The
    evals' fractions only pick b's tail, relative to the largest."""
    acc_b = [0.1, 0.3, 0.5, 0.5]
    runs = [
        ([0.2, 0.4, 0.6, 0.8], [0.0, 0.5, 1.0, 2.0], [0.0, 0.25, 0.5, 1.0]),
        ([0.6, 0.6, 0.7, 0.8], [0.0, 2.0, 4.0, 8.0], [0.0, 1.0, 2.0, 4.0]),
        ([0.1, 0.2, 0.3, 0.4], [0.0, 2.0, 4.0, 8.0], [0.0, 1.0, 2.0, 4.0]),
    ]
    s = np.zeros((3, 1, 1, 2, 1, 4, 1))  # (batch, start, seed, algorithm, group, eval, fold)
    x = np.zeros((3, 1, 1, 2, 4))
    for i, (acc_a, x_a, x_b) in enumerate(runs):
        s[i, 0, 0, 0, 0, :, 0], s[i, 0, 0, 1, 0, :, 0] = (
            np.multiply(acc_a, 10),
            np.multiply(acc_b, 10),
        )
        x[i, 0, 0, 0], x[i, 0, 0, 1] = x_a, x_b
    n = np.full(s.shape, 10.0)
    fractions = np.array([0.25, 0.5, 0.75, 1.0])
    iv = ratio_intervals(s, n, x, fractions)
    np.testing.assert_allclose(iv.effect, [1.5, 0.5, 4.0], rtol=1e-12)
    np.testing.assert_array_equal(iv.censored, [0, 0, 1])
    assert np.isinf(iv.hi[2])
    shorter = ratio_intervals(s, n, x, fractions * 0.8)  # evals ending at 0.8 of the budget
    np.testing.assert_allclose(shorter.effect, iv.effect, rtol=1e-12)


def test_the_ratio_reads_the_mean_over_groups_and_b_s_whole_tail() -> None:
    """Two eval groups of 10 and 4 items give the curve of their mean accuracy (the same ratio
    as one group holding that mean), and b's target is the mean of every eval in the last
    quarter of the budget, the one at 0.75 included: b at 0.3 and 0.7 there and at the end makes
    0.5 the target, which a (0.4 at 0.5, 0.6 at 1) and b (0.3 at 0.5, 0.7 at 1) both reach at
    0.75: a ratio of 1."""
    acc_a = np.array([[0.0, 0.2, 0.4, 0.6], [0.4, 0.6, 0.8, 1.0]])  # (group, eval): mean 0.2 ..
    acc_b = np.array([[0.0, 0.2, 0.1, 0.5], [0.2, 0.4, 0.5, 0.9]])  # mean 0.1, 0.3, 0.3, 0.7
    counts = np.array([10.0, 4.0])
    s = np.zeros((1, 1, 2, 2, 4, 1))  # (start, seed, algorithm, group, eval, fold)
    s[0, 0, 0, :, :, 0] = acc_a * counts[:, None]
    s[0, 0, 1, :, :, 0] = acc_b * counts[:, None]
    n = np.broadcast_to(counts[None, None, None, :, None, None], s.shape).copy()
    x = np.tile(np.array([0.0, 0.5, 1.0, 2.0]), (1, 1, 2, 1))
    x[0, 0, 1] = [0.0, 0.25, 0.5, 1.0]
    fractions = np.array([0.25, 0.5, 0.75, 1.0])
    two = ratio_intervals(s, n, x, fractions)
    s1 = np.stack([acc_a.mean(0), acc_b.mean(0)])[None, None, :, None, :, None] * 10
    one = ratio_intervals(s1, np.full(s1.shape, 10.0), x, fractions)
    assert float(two.effect) == pytest.approx(float(one.effect), rel=1e-12)
    assert float(one.effect) == pytest.approx(1.0, rel=1e-12)


def test_curves_at_floor_ceiling_and_crossing_at_the_first_eval_warn_nothing() -> None:
    """a at 1.0 from the first eval (it crosses there), b flat (its fit is level, so the
    crossing's interpolation would divide 0 by 0), a curve at 0: the ratio and the area are
    computed without a warning, and the crossing at the first eval is that eval's compute."""
    items = _curves({
        ("s1", 1, "a"): [1.0, 1.0, 1.0, 1.0], ("s1", 1, "b"): [0.6, 0.6, 0.6, 0.6],
        ("s2", 2, "a"): [0.0, 0.0, 0.0, 0.0], ("s2", 2, "b"): [0.0, 0.0, 0.0, 0.0],
        ("s3", 3, "a"): [0.4, 0.6, 0.6, 0.6], ("s3", 3, "b"): B,
    })  # fmt: skip
    with _no_warnings():
        est = compute_ratio(items, "a", "b", folds=2)
        area = area_difference(items, "a", "b", folds=2)
        budget = compute_ratio(items, "a", "b", folds=2, denominator="budget")
    # s1: a reaches 0.6 at its first eval (250), b too (250); s2: both at 0 reach 0 at 250;
    # s3: a at 500, b at 750
    assert est.per_start == pytest.approx((1.0, 1.0, 2 / 3))
    assert budget.per_start == pytest.approx((0.25, 0.25, 0.5))
    assert area.per_start[1] == 0.0 and area.per_start[0] > 0


def _dense(items: pd.DataFrame, folds: int):
    """A compute-ratio suite's fold sums as ``ratio_intervals`` takes them: s, n, x, fractions."""
    arr = _arrays(items, "compute_ratio", folds)
    return arr.s, arr.n, arr.x, arr.fractions


def test_ratio_intervals_count_censored_starts_per_suite() -> None:
    """The array path counts starts with a censored seed along the starts' axis of each suite."""
    items = simulate_items(Design(n_starts=4, n_seeds=1, items=12, evals=5, speed=4.0), seed=4)
    est = compute_ratio(items, "sppo", "grpo", folds=2)
    assert est.censored >= 2
    s, n, x, fractions = _dense(items, folds=2)
    iv = ratio_intervals(np.stack([s, s]), np.stack([n, n]), np.stack([x, x]), fractions)
    assert iv.censored.tolist() == [est.censored, est.censored]


# --- the item table read into curves: runs, evals, the isotonic fit, the crossing, weights ---


def test_a_seed_run_by_one_algorithm_only_is_left_out() -> None:
    """A (start, seed) where only a ran pairs with nothing: it is left out of the ratio and the
    area, and a start with no paired seed is no start at all."""
    paired = {
        ("s1", 1, "a"): [0.4, 0.6, 0.6, 0.6], ("s1", 1, "b"): B,
        ("s2", 2, "a"): [0.3, 0.5, 0.7, 0.5], ("s2", 2, "b"): B,
    }  # fmt: skip
    lone = {("s1", 5, "a"): [0.1, 0.1, 0.1, 0.1], ("s3", 6, "a"): [0.9, 0.9, 0.9, 0.9]}
    items = _curves({**paired, **lone})
    for fn in (compute_ratio, area_difference):
        est = fn(items, "a", "b", folds=1)
        assert (est.n_starts, est.n_seeds) == (2, 1)
        assert est.per_start == pytest.approx(fn(_curves(paired), "a", "b", folds=1).per_start)


def test_a_run_missing_an_eval_is_refused_by_name() -> None:
    """The curve estimands need every eval of every dataset: a run without one (here a's run of
    s2, seed 2, on dataset e at fraction 0.5, its compute there still logged through d) is
    named in the error with the budget fractions."""
    curves = {
        ("s1", 1, "a"): [0.4, 0.6, 0.6, 0.6], ("s1", 1, "b"): B,
        ("s2", 2, "a"): [0.3, 0.5, 0.7, 0.5], ("s2", 2, "b"): B,
    }  # fmt: skip
    items = _curves(curves, datasets=("d", "e"))
    gap = (items["start"] == "s2") & (items["algorithm"] == "a") & (items["dataset"] == "e")
    items = items[~(gap & (items["budget_fraction"] == 0.5))]
    for fn, name in ((compute_ratio, "compute_ratio"), (area_difference, "area_difference")):
        with pytest.raises(ValueError) as err:
            fn(items, "a", "b", folds=1)
        assert str(err.value) == (
            "runs (start, seed) [('s2', 2)] lack an eval of some dataset or a compute value at "
            f"some budget fraction of [0.25, 0.5, 0.75, 1.0]; {name} needs every eval"
        )
    # every eval present, but no compute logged at one of them: refused the same way
    full = _curves(curves, datasets=("d", "e"))
    blind = (full["start"] == "s1") & (full["algorithm"] == "b") & (full["budget_fraction"] == 0.75)
    full.loc[blind, "compute"] = np.nan
    with pytest.raises(ValueError, match=r"^runs \(start, seed\) \[\('s1', 1\)\] lack an eval"):
        compute_ratio(full, "a", "b", folds=1)


def test_one_item_at_one_eval_is_a_curve() -> None:
    """The smallest suite the area reads: one item, one eval (weight 1): per start a's score
    minus b's."""
    rows = [
        (start, seed, algo, "d", np.nan, "i0", 1.0, 1000.0, score)
        for start, seed, algo, score in (
            ("s1", 1, "a", 1.0), ("s1", 1, "b", 0.0), ("s2", 2, "a", 1.0), ("s2", 2, "b", 1.0),
        )
    ]  # fmt: skip
    items = pd.DataFrame(rows, columns=list(ITEM_COLUMNS))
    est = area_difference(items, "a", "b", folds=1)
    assert (est.n_starts, est.n_seeds) == (2, 1)
    assert est.per_start == pytest.approx((1.0, 0.0))


def test_isotonic_fit_matches_pool_adjacent_violators():
    from analysis.claims.protocol import _isotonic  # the helper under test, loop versus vectorised

    def pava(y):
        blocks = [[v, 1] for v in y]
        i = 0
        while i < len(blocks) - 1:
            if blocks[i][0] / blocks[i][1] > blocks[i + 1][0] / blocks[i + 1][1]:
                blocks[i] = [blocks[i][0] + blocks[i + 1][0], blocks[i][1] + blocks[i + 1][1]]
                del blocks[i + 1]
                i = max(i - 1, 0)
            else:
                i += 1
        return np.concatenate([[s / n] * n for s, n in blocks])

    y = np.random.default_rng(4).random((50, 9))
    np.testing.assert_allclose(_isotonic(y), np.stack([pava(r) for r in y]), atol=TOL)


def test_the_isotonic_fit_and_the_crossing_warn_nothing_on_their_own() -> None:
    """The helpers divide by empty blocks (the isotonic fit's means over k < i) and by level
    steps (the crossing's interpolation between equal values): each keeps its own numpy errors
    quiet, not only inside the estimators that call it."""
    from analysis.claims.protocol import _crossing, _isotonic

    y = np.array(
        [[0.2, 0.1, 0.4, 0.4], [0.0, 0.0, 0.0, 0.0], [0.5, 0.6, 0.7, 0.8], [0.2, 0.6, 0.7, 0.8]]
    )
    with _no_warnings():
        fit = _isotonic(y)
        cross = _crossing(
            fit, np.array([1.0, 2.0, 3.0, 4.0]) * np.ones((4, 1)), np.array([0.4, 0.0, 0.4, 0.4])
        )
    np.testing.assert_allclose(fit[:2], [[0.15, 0.15, 0.4, 0.4], [0.0, 0.0, 0.0, 0.0]], rtol=1e-12)
    np.testing.assert_allclose(fit[2:], y[2:], rtol=1e-12)  # increasing: itself
    # above the target from the first eval: that eval; between the first two: interpolated
    np.testing.assert_allclose(cross, [3.0, 1.0, 1.0, 1.5], rtol=1e-12)


def test_trapezoid_weights_batched_and_at_one_eval() -> None:
    """Weights along the last axis whose sum with a curve is its trapezoid mean over its span:
    per row of a batch, half the neighbouring gaps over the span; one eval weighs 1; a curve
    with no span (all evals at one compute) has no mean (NaN) and warns nothing."""
    x = np.array([[[0.0, 1.0, 3.0, 4.0]], [[0.0, 2.0, 4.0, 8.0]]])  # (2, 1, 4)
    w = trapezoid_weights(x)
    assert w.shape == (2, 1, 4)
    np.testing.assert_allclose(w[0, 0], [0.5 / 4, 1.5 / 4, 1.5 / 4, 0.5 / 4])
    np.testing.assert_allclose(w[1, 0], [1 / 8, 2 / 8, 3 / 8, 2 / 8])
    two = trapezoid_weights(np.array([[0.0, 2.0]]))
    np.testing.assert_allclose(two, [[0.5, 0.5]])
    np.testing.assert_array_equal(
        trapezoid_weights(np.array([[5.0], [7.0], [9.0]])), np.ones((3, 1))
    )
    with _no_warnings():
        flat = trapezoid_weights(np.array([[3.0, 3.0, 3.0]]))
    assert np.isnan(flat).all()


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


def test_the_bootstrap_counts_ties_at_zero_on_both_sides_and_batches() -> None:
    """Replicates exactly at 0 count on both sides (p = 1, never above 1) when a and b score
    alike; a batch computes each suite's shares alone (a suite where b is ahead throughout has
    p = 0 beside it); a start without data is left out of each replicate's mean and warns
    nothing."""
    rng = np.random.default_rng(3)
    n = np.full((5, 2, 4), 6.0)
    sa = rng.binomial(6, 0.5, size=(5, 2, 4)).astype(float)
    tied = linear_intervals(sa, sa, n, method="bootstrap", reps=200)
    assert float(tied.p_value) == 1.0 and float(tied.effect) == 0.0
    sb = np.minimum(sa + 3.0, 6.0)  # b ahead on every fold of every start
    both = linear_intervals(np.stack([sa, sa]), np.stack([sa, sb]), np.stack([n, n]),
                            method="bootstrap", reps=200)  # fmt: skip
    np.testing.assert_array_equal(both.p_value, [1.0, 0.0])
    gap = n.copy()
    gap[2], sa_gap, sb_gap = 0.0, sa.copy(), sb.copy()
    sa_gap[2], sb_gap[2] = 0.0, 0.0
    with _no_warnings():
        left = linear_intervals(sa_gap, sb_gap, gap, method="bootstrap", reps=400, seed=1)
    kept = np.array([0, 1, 3, 4])
    ref = linear_intervals(sa_gap[kept], sb_gap[kept], gap[kept], method="t")
    assert float(left.effect) == pytest.approx(float(ref.effect), rel=1e-12)
    assert np.isfinite(float(left.lo)) and float(left.hi) < 0


# --- b reaches its own target ----------------------------------------------------------------


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
