"""What the protocol's functions (analysis/claims/protocol.py) promise beyond their worked examples in
test_protocol.py, written for the mutation scope (docs/mutation.md): their refusals and the
messages that name the bad input, the settings they pass on (datasets, seed, defaults), the
fields of the estimate they return, the censored count, the t interval's folds, and that the
edge cases they handle (a curve at its ceiling, a crossing at the first eval) warn nothing.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.claims.protocol import (
    ITEM_COLUMNS,
    NON_INFERIOR,
    NOT_RESOLVED,
    ClaimEstimate,
    area_difference,
    claim_p_value,
    compute_ratio,
    final_difference,
    holm,
    horizon_slope,
    linear_intervals,
    ratio_intervals,
    reached_level,
    trapezoid_weights,
    verdict,
)
from analysis.simulate import Design, simulate_items


@contextmanager
def _no_warnings() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def _curves(curves: dict, items: int = 10, datasets: tuple[str, ...] = ("d",)) -> pd.DataFrame:
    """{(start, seed, algorithm): [accuracy at fractions 0.25, 0.5, 0.75, 1]} -> item table, the
    first round(acc * items) items correct, compute 1000 x fraction, on each of ``datasets``."""
    rows = []
    for (start, seed, algo), accs in curves.items():
        for ds in datasets:
            for f, acc in zip((0.25, 0.5, 0.75, 1.0), accs, strict=True):
                for i in range(items):
                    rows.append((start, seed, algo, ds, np.nan, f"i{i}", f, 1000 * f,
                                 float(i < round(acc * items))))  # fmt: skip
    return pd.DataFrame(rows, columns=list(ITEM_COLUMNS))


B = [0.2, 0.4, 0.6, 0.6]  # b reaches 0.6 at 750 (test_protocol.test_compute_ratio_hand_worked)


# --- Holm ------------------------------------------------------------------------------------


def test_holm_refuses_levels_and_p_values_outside_their_ranges() -> None:
    for alpha in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(ValueError) as err:
            holm([0.01], alpha)
        assert str(err.value) == f"alpha must be in (0, 1), got {alpha}"
    for bad in ([1.5, 0.1], [-0.01]):
        with pytest.raises(ValueError) as err:
            holm(bad)
        assert str(err.value) == f"p-values must be in [0, 1], got {bad}"
    with pytest.raises(ValueError) as err:
        holm([0.1, 0.2], family_size=1)
    assert str(err.value) == "family_size=1 is smaller than the 2 p-values given"
    # the ends of both ranges are accepted: p = 0 and p = 1, alpha just inside (0, 1)
    rows = holm([0.0, 1.0], alpha=0.999)
    assert [(r.p, r.rank, r.rejected) for r in rows] == [(0.0, 1, True), (1.0, 2, False)]
    assert [r.alpha_adj for r in holm([0.0, 1.0], alpha=1e-9)] == [1e-9 / 2, 1e-9]


def test_holm_rows_hold_plain_numbers_and_untested_members_read_p_one() -> None:
    """An untested member (NaN) enters as p = 1 and is shown so; every field is a plain Python
    number of its documented type."""
    rows = holm([float("nan"), 0.004, 0.03], alpha=0.05, family_size=4)
    assert [r.p for r in rows] == [1.0, 0.004, 0.03]
    assert [r.rank for r in rows] == [3, 1, 2]
    assert [r.alpha_adj for r in rows] == pytest.approx([0.05 / 2, 0.05 / 4, 0.05 / 3])
    assert [r.p_adj for r in rows] == pytest.approx([1.0, 0.016, 0.09])
    # 0.004 <= 0.05 / 4 is rejected; 0.03 > 0.05 / 3 stops the step-down
    assert [r.rejected for r in rows] == [False, True, False]
    for r in rows:
        assert type(r.p) is float and type(r.rank) is int and type(r.rejected) is bool
        assert type(r.alpha_adj) is float and type(r.p_adj) is float


# --- compute_ratio's settings and fields -----------------------------------------------------


def test_compute_ratio_names_what_it_compared_and_its_scale() -> None:
    items = _curves({
        ("s1", 1, "a"): [0.4, 0.6, 0.6, 0.6], ("s1", 1, "b"): B,
        ("s2", 2, "a"): [0.3, 0.5, 0.7, 0.5], ("s2", 2, "b"): B,
    })  # fmt: skip
    est = compute_ratio(items, "a", "b", folds=1)
    assert (est.estimand, est.a, est.b, est.scale) == ("compute_ratio", "a", "b", "log")
    assert (est.n_starts, est.n_seeds, est.censored) == (2, 1, 0)
    with pytest.raises(ValueError) as err:
        compute_ratio(items, "a", "b", denominator="final")
    assert str(err.value) == "denominator must be 'crossing' or 'budget', got 'final'"


def _two_datasets() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Dataset d, and d with a dataset e on which a is slower: (d's items, both's items)."""
    d = _curves({
        ("s1", 1, "a"): [0.4, 0.6, 0.6, 0.6], ("s1", 1, "b"): B,
        ("s2", 2, "a"): [0.3, 0.5, 0.7, 0.5], ("s2", 2, "b"): B,
    })  # fmt: skip
    e = _curves({
        ("s1", 1, "a"): [0.1, 0.2, 0.3, 0.6], ("s1", 1, "b"): B,
        ("s2", 2, "a"): [0.1, 0.1, 0.2, 0.6], ("s2", 2, "b"): B,
    }, datasets=("e",))  # fmt: skip
    both = pd.concat([d, e], ignore_index=True)
    return d, both


def test_compute_ratio_reads_only_the_datasets_asked_for() -> None:
    """On dataset e, a is slower than on d: the ratio on ``datasets=["d"]`` is d's alone, the
    same as on the item table without e, and not the ratio over both."""
    d, both = _two_datasets()
    only_d = compute_ratio(both, "a", "b", ["d"], folds=1)
    assert only_d.per_start == pytest.approx(compute_ratio(d, "a", "b", folds=1).per_start)
    assert only_d.per_start == pytest.approx((2 / 3, 1.0))
    assert compute_ratio(both, "a", "b", folds=1).per_start != pytest.approx(only_d.per_start)
    only_e = compute_ratio(both, "a", "b", ["e"], folds=1)
    assert only_e.per_start == pytest.approx((4 / 3, 4 / 3))  # a at 1000, b at 750


