"""The leaderboard on eval points with known answers: areas, means over starts, ranks, the
paired probability of improvement, costs, and the controls' labels."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from scipy import stats

from analysis.leaderboard import (
    CONTROLS,
    format_leaderboard,
    improvement_interval,
    leaderboard_table,
    per_start_scores,
    plot_performance_profile,
    rank_sets,
    run_scores,
    studentized_interval,
    t_interval,
)
from analysis.metrics import (
    COMPUTE_FLOPS,
    COMPUTE_WALL_S,
    MEMORY_PEAK_BYTES,
    flops_phase,
)

FRACTIONS = (0.0, 0.25, 0.5, 1.0)


def _points(finals: dict[str, list[float]], seeds: int = 1) -> tuple[pd.DataFrame, dict[str, str]]:
    """Eval points: each run rises linearly from 0 at fraction 0 to its final at fraction 1;
    ``finals[algorithm][s]`` is every seed's final at start ``s``."""
    rows, starts = [], {}
    for algo, values in finals.items():
        for s, final in enumerate(values):
            for k in range(seeds):
                run = f"{algo}-s{s}-{k}"
                starts[run] = f"s{s}"
                for i, f in enumerate(FRACTIONS):
                    rows.append(
                        {
                            "run_id": run,
                            "algorithm": algo,
                            "dataset": "arith",
                            "step": i,
                            "budget_fraction": f,
                            "accuracy": final * f,
                            COMPUTE_FLOPS: 100.0 * f,
                            flops_phase("critic"): (40.0 if algo == "ppo" else 0.0) * f,
                            COMPUTE_WALL_S: 10.0 * f,
                            MEMORY_PEAK_BYTES: 2.0**20 * (1 + f),
                        }
                    )
    return pd.DataFrame(rows), starts


def test_run_scores_area_is_the_mean_over_the_budget() -> None:
    points, _ = _points({"grpo": [0.8]})
    runs = run_scores(points, "arith")
    # A straight line from 0 to 0.8 over the budget averages 0.4.
    assert runs["area"].iloc[0] == pytest.approx(0.4)
    assert runs["final"].iloc[0] == pytest.approx(0.8)
    assert runs["peak_mib"].iloc[0] == pytest.approx(2.0)
    assert runs["flops"].iloc[0] == pytest.approx(100.0)


def test_means_over_starts_ranks_and_paired_improvement() -> None:
    finals = {
        "sppo": [0.9, 0.8, 0.7, 0.6],  # above grpo at every start
        "grpo": [0.5, 0.4, 0.3, 0.2],
        "ppo": [0.5, 0.1, 0.1, 0.1],  # a tie with grpo at s0, below it elsewhere
    }
    points, starts = _points(finals, seeds=2)
    table = leaderboard_table(points, starts, "arith", reps=300, seed=1).set_index("algorithm")
    assert list(table.index) == ["sppo", "grpo", "ppo"]
    assert table.loc["sppo", "final"] == pytest.approx(0.75)
    assert table.loc["grpo", "area"] == pytest.approx(np.mean(finals["grpo"]) / 2)
    assert (table.loc[:, "starts"] == 4).all() and (table.loc[:, "runs"] == 8).all()
    # sppo beats both others by the same amount at every start: its paired differences have no
    # spread, so its rank set is {1}; P = 1 with Clopper-Pearson's lower bound (0.025)^(1/4).
    assert table.loc["sppo", ["rank", "rank_lo", "rank_hi"]].tolist() == [1.0, 1.0, 1.0]
    assert table.loc["sppo", "p_improve"] == 1.0 and table.loc["sppo", "p_improve_hi"] == 1.0
    assert table.loc["sppo", "p_improve_lo"] == pytest.approx(0.025**0.25)
    # ppo ties grpo at one start of four (counted half) and loses at the others.
    assert table.loc["ppo", "p_improve"] == pytest.approx(0.5 / 4)
    assert np.isnan(table.loc["grpo", "p_improve"])  # the reference is not compared with itself
    assert table.loc["ppo", "final_lo"] <= table.loc["ppo", "final"] <= table.loc["ppo", "final_hi"]
    assert table.loc["ppo", "critic_flops"] == pytest.approx(40.0)
    assert table.loc["sppo", "critic_flops"] == 0.0


def test_controls_are_labelled_and_formatted() -> None:
    points, starts = _points({"ppo_inert_critic": [0.3, 0.4], "grpo": [0.5, 0.6]})
    table = leaderboard_table(points, starts, "arith", reps=50)
    text = format_leaderboard(table).set_index("algorithm")
    assert text.loc["ppo_inert_critic", "note"] == CONTROLS["ppo_inert_critic"]
    assert text.loc["grpo", "note"] == ""
    assert text.loc["grpo", "final"].startswith("0.550 [")
    assert text.loc["grpo", "P(> ref)"] == "–"


def test_rows_that_repeat_another_at_every_start_say_so() -> None:
    # gmpo equals gspo at both starts; rloo equals gspo at one start only, so it is not a repeat.
    finals = {"gspo": [0.3, 0.5], "gmpo": [0.3, 0.5], "rloo": [0.3, 0.6], "spo": [0.2, 0.4]}
    points, starts = _points(finals)
    table = leaderboard_table(points, starts, "arith", reps=50).set_index("algorithm")
    assert table.loc["gmpo", "note"] == "same final and area as gspo at every start"
    # bootstrap-t from 8 starts: the two rows resample the same starts, so their intervals agree
    eight = np.array([[0.2, 0.3, 0.5, 0.4, 0.6, 0.1, 0.35, 0.45]] * 2 + [[0.3] * 7 + [0.4]])
    mean, lo, hi = studentized_interval(eight, reps=400, rng=np.random.default_rng(3))
    assert (lo[0], hi[0]) == (lo[1], hi[1]) and lo[0] < mean[0] < hi[0]
    assert table.loc["gspo", "note"] == "same final and area as gmpo at every start"
    assert table.loc["rloo", "note"] == ""
    assert table.loc["spo", "note"] == CONTROLS["spo"]


