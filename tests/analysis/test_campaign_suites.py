"""The campaign's suites as declared before their first shard: every registered algorithm on both
leaderboards, starts that no tuning run used, the claim (a) companion on the leaderboard's starts,
and one family of three claims across the three suites."""

from __future__ import annotations

import pytest

from algorithms.base import list_algorithms
from analysis.claims.spec import Family
from benchmarks.config import compose_config
from benchmarks.suite.plan import validate
from sweeps.spec_fields import load_spec

LEADERBOARDS = {"leaderboard_arith": "claims", "leaderboard_chain_sum": "claims_chain_sum"}
CAMPAIGN = [*LEADERBOARDS, "leaderboard_chain_sum_8192"]


def _tuning_seeds(spec_name: str) -> set[int]:
    """The start seeds a shipped tuning sweep's trials run on: its base suite's seed onwards."""
    spec = load_spec(spec_name)
    cfg = compose_config(list(spec.base_overrides))
    return set(range(cfg.seed, cfg.seed + spec.starts))


@pytest.mark.parametrize("suite", list(LEADERBOARDS))
def test_a_leaderboard_runs_every_registered_algorithm_on_its_claims_task(suite):
    cfg, twin = compose_config([f"suite={suite}"]), compose_config([f"suite={LEADERBOARDS[suite]}"])
    assert sorted(validate(cfg).algorithms) == sorted(list_algorithms())
    # the task, budget and warm start the sweeps tuned on
    assert (cfg.task, cfg.budget, cfg.warmstart) == (twin.task, twin.budget, twin.warmstart)


def test_the_campaign_starts_are_ten_and_never_a_tuning_start():
    tuning = set()
    for name in [
        "claims_actor",
        "claims_critic",
        "claims_chain_sum_actor",
        "claims_chain_sum_critic",
        "leaderboard_arith_actor",
        "leaderboard_chain_sum_actor",
        "leaderboard_chain_sum_8192_actor",
    ]:
        tuning |= _tuning_seeds(name)
    starts = {s: validate(compose_config([f"suite={s}"])).seeds for s in CAMPAIGN}
    assert all(seeds == list(range(10, 20)) for seeds in starts.values()), starts
    assert not tuning & set(starts["leaderboard_arith"]), tuning


def test_claim_a_companion_is_sppo_and_ppo_at_four_times_the_leaderboard_budget():
    lead = compose_config(["suite=leaderboard_chain_sum"])
    comp = compose_config(["suite=leaderboard_chain_sum_8192"])
    assert sorted(validate(comp).algorithms) == ["ppo", "sppo"]
    assert comp.budget.limit == 4 * lead.budget.limit == 8192
    assert (comp.task, comp.warmstart) == (lead.task, lead.warmstart)  # the same starts


def test_the_campaign_declares_one_family_of_three_claims_with_margins():
    claims = [c for s in CAMPAIGN for c in validate(compose_config([f"suite={s}"])).claims]
    assert [(c.name, c.estimand, c.a, c.b, c.direction) for c in claims] == [
        ("rollouts", "area_difference", "sppo", "grpo", "a >= b"),
        ("rollouts", "area_difference", "sppo", "grpo", "a >= b"),
        ("horizon", "horizon_slope", "sppo", "ppo", "a >= b"),
    ]
    assert {c.family for c in claims} == {Family("campaign", 3)}
    assert [c.margin for c in claims] == [0.035, 0.08, 0.01]


@pytest.mark.parametrize("suite", CAMPAIGN)
def test_each_campaign_suite_ships_the_point_its_tuning_export_selects(suite):
    """Every algorithm the campaign's sweep tuned for a suite runs that suite at the best
    complete point of results/tuning (the rates are read from the committed export, not
    retyped): the leaderboards' 11 tuned algorithms, and the companion's sppo and ppo, tuned
    again at its 8,192 samples."""
    from pathlib import Path

    from analysis.tuning import read_tuning, tuning_table

    export = Path(__file__).resolve().parents[2] / "results" / "tuning" / f"{suite}_actor.json"
    data = read_tuning(export)
    cfg = compose_config([f"suite={suite}"])
    rows = tuning_table(data)[2:]
    algorithms = data["spec"]["algorithms"]
    assert len(rows) == len(algorithms) == (11 if suite in LEADERBOARDS else 2)
    per = data["spec"]["trials"] // len(algorithms)
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        alg, selected = cells[0], cells[-1]
        assert cells[1] == f"{per} / {per}", row  # equal effort: every grid point complete
        assert selected == f"actor_lr={cfg.algorithm[alg].actor_lr:.4g}", (alg, selected)
