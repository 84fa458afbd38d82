"""The calibration trajectory: held-out Pearson per evaluation point against compute, with the
paper's 0.642 as a reference line."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest

from analysis import calibration_trajectory, plot_calibration_trajectory
from analysis import metrics as M


def _frame() -> pd.DataFrame:
    rows = []

    def add(run, algo, seed, step, metric, value):
        rows.append(
            {
                "run_id": run,
                "algorithm": algo,
                "seed": seed,
                "step": step,
                "metric": metric,
                "value": value,
            }
        )

    for run, seed, shift in (("s0", 0, 0.0), ("s1", 1, 0.2)):
        for step, flops in ((0, 0.0), (3, 30.0), (5, 50.0), (6, 60.0)):
            add(run, "sppo", seed, step, M.COMPUTE_FLOPS, flops)
        for step, r in ((0, 0.0), (3, 0.3), (6, 0.5)):  # eval points: steps 0, 3, 6
            add(run, "sppo", seed, step, M.CRITIC_CALIBRATION_PEARSON, r + shift)
            add(run, "sppo", seed, step, M.CRITIC_CALIBRATION_ECE, 0.2)
    add("p0", "ppo", 0, 0, M.COMPUTE_FLOPS, 0.0)
    add("p0", "ppo", 0, 4, M.COMPUTE_FLOPS, 70.0)
    add("p0", "ppo", 0, 4, M.CRITIC_FIRST_VALUE_PEARSON, 0.4)
    add("p0", "ppo", 0, 4, M.CRITIC_HELDOUT_EXPLAINED_VAR, 0.1)
    add("g0", "grpo", 0, 4, M.COMPUTE_FLOPS, 70.0)  # no critic: not in the trajectory
    return pd.DataFrame(rows)


def test_trajectory_rows_are_eval_points_with_their_compute():
    t = calibration_trajectory(_frame())
    assert set(t["run_id"]) == {"s0", "s1", "p0"}
    s0 = t[t["run_id"] == "s0"]
    assert s0["step"].tolist() == [0, 3, 6]
    assert s0[M.COMPUTE_FLOPS].tolist() == [0.0, 30.0, 60.0]
    assert s0["pearson"].tolist() == [0.0, 0.3, 0.5]
    p0 = t[t["run_id"] == "p0"].iloc[0]
    assert p0["pearson"] == 0.4 and p0[M.CRITIC_HELDOUT_EXPLAINED_VAR] == 0.1
    assert np.isnan(p0[M.CRITIC_CALIBRATION_ECE])


def test_plot_has_the_paper_reference_and_one_mean_line_per_algorithm():
    ax = plot_calibration_trajectory(_frame())
    labels = [line.get_label() for line in ax.get_lines()]
    assert "paper, held-out (0.642)" in labels
    ref = next(line for line in ax.get_lines() if line.get_label().startswith("paper"))
    assert list(ref.get_ydata()) == [M.PAPER_CALIBRATION_PEARSON] * 2
    sppo = next(line for line in ax.get_lines() if line.get_label().startswith("sppo"))
    assert list(sppo.get_ydata()) == pytest.approx([0.1, 0.4, 0.6])  # mean over the seeds
    assert any(label.startswith("ppo (value at the first token)") for label in labels)


def test_no_trajectory_says_why():
    with pytest.raises(ValueError, match="calibration_every_eval"):
        plot_calibration_trajectory(_frame().query("algorithm == 'grpo'"))