def test_compute_ratio_deals_its_folds_from_the_seed_given() -> None:
    """The item folds are dealt from ``seed`` (default 0): another seed deals other folds, so
    another jackknife variance, around the same effect."""
    items = simulate_items(Design(n_starts=3, n_seeds=1, items=12, evals=4, speed=0.5), seed=4)
    default = compute_ratio(items, "sppo", "grpo", folds=4)
    assert default == compute_ratio(items, "sppo", "grpo", folds=4, seed=0)
    other = compute_ratio(items, "sppo", "grpo", folds=4, seed=1)
    assert other.effect == pytest.approx(default.effect, rel=1e-12)
    assert other.se != pytest.approx(default.se, rel=1e-9)


def test_the_censored_count_is_of_starts_and_on_one_start_of_seeds() -> None:
    """Over two or more starts, ``censored`` counts the starts where a never reached the target
    on some seed (two censored seeds of one start count once); over one start, whether any
    seed was."""
    never = [0.1, 0.2, 0.3, 0.4]
    two = _curves({
        ("s1", 1, "a"): never, ("s1", 1, "b"): B, ("s1", 2, "a"): never, ("s1", 2, "b"): B,
        ("s2", 3, "a"): never, ("s2", 3, "b"): B,
    })  # fmt: skip
    assert compute_ratio(two, "a", "b", folds=1).censored == 2
    three = pd.concat([two, _curves({("s3", 4, "a"): B, ("s3", 4, "b"): B})], ignore_index=True)
    assert compute_ratio(three, "a", "b", folds=1).censored == 2
    one = two[two["start"] == "s1"]
    est = compute_ratio(one, "a", "b", folds=1)
    assert est.n_starts == 1 and est.censored == 1


def test_ratio_intervals_count_censored_starts_per_suite() -> None:
    """The array path counts starts with a censored seed along the starts' axis of each suite."""
    items = simulate_items(Design(n_starts=4, n_seeds=1, items=12, evals=5, speed=4.0), seed=4)
    est = compute_ratio(items, "sppo", "grpo", folds=2)
    assert est.censored >= 2
    s, n, x, fractions = _dense(items, folds=2)
    iv = ratio_intervals(np.stack([s, s]), np.stack([n, n]), np.stack([x, x]), fractions)
    assert iv.censored.tolist() == [est.censored, est.censored]


def _dense(items: pd.DataFrame, folds: int):
    from analysis.claims.protocol import _curve_arrays

    arr = _curve_arrays(items, "sppo", "grpo", None, folds, 0, "compute_ratio")
    take = [np.flatnonzero(row) for row in arr.runs]
    pick = lambda v: np.stack([v[i, t] for i, t in enumerate(take)])  # noqa: E731
    return pick(arr.s), pick(arr.n), pick(arr.x), arr.fractions


# --- the linear t interval on arrays ---------------------------------------------------------


def _sums(rng: np.random.Generator, u: int = 5, g: int = 3, k: int = 4):
    n = rng.integers(3, 6, size=(u, g, k)).astype(float)
    sa = rng.binomial(n.astype(int), 0.6).astype(float)
    sb = rng.binomial(n.astype(int), 0.4).astype(float)
    return sa, sb, n


def test_linear_t_interval_with_one_fold_is_the_t_interval_over_starts() -> None:
    """One item fold: no jackknife, the t interval of the starts' effects (n - 1 degrees of
    freedom) and its two-sided p-value; the horizons, when given, make it the slope's."""
    sa, sb, n = _sums(np.random.default_rng(1), k=1)
    for h in (None, np.array([1.0, 2.0, 4.0])):
        iv = linear_intervals(sa, sb, n, None if h is None else tuple(h), confidence=0.9)
        d = sa[..., 0] / n[..., 0] - sb[..., 0] / n[..., 0]  # (U, G)
        if h is None:
            per = d.mean(axis=-1)
        else:
            w = n[..., 0]
            hbar = (w * h).sum(-1, keepdims=True) / w.sum(-1, keepdims=True)
            per = (w * (h - hbar) * d).sum(-1) / (w * (h - hbar) ** 2).sum(-1)
        se = per.std(ddof=1) / math.sqrt(per.size)
        half = stats.t.ppf(0.95, per.size - 1) * se
        assert float(iv.effect) == pytest.approx(per.mean(), rel=1e-12)
        assert (float(iv.lo), float(iv.hi)) == pytest.approx(
            (per.mean() - half, per.mean() + half), rel=1e-12
        )
        assert float(iv.se) == pytest.approx(se, rel=1e-12) and float(iv.df) == per.size - 1
        p = 2 * stats.t.sf(abs(per.mean() / se), per.size - 1)
        assert float(iv.p_value) == pytest.approx(p, rel=1e-9)
        assert float(iv.censored) == 0


def test_linear_t_interval_keeps_two_folds_and_drops_one() -> None:
    """Two item folds are a jackknife: items shared by every start (one fold easy for a, the
    other for b) widen the interval beyond the spread over starts; merged into one fold, that
    variance is gone."""
    n = np.full((5, 2, 2), 10.0)
    sa = np.array([[8.0, 3.0], [7.0, 2.0]])[None] + np.arange(5.0)[:, None, None] % 2
    sb = np.array([[3.0, 8.0], [4.0, 5.0]])[None] + np.zeros((5, 1, 1))
    two = linear_intervals(sa, sb, n)
    merged = linear_intervals(sa.sum(-1, keepdims=True), sb.sum(-1, keepdims=True),
                              n.sum(-1, keepdims=True))  # fmt: skip
    assert float(two.effect) == pytest.approx(float(merged.effect), rel=1e-12)
    assert float(two.se) > 2 * float(merged.se) > 0


def test_linear_interval_refuses_an_unknown_method() -> None:
    sa, sb, n = _sums(np.random.default_rng(3))
    with pytest.raises(ValueError) as err:
        linear_intervals(sa, sb, n, method="percentile")
    assert str(err.value) == "method must be 't' or 'bootstrap', got 'percentile'"


# --- edge cases that must not warn -----------------------------------------------------------


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


# --- the other estimands' settings, fields and jackknife -------------------------------------


def test_final_and_area_differences_name_what_they_compared_and_deal_folds_from_seed() -> None:
    items = simulate_items(Design(n_starts=3, n_seeds=1, items=12, evals=4, speed=0.5), seed=4)
    for fn, name in ((final_difference, "final_difference"), (area_difference, "area_difference")):
        est = fn(items, "sppo", "grpo", folds=4)
        assert (est.estimand, est.a, est.b, est.scale) == (name, "sppo", "grpo", "accuracy")
        assert est == fn(items, "sppo", "grpo", folds=4, seed=0)  # the default seed
        other = fn(items, "sppo", "grpo", folds=4, seed=1)
        assert other.effect == pytest.approx(est.effect, rel=1e-12)
        assert other.se != pytest.approx(est.se, rel=1e-9)


