"""`sppo-bench power`'s simulation against answers known in closed form: with no shared item
variance the t interval's power follows the normal approximation
S ~ ((z(1 - alpha/2) + z(power)) * sigma / distance)^2, a few starts more for t's heavier tails."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from analysis.power import power_at, starts_needed, variance_components


def _normal_approx(sigma: float, distance: float, alpha: float = 0.05, power: float = 0.8) -> float:
    return ((norm.ppf(1 - alpha / 2) + norm.ppf(power)) * sigma / distance) ** 2


def _pilot(mean: float, sigma: float, n: int = 200, seed: int = 0) -> np.ndarray:
    """Per-start effects with exactly this mean and sample spread."""
    z = np.random.default_rng(seed).normal(size=n)
    return mean + sigma * (z - z.mean()) / z.std(ddof=1)


def test_variance_components_split_the_pilot_se() -> None:
    per_start = np.array([0.1, 0.2, 0.3, 0.4])
    sigma = per_start.std(ddof=1)
    mean, s, v = variance_components(per_start, se=np.sqrt(sigma**2 / 4 + 0.01))
    assert (mean, s) == (pytest.approx(0.25), pytest.approx(sigma))
    assert v == pytest.approx(0.01)
    # An se below the starts' own part leaves no item variance (floored, not negative).
    assert variance_components(per_start, se=0.0)[2] == 0.0
    # An se of the starts alone leaves no item variance, not float64's rounding of a difference.
    ten = [-0.012, -0.003, -0.01, -0.014, 0.003, -0.006, 0.029, 0.0, 0.006, 0.019]  # 3.4e-21 left
    for e in (per_start, np.array(ten)):
        se = e.std(ddof=1) / np.sqrt(e.size)
        assert variance_components(e, se=se)[2] == 0.0
    with pytest.raises(ValueError, match="at least 2 starts"):
        variance_components(np.array([0.3, np.nan]), se=0.1)


@pytest.mark.parametrize(
    ("direction", "effect", "margin"),
    [(">=", 0.0, 0.5), (">", 0.5, None)],  # level algorithms at margin 0.5; a 0.5 superiority
)
def test_starts_needed_matches_the_normal_approximation(direction, effect, margin) -> None:
    plan = starts_needed(
        _pilot(effect, 1.0),
        se=1.0 / np.sqrt(200),  # no shared item variance
        alpha=0.05,
        margin=margin,
        direction=direction,
        max_starts=45,
        suites=3000,
    )
    expected = _normal_approx(1.0, 0.5)  # 31.4
    assert plan.v_items == pytest.approx(0.0, abs=1e-12)
    assert plan.needed is not None and expected <= plan.needed <= expected + 4
    assert plan.power[plan.starts.index(plan.needed)] >= 0.8
    assert all(p < 0.8 for s, p in zip(plan.starts, plan.power, strict=True) if s < plan.needed - 2)


def test_a_stricter_holm_level_needs_more_starts() -> None:
    common = {"effect": 0.5, "sigma_start": 1.0, "v_items": 0.0, "margin": None, "direction": ">"}
    assert power_at(20, alpha=0.0125, **common) < power_at(20, alpha=0.05, **common)


def test_shared_item_variance_can_make_a_claim_unreachable() -> None:
    # The items' part alone, sqrt(0.04) = 0.2, times t's quantile exceeds the margin of 0.1:
    # no number of starts resolves a level pair.
    plan = starts_needed(
        _pilot(0.0, 0.05), se=np.sqrt(0.05**2 / 200 + 0.04), alpha=0.05, margin=0.1,
        direction=">=", max_starts=30, suites=1000,
    )  # fmt: skip
    assert plan.v_items == pytest.approx(0.04)
    assert plan.needed is None and max(plan.power) < 0.5


def test_equivalence_needs_the_interval_inside_both_margins() -> None:
    # TOST at margin 0.5 on a level pair: both ends must clear, so it needs more starts than
    # the one-sided non-inferiority question at the same margin.
    pilot, se = _pilot(0.0, 1.0), 1.0 / np.sqrt(200)
    kw = {"alpha": 0.05, "margin": 0.5, "max_starts": 60, "suites": 2000}
    tost = starts_needed(pilot, se, direction="~=", **kw)
    non_inferior = starts_needed(pilot, se, direction=">=", **kw)
    assert tost.needed is not None and tost.needed > non_inferior.needed
    with pytest.raises(ValueError, match="direction"):
        power_at(5, effect=0, sigma_start=1, v_items=0, alpha=0.05, margin=0.1, direction="<")


def test_margin_at_cap_is_what_the_cap_resolves_for_level_algorithms() -> None:
    from analysis.power import margin_at

    m = margin_at(10, sigma_start=1.0, v_items=0.0, alpha=0.05)
    # At that margin, 10 starts of level algorithms resolve non-inferiority about 80% of the time.
    p = power_at(10, effect=0.0, sigma_start=1.0, v_items=0.0, alpha=0.05, margin=m,
                 direction=">=", suites=8000)  # fmt: skip
    assert 0.75 <= p <= 0.86
    assert margin_at(10, 1.0, 0.04, 0.05) > m  # shared item variance widens it


def test_power_command_on_the_committed_pilot(capsys) -> None:
    """`sppo-bench power` on the committed claims_chain_sum shards, with the claims as the suite
    declares them now: one row per claim, read at alpha over the family's size."""
    from benchmarks.cli import main
    from testkit.paths import REPO

    pilot = REPO / "results" / "claims_chain_sum"
    assert main(["power", "--results", str(pilot), "--suite", "claims_chain_sum",
                 "--max-starts", "12"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| horizon") or
            line.startswith("| rollouts")]  # fmt: skip
    assert len(rows) == 2
    assert "| horizon_slope | a >= b | 0.01 | 0.0125 |" in rows[0]
    assert "| area_difference | a >= b | 0.02 | 0.0125 |" in rows[1]


def test_power_command_refuses_a_missing_pilot(tmp_path, capsys) -> None:
    from benchmarks.cli import main

    assert main(["power", "--results", str(tmp_path / "none")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_power_command_names_the_suites_when_suite_is_unknown(capsys) -> None:
    """An unknown --suite ends in exit 2 with the suites there are, not in Hydra's traceback."""
    from benchmarks.cli import main
    from testkit.paths import REPO

    pilot = REPO / "results" / "claims_chain_sum"
    assert main(["power", "--results", str(pilot), "--suite", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sppo-bench power: --suite: suite=nope: no such option")
    assert "'leaderboard_chain_sum_8192'" in err and "Traceback" not in err


@pytest.mark.parametrize("option", [["--cap", "0"], ["--max-starts", "-1"], ["--cap", "ten"]])
def test_power_command_refuses_fewer_than_two_starts(option, capsys) -> None:
    """--cap 0 ended in a ZeroDivisionError and --max-starts -1 printed an empty search."""
    from benchmarks.cli import main
    from testkit.paths import REPO

    with pytest.raises(SystemExit) as stop:
        main(["power", "--results", str(REPO / "results" / "claims_chain_sum"), *option])
    assert stop.value.code == 2
    assert f"argument {option[0]}: '{option[1]}': a whole number of starts >= 2" in (
        capsys.readouterr().err
    )
