"""Hand-computed cases for the analysis formulas: bootstrap, IQM, probability of improvement,
saturating fit, compute-to-target, table writers. No MLflow store (see test_analysis.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import trim_mean

from analysis import (
    bootstrap_ci,
    compute_to_target,
    describe_compute_to_target,
    fit_saturating,
    format_number,
    improvement_estimates,
    interval_estimates,
    iqm,
    probability_of_improvement,
    probability_of_improvement_ci,
    saturating_curve,
    stratified_bootstrap,
    to_latex,
    to_markdown,
)
from analysis.metrics import COMPUTE_ROLLOUT_TOKENS

# --- bootstrap --------------------------------------------------------------------------------


def test_bootstrap_ci_contains_true_mean_and_shrinks_with_more_seeds() -> None:
    rng = np.random.default_rng(123)
    true_mean = 0.5
    widths = {}
    for n in (5, 50):
        scores = rng.normal(true_mean, 0.1, size=(n, 1))
        est, lo, hi = bootstrap_ci(scores, "mean", reps=2000, seed=0)
        assert lo <= true_mean <= hi
        assert lo <= est <= hi
        assert est == pytest.approx(scores.mean())
        widths[n] = float(hi - lo)
    assert widths[50] < widths[5] / 2  # ~ 1/sqrt(n): sqrt(10) ~ 3.2x narrower


def test_bootstrap_ci_coverage_on_simulated_seeds() -> None:
    rng = np.random.default_rng(7)
    hits = 0
    trials = 200
    for t in range(trials):
        scores = rng.normal(0.3, 0.05, size=(10, 2))  # 10 seeds x 2 benchmarks
        _, lo, hi = bootstrap_ci(scores, "mean", reps=500, seed=t)
        hits += bool(lo <= 0.3 <= hi)
    # Percentile intervals with 10 runs under-cover slightly; 95% nominal.
    assert 0.85 <= hits / trials <= 0.99


def test_named_statistics_match_callables_replicate_by_replicate() -> None:
    scores = np.random.default_rng(0).random((7, 3))
    for name, func in (
        ("mean", np.mean),
        ("median", np.median),
        ("iqm", lambda x: trim_mean(x, 0.25, axis=None)),
    ):
        fast = stratified_bootstrap(scores, name, reps=50, seed=3)
        slow = stratified_bootstrap(scores, func, reps=50, seed=3)
        np.testing.assert_allclose(fast, slow)


def test_bootstrap_is_stratified_by_task() -> None:
    # Task 0 holds 0s, task 1 holds 1s: resampling runs within each task keeps the mean at 0.5.
    # Pooled resampling of cells would not.
    scores = np.column_stack([np.zeros(6), np.ones(6)])
    boot = stratified_bootstrap(scores, "mean", reps=200, seed=0)
    np.testing.assert_allclose(boot, 0.5)


def test_bootstrap_points_axis_gives_one_interval_per_point() -> None:
    scores = np.random.default_rng(1).normal(size=(8, 1, 4)) + np.arange(4)
    est, lo, hi = bootstrap_ci(scores, reps=300, seed=0)
    assert est.shape == lo.shape == hi.shape == (4,)
    assert np.all(lo <= est) and np.all(est <= hi)
    np.testing.assert_allclose(est, scores.mean(axis=(0, 1)))


def test_bootstrap_is_seeded() -> None:
    scores = np.random.default_rng(2).random((5, 2))
    a = bootstrap_ci(scores, reps=100, seed=11)
    b = bootstrap_ci(scores, reps=100, seed=11)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# --- IQM, probability of improvement ----------------------------------------------------------


def test_iqm_hand_computed() -> None:
    assert iqm(np.arange(1.0, 9.0)) == pytest.approx(4.5)  # mean of 3, 4, 5, 6
    scores = np.random.default_rng(3).random((6, 2))
    assert iqm(scores) == pytest.approx(trim_mean(scores, 0.25, axis=None))
    # One diverged seed barely moves the IQM, unlike the mean.
    runs = np.array([0.50, 0.52, 0.48, 0.51, 0.49, 0.50, 0.47, 0.0])
    assert abs(iqm(runs) - 0.5) < 0.01
    assert abs(runs.mean() - 0.5) > 0.05


def test_probability_of_improvement() -> None:
    x = np.array([0.6, 0.7, 0.8])
    y = np.array([0.1, 0.2, 0.3])
    assert probability_of_improvement(x, y) == 1.0
    assert probability_of_improvement(y, x) == 0.0
    assert probability_of_improvement(x, x) == 0.5
    # Pairs (3,2) win, (3,4) lose, (5,2) win, (5,4) win: 3/4.
    assert probability_of_improvement(np.array([3.0, 5.0]), np.array([2.0, 4.0])) == 0.75
    # Task-averaged: X wins task 0 always, loses task 1 always.
    two = np.array([[1.0, 0.0], [1.0, 0.0]])
    other = np.array([[0.0, 1.0], [0.0, 1.0]])
    assert probability_of_improvement(two, other) == 0.5
    p, lo, hi = probability_of_improvement_ci(x, y, reps=200)
    assert (p, lo, hi) == (1.0, 1.0, 1.0)
    p, lo, hi = probability_of_improvement_ci(x, x, reps=200)
    assert p == 0.5 and lo < 0.5 < hi


# --- hierarchical resampling (starts, then runs within a start) -------------------------------


def test_hierarchical_bootstrap_weighs_drawn_starts_equally() -> None:
    """Runs score their start's index; starts hold 1, 2 and 5 runs. Each replicate mean is the
    mean of three drawn starts' indices (each drawn start gives as many runs as the largest
    start), so it is a multiple of 1/3, whatever the run counts; weighting by runs would not be."""
    labels = ["s0"] + ["s1"] * 2 + ["s2"] * 5
    scores = np.array([0.0] + [1.0] * 2 + [2.0] * 5)
    boot = stratified_bootstrap(scores, "mean", reps=500, seed=0, starts=labels)
    np.testing.assert_allclose(boot * 3, np.round(boot * 3), atol=1e-12)  # float64 sums of 24
    assert set(np.round(boot * 3).astype(int)) == set(range(7))  # every combination turns up


def test_hierarchical_interval_holds_the_spread_over_starts() -> None:
    """Three starts with offsets -1, 0, +1 and five near-identical runs each: run-level
    resampling treats 15 runs as independent and gives a narrow interval; resampling starts
    gives about the spread of three start means."""
    rng = np.random.default_rng(1)
    offsets = np.repeat([-1.0, 0.0, 1.0], 5)
    scores = offsets + 0.01 * rng.standard_normal(15)
    labels = np.repeat(["a", "b", "c"], 5)
    _, lo_runs, hi_runs = bootstrap_ci(scores, reps=2000, seed=2)
    _, lo, hi = bootstrap_ci(scores, reps=2000, seed=2, starts=labels)
    assert hi - lo > 2 * (hi_runs - lo_runs)
    assert lo < -0.5 and hi > 0.5  # a mean of three draws from {-1, 0, 1}
    with pytest.raises(ValueError, match="one start per run \\(15\\)"):
        bootstrap_ci(scores, starts=labels[:3])


def test_hierarchical_probability_of_improvement_pairs_starts() -> None:
    """x beats y by 0.1 within every start while starts differ by 1: drawing starts once for
    both keeps each pair within a start, so every replicate of P(X > Y) sees x ahead in the
    drawn starts; P itself is the unpaired statistic, unchanged."""
    offsets = np.repeat([0.0, 1.0, 2.0], 2)
    x, y = offsets + 0.1, offsets
    labels = np.repeat(["a", "b", "c"], 2)
    p, lo, hi = probability_of_improvement_ci(x, y, reps=500, starts_x=labels, starts_y=labels)
    assert p == probability_of_improvement(x, y)
    p_u, lo_u, hi_u = probability_of_improvement_ci(x, y, reps=500)
    assert p_u == p and (hi - lo) <= (hi_u - lo_u)
    with pytest.raises(ValueError, match="same starts"):
        probability_of_improvement_ci(x, y, starts_x=labels, starts_y=np.repeat(["a", "b", "d"], 2))
    with pytest.raises(ValueError, match="both starts_x and starts_y"):
        probability_of_improvement_ci(x, y, starts_x=labels)
    table = improvement_estimates(
        {"sppo": x, "grpo": y}, reps=500, starts={"sppo": labels, "grpo": labels}
    )
    assert table.loc[0, ["probability", "lo", "hi"]].tolist() == [p, lo, hi]  # same seed
    est = interval_estimates({"sppo": x}, "iqm", reps=200, starts={"sppo": labels})
    assert est.loc[0, "lo"] <= est.loc[0, "estimate"] <= est.loc[0, "hi"]


# --- saturating fit ---------------------------------------------------------------------------

TRUE = {"r0": 0.15, "a": 0.62, "b": 1.4, "c_mid": 3.0e15}


def test_saturating_curve_limits() -> None:
    assert saturating_curve(0.0, **TRUE) == pytest.approx(TRUE["r0"])
    assert saturating_curve(TRUE["c_mid"], **TRUE) == pytest.approx((TRUE["r0"] + TRUE["a"]) / 2)
    assert saturating_curve(1e40, **TRUE) == pytest.approx(TRUE["a"])


@pytest.mark.parametrize("with_start_point", [True, False])
def test_fit_recovers_known_parameters_from_noiseless_data(with_start_point: bool) -> None:
    c = np.geomspace(1e14, 1e17, 12)
    if with_start_point:
        c = np.concatenate([[0.0], c])  # R0 fixed from the zero-compute eval
    y = saturating_curve(c, **TRUE)
    fit = fit_saturating(c, y)
    assert fit.r0_fitted is not with_start_point
    assert fit.a == pytest.approx(TRUE["a"], rel=0.01)
    assert fit.b == pytest.approx(TRUE["b"], rel=0.01)
    assert fit.c_mid == pytest.approx(TRUE["c_mid"], rel=0.01)
    assert fit.r0 == pytest.approx(TRUE["r0"], rel=0.01)
    assert fit.rmse < 1e-6
    np.testing.assert_allclose(fit(c), y, atol=1e-6)


def test_fit_handles_a_collapsing_curve() -> None:
    c = np.concatenate([[0.0], np.linspace(100, 2000, 10)])
    y = saturating_curve(c, r0=0.4, a=0.1, b=2.0, c_mid=800.0)  # accuracy falls (PPO collapse)
    fit = fit_saturating(c, y)
    assert fit.a == pytest.approx(0.1, rel=0.01)
    assert fit.c_mid == pytest.approx(800.0, rel=0.01)


def test_fit_needs_enough_points() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        fit_saturating(np.array([0.0, 1.0, 2.0]), np.array([0.1, 0.2, 0.3]))


# --- compute to target ------------------------------------------------------------------------


def _points(curves: dict[str, tuple[list[float], list[float]]]) -> pd.DataFrame:
    rows = []
    for algo, (xs, ys) in curves.items():
        for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
            rows.append(
                {
                    "run_id": f"{algo}-0",
                    "algorithm": algo,
                    "seed": 0,
                    "dataset": "math500",
                    "step": 10 * i,
                    "eval_index": i,
                    "budget_fraction": i / (len(xs) - 1),
                    "accuracy": y,
                    COMPUTE_ROLLOUT_TOKENS: x,
                }
            )
    return pd.DataFrame(rows)


def test_compute_to_target_interpolates_linearly() -> None:
    points = _points(
        {
            "sppo": ([0, 100, 200, 300], [0.2, 0.4, 0.6, 0.7]),
            "grpo": ([0, 200, 400, 600], [0.2, 0.3, 0.45, 0.5]),
            "ppo": ([0, 100, 200, 300], [0.2, 0.3, 0.35, 0.4]),
        }
    )
    table = compute_to_target(points).set_index("algorithm")
    # Default target: best baseline final = grpo's 0.5.
    assert table.loc["sppo", "target"] == 0.5
    assert table.loc["sppo", "target_source"] == "grpo"
    # sppo crosses 0.5 between (100, 0.4) and (200, 0.6): 100 + 0.1 / 0.2 * 100 = 150.
    assert table.loc["sppo", "compute"] == pytest.approx(150.0)
    assert table.loc["grpo", "compute"] == pytest.approx(600.0)
    assert table.loc["grpo", "ratio_to_reference"] == pytest.approx(4.0)
    assert not table.loc["ppo", "reached"]
    assert np.isnan(table.loc["ppo", "ratio_to_reference"])
    # An explicit target; already met at the first point -> its compute.
    given = compute_to_target(points, target=0.35).set_index("algorithm")
    assert given.loc["sppo", "compute"] == pytest.approx(75.0)  # 0 -> 0.2, 100 -> 0.4
    assert given.loc["ppo", "compute"] == pytest.approx(200.0)
    assert compute_to_target(points, target=0.1).set_index("algorithm").loc["grpo", "compute"] == 0
    text = describe_compute_to_target(table.reset_index())
    assert any("4.00x fewer rollout tokens than grpo" in s for s in text)
    assert any("ppo does not reach" in s for s in text)


def test_compute_to_target_averages_seeds_first() -> None:
    points = pd.concat(
        [
            _points({"sppo": ([0, 100, 200], [0.0, 0.2, 0.4])}).assign(run_id="a"),
            _points({"sppo": ([0, 100, 200], [0.0, 0.4, 0.8])}).assign(run_id="b", seed=1),
            _points({"grpo": ([0, 100, 200], [0.0, 0.3, 0.45])}),
        ]
    )
    table = compute_to_target(points).set_index("algorithm")
    # Mean sppo curve: 0, 0.3, 0.6; target 0.45 -> 100 + 0.15 / 0.3 * 100 = 150.
    assert table.loc["sppo", "compute"] == pytest.approx(150.0)


# --- writers ----------------------------------------------------------------------------------


def test_format_number() -> None:
    assert format_number(1.234e18) == "1.23e18"
    assert format_number(2000.0) == "2,000"
    assert format_number(12) == "12"
    assert format_number(0.4567891) == "0.4568"
    assert format_number(float("nan")) == "–"
    assert format_number("48.1 ± 1.2") == "48.1 ± 1.2"


def test_markdown_and_latex_writers() -> None:
    df = pd.DataFrame({"algorithm": ["sppo", "grpo"], "peak_mib": [1024.0, 2048.0]})
    md = to_markdown(df)
    assert md.splitlines() == [
        "| algorithm | peak_mib |",
        "| :--- | ---: |",
        "| sppo | 1,024 |",
        "| grpo | 2,048 |",
    ]
    tex = to_latex(df, caption="Peak 50% memory", label="tab:mem")
    assert r"\begin{tabular}{lr}" in tex
    assert r"algorithm & peak\_mib \\" in tex
    assert r"sppo & 1,024 \\" in tex
    assert r"\caption{Peak 50\% memory}" in tex and r"\label{tab:mem}" in tex
    assert r"$\pm$" in to_latex(pd.DataFrame({"x": ["1.0 ± 0.1"]}))
    indexed = to_markdown(df.set_index("algorithm"), index=True)
    assert indexed.splitlines()[0] == "| algorithm | peak_mib |"


def test_describe_compute_to_target_without_the_reference() -> None:
    points = _points(
        {"grpo": ([0, 100, 200], [0.2, 0.3, 0.5]), "ppo": ([0, 100, 200], [0.2, 0.3, 0.4])}
    )
    assert describe_compute_to_target(compute_to_target(points)) == [
        "No sppo runs: no compute-to-target ratios."
    ]
    unreached = _points(
        {
            "sppo": ([0, 100, 200], [0.2, 0.25, 0.3]),
            "grpo": ([0, 100, 200], [0.2, 0.3, 0.5]),
            "ppo": ([0, 100, 200], [0.2, 0.3, 0.4]),
        }
    )
    text = describe_compute_to_target(compute_to_target(unreached))
    assert text == ["sppo does not reach 0.5 accuracy on math500 (grpo's final)."]


def test_describe_compute_to_target_with_a_zero_lower_bound() -> None:
    """A seed where the reference meets the target at zero compute makes the paired interval's
    lower end 0: the sentence says the "more" side is unbounded instead of dividing by it."""
    row = {
        "dataset": "arith",
        "x": "compute/rollout_tokens",
        "target": 0.4,
        "target_source": "grpo",
        "reached": True,
        "compute": 100.0,
        "ratio_to_reference": 0.5,
        "ratio_paired": 0.5,
        "ratio_lo": 0.0,
        "ratio_hi": 0.8,
        "n_seeds": 5,
        "n_unreached": 0,
    }
    table = pd.DataFrame([{**row, "algorithm": "sppo"}, {**row, "algorithm": "grpo"}])
    (line,) = describe_compute_to_target(table)
    assert line.startswith("sppo needs 2.00x more rollout tokens than grpo")
    assert line.endswith(
        "paired interval over 5 seeds, per-seed bootstrap, coverage about 90% in simulation, "
        "not 95%: 1.25x to unbounded)."
    )