def test_area_difference_reads_only_the_datasets_asked_for() -> None:
    d, both = _two_datasets()
    only_d = area_difference(both, "a", "b", ["d"], folds=1)
    assert only_d.per_start == pytest.approx(area_difference(d, "a", "b", folds=1).per_start)
    assert area_difference(both, "a", "b", folds=1).per_start != pytest.approx(only_d.per_start)


def _uniform(curves: dict, items: int = 9) -> pd.DataFrame:
    """Every item of a run scores the same at each eval (0 or 1): leaving any item out changes
    no accuracy."""
    rows = []
    for (start, seed, algo), accs in curves.items():
        for f, acc in zip((0.25, 0.5, 0.75, 1.0), accs, strict=True):
            for i in range(items):
                rows.append((start, seed, algo, "d", np.nan, f"i{i}", f, 1000 * f, float(acc)))
    return pd.DataFrame(rows, columns=list(ITEM_COLUMNS))


def test_leaving_out_items_that_all_score_alike_changes_nothing() -> None:
    """When every item of a run scores alike, each fold-deleted variant equals the full data, so
    the jackknife adds no item variance: 4 uneven folds (9 items) give the interval of 1 fold,
    for the area and for the compute ratio."""
    items = _uniform({
        ("s1", 1, "a"): [0, 1, 1, 1], ("s1", 1, "b"): [0, 0, 1, 1],
        ("s2", 2, "a"): [0, 0, 1, 1], ("s2", 2, "b"): [0, 0, 1, 1],
        ("s3", 3, "a"): [1, 1, 1, 1], ("s3", 3, "b"): [0, 0, 0, 1],
    })  # fmt: skip
    for fn in (area_difference, compute_ratio):
        with _no_warnings():
            four, one = fn(items, "a", "b", folds=4), fn(items, "a", "b", folds=1)
        assert four.per_start == pytest.approx(one.per_start, rel=1e-12)
        assert (four.se, four.df) == pytest.approx((one.se, one.df), rel=1e-12)
        assert (four.lo, four.hi) == pytest.approx((one.lo, one.hi), rel=1e-12)
    # per start the trapezoid mean over 250 .. 1000 (equal gaps: (y0/2 + y1 + y2 + y3/2) / 3)
    # of a - b: s1 2.5/3 - 1.5/3, s2 0, s3 1 - 0.5/3
    area = area_difference(items, "a", "b", folds=1)
    assert area.per_start == pytest.approx((1 / 3, 0.0, 5 / 6), rel=1e-12)


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


# --- which runs the curve estimands use -------------------------------------------------------


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


# --- the horizon slope's settings ------------------------------------------------------------


def _finals(per_group: dict[str, tuple[float, float]], starts: int = 3, items: int = 8):
    """Final evals per start: for each dataset (horizon in its name, or none) a's and b's
    accuracy, plus a start-specific offset on a (so the starts differ)."""
    rows = []
    for s in range(starts):
        for ds, (acc_a, acc_b) in per_group.items():
            h = float(ds[1:]) if ds.startswith("h") else np.nan
            for algo, acc in (
                ("a", acc_a + 0.1 * (s % 2) * (h if h == h else 0) / 8),
                ("b", acc_b),
            ):
                for i in range(items):
                    rows.append((f"s{s}", s, algo, ds, h, f"i{i}", 1.0, 1000.0,
                                 float(i < round(acc * items))))  # fmt: skip
    return pd.DataFrame(rows, columns=list(ITEM_COLUMNS))


def test_horizon_slope_defaults_to_the_datasets_with_a_horizon() -> None:
    """Without ``datasets`` the groups are every dataset with a horizon (an overall dataset
    without one is left out); two distinct horizons are enough for a slope; ``datasets`` picks
    the groups; the estimate names what it compared and its scale."""
    items = _finals({"h2": (0.5, 0.5), "h4": (0.75, 0.5), "h8": (1.0, 0.5), "all": (0.0, 1.0)})
    est = horizon_slope(items, "a", "b", folds=1)
    assert est == horizon_slope(items, "a", "b", ["h2", "h4", "h8"], folds=1)
    assert (est.estimand, est.a, est.b, est.scale) == ("horizon_slope", "a", "b", "accuracy")
    # start 0: differences (0, .25, .5) over horizons 2, 4, 8 with equal weights: mean horizon
    # 14/3, sum dx d = 1.5, sum dx^2 = 168/9, slope 9/112
    assert est.per_start[0] == pytest.approx(9 / 112, rel=1e-12)
    two = horizon_slope(items, "a", "b", ["h2", "h8"], folds=1)
    assert two.per_start[0] == pytest.approx(0.5 / 6, rel=1e-12)
    assert horizon_slope(items, "a", "b", ["h2", "h4"], folds=1).per_start[0] == pytest.approx(
        0.25 / 2, rel=1e-12
    )
    logit = horizon_slope(items, "a", "b", folds=1, scale="logit")
    assert (logit.scale, logit.a, logit.b) == ("logit", "a", "b")
    with pytest.raises(ValueError) as err:
        horizon_slope(items, "a", "b", scale="log")
    assert str(err.value) == "scale must be 'accuracy' or 'logit', got 'log'"
    with pytest.raises(ValueError, match="two or more datasets with distinct horizons"):
        horizon_slope(items, "a", "b", ["h4"], folds=1)


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


# --- a margin claim's p-value at the edges ---------------------------------------------------


def _est(effect: float, se: float, df: float) -> ClaimEstimate:
    return ClaimEstimate(
        estimand="final_difference", a="a", b="b", effect=effect, lo=float("nan"),
        hi=float("nan"), level=0.95, p_value=0.5, n_starts=5, n_seeds=1, mde=float("nan"),
        conditional=False, per_start=(), se=se, df=df,
    )  # fmt: skip


