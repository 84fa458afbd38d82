"""The ``claims:`` node: the shipped declarations parse, and every bad field fails validation
before any compute, naming the field and what is allowed."""

from __future__ import annotations

import copy

import pytest

from algorithms import ConfigError
from analysis.claims import Family, parse_claims
from benchmarks.config import compose_config
from benchmarks.suite.plan import validate

HORIZON = {
    "name": "horizon",
    "estimand": "horizon_slope",
    "a": "sppo",
    "b": "ppo",
    "direction": "a >= b",
    "groups": "all",
    "family": {"name": "headline", "size": 4},
    "gates": {
        "start_max": 0.8,
        "gain_min": 0.05,
        "final_min": {
            "ppo": {"critic/heldout_explained_variance": 0.1},
            "sppo": {"critic/calibration_pearson": 0.3},
        },
    },
}


@pytest.mark.parametrize("suite", ["default", "claims", "claims_chain_sum"])
def test_shipped_suites_declare_the_two_headline_claims_in_a_family_of_four(suite):
    plan = validate(compose_config([f"suite={suite}"]))
    assert [(c.name, c.estimand, c.a, c.b) for c in plan.claims] == [
        ("horizon", "horizon_slope", "sppo", "ppo"),
        ("rollouts", "compute_ratio", "sppo", "grpo"),
    ]
    assert {c.family for c in plan.claims} == {Family("headline", 4)}
    horizon = plan.claims[0].gates
    assert (horizon.start_max, horizon.gain_min) == (0.8, 0.05)
    assert horizon.final_min == {
        "ppo": {"critic/heldout_explained_variance": 0.1},
        "sppo": {"critic/calibration_pearson": 0.3},
    }
    if suite != "default":  # a verdict replicates over starts: one per seed
        assert plan.warmstart["per_seed"] is True


def _with(path: str, value) -> list[dict]:
    """HORIZON with one field (``a.b.c``) set (``...`` deletes it)."""
    claim = copy.deepcopy(HORIZON)
    node = claim
    *parents, leaf = path.split(".")
    for p in parents:
        node = node[p]
    if value is ...:
        del node[leaf]
    else:
        node[leaf] = value
    return [claim]


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("estimand", "trend", "claims[0].estimand='trend': allowed: ['horizon_slope'"),
        ("direction", "a > b", "claims[0].direction='a > b': allowed: ['a >= b', 'a <= b']"),
        ("a", "nope", "claims[0].a='nope': allowed: ["),
        ("b", "sppo", "claims[0].b='sppo': must differ from a"),
        ("groups", ["arith_h9"], "claims[0].groups: 'arith_h9' is not an eval dataset"),
        ("groups", 3, "claims[0].groups=3: allowed: ['all', 'ends']"),
        ("family", {"name": "x"}, "claims[0].family={'name': 'x'}: must be {name:"),
        ("family.size", 0, "claims[0].family.size=0: must be an integer >= 1"),
        ("gates.start", 0.8, "claims[0].gates.start: unknown key; allowed: ['start_max'"),
        ("gates.gain_min", "high", "claims[0].gates.gain_min='high': must be a number"),
        ("gates.final_min.ppo", {"critic/foo": 0.1}, "final_min.ppo.critic/foo: unknown metric"),
        ("gates.final_min.nope", {"critic/calibration_pearson": 0.3}, "unknown algorithm"),
        ("name", ..., "claims[0].name: missing"),
        ("what", 1, "claims[0].what: unknown key; allowed: ['name', 'estimand'"),
    ],
)
def test_a_bad_field_is_named_with_its_allowed_values(path, value, message):
    node = _with(path, value)
    with pytest.raises(ValueError) as err:
        parse_claims(node, algorithms=["sppo", "ppo", "grpo"], datasets=["arith", "arith_h1"])
    assert message in str(err.value)


def test_a_family_has_one_size_that_counts_every_member():
    two = [HORIZON, {**HORIZON, "name": "other", "family": {"name": "headline", "size": 3}}]
    with pytest.raises(ValueError, match=r"claims\[1\].family.size: family 'headline' is"):
        parse_claims(two)
    small = [HORIZON, {**HORIZON, "name": "other", "family": {"name": "headline", "size": 1}}]
    with pytest.raises(ValueError, match="one family has one size"):
        parse_claims(small)
    one = [{**HORIZON, "family": {"name": "solo", "size": 1}}, {**HORIZON, "name": "x"}]
    with pytest.raises(ValueError, match=r"claims\[1\].family.size=1: family 'solo' has 2"):
        parse_claims([one[0], {**one[1], "family": {"name": "solo", "size": 1}}])
    with pytest.raises(ValueError, match=r"claims\[1\].name='horizon': already used"):
        parse_claims([HORIZON, HORIZON])


def test_the_plan_rejects_a_bad_claim_before_any_compute(tmp_path):
    cfg = compose_config(["claims.0.direction=sideways", f"cache_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"claims\[0\].direction='sideways': allowed"):
        validate(cfg)
    assert not any(tmp_path.iterdir())  # nothing was built
    cfg = compose_config(["claims.1.groups=[arith_h7]"])
    with pytest.raises(ConfigError, match="allowed: .*'arith_h4'"):
        validate(cfg)


def test_no_claims_is_allowed():
    assert validate(compose_config(["claims=[]"])).claims == []
    assert parse_claims(None) == []
