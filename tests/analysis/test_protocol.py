"""The verdict protocol (analysis/claims/protocol.py) on item tables whose answer is worked by hand:
the estimands (the horizon slope, its default groups and the logit scale at the floor and the
ceiling; the final difference; claim (b)'s compute ratio, its censoring, and the area under the
accuracy-versus-compute curve; the datasets each reads), the t interval with the shared-item
variance, one start, the estimate's printed level, Holm's step-down adjustment and its ties, the
verdict rule (an interval end exactly on a threshold does not cross it), the margin claims'
p-values (non-inferiority, equivalence by two one-sided tests) and the bad input refused by name.
The interval's construction is tests/analysis/test_protocol_intervals.py, the array path
test_protocol_arrays.py; coverage on simulated suites is tests/analysis/test_coverage.py.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.claims.protocol import (
    CONDITIONAL,
    DOES_NOT_HOLD,
    EQUIVALENT,
    ITEM_COLUMNS,
    NON_INFERIOR,
    NOT_RESOLVED,
    SUPERIOR,
    ClaimEstimate,
    area_difference,
    claim_p_value,
    compute_ratio,
    final_difference,
    final_items,
    holm,
    horizon_slope,
    linear_intervals,
    reached_level,
    resolved,
    verdict,
)
from analysis.simulate import Design, simulate_items
from testkit.protocol import TOL, B
from testkit.protocol import curves as _curves
from testkit.protocol import est as _est
from testkit.protocol import groups as _groups


def _table(finals: dict, horizons: dict, fraction: float = 1.0, compute: float = 1.0):
    """Item table from {(start, seed, algorithm, dataset): [score per item]} at one eval."""
    rows = []
    for (start, seed, algo, ds), scores in finals.items():
        for i, v in enumerate(scores):
            rows.append((start, seed, algo, ds, horizons.get(ds, np.nan), f"i{i}", fraction,
                         compute, float(v)))  # fmt: skip
    return pd.DataFrame(rows, columns=list(ITEM_COLUMNS))


def _random_finals(rng, starts=4, seeds=1, sizes=(3, 5, 8)):
    finals = {}
    for s, r, a in itertools.product(range(starts), range(seeds), ("a", "b")):
        for g, n in enumerate(sizes):
            finals[(f"s{s}", 10 * s + r, a, f"g{g}")] = rng.integers(0, 2, n)
    return finals


# --- estimands -------------------------------------------------------------------------------


def test_horizon_slope_is_the_items_least_squares_slope_per_start():
    """Per start, the slope of group means weighted by items per group is the ordinary
    least-squares slope over items with x = their group's horizon (unequal group sizes)."""
    rng = np.random.default_rng(0)
    horizons = {"g0": 1.0, "g1": 2.0, "g2": 5.0}
    finals = _random_finals(rng, starts=4, seeds=2)
    items = _table(finals, horizons)
    est = horizon_slope(items, "a", "b")
    expected = []
    for s in range(4):
        x, y = [], []
        for g, n in enumerate((3, 5, 8)):
            d = np.mean(
                [finals[(f"s{s}", 10 * s + r, "a", f"g{g}")] for r in range(2)], axis=0
            ) - np.mean([finals[(f"s{s}", 10 * s + r, "b", f"g{g}")] for r in range(2)], axis=0)
            x += [horizons[f"g{g}"]] * n
            y += list(d)
        expected.append(np.polyfit(x, y, 1)[0])
    np.testing.assert_allclose(est.per_start, expected, atol=TOL)
    assert est.effect == pytest.approx(np.mean(expected), abs=TOL)
    assert (est.n_starts, est.n_seeds, est.conditional) == (4, 2, False)


