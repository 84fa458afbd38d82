"""Gates: each fires on a suite built to fail it, and passes on one built to pass it.

The suites are item tables built directly (starts x two seeds, four horizon groups) and tidy
frames of critic metrics logged at four evals: every value a gate reads is set by construction,
so each expected value below is worked by hand (a lower bound over two starts with values x and
y is their mean minus t(0.95, 1) = 6.3138 x |x - y| / 2).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.claims.gates import (
    CEILING,
    CRITIC_PEARSON_MIN,
    INERT_CRITIC_PEARSON,
    calibrate_threshold,
    claim_datasets,
    critic_gate,
    evaluate_gates,
    gate_datasets,
    inert_critic_statistics,
    late_mean,
    late_means_per_start,
    lower_bound,
    per_start_finals,
    start_gate,
    unsaturated_starts,
    untestable,
)
from analysis.claims.spec import parse_claims
from analysis.results import read_results
from testkit.paths import REPO

HORIZONS = (1, 2, 4, 8)
ITEMS = 20
T95_1 = 6.313751514675043  # scipy.stats.t.ppf(0.95, 1)
T95_4 = 2.131846786326649  # scipy.stats.t.ppf(0.95, 4)
T95_9 = 1.833112932656237  # scipy.stats.t.ppf(0.95, 9)
FV = "critic/first_value_pearson"
EV = "critic/heldout_explained_variance"
CP = "critic/calibration_pearson"


def _claims(**gates):
    base = {
        "name": "horizon",
        "estimand": "horizon_slope",
        "a": "sppo",
        "b": "ppo",
        "direction": "a >= b",
        "margin": 0.01,
        "groups": "all",
        "family": {"name": "headline", "size": 4},
        "gates": gates,
    }
    ratio = {**base, "name": "rollouts", "estimand": "compute_ratio", "b": "grpo"}
    ratio["direction"] = "a needs less compute"
    del ratio["margin"]
    return parse_claims([base, ratio])


def _items(
    start: dict[int, float],
    final: dict[str, dict[int, float]],
    starts: tuple[str, ...] = ("s0", "s1"),
    saturated: tuple[str, ...] = (),
) -> pd.DataFrame:
    """An item table whose accuracy at horizon h is ``start[h]`` at the first eval for every
    run and ``final[alg][h]`` at the last (the first round(acc * ITEMS) items correct); on the
    ``saturated`` starts every algorithm ends at 1.0 on every group. Run ids ``alg-start-seed``."""
    rows = []
    for s in starts:
        for seed in (0, 1):
            for alg, acc in final.items():
                end = dict.fromkeys(HORIZONS, 1.0) if s in saturated else acc
                for frac, level in ((0.0, start), (1.0, end)):
                    for h in HORIZONS:
                        k = round(level[h] * ITEMS)
                        for i in range(ITEMS):
                            item = dict(start=s, seed=seed, algorithm=alg, budget_fraction=frac,
                                        run_id=f"{alg}-{s}-{seed}")  # fmt: skip
                            correct = float(i < k)
                            rows.append(
                                {
                                    **item,
                                    "dataset": f"arith_h{h}",
                                    "horizon": float(h),
                                    "item": str(i + 100 * h),
                                    "correct": correct,
                                }
                            )
                            rows.append({**item, "dataset": "arith", "horizon": np.nan,
                                         "item": str(i + 100 * h), "correct": correct})  # fmt: skip
    items = pd.DataFrame(rows)
    items["compute"] = items["budget_fraction"] * 1000
    return items


START = {1: 0.5, 2: 0.4, 4: 0.3, 8: 0.2}
LEARNS = {a: {h: START[h] + 0.2 for h in HORIZONS} for a in ("sppo", "ppo", "grpo")}


def _df(values: dict[tuple[str, str], dict[str, float]]) -> pd.DataFrame:
    """A tidy frame where each (algorithm, metric)'s runs log the metric at four evals: -5 at the
    first two, the start's value at the last two (so the late-eval mean is the value: the
    second half of the evals), for both seeds of each start named."""
    rows = []
    for (alg, metric), per_start in values.items():
        for start, v in per_start.items():
            for seed in (0, 1):
                for step, value in ((1, -5.0), (2, -5.0), (3, v), (4, v)):
                    rid = f"{alg}-{start}-{seed}"
                    rows.append(dict(run_id=rid, algorithm=alg, metric=metric, step=step,
                                     value=value))  # fmt: skip
    return pd.DataFrame(rows)


CRITICS = {"ppo": {EV: 0.1}, "sppo": {CP: 0.3}}
#: Learning critics on both starts: ppo's Pearson 0.60 and 0.62 (bound 0.61 - 0.063138), EV
#: beside it 0.2 and 0.3; sppo's 0.50 and 0.50 (no spread: the bound is the mean).
CRITICS_OK = _df(
    {
        ("ppo", FV): {"s0": 0.60, "s1": 0.62},
        ("ppo", EV): {"s0": 0.2, "s1": 0.3},
        ("sppo", CP): {"s0": 0.5, "s1": 0.5},
    }
)


def test_datasets_a_claim_uses_and_the_ends_its_gates_read():
    items = _items(START, LEARNS)
    horizon, ratio = _claims()
    assert claim_datasets(horizon, items) == ["arith_h1", "arith_h2", "arith_h4", "arith_h8"]
    assert claim_datasets(ratio, items) == ["arith"]  # the whole task
    assert gate_datasets(claim_datasets(horizon, items), items) == ["arith_h1", "arith_h8"]
    assert gate_datasets(["arith"], items) == ["arith"]


def test_every_gate_passes_on_a_suite_with_headroom_and_learning_critics():
    (horizon, _) = _claims(start_max=0.8, gain_min=0.05, final_min=CRITICS)
    gates = evaluate_gates(horizon, _items(START, LEARNS), CRITICS_OK)
    bound = "95% lower bound over 2 starts"
    assert [(g.name, round(g.value, 6)) for g in gates] == [
        ("start accuracy at arith_h1", 0.5),
        ("best gain at arith_h1 (grpo)", 0.2),  # a tie: the first algorithm by name
        ("start accuracy at arith_h8", 0.2),
        ("best gain at arith_h8 (grpo)", 0.2),
        # the declared EV names ppo's token critic: it is gated on its first-value Pearson
        (f"ppo {FV}, late-eval mean, {bound}", round(0.61 - T95_1 * 0.01, 6)),
        (f"sppo {CP}, late-eval mean, {bound}", 0.5),
        ("starts where sppo and ppo end >= 0.95 on every group used", 0.0),
    ]
    assert all(g.passes for g in gates) and untestable(gates) is None
    assert [g.threshold for g in gates[4:6]] == [CRITIC_PEARSON_MIN] * 2
    # the held-out EV is printed beside ppo's Pearson, not gated: mean 0.25, bound over 2
    assert gates[4].detail == (
        "mean 0.610; per start s0 0.600, s1 0.620; beside: "
        f"{EV} mean 0.250, 95% lower bound {0.25 - T95_1 * 0.05:.3f}"
    )
    assert gates[6].detail == "0 of 2"


def test_the_start_gate_fires_on_a_group_solved_from_the_start():
    solved = {**START, 1: 0.95}
    final = {a: {**v, 1: 1.0} for a, v in LEARNS.items()}
    (horizon, _) = _claims(start_max=0.8)
    gates = evaluate_gates(horizon, _items(solved, final), None)
    assert untestable(gates) == (
        "untestable on this testbed: start accuracy at arith_h1 = 0.950 (needs <= 0.8)"
    )


def test_the_gain_gate_fires_on_a_group_where_nothing_learns():
    flat = {a: {**v, 8: START[8]} for a, v in LEARNS.items()}
    flat["ppo"][8] = START[8] - 0.1  # one algorithm even loses
    (horizon, _) = _claims(gain_min=0.05)
    message = untestable(evaluate_gates(horizon, _items(START, flat), None))
    assert message == (
        "untestable on this testbed: best gain at arith_h8 (grpo) = 0.000 (needs >= 0.05)"
    )


@pytest.mark.parametrize(
    ("values", "failing"),
    [
        # ppo's Pearson at the inert critic's level on both starts: bound 0.2 < the threshold
        (
            {("ppo", FV): {"s0": 0.2, "s1": 0.2}, ("sppo", CP): {"s0": 0.5, "s1": 0.5}},
            f"ppo {FV}, late-eval mean, 95% lower bound over 2 starts = 0.200 (needs >= {CRITIC_PEARSON_MIN})",
        ),
        # sppo's critic high on average (0.45) but spread (0.3, 0.6): bound 0.45 - 0.947 < 0
        (
            {("ppo", FV): {"s0": 0.6, "s1": 0.62}, ("sppo", CP): {"s0": 0.3, "s1": 0.6}},
            f"sppo {CP}, late-eval mean, 95% lower bound over 2 starts = "
            f"{0.45 - T95_1 * 0.15:.3f} (needs >= {CRITIC_PEARSON_MIN})",
        ),
    ],
)
def test_the_critic_gates_fire_on_a_critic_that_does_not_learn(values, failing):
    (horizon, _) = _claims(final_min=CRITICS)
    message = untestable(evaluate_gates(horizon, _items(START, LEARNS), _df(values)))
    assert message is not None and failing in message


def test_a_gate_whose_metric_was_not_logged_fails_as_not_measured():
    (horizon, _) = _claims(final_min={"sppo": {CP: 0.3}})
    message = untestable(evaluate_gates(horizon, _items(START, LEARNS), None))
    assert message == (
        f"untestable on this testbed: sppo {CP}, late-eval mean = not measured (needs >= {CRITIC_PEARSON_MIN})"
    )


def test_late_mean_reads_the_second_half_of_the_evals():
    assert late_mean([1.0]) == 1.0
    assert late_mean([0.0, 1.0]) == 1.0
    assert late_mean([0.0, 0.0, 3.0]) == 1.5  # the last ceil(3 / 2) = 2
    assert late_mean([-5.0, -5.0, 0.2, 0.4]) == pytest.approx(0.3, abs=1e-15)
    assert math.isnan(late_mean([]))


def test_late_means_per_start_average_each_run_s_late_mean_over_the_start_s_runs():
    """A start is one unit: its runs' late-eval means (not their evals) are averaged."""
    runs = [("s0", [0.0, 1.0]), ("s0", [0.2, 0.25, 0.25]), ("s1", [0.5]), ("s1", [0.0, 0.0])]
    assert late_means_per_start(runs) == {"s0": 0.625, "s1": 0.25}