def test_margin_p_value_without_a_usable_standard_error_or_with_none_at_all() -> None:
    """A missing se, df or effect (NaN), or df <= 0, gives no p-value (NaN); a df between 0 and
    1 is a t distribution like any other; se = 0 (every start agrees exactly) puts an effect
    off the margin infinitely far from it: p = 0."""
    nan = float("nan")
    for e, se, df in ((0.01, nan, 4.0), (0.01, 0.01, nan), (nan, 0.01, 4.0), (0.01, 0.01, 0.0)):
        assert math.isnan(claim_p_value(_est(e, se, df), "greater", 0.02)), (e, se, df)
    half = claim_p_value(_est(0.01, 0.01, 0.5), "greater", 0.02)
    assert half == pytest.approx(2 * stats.t.sf(3.0, 0.5), rel=1e-12) and half > 0.1
    assert claim_p_value(_est(0.01, 0.0, 4.0), "greater", 0.02) == 0.0
    assert claim_p_value(_est(-0.05, 0.0, 4.0), "greater", 0.02) == 0.0  # holds not: also sure
    assert claim_p_value(_est(0.0, 0.0, 4.0), "equivalent", 0.02) == 0.0


# --- the interval from its documented construction -------------------------------------------


def _interval_by_hand(e: np.ndarray, e_del: np.ndarray, confidence: float):
    """The module docstring's interval over S units (finite ``e``) and K folds: the units'
    variance over S plus the shared items' V_items = S / (S - 1) (V_joint - mean v_unit / S),
    floored at 0, with Satterthwaite's degrees of freedom over the three mean squares (never
    fewer than S - 1; S - 1 when no shared part); one unit: its own jackknife, K - 1 df."""
    keep = np.isfinite(e)
    e, e_del = e[keep], e_del[keep]
    s, k = e.size, e_del.shape[1]
    jack = lambda x: (k - 1) / k * ((x - x.mean(-1, keepdims=True)) ** 2).sum(-1)  # noqa: E731
    v_unit = jack(e_del)
    if s == 1:
        return e.mean(), math.sqrt(v_unit[0]), k - 1.0
    v_joint = float(jack(e_del.mean(axis=0)))
    a = e.var(ddof=1) / s
    shared = max(0.0, s / (s - 1) * (v_joint - v_unit.mean() / s))
    v = a + shared
    df = s - 1.0
    if shared > 0:
        v_res = (v_unit.mean() - v_joint) / (s - 1)
        denom = a**2 / (s - 1) + v_joint**2 / (k - 1) + v_res**2 / ((s - 1) * (k - 1))
        df = max(v**2 / denom, s - 1.0)
    return e.mean(), math.sqrt(v), df


def _layout(rng: np.random.Generator, s: int, k: int, shared: float):
    """Fold sums of one group: a's items easier on some folds for every start (``shared``),
    plus per-start noise."""
    n = np.full((s, 1, k), 6.0)
    fold = rng.normal(0, shared, k)
    p_a = np.clip(0.55 + fold[None, :] + rng.normal(0, 0.05, (s, k)), 0.05, 0.95)
    sa = rng.binomial(6, p_a)[:, None, :].astype(float)
    sb = rng.binomial(6, np.full((s, k), 0.45))[:, None, :].astype(float)
    return sa, sb, n


def _effects(sa, sb, n):
    fa, fb, fn = sa.sum(-1)[:, 0], sb.sum(-1)[:, 0], n.sum(-1)[:, 0]
    with np.errstate(invalid="ignore"):  # a unit without items: NaN
        e = (fa - fb) / fn
        e_del = ((fa[:, None] - sa[:, 0]) - (fb[:, None] - sb[:, 0])) / (fn[:, None] - n[:, 0])
    return e, e_del


@pytest.mark.parametrize(("s", "k", "shared"), [(5, 4, 0.3), (6, 3, 0.0), (4, 2, 0.4), (1, 5, 0.2)])
def test_the_interval_is_its_documented_construction(s: int, k: int, shared: float) -> None:
    rng = np.random.default_rng(100 * s + k)
    sa, sb, n = _layout(rng, s, k, shared)
    e, e_del = _effects(sa, sb, n)
    mean, se, df = _interval_by_hand(e, e_del, 0.9)
    iv = linear_intervals(sa, sb, n, confidence=0.9)
    assert float(iv.effect) == pytest.approx(mean, rel=1e-12)
    assert float(iv.se) == pytest.approx(se, rel=1e-9)
    assert float(iv.df) == pytest.approx(df, rel=1e-9)
    half = stats.t.ppf(0.95, df) * se
    assert (float(iv.lo), float(iv.hi)) == pytest.approx((mean - half, mean + half), rel=1e-9)
    assert float(iv.p_value) == pytest.approx(2 * stats.t.sf(abs(mean) / se, df), rel=1e-6)


def test_the_interval_leaves_out_a_unit_without_data_and_batches() -> None:
    """A unit with no items (NaN effect) is left out of the count of units; suites batched on a
    leading axis are each computed alone, whatever their missing units."""
    rng = np.random.default_rng(7)
    suites = [_layout(rng, 5, 4, 0.3) for _ in range(2)]
    sa, sb, n = (np.stack([x[i] for x in suites]) for i in range(3))
    n[1, 2], sa[1, 2], sb[1, 2] = 0.0, 0.0, 0.0  # suite 1 has no data for unit 2
    with _no_warnings():
        both = linear_intervals(sa, sb, n)
    for j in range(2):
        e, e_del = _effects(sa[j], sb[j], n[j])
        mean, se, df = _interval_by_hand(e, e_del, 0.95)
        assert float(both.effect[j]) == pytest.approx(mean, rel=1e-12)
        assert (float(both.se[j]), float(both.df[j])) == pytest.approx((se, df), rel=1e-9)
    assert float(both.df[1]) >= 3.0