def test_final_difference_without_item_folds_is_the_t_interval_over_starts():
    """folds=1 leaves no item variance: the interval is Student's t over the per-start means of
    the per-dataset item means."""
    rng = np.random.default_rng(1)
    finals = _random_finals(rng, starts=5)
    items = _table(finals, {})
    est = final_difference(items, "a", "b", folds=1)
    per = [
        np.mean([np.mean(finals[(f"s{s}", 10 * s, "a", f"g{g}")])
                 - np.mean(finals[(f"s{s}", 10 * s, "b", f"g{g}")]) for g in range(3)])
        for s in range(5)
    ]  # fmt: skip
    np.testing.assert_allclose(est.per_start, per, atol=TOL)
    lo, hi = stats.t.interval(0.95, 4, loc=np.mean(per), scale=stats.sem(per))
    assert (est.lo, est.hi) == (pytest.approx(lo, abs=TOL), pytest.approx(hi, abs=TOL))
    tstat = np.mean(per) / stats.sem(per)
    assert est.p_value == pytest.approx(2 * stats.t.sf(abs(tstat), 4), abs=TOL)
    mde = (stats.t.ppf(0.975, 4) + stats.t.ppf(0.8, 4)) * stats.sem(per)
    assert est.mde == pytest.approx(mde, abs=TOL)
    lo99, hi99 = est.interval(0.01)
    assert lo99 < est.lo and hi99 > est.hi


def test_identical_starts_leave_only_the_shared_item_variance():
    """When every start has the same scores, the spread over starts is 0 and the variance is the
    shared items' alone: the delete-a-fold jackknife of the item mean (hand-computed)."""
    scores_a = np.array([1, 0, 1, 1, 0, 1, 1, 1, 0, 1], float)
    scores_b = np.array([0, 0, 1, 0, 0, 1, 0, 1, 0, 0], float)
    sa = np.tile(scores_a.reshape(1, 1, 10), (3, 1, 1))  # (S, G, K): one item per fold
    sb = np.tile(scores_b.reshape(1, 1, 10), (3, 1, 1))
    n = np.ones_like(sa)
    est = linear_intervals(sa, sb, n)
    d = scores_a - scores_b
    loo = (d.sum() - d) / 9
    jk = 9 / 10 * ((loo - loo.mean()) ** 2).sum()
    assert float(est.effect) == pytest.approx(d.mean(), abs=TOL)
    assert float(est.se) == pytest.approx(np.sqrt(jk), abs=TOL)
    assert float(est.df) == pytest.approx(9, abs=TOL)  # all from the items: folds - 1


def test_shared_items_widen_the_interval_beyond_the_spread_over_starts():
    """A large algorithm-by-item effect shared by every start: the interval with the items'
    variance is wider than the t interval over starts alone (folds=1); the effect is the same."""
    items = simulate_items(Design(n_starts=5, alg_item_sd=1.0), seed=3)
    with_items = final_difference(items, "sppo", "grpo")
    starts_only = final_difference(items, "sppo", "grpo", folds=1)
    assert with_items.effect == pytest.approx(starts_only.effect, abs=TOL)
    assert with_items.se > starts_only.se


def test_logit_slope_of_a_constant_logit_shift_is_zero():
    """a = b shifted by one logit in every group: the accuracy difference varies with the
    group's level, the logit difference does not."""
    rows = {}
    for s in range(3):
        for g, pb in enumerate((0.2, 0.5, 0.8)):
            pa = 1 / (1 + np.exp(-(np.log(pb / (1 - pb)) + 1.0)))
            n = 1000
            rows[(f"s{s}", s, "a", f"g{g}")] = (np.arange(n) < round(pa * n)).astype(float)
            rows[(f"s{s}", s, "b", f"g{g}")] = (np.arange(n) < round(pb * n)).astype(float)
    items = _table(rows, {"g0": 1.0, "g1": 2.0, "g2": 3.0})
    assert abs(horizon_slope(items, "a", "b", scale="logit").effect) < 5e-3  # rounding to 1/n
    assert abs(horizon_slope(items, "a", "b").effect) > 0.03


# --- the horizon slope's groups and the logit scale at the floor and the ceiling -------------


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