def test_the_critic_gate_is_the_start_gate_at_the_calibrated_threshold():
    """One statistic and one threshold for every reader: the claims read the bound over starts,
    a sweep the weakest start (confidence None), both against CRITIC_PEARSON_MIN."""
    per = {"s0": 0.9, "s1": 0.85, "s2": 0.8, "s3": 0.85, "s4": 0.15}
    for confidence in (0.95, None):
        gate = critic_gate("ppo pearson", per, confidence=confidence, beside="ev")
        assert gate == start_gate(
            "ppo pearson", per, CRITIC_PEARSON_MIN, confidence=confidence, beside="ev"
        )
    assert critic_gate("p", per).passes and not critic_gate("p", per, confidence=None).passes
    at = {"s0": CRITIC_PEARSON_MIN, "s1": 0.5}
    assert critic_gate("p", at, confidence=None).passes  # at the threshold


def test_the_gate_reads_a_bound_of_the_mean_not_the_weakest_start():
    """Five starts, one idle (0.15): "every start >= 0.378" fails; the bound of the mean
    (0.71, sd 0.3150: 0.4097) passes. The same values with the weakest start read (a sweep's screen)
    fail, and a one-start reading has no bound."""
    per = {"s0": 0.9, "s1": 0.85, "s2": 0.8, "s3": 0.85, "s4": 0.15}
    v = np.array(list(per.values()))
    gate = start_gate("pearson", per, CRITIC_PEARSON_MIN)
    assert gate.value == pytest.approx(v.mean() - T95_4 * v.std(ddof=1) / math.sqrt(5), abs=1e-12)
    assert gate.value == pytest.approx(0.4097, abs=1e-4) and gate.passes
    weakest = start_gate("pearson", per, CRITIC_PEARSON_MIN, confidence=None)
    assert weakest.name == "pearson, weakest of 5 starts (s4)" and weakest.value == 0.15
    assert not weakest.passes
    one = start_gate("pearson", {"s0": 0.5}, CRITIC_PEARSON_MIN)
    assert one.value == 0.5 and one.passes and "no bound" in one.detail
    nan = start_gate("pearson", {"s0": float("nan")}, CRITIC_PEARSON_MIN)
    assert math.isnan(nan.value) and not nan.passes
    assert np.isnan(lower_bound([0.5]))


