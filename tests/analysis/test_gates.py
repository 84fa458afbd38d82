"""Gates: each fires on a suite built to fail it, and passes on one built to pass it.

The suites are item tables built directly (two starts x two seeds, four horizon groups): every
value a gate reads is set by construction, so each expected value below is worked by hand.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.claims import parse_claims
from analysis.gates import (
    claim_datasets,
    evaluate_gates,
    gate_datasets,
    per_start_finals,
    untestable,
)

HORIZONS = (1, 2, 4, 8)
ITEMS = 20


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


def _items(start: dict[int, float], final: dict[str, dict[int, float]]) -> pd.DataFrame:
    """An item table whose accuracy at horizon h is ``start[h]`` at the first eval for every
    run and ``final[alg][h]`` at the last (the first round(acc * ITEMS) items correct)."""
    rows = []
    for s in ("s0", "s1"):
        for seed in (0, 1):
            for alg, acc in final.items():
                for frac, level in ((0.0, start), (1.0, acc)):
                    for h in HORIZONS:
                        k = round(level[h] * ITEMS)
                        for i in range(ITEMS):
                            item = dict(start=s, seed=seed, algorithm=alg, budget_fraction=frac)
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


def _df(values: dict[str, dict[str, float]]) -> pd.DataFrame:
    """A tidy frame where each algorithm's run logs a metric at steps 1 and 2 (the last wins)."""
    rows = []
    for alg, metrics in values.items():
        for metric, v in metrics.items():
            for step, value in ((1, -5.0), (2, v)):
                rows.append(dict(run_id=alg, algorithm=alg, metric=metric, step=step, value=value))
    return pd.DataFrame(rows)


CRITICS_OK = _df(
    {"ppo": {"critic/heldout_explained_variance": 0.2}, "sppo": {"critic/calibration_pearson": 0.5}}
)


def test_datasets_a_claim_uses_and_the_ends_its_gates_read():
    items = _items(START, LEARNS)
    horizon, ratio = _claims()
    assert claim_datasets(horizon, items) == ["arith_h1", "arith_h2", "arith_h4", "arith_h8"]
    assert claim_datasets(ratio, items) == ["arith"]  # the whole task
    assert gate_datasets(claim_datasets(horizon, items), items) == ["arith_h1", "arith_h8"]
    assert gate_datasets(["arith"], items) == ["arith"]


def test_every_gate_passes_on_a_suite_with_headroom_and_learning_critics():
    (horizon, _) = _claims(
        start_max=0.8,
        gain_min=0.05,
        final_min={
            "ppo": {"critic/heldout_explained_variance": 0.1},
            "sppo": {"critic/calibration_pearson": 0.3},
        },
    )
    gates = evaluate_gates(horizon, _items(START, LEARNS), CRITICS_OK)
    assert [(g.name, round(g.value, 6)) for g in gates] == [
        ("start accuracy at arith_h1", 0.5),
        ("best gain at arith_h1 (grpo)", 0.2),  # a tie: the first algorithm by name
        ("start accuracy at arith_h8", 0.2),
        ("best gain at arith_h8 (grpo)", 0.2),
        ("ppo critic/heldout_explained_variance at the end", 0.2),  # the last step's value
        ("sppo critic/calibration_pearson at the end", 0.5),
    ]
    assert all(g.passes for g in gates)
    assert untestable(gates) is None


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
        (
            {"ppo": {"critic/heldout_explained_variance": 0.004}},
            "ppo critic/heldout_explained_variance at the end = 0.004 (needs >= 0.1)",
        ),
        (
            {
                "ppo": {"critic/heldout_explained_variance": 0.2},
                "sppo": {"critic/calibration_pearson": 0.1},
            },
            "sppo critic/calibration_pearson at the end = 0.100 (needs >= 0.3)",
        ),
    ],
)
def test_the_critic_gates_fire_on_a_critic_that_does_not_learn(values, failing):
    (horizon, _) = _claims(
        final_min={
            "ppo": {"critic/heldout_explained_variance": 0.1},
            "sppo": {"critic/calibration_pearson": 0.3},
        }
    )
    message = untestable(evaluate_gates(horizon, _items(START, LEARNS), _df(values)))
    assert message is not None and failing in message


def test_a_gate_whose_metric_was_not_logged_fails_as_not_measured():
    (horizon, _) = _claims(final_min={"sppo": {"critic/calibration_pearson": 0.3}})
    message = untestable(evaluate_gates(horizon, _items(START, LEARNS), None))
    assert message == (
        "untestable on this testbed: sppo critic/calibration_pearson at the end = not measured "
        "(needs >= 0.3)"
    )


def test_the_critic_gate_fails_when_one_start_s_critic_sits_idle():
    """Two starts x two seeds of PPO: start s0's critic learns (0.3, 0.1 at the end), s1's
    does not (0.0, 0.02). The mean over the four runs (0.105) would pass a 0.1 gate; the gate
    reads each start and fails on s1, the table shows both."""
    (horizon, _) = _claims(final_min={"ppo": {"critic/heldout_explained_variance": 0.1}})
    ends = {("s0", 0): 0.3, ("s0", 1): 0.1, ("s1", 0): 0.0, ("s1", 1): 0.02}
    rows, items = [], []
    for (start, seed), v in ends.items():
        rid = f"ppo-{start}-{seed}"
        for step, value in ((1, -1.0), (2, v)):
            rows.append(
                dict(
                    run_id=rid,
                    algorithm="ppo",
                    metric="critic/heldout_explained_variance",
                    step=step,
                    value=value,
                )
            )
        items.append(dict(run_id=rid, start=start, seed=seed, algorithm="ppo"))
    df, items = pd.DataFrame(rows), pd.DataFrame(items)
    table = per_start_finals([horizon], items, df)
    got = {r.start: (round(r.value, 9), r.runs, r.threshold) for r in table.itertuples()}
    assert got == {"s0": (0.2, 2, 0.1), "s1": (0.01, 2, 0.1)}
    (gate,) = evaluate_gates(horizon, items, df)
    assert gate.name == "ppo critic/heldout_explained_variance at the end, weakest of 2 starts (s1)"
    assert gate.value == pytest.approx(0.01, abs=1e-12) and not gate.passes
    assert table["value"].mean() == pytest.approx(0.105, abs=1e-12)  # what a mean would have read
    # runs the item table cannot place on a start form one group: the mean over runs
    (pooled,) = evaluate_gates(horizon, items.drop(columns="start"), df)
    assert pooled.name == "ppo critic/heldout_explained_variance at the end"
    assert pooled.value == pytest.approx(0.105, abs=1e-12) and pooled.passes
    assert per_start_finals(_claims(), items, df).empty  # no final_min gate: nothing to show