def test_the_logit_slope_clips_half_an_item_inside_floor_and_ceiling() -> None:
    """A group at 1 (or 0) is read at 1 - 1/(2n) (or 1/(2n)): with 8 items, logit(15/16) =
    log 15; with one item, 1/2 either way (logit 0)."""
    up = horizon_slope(_groups({"h1": (1.0, 0.0), "h2": (0.5, 0.5)}, 8), "a", "b", scale="logit")
    assert up.per_start[0] == pytest.approx(-2 * math.log(15), rel=1e-12)
    down = horizon_slope(_groups({"h1": (0.0, 1.0), "h2": (0.5, 0.5)}, 8), "a", "b", scale="logit")
    assert down.per_start[0] == pytest.approx(2 * math.log(15), rel=1e-12)
    one = horizon_slope(_groups({"h1": (1.0, 0.0), "h2": (0.0, 1.0)}, 1), "a", "b", scale="logit")
    assert one.per_start[0] == 0.0


# --- claim (b) -------------------------------------------------------------------------------


def test_compute_ratio_hand_worked():
    """b: 0.2, 0.4, 0.6, 0.6: target = mean of the last quarter's evals (fractions 0.75, 1) =
    0.6, b's isotonic curve reaches it at 750. Start 1's a reaches 0.6 at 500 (ratio 2/3); start
    2's a (0.3, 0.5, 0.7, 0.5: isotonic 0.3, 0.5, 0.6, 0.6) reaches it at 750 (ratio 1)."""
    items = _curves({
        ("s1", 1, "a"): [0.4, 0.6, 0.6, 0.6], ("s1", 1, "b"): [0.2, 0.4, 0.6, 0.6],
        ("s2", 2, "a"): [0.3, 0.5, 0.7, 0.5], ("s2", 2, "b"): [0.2, 0.4, 0.6, 0.6],
    })  # fmt: skip
    est = compute_ratio(items, "a", "b", folds=1)
    np.testing.assert_allclose(est.per_start, [2 / 3, 1.0], atol=TOL)
    assert est.effect == pytest.approx(np.sqrt(2 / 3), abs=TOL)  # geometric mean
    assert est.censored == 0 and np.isfinite(est.hi)
    budget = compute_ratio(items, "a", "b", folds=1, denominator="budget")
    np.testing.assert_allclose(budget.per_start, [0.5, 0.75], atol=TOL)


def test_compute_ratio_interpolates_and_censors():
    """a 0.4, 0.5, 0.7, 0.8 reaches b's 0.6 halfway between 500 and 750 (625 / 750); a start
    whose a stays below is censored at its spent compute (1000 / 750), making the upper end
    infinite and the p-value one-sided."""
    items = _curves({
        ("s1", 1, "a"): [0.4, 0.5, 0.7, 0.8], ("s1", 1, "b"): [0.2, 0.4, 0.6, 0.6],
        ("s2", 2, "a"): [0.1, 0.2, 0.3, 0.4], ("s2", 2, "b"): [0.2, 0.4, 0.6, 0.6],
        ("s3", 3, "a"): [0.4, 0.6, 0.6, 0.6], ("s3", 3, "b"): [0.2, 0.4, 0.6, 0.6],
    })  # fmt: skip
    est = compute_ratio(items, "a", "b", folds=1)
    np.testing.assert_allclose(est.per_start, [625 / 750, 1000 / 750, 500 / 750], atol=TOL)
    assert est.censored == 1 and est.hi == np.inf and est.interval(0.01)[1] == np.inf
    logs = np.log(est.per_start)
    tstat = logs.mean() / stats.sem(logs)
    assert est.p_value == pytest.approx(min(1.0, 2 * stats.t.sf(tstat, 2)), abs=TOL)
    assert verdict(est, 0.05, "less") != SUPERIOR


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


# --- claim (b)'s primary estimand: the normalised area under the curve -----------------------


def _curves_at(curves: dict, fractions, compute, items: int = 10) -> pd.DataFrame:
    """{(start, seed, algorithm): [accuracy at each eval]} -> item table at the given budget
    fractions and compute, the first round(acc * items) items correct."""
    rows = []
    for (start, seed, algo), accs in curves.items():
        for f, x, acc in zip(fractions, compute, accs, strict=True):
            for i in range(items):
                rows.append((start, seed, algo, "d", np.nan, f"i{i}", f, x,
                             float(i < round(acc * items))))  # fmt: skip
    return pd.DataFrame(rows, columns=list(ITEM_COLUMNS))