def test_an_interval_at_a_level_refuses_levels_outside_zero_one_and_needs_a_se() -> None:
    """``ClaimEstimate.interval`` and ``mde_at`` read the t interval at 1 - alpha: alpha must be
    in (0, 1), named in the error; without a usable se or df (NaN, df <= 0) both are NaN; a
    ratio's interval is exp(log effect +- half), its upper end infinite when censored."""
    est = _est(0.05, 0.01, 4.0)
    for alpha in (0.0, 1.0, 2.0):
        for call in (est.interval, est.mde_at):
            with pytest.raises(ValueError) as err:
                call(alpha)
            assert str(err.value) == f"alpha must be in (0, 1), got {alpha}"
    half = stats.t.ppf(0.975, 4.0) * 0.01
    assert est.interval(0.05) == pytest.approx((0.05 - half, 0.05 + half), rel=1e-12)
    assert est.mde_at(0.05) == pytest.approx((stats.t.ppf(0.975, 4) + stats.t.ppf(0.8, 4)) * 0.01)
    nan = float("nan")
    for se, df in ((nan, 4.0), (0.01, nan), (0.01, 0.0)):
        lo, hi = _est(0.05, se, df).interval(0.05)
        assert math.isnan(lo) and math.isnan(hi) and math.isnan(_est(0.05, se, df).mde_at(0.05))
    low = _est(0.05, 0.01, 0.5)  # df between 0 and 1: a t interval like any other
    assert low.interval(0.05)[1] == pytest.approx(0.05 + stats.t.ppf(0.975, 0.5) * 0.01)
    assert low.mde_at(0.05) == pytest.approx(
        (stats.t.ppf(0.975, 0.5) + stats.t.ppf(0.8, 0.5)) * 0.01
    )
    ratio = ClaimEstimate(
        estimand="compute_ratio", a="a", b="b", effect=0.8, lo=nan, hi=nan, level=0.95,
        p_value=0.5, n_starts=5, n_seeds=1, mde=nan, conditional=False, per_start=(), se=0.1,
        df=4.0, scale="log",
    )  # fmt: skip
    h = stats.t.ppf(0.95, 4.0) * 0.1
    assert ratio.interval(0.1) == pytest.approx((0.8 * math.exp(-h), 0.8 * math.exp(h)))
    censored = ClaimEstimate(**{**ratio.__dict__, "censored": 2})
    assert censored.interval(0.1) == (pytest.approx(0.8 * math.exp(-h)), float("inf"))


# --- the verdict at its thresholds -----------------------------------------------------------


def _touching(end: str, at: float, alpha: float = 0.05, df: float = 4.0) -> ClaimEstimate:
    """An estimate whose interval at level 1 - alpha has its ``end`` ("lo" or "hi") exactly at
    ``at`` (float64), found by trying standard errors until the subtraction is exact."""
    for se in np.linspace(0.01, 0.02, 401):
        half = float(stats.t.ppf(1 - alpha / 2, df)) * float(se)
        effect = at + half if end == "lo" else at - half
        est = _est(effect, float(se), df)
        lo, hi = est.interval(alpha)
        if (lo if end == "lo" else hi) == at:
            return est
    raise AssertionError(f"no standard error puts {end} exactly at {at}")


def test_an_interval_touching_a_threshold_does_not_cross_it() -> None:
    """Each verdict needs the interval strictly past its threshold: an end exactly on 0, on -m
    or on +m leaves the claim where it would be without that end."""
    m = 0.25
    tag = f" (margin {m:g})"
    assert verdict(_touching("lo", 0.0), 0.05, "greater") == NOT_RESOLVED
    assert verdict(_touching("hi", 0.0), 0.05, "less") == NOT_RESOLVED
    assert verdict(_touching("lo", 0.0), 0.05, "greater", margin=m) == NON_INFERIOR + tag
    assert verdict(_touching("lo", -m), 0.05, "greater", margin=m) == NOT_RESOLVED + tag
    assert verdict(_touching("hi", m), 0.05, "less", margin=m) == NOT_RESOLVED + tag
    assert verdict(_touching("hi", -m), 0.05, "greater", margin=m) == NOT_RESOLVED + tag
    assert verdict(_touching("lo", m), 0.05, "less", margin=m) == NOT_RESOLVED + tag
    assert verdict(_touching("hi", 0.0), 0.05, "greater") == NOT_RESOLVED
    assert verdict(_touching("lo", 0.0), 0.05, "less") == NOT_RESOLVED
    # equivalence: inside (-m, m) strictly; outside [-m, m] strictly
    assert verdict(_touching("lo", -m), 0.05, "equivalent", margin=m) == NOT_RESOLVED + tag
    assert verdict(_touching("hi", m), 0.05, "equivalent", margin=m) == NOT_RESOLVED + tag
    assert verdict(_touching("lo", m), 0.05, "equivalent", margin=m) == NOT_RESOLVED + tag
    assert verdict(_touching("hi", -m), 0.05, "equivalent", margin=m) == NOT_RESOLVED + tag


def test_verdict_without_an_interval_and_the_claims_it_refuses() -> None:
    nan = float("nan")
    assert verdict(_est(0.05, nan, 4.0), 0.05, "greater", margin=0.02) == (
        f"{NOT_RESOLVED} (margin 0.02)"
    )
    assert verdict(_est(0.05, nan, 4.0), 0.05, "greater") == NOT_RESOLVED
    with pytest.raises(ValueError) as err:
        verdict(_est(0.05, 0.01, 4.0), 0.05, "equivalent")
    assert str(err.value) == "direction 'equivalent' needs a margin > 0 (the estimand's units)"
    for margin in (0.0, -0.1, float("inf")):
        with pytest.raises(ValueError) as err:
            verdict(_est(0.05, 0.01, 4.0), 0.05, "greater", margin=margin)
        assert str(err.value) == (
            f"margin must be a number > 0 (the estimand's units), got {margin!r}"
        )
    ratio = ClaimEstimate(**{**_est(0.8, 0.1, 4.0).__dict__, "estimand": "compute_ratio"})
    with pytest.raises(ValueError) as err:
        claim_p_value(ratio, "less", 0.1)
    assert str(err.value) == "compute_ratio takes no margin: its claims are superiority claims"


# --- the logit scale at the floor and the ceiling, and the unit of the final arrays -----------


def _groups(acc: dict[str, tuple[float, float]], items: int) -> pd.DataFrame:
    """Final evals of 3 identical starts: per dataset ``h<horizon>`` a's and b's accuracy."""
    rows = []
    for s in range(3):
        for ds, (acc_a, acc_b) in acc.items():
            for algo, v in (("a", acc_a), ("b", acc_b)):
                for i in range(items):
                    rows.append((f"s{s}", s, algo, ds, float(ds[1:]), f"i{i}", 1.0, 1000.0,
                                 float(i < round(v * items))))  # fmt: skip
    return pd.DataFrame(rows, columns=list(ITEM_COLUMNS))


