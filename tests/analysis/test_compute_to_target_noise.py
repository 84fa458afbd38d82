"""Compute to target with paired intervals over seeds: a ratio within noise is never told as a
win, and none is printed as "1.00x". Frames built here: per seed, grpo climbs linearly from 0.2 to
0.6 over 1,000 rollout samples; sppo climbs the same 0.4 in ``speed[s]`` x 1,000 samples (linear,
so each crossing is exact), evaluated up to ``budget`` samples; a shared per-seed offset on both
(the warm start). With the default target (grpo's final), sppo reaches it at 1,000 * speed[s]
samples and grpo at its last eval, 1,000.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import compute_to_target, describe_compute_to_target
from analysis.metrics import COMPUTE_ROLLOUT_SAMPLES

FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)


def _points(speed: dict[int, float], budget: float = 2000.0) -> pd.DataFrame:
    rows = []
    for s, k in speed.items():
        off = 0.02 * s
        for algo, total in (("grpo", 1000.0), ("sppo", budget)):
            for i, f in enumerate(FRACTIONS):
                x = total * f
                gain = f if algo == "grpo" else x / (1000.0 * k)
                rows.append(
                    {
                        "run_id": f"{algo}-{s}",
                        "algorithm": algo,
                        "seed": s,
                        "dataset": "arith",
                        "step": 10 * i,
                        "eval_index": i,
                        "budget_fraction": f,
                        "accuracy": 0.2 + off + 0.4 * gain,
                        COMPUTE_ROLLOUT_SAMPLES: x,
                    }
                )
    return pd.DataFrame(rows)


def _grpo_row(points: pd.DataFrame, **kw: object) -> tuple[pd.Series, list[str]]:
    table = compute_to_target(points, COMPUTE_ROLLOUT_SAMPLES, "arith", reps=1000, **kw)
    return table.set_index("algorithm").loc["grpo"], describe_compute_to_target(table)


def test_a_consistent_win_is_told_with_its_interval() -> None:
    speed = {0: 0.45, 1: 0.5, 2: 0.55, 3: 0.5, 4: 0.48}
    row, text = _grpo_row(_points(speed))
    # ratio of means: grpo's 5 x 1,000 samples over sppo's sum of 1,000 * speed
    assert row["ratio_paired"] == pytest.approx(5 / sum(speed.values()), rel=1e-12)
    assert row["n_seeds"] == 5 and row["n_unreached"] == 0 and bool(row["resolved"])
    assert 1 < row["ratio_lo"] <= row["ratio_paired"] <= row["ratio_hi"]
    (line,) = text
    assert line.startswith("sppo reaches 0.64 accuracy on arith (grpo's final) with 2.02x fewer")
    assert (
        "rollout samples than grpo (paired interval over 5 seeds, per-seed bootstrap, coverage "
        "about 90% in simulation, not 95%: " in line
    )
    assert row["interval"] == "per-seed bootstrap, coverage about 90% in simulation, not 95%"


def test_a_ratio_within_noise_is_not_told_as_a_win() -> None:
    """The mean curves say sppo is ahead (about 1.1x); the seeds disagree among themselves."""
    speed = {0: 0.5, 1: 1.4, 2: 0.6, 3: 1.3, 4: 0.9}
    row, text = _grpo_row(_points(speed))
    assert row["ratio_to_reference"] > 1  # the point estimate alone would have read as a win
    assert row["ratio_lo"] < 1 < row["ratio_hi"] and not bool(row["resolved"])
    (line,) = text
    assert "within noise" in line and "fewer" not in line and "more" not in line
    assert "x" not in line.split("(ratio", 1)[1]  # bare ratios, no "Nx" figure
    assert "1.00x" not in line


def test_a_consistent_loss_is_told_as_more() -> None:
    row, text = _grpo_row(_points({0: 1.3, 1: 1.4, 2: 1.35, 3: 1.45, 4: 1.4}))
    assert row["ratio_hi"] < 1 and bool(row["resolved"])
    (line,) = text
    assert line.startswith("sppo needs 1.38x more rollout samples than grpo to reach")
    assert "(paired interval over 5 seeds, per-seed bootstrap, coverage about 90% in " in line
    assert "95% paired" not in line
    # The same consistent loss over 4 seeds: an interval, but no verdict (MIN_VERDICT_SEEDS).
    row4, text4 = _grpo_row(_points({0: 1.3, 1: 1.4, 2: 1.35, 3: 1.45}))
    assert row4["ratio_hi"] < 1 and not bool(row4["resolved"])
    (line4,) = text4
    assert line4.startswith("not resolved at this power (a verdict needs 5 seeds)")
    assert "x more" not in line4 and "paired interval over 4 seeds, per-seed bootstrap" in line4


def test_a_seed_that_never_reaches_leaves_the_ratio_unresolved() -> None:
    """sppo misses grpo's final in one seed (speed 3: it would need 3,000 of its 2,000)."""
    row, text = _grpo_row(_points({0: 0.5, 1: 0.5, 2: 0.55, 3: 3.0, 4: 0.52}))
    assert row["n_unreached"] == 1 and row["ratio_lo"] == 0.0  # infinite sppo compute
    assert not bool(row["resolved"])
    (line,) = text
    assert line.startswith("not resolved at this power: the rollout samples sppo and grpo need")
    assert "1 where a curve never reached the target" in line and "fewer" not in line


def test_one_seed_has_no_interval_and_is_marked_not_resolved() -> None:
    row, text = _grpo_row(_points({0: 0.5}))
    assert row["n_seeds"] == 1 and np.isnan(row["ratio_lo"]) and not bool(row["resolved"])
    assert row["interval"] == ""
    assert text == [
        "not resolved (no interval: one curve per algorithm): on the mean curves sppo reaches "
        "0.6 accuracy on arith (grpo's final) with 2.00x fewer rollout samples than grpo."
    ]
    # an exact tie on one seed: "about the same", never "1.00x"
    _, tie = _grpo_row(_points({0: 1.0}, budget=1000.0))
    assert tie == [
        "not resolved (no interval: one curve per algorithm): on the mean curves sppo and grpo "
        "need about the same rollout samples to reach 0.6 accuracy on arith (grpo's final)."
    ]


def test_a_given_target_pairs_each_seeds_crossings() -> None:
    """With target=0.4 (below every final) both cross it: sppo at 500 * speed, grpo at 500."""
    speed = {0: 0.4, 1: 0.5, 2: 0.6, 3: 0.45, 4: 0.55}
    pts = _points(speed)
    pts["accuracy"] -= 0.02 * pts["seed"]  # no offset: the target means the same on each seed
    row, _ = _grpo_row(pts, target=0.4)
    assert row["target_source"] == "given"
    assert row["ratio_paired"] == pytest.approx(5 * 500 / (500 * sum(speed.values())), rel=1e-12)
    assert row["n_seeds"] == 5 and bool(row["resolved"])