def test_area_difference_is_the_trapezoid_mean_over_the_budget_hand_worked():
    """Evals at fractions 0, 0.25, 1 of a 2,000-rollout budget (compute 0, 500, 2000: unevenly
    spaced, so the eval index is not the axis). Start 1: a 0, 0.4, 0.8: trapezoid
    (500 x 0.2 + 1500 x 0.6) / 2000 = 0.5; b 0, 0.2, 0.8: (500 x 0.1 + 1500 x 0.5) / 2000 =
    0.4; difference +0.1 (a rises earlier to the same end). Start 2: a 0.2, 0.2, 0.6: (500 x 0.2
    + 1500 x 0.4) / 2000 = 0.35; b 0.2, 0.4, 0.6: (500 x 0.3 + 1500 x 0.5) / 2000 = 0.45;
    difference -0.1. Start 3 has two seeds, differences +0.1 and 0 (a == b): mean +0.05."""
    fr, x = (0.0, 0.25, 1.0), (0.0, 500.0, 2000.0)
    items = _curves_at({
        ("s1", 1, "a"): [0.0, 0.4, 0.8], ("s1", 1, "b"): [0.0, 0.2, 0.8],
        ("s2", 2, "a"): [0.2, 0.2, 0.6], ("s2", 2, "b"): [0.2, 0.4, 0.6],
        ("s3", 3, "a"): [0.0, 0.4, 0.8], ("s3", 3, "b"): [0.0, 0.2, 0.8],
        ("s3", 4, "a"): [0.2, 0.2, 0.6], ("s3", 4, "b"): [0.2, 0.2, 0.6],
    }, fr, x)  # fmt: skip
    est = area_difference(items, "a", "b", folds=1)
    np.testing.assert_allclose(est.per_start, [0.1, -0.1, 0.05], atol=TOL)
    assert est.effect == pytest.approx(0.05 / 3, abs=TOL)
    assert (est.n_starts, est.n_seeds, est.censored, est.null) == (3, 1, 0, 0.0)
    lo, hi = stats.t.interval(0.95, 2, loc=0.05 / 3, scale=stats.sem([0.1, -0.1, 0.05]))
    assert (est.lo, est.hi) == (pytest.approx(lo, abs=TOL), pytest.approx(hi, abs=TOL))
    # the final difference of the same table is 0 at every start: only the area sees the speed
    assert final_difference(items, "a", "b", folds=1).per_start == pytest.approx((0, 0, 0))


def test_area_without_an_eval_at_zero_is_the_mean_over_the_evals_span():
    """Evals at 0.25 ... 1 (compute 250 ... 1000), a linear 0.2, 0.4, 0.6, 0.8: mean 0.5 over
    [250, 1000]; b 0.2, 0.2, 0.6, 0.6: (0.2 + 0.4 + 0.6) x 250 / 750 = 0.4."""
    items = _curves({
        ("s1", 1, "a"): [0.2, 0.4, 0.6, 0.8], ("s1", 1, "b"): [0.2, 0.2, 0.6, 0.6],
        ("s2", 2, "a"): [0.2, 0.4, 0.6, 0.8], ("s2", 2, "b"): [0.2, 0.4, 0.6, 0.8],
    })  # fmt: skip
    est = area_difference(items, "a", "b", folds=1)
    np.testing.assert_allclose(est.per_start, [0.1, 0.0], atol=TOL)


