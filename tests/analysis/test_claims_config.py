"""The ``claims:`` node: the shipped declarations parse (with their margins), and every bad field
fails validation before any compute, naming the field and what is allowed; claims logged before
margins existed are still read, as the superiority claims they were."""

from __future__ import annotations

import copy
import json

import pytest

from algorithms import ConfigError
from analysis.claims.spec import Family, claims_from_param, parse_claims
from benchmarks.config import compose_config
from benchmarks.suite.plan import validate

HORIZON = {
    "name": "horizon",
    "estimand": "horizon_slope",
    "a": "sppo",
    "b": "ppo",
    "direction": "a >= b",
    "margin": 0.01,
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


#: The margins each shipped suite declares (docs/statistics.md, "Margins"): the slope's is about
#: 5 accuracy points across the task's horizons, the area's 0.02 of mean accuracy.
SHIPPED_MARGINS = {"default": 0.015, "claims": 0.005, "claims_chain_sum": 0.01}


@pytest.mark.parametrize("suite", ["default", "claims", "claims_chain_sum"])
def test_shipped_suites_declare_the_two_headline_claims_in_a_family_of_four(suite):
    plan = validate(compose_config([f"suite={suite}"]))
    assert [(c.name, c.estimand, c.a, c.b, c.direction, c.margin) for c in plan.claims] == [
        ("horizon", "horizon_slope", "sppo", "ppo", "a >= b", SHIPPED_MARGINS[suite]),
        ("rollouts", "area_difference", "sppo", "grpo", "a >= b", 0.02),
    ]
    assert {c.family for c in plan.claims} == {Family("headline", 4)}
    horizon = plan.claims[0].gates
    assert (horizon.start_max, horizon.gain_min) == (0.8, 0.05)
    assert horizon.final_min == {
        "ppo": {"critic/heldout_explained_variance": 0.1},
        "sppo": {"critic/calibration_pearson": 0.3},
    }
    if suite != "default":  # a verdict replicates over starts: one per seed
        assert plan.warmstart.per_seed is True


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
        ("direction", "a >> b", "claims[0].direction='a >> b': allowed: ['a >= b', 'a <= b', "),
        ("margin", ..., "claims[0].margin: missing; direction 'a >= b' (non-inferiority or "),
        ("margin", None, "claims[0].margin: missing; direction 'a >= b'"),
        ("margin", -0.01, "claims[0].margin=-0.01: must be a number > 0 (accuracy per horizon"),
        ("margin", 0, "claims[0].margin=0: must be a number > 0"),
        ("margin", "small", "claims[0].margin='small': must be a number"),
        ("margin", float("inf"), "claims[0].margin=inf: must be a finite number"),
        ("a", "nope", "claims[0].a='nope': allowed: ["),
        ("b", "sppo", "claims[0].b='sppo': must differ from a"),
        ("groups", ["arith_h9"], "claims[0].groups: 'arith_h9' is not an eval dataset"),
        ("groups", 3, "claims[0].groups=3: allowed: ['all', 'ends']"),
        ("family", {"name": "x"}, "claims[0].family={'name': 'x'}: must be {name:"),
        ("family.size", 0, "claims[0].family.size=0 must be >= 1"),
        ("family.size", 1.5, "claims[0].family.size=1.5: must be an integer >= 1"),
        ("gates.start", 0.8, "claims[0].gates.start: unknown key; allowed: ['start_max'"),
        ("gates.gain_min", "high", "claims[0].gates.gain_min='high': must be a number"),
        ("gates.final_min.ppo", {"critic/foo": 0.1}, "final_min.ppo.critic/foo: unknown metric"),
        ("gates.final_min.nope", {"critic/calibration_pearson": 0.3}, "unknown algorithm"),
        ("name", ..., "claims[0].name: missing"),
        ("what", 1, "claims[0].what: unknown key; allowed: ['name', 'estimand'"),
        ("estimand", "compute_ratio", "claims[0].direction='a >= b': allowed: ['a needs less"),
    ],
)
def test_a_bad_field_is_named_with_its_allowed_values(path, value, message):
    node = _with(path, value)
    with pytest.raises(ValueError) as err:
        parse_claims(node, algorithms=["sppo", "ppo", "grpo"], datasets=["arith", "arith_h1"])
    assert message in str(err.value)


def test_a_margin_goes_only_with_non_inferiority_and_equivalence():
    """a > b (superiority) and the compute ratio's directions take no margin; a ~= b needs one,
    and a >= b, a <= b, a ~= b parse with theirs (sentence included)."""
    bad = [
        ({"direction": "a > b"}, "claims[0].margin=0.01: direction 'a > b' takes no margin; a "
                                 "margin goes with ['a >= b', 'a <= b', 'a ~= b']"),
        ({"estimand": "compute_ratio", "direction": "a needs less compute"},
         "claims[0].margin=0.01: direction 'a needs less compute' takes no margin "
         "(compute_ratio takes none)"),
        ({"direction": "a ~= b", "margin": None}, "claims[0].margin: missing; direction 'a ~= b'"),
    ]  # fmt: skip
    for change, message in bad:
        with pytest.raises(ValueError) as err:
            parse_claims([{**HORIZON, **change}])
        assert message in str(err.value)
    for direction, rel in (("a >= b", ">="), ("a <= b", "<="), ("a ~= b", "~=")):
        (c,) = parse_claims([{**HORIZON, "direction": direction, "margin": 0.02}])
        assert c.margin == 0.02
        assert c.sentence == (
            f"sppo {rel} ppo as the horizon grows (margin 0.02 accuracy per horizon step)"
        )
    area = {**HORIZON, "estimand": "area_difference", "b": "grpo", "gates": None}
    (c,) = parse_claims([area])
    assert c.sentence == (
        "sppo >= grpo in mean accuracy over the rollout budget (margin 0.01 mean accuracy over "
        "the budget)"
    )
    (c,) = parse_claims(
        [{k: v for k, v in HORIZON.items() if k != "margin"} | {"direction": "a > b"}]
    )
    assert c.margin is None and c.sentence == "sppo > ppo as the horizon grows"


def test_claims_logged_before_margins_are_read_as_superiority_claims():
    """A run's ``claims`` param from before margins (a >= b without one, a compute ratio) is
    read as declared, never given a margin after the run: its sentence says it is tested as
    a > b. A new declaration without the margin is refused."""
    old = [
        {k: v for k, v in HORIZON.items() if k != "margin"},
        {**{k: v for k, v in HORIZON.items() if k not in ("margin", "gates")}, "name": "rollouts",
         "estimand": "compute_ratio", "b": "grpo", "direction": "a needs less compute"},
    ]  # fmt: skip
    horizon, rollouts = claims_from_param(json.dumps(old))
    assert horizon.margin is None and rollouts.margin is None
    assert horizon.sentence == (
        "sppo >= ppo as the horizon grows (declared without a margin: tested as sppo > ppo)"
    )
    assert rollouts.sentence == "sppo reaches grpo's accuracy with fewer rollouts"
    with pytest.raises(ValueError, match=r"claims\[0\].margin: missing"):
        parse_claims(old)
    assert claims_from_param(None) is None


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
    cfg = compose_config(["~claims.0.margin"])
    with pytest.raises(ConfigError, match=r"claims\[0\].margin: missing; direction 'a >= b'"):
        validate(cfg)


def test_no_claims_is_allowed():
    assert validate(compose_config(["claims=[]"])).claims == []
    assert parse_claims(None) == []
