"""The protocol's interval (analysis/claims/protocol.py) against the module docstring's
construction: the spread over units plus the shared items' delete-a-fold jackknife variance,
Satterthwaite's degrees of freedom and their floor, the summary over no unit or one, the ratio's
interval on the log scale, censored or not; the linear t interval with one item fold or two; the
units (starts, or one start's seeds; a start's seeds averaged item by item); the item folds (dealt
from the seed, dataset by dataset in name order, ``folds=0``, items that all score alike, a
fold-deleted ratio); and the interval's edges (``ClaimEstimate.interval`` and ``mde_at`` at levels
outside (0, 1) or without a usable se or df, identical starts giving an interval of no width).
Where the code divides 0 by 0 on purpose, numpy's warnings are errors.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.claims.protocol import (
    ITEM_COLUMNS,
    ClaimEstimate,
    area_difference,
    compute_ratio,
    final_difference,
    horizon_slope,
    linear_intervals,
)
from analysis.simulate import Design, simulate_items
from testkit.protocol import B
from testkit.protocol import curves as _curves
from testkit.protocol import est as _est
from testkit.protocol import groups as _groups
from testkit.protocol import no_warnings as _no_warnings

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


# --- the linear t interval: one item fold or two ---------------------------------------------


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


# --- the units: starts, or one start's seeds -------------------------------------------------


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


# --- the item folds and the jackknife --------------------------------------------------------


def test_compute_ratio_deals_its_folds_from_the_seed_given() -> None:
    """The item folds are dealt from ``seed`` (default 0): another seed deals other folds, so
    another jackknife variance, around the same effect."""
    items = simulate_items(Design(n_starts=3, n_seeds=1, items=12, evals=4, speed=0.5), seed=4)
    default = compute_ratio(items, "sppo", "grpo", folds=4)
    assert default == compute_ratio(items, "sppo", "grpo", folds=4, seed=0)
    other = compute_ratio(items, "sppo", "grpo", folds=4, seed=1)
    assert other.effect == pytest.approx(default.effect, rel=1e-12)
    assert other.se != pytest.approx(default.se, rel=1e-9)


def test_final_and_area_differences_name_what_they_compared_and_deal_folds_from_seed() -> None:
    items = simulate_items(Design(n_starts=3, n_seeds=1, items=12, evals=4, speed=0.5), seed=4)
    for fn, name in ((final_difference, "final_difference"), (area_difference, "area_difference")):
        est = fn(items, "sppo", "grpo", folds=4)
        assert (est.estimand, est.a, est.b, est.scale) == (name, "sppo", "grpo", "accuracy")
        assert est == fn(items, "sppo", "grpo", folds=4, seed=0)  # the default seed
        other = fn(items, "sppo", "grpo", folds=4, seed=1)
        assert other.effect == pytest.approx(est.effect, rel=1e-12)
        assert other.se != pytest.approx(est.se, rel=1e-9)


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


# --- the interval's edges: levels, guards, no spread -----------------------------------------


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