def test_area_difference_matches_a_loop_over_runs():
    """A simulated suite of 4 starts x 2 seeds, three groups: per run the mean over datasets of
    the item means at each eval, numpy's trapezoid over compute divided by the span, then per
    start the mean over seeds of a - b (the vectorised path, item folds and all)."""
    items = simulate_items(Design(n_starts=4, n_seeds=2, horizons=(1, 2, 3), items=12, evals=5,
                                  speed=0.6), seed=8)  # fmt: skip
    est = area_difference(items, "sppo", "grpo")
    per_start = []
    for _, st in items.groupby("start", sort=True):
        diffs = []
        for _, run in st.groupby("seed"):
            area = {}
            for algo, sub in run.groupby("algorithm"):
                acc = sub.groupby(["budget_fraction", "dataset"])["correct"].mean()
                acc = acc.groupby(level=0).mean()
                x = sub.groupby("budget_fraction")["compute"].first().loc[acc.index].to_numpy()
                area[algo] = np.trapezoid(acc.to_numpy(), x) / (x[-1] - x[0])
            diffs.append(area["sppo"] - area["grpo"])
        per_start.append(np.mean(diffs))
    np.testing.assert_allclose(est.per_start, per_start, atol=TOL)
    assert est.effect == pytest.approx(np.mean(per_start), abs=TOL)
    # the shared items' variance widens the interval beyond the spread over starts
    assert est.se >= area_difference(items, "sppo", "grpo", folds=1).se


def test_area_difference_reads_only_the_datasets_asked_for() -> None:
    d, both = _two_datasets()
    only_d = area_difference(both, "a", "b", ["d"], folds=1)
    assert only_d.per_start == pytest.approx(area_difference(d, "a", "b", folds=1).per_start)
    assert area_difference(both, "a", "b", folds=1).per_start != pytest.approx(only_d.per_start)


def test_area_needs_every_eval():
    items = _curves({("s1", 1, "a"): [0.2, 0.4, 0.6, 0.8], ("s1", 1, "b"): [0.2, 0.2, 0.6, 0.6]})
    items = items[~((items["algorithm"] == "a") & (items["budget_fraction"] == 0.5))]
    with pytest.raises(ValueError, match="area_difference needs every eval"):
        area_difference(items, "a", "b")


# --- one start -------------------------------------------------------------------------------


def test_one_start_is_conditional_over_its_seeds_and_gets_no_verdict():
    items = simulate_items(Design(n_starts=1, n_seeds=4, shift=2.0), seed=5)
    for f in (horizon_slope, final_difference, compute_ratio, area_difference):
        est = f(items, "sppo", "grpo")
        assert est.conditional and est.n_starts == 1 and est.n_seeds == 4
        assert np.isfinite(est.lo) and np.isfinite(est.se)
        assert verdict(est, 0.05, "greater") == CONDITIONAL
    assert final_difference(items, "sppo", "grpo").lo > 0  # a large shift shows, conditionally


def test_one_start_one_seed_is_an_interval_over_items_alone():
    """One start, one seed: the per-unit jackknife over the 20 item folds, 19 degrees of
    freedom."""
    items = simulate_items(Design(n_starts=1, n_seeds=1), seed=6)
    est = final_difference(items, "sppo", "grpo")
    assert est.conditional and est.df == 19 and np.isfinite(est.se) and est.se > 0


# --- the estimate's level --------------------------------------------------------------------


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


# --- Holm and the verdict --------------------------------------------------------------------


def test_holm_hand_worked_family():
    """p = 0.01, 0.04, 0.03, 0.005 at alpha 0.05. Sorted: 0.005 at 0.05/4 = 0.0125 (rejected),
    0.01 at 0.05/3 (rejected), 0.03 at 0.05/2 = 0.025 (not): testing stops, so 0.04 is not
    rejected although it is below 0.05. Adjusted p: 4 x 0.005 = 0.02, 3 x 0.01 = 0.03,
    max(0.03, 2 x 0.03) = 0.06, max(0.06, 1 x 0.04) = 0.06."""
    rows = holm([0.01, 0.04, 0.03, 0.005], alpha=0.05)
    assert [r.rank for r in rows] == [2, 4, 3, 1]
    np.testing.assert_allclose([r.alpha_adj for r in rows], [0.05 / 3, 0.05, 0.025, 0.0125])
    np.testing.assert_allclose([r.p_adj for r in rows], [0.03, 0.06, 0.06, 0.02])
    assert [r.rejected for r in rows] == [True, False, False, True]