def test_the_logit_slope_clips_half_an_item_inside_floor_and_ceiling() -> None:
    """A group at 1 (or 0) is read at 1 - 1/(2n) (or 1/(2n)): with 8 items, logit(15/16) =
    log 15; with one item, 1/2 either way (logit 0)."""
    up = horizon_slope(_groups({"h1": (1.0, 0.0), "h2": (0.5, 0.5)}, 8), "a", "b", scale="logit")
    assert up.per_start[0] == pytest.approx(-2 * math.log(15), rel=1e-12)
    down = horizon_slope(_groups({"h1": (0.0, 1.0), "h2": (0.5, 0.5)}, 8), "a", "b", scale="logit")
    assert down.per_start[0] == pytest.approx(2 * math.log(15), rel=1e-12)
    one = horizon_slope(_groups({"h1": (1.0, 0.0), "h2": (0.0, 1.0)}, 1), "a", "b", scale="logit")
    assert one.per_start[0] == 0.0


def test_final_arrays_use_starts_from_two_and_name_the_missing_pair() -> None:
    """Two starts are units (their seeds averaged per item); one start's seeds are its units;
    an item table with no final eval of both algorithms is refused by name."""
    rows = []
    for s, seed, algo, v in (
        ("s1", 1, "a", 1.0), ("s1", 2, "a", 0.0), ("s1", 1, "b", 0.0), ("s1", 2, "b", 0.0),
        ("s2", 3, "a", 1.0), ("s2", 4, "a", 1.0), ("s2", 3, "b", 0.0), ("s2", 4, "b", 1.0),
    ):  # fmt: skip
        rows.append((s, seed, algo, "d", np.nan, "i0", 1.0, 1000.0, v))
    items = pd.DataFrame(rows, columns=list(ITEM_COLUMNS))
    est = final_difference(items, "a", "b", folds=1)
    assert (est.n_starts, est.n_seeds) == (2, 2)
    assert est.per_start == pytest.approx((0.5, 0.5))
    one = final_difference(items[items["start"] == "s1"], "a", "b", folds=1)
    assert one.conditional and one.per_start == pytest.approx((0.5,))
    assert one.n_starts == 1 and one.n_seeds == 2
    with pytest.raises(ValueError) as err:
        final_difference(items[items["algorithm"] == "a"].assign(algorithm="a"), "a", "c", folds=1)
    assert "'c'" in str(err.value)


def test_reached_level_by_estimand_and_starts() -> None:
    """The coverage printed at 95%: the simulated level at the largest measured count of starts
    at or below n (3 starts: the horizon slope 0.97, the area 0.94); the nominal level at other
    confidences and below 3 starts; the default estimand is the final difference."""
    assert reached_level(3) == 0.95 == reached_level(3, 0.95, "final_difference")
    assert reached_level(3, estimand="horizon_slope") == 0.97
    assert reached_level(4, estimand="horizon_slope") == 0.97
    assert reached_level(5, estimand="horizon_slope") == 0.95
    assert reached_level(3, estimand="area_difference") == 0.94
    assert reached_level(2, estimand="horizon_slope") == 0.95
    assert reached_level(3, 0.9, "horizon_slope") == 0.9
    with pytest.raises(ValueError) as err:
        reached_level(5, estimand="area")
    assert str(err.value) == (
        "estimand must be one of ['horizon_slope', 'final_difference', 'area_difference', "
        "'compute_ratio'], got 'area'"
    )


# --- the interval's edges: no spread, guards, the ratio's ends --------------------------------


def _estimate(estimand: str = "final_difference", **kw: object) -> ClaimEstimate:
    fields = dict(
        estimand=estimand, a="a", b="b", effect=1.5 if estimand == "compute_ratio" else 0.2,
        lo=float("nan"), hi=float("nan"), level=0.95, p_value=0.5, n_starts=5, n_seeds=2,
        mde=float("nan"), conditional=False, per_start=(), se=0.1, df=4.0,
    )  # fmt: skip
    fields.update(kw)
    return ClaimEstimate(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("se", "df"),
    [
        (float("inf"), 4.0),
        (0.1, float("inf")),
        (float("nan"), 4.0),
        (0.1, float("nan")),
        (0.1, 0.0),
    ],
)
def test_an_interval_and_mde_need_a_finite_se_and_positive_finite_df(se: float, df: float) -> None:
    """Without a finite standard error and finite degrees of freedom above 0 there is no
    interval (NaN at both ends, also for a censored ratio, whose upper end would otherwise be
    infinite) and no smallest detectable effect."""
    for est in (_estimate(se=se, df=df), _estimate("compute_ratio", se=se, df=df, censored=1)):
        lo, hi = est.interval(0.05)
        assert math.isnan(lo) and math.isnan(hi), (est.estimand, lo, hi)
        assert math.isnan(est.mde_at(0.05))


def test_identical_starts_give_an_interval_of_no_width_and_warn_nothing() -> None:
    """Every start the same effect and every item alike: no spread at all (se 0), so the
    interval is the point, the test of no effect has p = 0 (t infinite) and its degrees of
    freedom are starts - 1; a zero effect with no spread has no test (p NaN). Nothing warns
    (0 / 0 and x / 0 happen inside)."""
    same = {(f"s{s}", s, algo): [acc] * 4 for s in (1, 2, 3) for algo, acc in (("a", 1), ("b", 0))}
    tie = {(f"s{s}", s, algo): [1] * 4 for s in (1, 2, 3) for algo in ("a", "b")}
    with _no_warnings():
        diff = final_difference(_uniform(same), "a", "b", folds=3)
        level = final_difference(_uniform(tie), "a", "b", folds=3)
        ratio = compute_ratio(_uniform(tie), "a", "b", folds=3)
    assert (diff.effect, diff.lo, diff.hi, diff.se, diff.df) == (1.0, 1.0, 1.0, 0.0, 2.0)
    assert diff.p_value == 0.0
    assert (level.effect, level.lo, level.hi, level.se) == (0.0, 0.0, 0.0, 0.0)
    assert math.isnan(level.p_value)
    assert (ratio.effect, ratio.lo, ratio.hi, ratio.se) == (1.0, 1.0, 1.0, 0.0)