def test_a_run_without_a_start_is_refused() -> None:
    points, starts = _points({"grpo": [0.5, 0.6]})
    starts.pop(next(iter(starts)))
    with pytest.raises(ValueError, match="no start known"):
        per_start_scores(run_scores(points, "arith"), starts)


def test_performance_profile_steps_down_at_each_start() -> None:
    points, starts = _points({"grpo": [0.2, 0.6], "sppo": [0.4, 0.8]})
    per = per_start_scores(run_scores(points, "arith"), starts)
    ax = plot_performance_profile(per, ax=Figure().subplots())
    lines = {line.get_label(): line for line in ax.get_lines()}
    x, y = lines["grpo"].get_data()
    # Both starts at or above tau up to 0.2, one up to 0.6, none after.
    assert y[np.searchsorted(x, 0.1)] == 1.0
    assert y[np.searchsorted(x, 0.5)] == 0.5
    assert y[np.searchsorted(x, 0.7)] == 0.0


def test_rank_sets_decide_only_the_pairs_their_intervals_separate() -> None:
    rng = np.random.default_rng(0)
    noise = 0.01 * rng.standard_normal((4, 10))
    # rows 0 and 1 tied, far above row 2, far above row 3
    values = np.array([0.8, 0.8, 0.5, 0.2])[:, None] + noise
    point, lo, hi = rank_sets(values)
    assert lo.tolist() == [1.0, 1.0, 3.0, 4.0]
    assert hi.tolist() == [2.0, 2.0, 3.0, 4.0]
    assert sorted(point[:2].tolist()) == [1.0, 2.0]
    # identical rows: nothing separates them, every rank is possible
    _, lo, hi = rank_sets(np.tile(values[0], (3, 1)))
    assert lo.tolist() == [1.0] * 3 and hi.tolist() == [3.0] * 3
    # a row with one shared start decides nothing
    one = np.array([[0.9, np.nan, np.nan], [0.1, 0.2, 0.3]])
    _, lo, hi = rank_sets(one)
    assert lo.tolist() == [1.0, 1.0] and hi.tolist() == [2.0, 2.0]


def test_improvement_interval_is_clopper_pearson_with_ties_half() -> None:
    ref = np.array([0.5, 0.5, 0.5, 0.5, 0.5])
    values = np.vstack([ref, [0.6, 0.6, 0.4, 0.5, np.nan], [0.6] * 5])
    p, lo, hi = improvement_interval(values, reference=0)
    assert np.isnan(p[0]) and np.isnan(lo[0]) and np.isnan(hi[0])
    # row 1: 2 wins, 1 tie, 1 loss over the 4 shared starts: 2.5 / 4
    assert p[1] == pytest.approx(2.5 / 4)
    assert lo[1] == pytest.approx(stats.beta.ppf(0.025, 2.5, 2.5))
    assert hi[1] == pytest.approx(stats.beta.ppf(0.975, 3.5, 1.5))
    # row 2 wins everywhere: exact bounds (0.025)^(1/5) and 1
    assert (p[2], hi[2]) == (1.0, 1.0) and lo[2] == pytest.approx(0.025 ** (1 / 5))


def test_studentized_interval_holds_the_mean_and_degenerates_without_spread() -> None:
    rng = np.random.default_rng(1)
    values = np.vstack([rng.normal(0.4, 0.1, 10), np.full(10, 0.7), [0.5] + [np.nan] * 9])
    mean, lo, hi = studentized_interval(values, reps=2000, rng=rng)
    assert mean[0] == pytest.approx(values[0].mean())
    assert lo[0] < mean[0] < hi[0]
    # its width is of the order of Student's: the same standard error, quantiles of t
    t_mean, t_lo, t_hi = t_interval(values)
    assert 0.5 < (hi[0] - lo[0]) / (t_hi[0] - t_lo[0]) < 2.0
    assert (lo[1], hi[1]) == (0.7, 0.7)
    assert mean[2] == 0.5 and np.isnan(lo[2]) and np.isnan(hi[2]) and np.isnan(t_lo[2])


def test_below_eight_starts_the_mean_gets_students_t() -> None:
    """Over 2 starts every resample with spread has the mean's own mean, so a bootstrap-t would
    have width 0; Student's t is used below 8 starts, and the bootstrap-t from 8 on."""
    two = np.array([[0.95, 0.98], [0.40, 0.60]])
    mean, lo, hi = studentized_interval(two, reps=500, rng=np.random.default_rng(0))
    t_mean, t_lo, t_hi = t_interval(two)
    assert np.allclose(lo, np.clip(t_lo, 0, 1)) and np.allclose(hi, np.clip(t_hi, 0, 1))
    assert hi[0] == 1.0  # cut to the range of an accuracy
    eight = np.random.default_rng(2).normal(0.5, 0.1, (1, 8))
    _, lo8, hi8 = studentized_interval(eight, reps=500, rng=np.random.default_rng(0))
    _, t_lo8, t_hi8 = t_interval(eight)
    assert (lo8[0], hi8[0]) != (t_lo8[0], t_hi8[0]) and lo8[0] < eight.mean() < hi8[0]