def test_holm_breaks_ties_in_favour_of_tested_members():
    """An untested member (NaN: gates failed) declared first and a tested one with p = 1 (e.g.
    a censored ratio's one-sided p): the tested one ranks first and is shown at alpha / m, the
    level it is tested at; the untested one ranks last. Equal tested p-values keep declaration
    order."""
    rows = holm([float("nan"), 1.0], alpha=0.05, family_size=4)
    assert [r.rank for r in rows] == [2, 1]
    np.testing.assert_allclose([r.alpha_adj for r in rows], [0.05 / 3, 0.05 / 4])
    assert not any(r.rejected for r in rows)
    rows = holm([float("nan"), 0.3, float("nan"), 0.3, 0.001])
    assert [r.rank for r in rows] == [4, 2, 5, 3, 1]
    assert [r.rejected for r in rows] == [False, False, False, False, True]


def test_holm_counts_the_absent_members_of_the_family():
    """The same four in a family of 6: thresholds 0.05/6, /5, /4, /3. 0.005 <= 0.00833 and
    0.01 <= 0.01 are rejected, 0.03 > 0.0125 stops the test. Adjusted: 0.03, 0.05,
    max(0.05, 4 x 0.03) = 0.12, max(0.12, 3 x 0.04) = 0.12."""
    rows = holm([0.01, 0.04, 0.03, 0.005], alpha=0.05, family_size=6)
    np.testing.assert_allclose([r.alpha_adj for r in rows], [0.01, 0.05 / 3, 0.0125, 0.05 / 6])
    np.testing.assert_allclose([r.p_adj for r in rows], [0.05, 0.12, 0.12, 0.03])
    assert [r.rejected for r in rows] == [True, False, False, True]
    nan = holm([float("nan"), 0.001])
    assert nan[0].rank == 2 and not nan[0].rejected and nan[1].rejected
    with pytest.raises(ValueError, match="family_size=1"):
        holm([0.1, 0.2], family_size=1)


def test_holm_rejects_every_member_when_none_fails() -> None:
    rows = holm([0.001, 0.004, 0.01], 0.05)
    assert [r.rejected for r in rows] == [True, True, True]
    assert [r.rank for r in rows] == [1, 2, 3]


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


def _estimate(lo, hi, se, estimand="final_difference", n_starts=5, censored=0):
    effect = (lo + hi) / 2
    return ClaimEstimate(
        estimand=estimand, a="a", b="b", effect=effect, lo=lo, hi=hi, level=0.95, p_value=0.5,
        n_starts=n_starts, n_seeds=1, mde=0.1, conditional=n_starts == 1, per_start=(),
        se=se, df=4.0, censored=censored,
    )  # fmt: skip


def test_verdict_uses_the_interval_at_the_adjusted_level():
    half95 = stats.t.ppf(0.975, 4)
    est = _estimate(0.1, 0.1 + 2 * half95 * 0.04, 0.04)  # centre 0.1 + 1.96.. se: excludes 0
    assert est.lo > 0
    assert verdict(est, 0.05, "greater") == SUPERIOR
    assert verdict(est, 0.05, "less") == DOES_NOT_HOLD
    assert verdict(est, 0.001, "greater") == NOT_RESOLVED  # wider at the adjusted level
    # Holm stopped before this claim: not rejected, although its own interval excludes 0
    assert verdict(est, 0.05, "greater", rejected=False) == NOT_RESOLVED
    assert verdict(est, 0.05, "greater", rejected=True) == SUPERIOR
    assert verdict(_estimate(-0.1, 0.1, 0.04, n_starts=1), 0.05, "greater") == CONDITIONAL
    with pytest.raises(ValueError, match="direction"):
        verdict(est, 0.05, "up")


def test_smallest_detectable_effect_at_the_holm_level():
    """mde_at(alpha) = (t(1 - alpha/2) + t(0.8)) x se at the interval's df: the nominal mde at
    0.05, and 1.41 times larger at a Holm level of 0.0125 over 4 degrees of freedom."""
    est = _estimate(-0.05, 0.05, 0.02)
    assert est.mde_at(0.05) == pytest.approx((stats.t.ppf(0.975, 4) + stats.t.ppf(0.8, 4)) * 0.02)
    at_holm = est.mde_at(0.0125)
    assert at_holm == pytest.approx((stats.t.ppf(1 - 0.00625, 4) + stats.t.ppf(0.8, 4)) * 0.02)
    assert at_holm / est.mde_at(0.05) == pytest.approx(1.414, abs=1e-3)  # 4 degrees of freedom


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