def test_the_threshold_is_the_inert_critic_s_upper_bound():
    """The shipped threshold is what :func:`calibrate_threshold` gives on the inert critic's
    statistics, and those are what the committed leaderboard_arith starts give: recomputed from
    the results sets, the same late-eval means the gate reads."""
    rs = read_results(sorted((REPO / "results" / "leaderboard_arith").glob("s*")))
    measured = inert_critic_statistics(rs.items, rs.tidy())
    assert list(measured) == [f"s{k}" for k in range(10, 20)]
    assert list(measured.values()) == pytest.approx(INERT_CRITIC_PEARSON, abs=1e-6)
    assert calibrate_threshold(list(measured.values())) == CRITIC_PEARSON_MIN
    v = np.array(INERT_CRITIC_PEARSON)
    half = T95_9 * v.std(ddof=1) / math.sqrt(10)
    assert CRITIC_PEARSON_MIN == round(v.mean() + half, 3)
    # an inert critic at its own measured level fails the gate
    assert not start_gate("pearson", measured, CRITIC_PEARSON_MIN).passes
    with pytest.raises(ValueError, match="two or more"):
        calibrate_threshold([0.1])


def test_the_saturation_gate_and_the_starts_the_sensitivity_line_keeps():
    """Start s0 ends at 1.0 on every group for every algorithm: it fails the ceiling check.
    One of two starts is half: the gate passes (the verdict stands on both, the sensitivity
    line drops s0); two of three saturated fail it. A start saturated on some groups only is
    kept (a group is left where the two could differ)."""
    (horizon, _) = _claims()
    items = _items(START, LEARNS, saturated=("s0",))
    (gate,) = evaluate_gates(horizon, items, None)
    assert (gate.value, gate.passes, gate.detail) == (0.5, True, "1 of 2: s0")
    assert unsaturated_starts(horizon, items) == ["s1"]
    three = _items(START, LEARNS, starts=("s0", "s1", "s2"), saturated=("s0", "s2"))
    (gate,) = evaluate_gates(horizon, three, None)
    assert gate.value == pytest.approx(2 / 3) and not gate.passes
    assert untestable([gate]) == (
        "untestable on this testbed: starts where sppo and ppo end >= 0.95 on every group used "
        "= 0.667 (needs <= 0.5) [2 of 3: s0, s2]"
    )
    partly = {a: {**v, 1: CEILING, 2: 1.0} for a, v in LEARNS.items()}  # h1, h2 at the ceiling
    assert unsaturated_starts(horizon, _items(START, partly)) == ["s0", "s1"]