def test_the_array_interval_by_hand_for_a_ratio_censored_or_not() -> None:
    """Three starts' log ratios 0.1, 0.3, 0.2 with no item variance: the ratio exp(0.2), its
    ends exp(0.2 -/+ t(0.975, 2) se) with se = sd / sqrt(3); the p-value 2 P(T >= 0.2 / se).
    A censored start makes the upper end infinite and the p-value the upper tail's: for an
    estimate below 1 that is 1 - P(T <= t) doubled, capped at 1."""
    from analysis.claims.protocol import _intervals

    e = np.array([0.1, 0.3, 0.2])
    e_del = np.zeros((3, 0))
    se = e.std(ddof=1) / math.sqrt(3)
    half = stats.t.ppf(0.975, 2) * se
    iv = _intervals(True, e, e_del, 0.95, 0)
    assert float(iv.effect) == pytest.approx(math.exp(0.2), rel=1e-12)
    assert float(iv.lo) == pytest.approx(math.exp(0.2 - half), rel=1e-12)
    assert float(iv.hi) == pytest.approx(math.exp(0.2 + half), rel=1e-12)
    assert float(iv.p_value) == pytest.approx(2 * stats.t.sf(0.2 / se, 2), rel=1e-9)
    cens = _intervals(True, e, e_del, 0.95, 1)
    assert float(cens.hi) == math.inf and float(cens.lo) == pytest.approx(float(iv.lo))
    assert float(cens.p_value) == pytest.approx(2 * stats.t.sf(0.2 / se, 2), rel=1e-9)
    below = _intervals(True, -e, e_del, 0.95, 1)  # estimate below 1: the upper tail's p is 1
    assert float(below.p_value) == 1.0
    small = _intervals(True, e / 4, e_del, 0.95, 1)  # upper tail 2 P(T >= t) below 1
    assert float(small.p_value) == pytest.approx(2 * stats.t.sf(0.05 / (se / 4), 2), rel=1e-9)
    for confidence in (0.0, 1.0, 1.5, -0.5):
        with pytest.raises(ValueError, match=rf"confidence must be in \(0, 1\), got {confidence}"):
            _intervals(False, e, e_del, confidence, 0)


def test_holm_rejects_every_member_when_none_fails() -> None:
    rows = holm([0.001, 0.004, 0.01], 0.05)
    assert [r.rejected for r in rows] == [True, True, True]
    assert [r.rank for r in rows] == [1, 2, 3]


def test_the_item_table_check_names_the_side_and_a_repeated_algorithm() -> None:
    items = _curves({("s1", 1, "a"): B, ("s1", 1, "b"): B})
    with pytest.raises(ValueError) as err:
        final_difference(items, "a", "c")
    assert str(err.value) == "b='c' has no rows; algorithms present: ['a', 'b']"
    with pytest.raises(ValueError) as err:
        final_difference(items, "a", "a")
    assert str(err.value) == "a and b must differ, got 'a' twice"


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


@pytest.mark.parametrize(
    ("e", "e_del"),
    [
        # two folds, four units: Satterthwaite's df (3.69) above the floor of units - 1
        (
            [0.16, -0.16, -0.11, 0.02],
            [[-0.03, -0.12], [-0.03, -0.13], [-0.02, -0.01], [0.05, -0.04]],
        ),
        # ten folds, five units sharing the folds' item effects: df 8.1
        _effects(*_layout(np.random.default_rng(50), 5, 10, 0.3)),
    ],
)
def test_the_degrees_of_freedom_where_satterthwaite_exceeds_the_floor(e, e_del) -> None:
    """Where the shared items' part is large, Satterthwaite's degrees of freedom exceed the
    floor of units - 1, so the formula itself (not the floor) sets the interval's width: the
    documented construction, at two folds (the smallest count that has the formula) and ten."""
    from analysis.claims.protocol import _summary

    e, e_del = np.asarray(e, float), np.asarray(e_del, float)
    mean, se, df = _interval_by_hand(e, e_del, 0.95)
    assert df > e.size - 1 + 0.5  # the formula, not the floor
    got = _summary(e, e_del)
    assert tuple(float(v) for v in got) == pytest.approx((mean, se, df), rel=1e-12)


def test_a_summary_over_no_unit_or_one_is_nan_and_warns_nothing() -> None:
    """No unit (an empty axis, or every unit NaN): mean and se NaN, in the batch's shape;
    one unit: its mean, its own jackknife's se and K - 1 df. Nothing warns (numpy's empty-slice
    warnings are silenced inside)."""
    from analysis.claims.protocol import _summary

    with _no_warnings():
        empty = _summary(np.empty((2, 0)), np.empty((2, 0, 0)))
        flat = _summary(np.empty(0), np.empty((0, 0)))
        nan = _summary(np.full(3, np.nan), np.full((3, 4), np.nan))
        one = _summary(np.array([0.5, np.nan]), np.array([[0.4, 0.6], [np.nan, np.nan]]))
    for v in empty:
        assert v.shape == (2,) and np.isnan(v).all()
    for v in (*flat, *nan[:2]):
        assert np.shape(v) == () and np.isnan(v)
    assert float(nan[2]) == 3.0  # K - 1, as for one unit; without a se it makes no interval
    assert float(one[0]) == 0.5
    assert float(one[1]) == pytest.approx(math.sqrt(0.5 * (0.1**2 + 0.1**2)), rel=1e-12)
    assert float(one[2]) == 1.0


# --- the compute ratio on arrays: compute axes, the floor, censoring ---------------------------


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


# --- the bootstrap alternative: ties at no effect, batches, a start without data -------------


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


# --- the estimate's fields and the item table's units -------------------------------------------


def test_the_estimate_carries_its_confidence_and_the_level_its_estimand_reaches() -> None:
    """At 0.9 the estimate records 0.9 and prints it as its level; at 0.95 over 3 starts the
    horizon slope's level is the simulation's 0.97 and the area's 0.94 (not the final
    difference's 0.95)."""
    items = _groups({"h1": (0.8, 0.5), "h2": (0.6, 0.5), "h4": (0.5, 0.5)}, 10)
    at90 = horizon_slope(items, "a", "b", confidence=0.9, folds=2)
    assert (at90.confidence, at90.level) == (0.9, 0.9)
    at95 = horizon_slope(items, "a", "b", folds=2)
    assert (at95.confidence, at95.level) == (0.95, 0.97)
    curves = _curves(
        {(f"s{s}", s, algo): acc for s in (1, 2, 3) for algo, acc in (("a", B), ("b", B))}
    )
    assert area_difference(curves, "a", "b", folds=2).level == 0.94


def _final_rows(rows: list[tuple]) -> pd.DataFrame:
    """(start, seed, algorithm, dataset, item, correct) final-eval rows -> item table."""
    return pd.DataFrame(
        [(s, sd, al, ds, 1.0, it, 1.0, 1000.0, c) for s, sd, al, ds, it, c in rows],
        columns=list(ITEM_COLUMNS),
    )