# --- bad input -------------------------------------------------------------------------------


def test_bad_input_names_the_field():
    items = _table({("s", 0, "a", "g"): [1, 0], ("s", 0, "b", "g"): [0, 0]}, {"g": 1.0})
    with pytest.raises(ValueError, match="lacks columns \\['correct'\\]"):
        final_difference(items.drop(columns="correct"), "a", "b")
    with pytest.raises(ValueError, match="a='c' has no rows; algorithms present: \\['a', 'b'\\]"):
        final_difference(items, "c", "b")
    with pytest.raises(ValueError, match="datasets \\['x'\\] have no rows"):
        final_difference(items, "a", "b", datasets=["x"])
    with pytest.raises(ValueError, match="two or more datasets with distinct horizons"):
        horizon_slope(items, "a", "b")
    with pytest.raises(ValueError, match="confidence"):
        final_difference(items, "a", "b", confidence=95)


def test_the_item_table_check_names_the_side_and_a_repeated_algorithm() -> None:
    items = _curves({("s1", 1, "a"): B, ("s1", 1, "b"): B})
    with pytest.raises(ValueError) as err:
        final_difference(items, "a", "c")
    assert str(err.value) == "b='c' has no rows; algorithms present: ['a', 'b']"
    with pytest.raises(ValueError) as err:
        final_difference(items, "a", "a")
    assert str(err.value) == "a and b must differ, got 'a' twice"


def test_curves_without_a_scored_item_are_refused_by_name() -> None:
    items = _curves({("s1", 1, "a"): B, ("s1", 1, "b"): B}).assign(correct=np.nan)
    for fn, name in ((area_difference, "area_difference"), (compute_ratio, "compute_ratio")):
        with pytest.raises(ValueError) as err:
            fn(items, "a", "b")
        assert str(err.value) == f"no item of 'a' or 'b' has a score; {name} needs their curves"


def test_final_items_takes_each_runs_largest_fraction():
    items = _curves({("s", 1, "a"): [0.1, 0.2, 0.3, 0.4], ("s", 1, "b"): [0.1, 0.2, 0.3, 0.4]})
    assert set(final_items(items)["budget_fraction"]) == {1.0}


# --- margins: non-inferiority and equivalence ------------------------------------------------


def _at(centre: float, half: float, alpha: float = 0.05, df: float = 4.0, **kw) -> ClaimEstimate:
    """An estimate whose interval at level 1 - alpha is centre +- half."""
    se = half / stats.t.ppf(1 - alpha / 2, df)
    return _estimate(centre - half, centre + half, se, **kw)


@pytest.mark.parametrize(
    ("centre", "half", "direction", "expected"),
    [
        # a >= b with margin 0.02: the interval [lo, hi] against 0 and -0.02
        (0.05, 0.03, "greater", SUPERIOR),  # [+0.02, +0.08]
        (0.00, 0.01, "greater", f"{NON_INFERIOR} (margin 0.02)"),  # [-0.01, +0.01]
        (-0.06, 0.03, "greater", f"{DOES_NOT_HOLD} (margin 0.02)"),  # [-0.09, -0.03]
        (-0.005, 0.01, "greater", f"{NON_INFERIOR} (margin 0.02)"),  # [-0.015, +0.005]
        (-0.02, 0.01, "greater", f"{NOT_RESOLVED} (margin 0.02)"),  # straddles -0.02
        (0.00, 0.05, "greater", f"{NOT_RESOLVED} (margin 0.02)"),  # straddles both
        # a <= b mirrors it at +0.02
        (-0.05, 0.03, "less", SUPERIOR),
        (0.00, 0.01, "less", f"{NON_INFERIOR} (margin 0.02)"),
        (0.06, 0.03, "less", f"{DOES_NOT_HOLD} (margin 0.02)"),
        # a ~= b with margin 0.02: inside, outside, straddling
        (0.00, 0.015, "equivalent", f"{EQUIVALENT} (margin 0.02)"),
        (0.05, 0.02, "equivalent", f"{DOES_NOT_HOLD} (margin 0.02)"),
        (-0.05, 0.02, "equivalent", f"{DOES_NOT_HOLD} (margin 0.02)"),
        (0.01, 0.02, "equivalent", f"{NOT_RESOLVED} (margin 0.02)"),
        (0.05, 0.02, "greater", SUPERIOR),  # superior is also non-inferior: the stronger verdict
    ],
)
def test_each_margin_verdict_is_reached_from_a_constructed_interval(
    centre, half, direction, expected
):
    est = _at(centre, half)
    assert verdict(est, 0.05, direction, margin=0.02) == expected
    # Holm rejects the claim exactly when its interval at that level resolves it
    p = claim_p_value(est, direction, 0.02)
    assert (p <= 0.05) == resolved(expected), p