def test_the_critic_table_shows_each_start_s_late_mean():
    """Two starts x two seeds of PPO: s0's runs end at 0.5 and 0.7 (mean 0.6), s1's at 0.1 and
    0.3; the table shows both starts' late means and the EV beside them, threshold NaN."""
    (horizon, _) = _claims(final_min={"ppo": {EV: 0.1}})
    ends = {("s0", 0): 0.5, ("s0", 1): 0.7, ("s1", 0): 0.1, ("s1", 1): 0.3}
    rows, items = [], []
    for (start, seed), v in ends.items():
        rid = f"ppo-{start}-{seed}"
        for metric, value in ((FV, v), (EV, v / 2)):
            for step, x in ((1, -1.0), (2, value)):
                rows.append(dict(run_id=rid, algorithm="ppo", metric=metric, step=step, value=x))
        items.append(dict(run_id=rid, start=start, seed=seed, algorithm="ppo"))
    df, items = pd.DataFrame(rows), pd.DataFrame(items)
    table = per_start_finals([horizon], items, df)
    got = {(r.start, r.metric): (round(r.value, 9), r.runs) for r in table.itertuples()}
    assert got == {
        ("s0", FV): (0.6, 2), ("s1", FV): (0.2, 2), ("s0", EV): (0.3, 2), ("s1", EV): (0.1, 2)
    }  # fmt: skip
    assert set(table.loc[table["metric"] == FV, "threshold"]) == {CRITIC_PEARSON_MIN}
    assert table.loc[table["metric"] == EV, "threshold"].isna().all()
    (gate,) = evaluate_gates(horizon, items, df)  # no item scores: no saturation gate
    assert gate.value == pytest.approx(0.4 - T95_1 * 0.2, abs=1e-12) and not gate.passes
    # runs the item table cannot place on a start form one group: one start, no bound
    (pooled,) = evaluate_gates(horizon, items.drop(columns="start"), df)
    assert pooled.value == pytest.approx(0.4, abs=1e-12) and "no bound" in pooled.detail
    assert per_start_finals(_claims(), items, df).empty  # no critic named: nothing to show


def test_the_sensitivity_line_drops_the_saturated_starts_and_the_verdict_keeps_them():
    """sppo ends 0.1 above ppo at h8 on s1 and s2 (slope 0.425 / 28.75 = 0.01478 per step on
    each); on s0 both end at 1.0 everywhere (slope 0). The verdict's estimate is over all three
    starts (0.00986); the sensitivity line, over s1 and s2, reads +0.015 and says it is not the
    verdict. With no saturated start there is no line."""
    from analysis.claims.table import claims_table, describe_claims

    final = {a: dict(v) for a, v in LEARNS.items()}
    final["sppo"][8] += 0.1
    items = _items(START, final, starts=("s0", "s1", "s2"), saturated=("s0",))
    table = claims_table(_claims(), items)
    row = table.iloc[0]
    assert row["n_starts"] == 3 and row["effect"] == pytest.approx(0.425 / 28.75 * 2 / 3, abs=1e-9)
    assert row["sensitivity"].startswith(
        "sensitivity, not the verdict: without the 1 start where sppo and ppo end >= 0.95 on "
        "every group used (s0): +0.015, "
    )
    assert row["sensitivity"].endswith(" over 2 starts")
    assert "*Sensitivity, not the verdict: without the 1 start" in describe_claims(table)[0]
    assert (claims_table(_claims(), _items(START, final))["sensitivity"] == "").all()