def test_final_arrays_average_a_start_s_seeds_item_by_item() -> None:
    """A start's units are its items, each the mean over the seeds that scored it: start s1's
    seed 2 has no score for item i1, so i1 is seed 1's alone (a 1, b 0) and i0 the mean of both
    seeds (a 0.5, b 0.5): (1 + 0) / 2 = 0.5, where pooling every (seed, item) would give 1/3. A
    dataset only a scored leaves the pairs (and the groups) it has none in."""
    rows = [
        ("s1", 1, "a", "d", "i0", 1.0), ("s1", 1, "b", "d", "i0", 0.0),
        ("s1", 1, "a", "d", "i1", 1.0), ("s1", 1, "b", "d", "i1", 0.0),
        ("s1", 2, "a", "d", "i0", 0.0), ("s1", 2, "b", "d", "i0", 1.0),
        ("s2", 3, "a", "d", "i0", 1.0), ("s2", 3, "b", "d", "i0", 1.0),
        ("s2", 3, "a", "d", "i1", 1.0), ("s2", 3, "b", "d", "i1", 1.0),
    ]  # fmt: skip
    items = _final_rows(rows)
    est = final_difference(items, "a", "b", folds=1)
    assert est.per_start == pytest.approx((0.5, 0.0), abs=1e-15)
    only_a = _final_rows([*rows, ("s1", 1, "a", "e", "i0", 1.0), ("s2", 3, "a", "e", "i0", 0.0)])
    assert final_difference(only_a, "a", "b", folds=1).per_start == est.per_start
    # the slope's horizons are those of the groups both scored (h9: a only)
    groups = _groups({"h1": (0.8, 0.5), "h2": (0.6, 0.5), "h4": (0.5, 0.5)}, 10)
    extra = groups[groups["dataset"] == "h4"].assign(dataset="h9", horizon=9.0)
    extra = extra[extra["algorithm"] == "a"]
    slope = horizon_slope(pd.concat([groups, extra], ignore_index=True), "a", "b", folds=2)
    assert slope.per_start == horizon_slope(groups, "a", "b", folds=2).per_start
    one = final_difference(items[items["start"] == "s1"], "a", "b", folds=1)
    assert one.conditional and one.n_starts == 1
    assert one.per_start == pytest.approx((0.0,))  # its seeds as units: 1.0 and -1.0
    assert one.df == 1.0  # two seeds as units: t with 1 degree of freedom
    with pytest.raises(ValueError) as err:
        final_difference(_final_rows([rows[0], rows[3]]), "a", "b", folds=1)
    assert str(err.value) == "no item has a final eval of both 'a' and 'b'"


def test_folds_zero_is_one_fold_and_a_lone_start_with_one_fold_has_no_item_df() -> None:
    """``folds=0`` deals every item into one fold (as ``folds=1``); one start's seeds with one
    fold have their t over seeds (df seeds - 1), and with no seeds to spare no degrees of
    freedom from the items."""
    items = _curves({("s1", 1, "a"): [0.2, 0.4, 0.6, 0.8], ("s1", 1, "b"): B,
                     ("s2", 2, "a"): [0.3, 0.5, 0.6, 0.7], ("s2", 2, "b"): B})  # fmt: skip
    for fn in (final_difference, area_difference):
        zero, one = fn(items, "a", "b", folds=0), fn(items, "a", "b", folds=1)
        assert (zero.effect, zero.se, zero.df) == (one.effect, one.se, one.df)
    lone = final_difference(items[items["start"] == "s1"], "a", "b", folds=1)
    assert lone.conditional and math.isnan(lone.df) and math.isnan(lone.se)


def test_item_folds_follow_the_datasets_sorted_by_name_whatever_their_order_in_the_table() -> None:
    """The folds are dealt dataset by dataset in name order from one seeded generator, so a
    table listing dataset d2 before d1 gets the same folds, and the same interval, as one
    listing d1 first. a's items are easy or hard alike in every start, so the items' shared
    part, and with it the interval, depends on which items share a fold."""
    rng = np.random.default_rng(5)
    easy = {(ds, i): rng.random() < 0.5 for ds in ("d1", "d2") for i in range(8)}
    rows = []
    for ds in ("d2", "d1"):
        for s in (1, 2, 3):
            for i in range(8):
                a_ok = easy[(ds, i)] or rng.random() < 0.2
                rows.append((f"s{s}", s, "a", ds, f"i{i}", float(a_ok)))
                rows.append((f"s{s}", s, "b", ds, f"i{i}", float(rng.random() < 0.4)))
    items = _final_rows(rows)
    flipped = items.iloc[::-1].reset_index(drop=True)
    for fn in (final_difference, area_difference):  # the area reads the table's own order
        one, two = fn(items, "a", "b", folds=4), fn(flipped, "a", "b", folds=4)
        assert (one.se, one.df) == pytest.approx((two.se, two.df), rel=1e-12)


def test_curves_without_a_scored_item_are_refused_by_name() -> None:
    items = _curves({("s1", 1, "a"): B, ("s1", 1, "b"): B}).assign(correct=np.nan)
    for fn, name in ((area_difference, "area_difference"), (compute_ratio, "compute_ratio")):
        with pytest.raises(ValueError) as err:
            fn(items, "a", "b")
        assert str(err.value) == f"no item of 'a' or 'b' has a score; {name} needs their curves"


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


def test_a_fold_deleted_ratio_is_the_ratio_without_that_fold() -> None:
    """Each fold-deleted log ratio is the full computation on the sums with that fold's items
    taken out (folds of unequal sizes in groups of unequal sizes)."""
    from analysis.claims.protocol import _ratio_effects

    rng = np.random.default_rng(8)
    n = rng.integers(2, 7, size=(2, 1, 2, 2, 4, 3)).astype(float)  # (U, R, 2, G, E, K)
    p = np.clip(
        np.linspace(0.1, 0.8, 4)[None, None, None, None, :, None]
        + 0.1 * rng.standard_normal(n.shape),
        0,
        1,
    )
    s = rng.binomial(n.astype(int), p).astype(float)
    x = np.tile(np.array([0.0, 1.0, 2.0, 4.0]), (2, 1, 2, 1))
    fractions = np.array([0.25, 0.5, 0.75, 1.0])
    lr, _ = _ratio_effects(s, n, x, fractions, "crossing")
    for k in range(3):
        keep = [j for j in range(3) if j != k]
        alone, _ = _ratio_effects(s[..., keep].sum(-1, keepdims=True), n[..., keep].sum(-1, keepdims=True), x, fractions, "crossing")  # fmt: skip
        np.testing.assert_allclose(lr[..., 1 + k], alone[..., 0], rtol=1e-12)