def test_without_a_margin_a_tie_never_supports_at_least_as_good():
    """The superiority reading ("a > b"): an interval around 0, however narrow, is not
    resolved; with a margin it is non-inferior."""
    tie = _at(0.0, 0.001)
    assert verdict(tie, 0.05, "greater") == NOT_RESOLVED
    assert verdict(tie, 0.05, "greater", margin=0.01) == f"{NON_INFERIOR} (margin 0.01)"


def test_margin_p_values_by_hand():
    """effect 0.01, se 0.01, df 4, margin 0.02. Non-inferiority: the shifted null effect <= -0.02,
    t = 3, p = 2 P(T4 >= 3). Equivalence (two one-sided tests): max(P(T >= 3), P(T <= -1)) =
    P(T <= -1), doubled; the 'outside' test: min(P(T >= -1), P(T <= 3)) doubled, capped at 1."""
    est = _estimate(0.01 - 0.0277, 0.01 + 0.0277, 0.01)
    assert est.effect == pytest.approx(0.01)
    assert claim_p_value(est, "greater", 0.02) == pytest.approx(2 * stats.t.sf(3, 4))
    assert claim_p_value(est, "less", 0.02) == pytest.approx(2 * stats.t.sf(1, 4))
    assert claim_p_value(est, "equivalent", 0.02) == pytest.approx(2 * stats.t.cdf(-1, 4))
    assert claim_p_value(est, "greater") == est.p_value  # superiority: the estimate's own test
    below = _estimate(-0.05 - 0.0277, -0.05 + 0.0277, 0.01)  # effect -0.05: below -m
    assert claim_p_value(below, "greater", 0.02) == pytest.approx(2 * stats.t.sf(3, 4))


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


def test_margin_p_value_and_verdict_agree_at_any_level():
    """Over random estimates, margins and Holm levels: p <= alpha exactly when the verdict at
    alpha resolves the claim (so Holm's decision and the printed verdict never disagree)."""
    rng = np.random.default_rng(11)
    for _ in range(2000):
        est = _estimate(0.0, 0.0, float(rng.uniform(0.001, 0.05)))
        est = ClaimEstimate(**{**est.__dict__, "effect": float(rng.normal(0, 0.05)),
                               "df": float(rng.uniform(2, 40))})  # fmt: skip
        alpha = float(rng.choice([0.05, 0.025, 0.0167, 0.0125]))
        direction = str(rng.choice(["greater", "less", "equivalent"]))
        margin = float(rng.uniform(0.005, 0.05))
        p = claim_p_value(est, direction, margin)
        assert (p <= alpha) == resolved(verdict(est, alpha, direction, margin=margin))


def test_margins_are_refused_where_they_mean_nothing():
    est = _at(0.0, 0.01)
    with pytest.raises(ValueError, match="'equivalent' needs a margin"):
        verdict(est, 0.05, "equivalent")
    with pytest.raises(ValueError, match="margin must be a number > 0"):
        claim_p_value(est, "greater", -0.01)
    ratio = _estimate(0.5, 0.9, 0.1, estimand="compute_ratio")
    with pytest.raises(ValueError, match="compute_ratio takes no margin"):
        verdict(ratio, 0.05, "less", margin=0.1)
