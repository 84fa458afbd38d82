"""The sweep spec's structural pass (parse_spec), alone: no config composed, no storage, no trial.

Every refusal names the field (its path in the spec), the bad value and what is allowed, in one
line, and is a :class:`ConfigError` of the config kit that checks the spec's scalars.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

import sweeps.spec
from algorithms.configkit import ConfigError, config_value
from sweeps.spec import ComponentSpec, ParamSpec, SpecError, SweepSpec
from sweeps.spec_fields import load_spec, parse_spec

LR = {"type": "float", "low": 3e-5, "high": 3e-4, "log": True}
TWO = {"algorithms": ["sppo", "ppo"], "trials": 4}
SPACE = "search_space.trainer.x"


def _spec(**changes) -> dict:
    spec = {
        "algorithms": ["sppo"],
        "trials": 2,
        "budget": ["budget.limit=64"],
        "search_space": {"algorithm.{alg}.actor_lr": dict(LR)},
        "objective": {"metric": "eval/arith/accuracy"},
        "sampler": "random",
        "pruner": "none",
    }
    spec.update(copy.deepcopy(changes))
    return spec


def _param(**node) -> dict:
    return _spec(search_space={"trainer.x": node})


# (spec, the field and its value as the message shows them, what the message says is allowed)
REFUSED = [
    (_spec(bogus=1), "bogus='bogus'", "'name', 'algorithms'"),
    (_spec(name="a b"), "name='a b'", "letters, digits"),
    (_spec(algorithms=[]), "algorithms=[]", "name at least one algorithm"),
    (_spec(algorithms="sppo"), "algorithms='sppo'", "a list of strings"),
    (_spec(algorithms=["sppo", "sppo"]), "algorithms=['sppo', 'sppo']", "duplicates"),
    (_spec(algorithms=["sp.po"]), "algorithms='sp.po'", "not an algorithm name"),
    (_spec(equal_effort="yes"), "equal_effort='yes'", "true or false"),
    (_spec(base_overrides=["algorithm=[ppo]"]), "base_overrides='algorithm=[ppo]'", "algorithms"),
    (_spec(budget=["trainer.x=1"]), "budget='trainer.x=1'", "budget.limit=..."),
    (_spec(search_space={}), "search_space={}", "non-empty mapping"),
    (_spec(search_space={"1abc": LR}), "search_space='1abc'", "dotted config path"),
    (_spec(search_space={"seeds": LR}), "search_space='seeds'", "any path but ['seeds'"),
    (_param(type="double"), f"{SPACE}.type='double'", "'float', 'int', 'categorical'"),
    (_param(**LR, lo=1), f"{SPACE}.lo='lo'", "'type', 'low', 'high', 'log', 'step'"),
    (_param(**LR, when_algorithm=[]), f"{SPACE}.when_algorithm=[]", "non-empty list"),
    (_param(**LR, when_algorithm=["ppo"]), f"{SPACE}.when_algorithm='ppo'", "one of 'sppo'"),
    (
        _spec(search_space={"algorithm.ppo.actor_lr": LR}),
        "search_space.algorithm.ppo.actor_lr='ppo'",
        "one of 'sppo'",
    ),
    (_param(**LR | {"log": "true"}), f"{SPACE}.log='true'", "true or false"),
    (_param(type="categorical", choices=[1], step=1), f"{SPACE}.step='step'", "'choices'"),
    (_param(**LR, choices=[1]), f"{SPACE}.choices='choices'", "'low', 'high'"),
    (_param(type="categorical", choices=[]), f"{SPACE}.choices=[]", "non-empty list"),
    (_param(type="categorical", choices=[[1]]), f"{SPACE}.choices=[1]", "null, bool, int"),
    (_param(type="categorical", choices=[1, 1]), f"{SPACE}.choices=[1, 1]", "duplicates"),
    (_param(type="float", high=1), f"{SPACE}.low=None", "a number"),
    (_param(type="float", low=0.1, high=float("inf")), f"{SPACE}.high=inf", "finite number"),
    (_param(type="float", low=True, high=1), f"{SPACE}.low=True", "a number"),
    (_param(type="int", low=1.5, high=3), f"{SPACE}.low=1.5", "needs an integer"),
    (_param(type="float", low=2, high=1), f"{SPACE}.low=2", "<= 1"),
    (_param(type="int", low=0, high=4, log=True), f"{SPACE}.low=0", "> 0 (a log-scale range)"),
    (_param(type="float", low=0, high=1, step=0), f"{SPACE}.step=0", "> 0"),
    (_param(type="int", low=0, high=4, step=1.5), f"{SPACE}.step=1.5", "needs an integer"),
    (_param(**LR, step=1e-5), f"{SPACE}.step=1e-05", "does not combine step with log"),
    (
        _spec(**TWO, search_space={"algorithm.sppo.actor_lr": LR}),
        "search_space=['algorithm.sppo.actor_lr']",
        "no parameter applies to ppo",
    ),
    (_spec(objective="auc"), "objective='auc'", "mapping {metric"),
    (_spec(objective={"metric": "auc", "goal": 1}), "objective.goal='goal'", "'metric'"),
    (_spec(objective={"metric": "loss"}), "objective.metric='loss'", "eval/<task>/accuracy"),
    (_spec(objective={"metric": "auc", "direction": "up"}), "direction='up'", "'maximize'"),
    (_spec(trials=0), "trials=0", ">= 1"),
    (_spec(trials=2.0), "trials=2.0", "an integer"),
    (_spec(**TWO | {"trials": 3}), "trials=3", "a multiple of 2"),
    (_spec(sampler=["tpe"]), "sampler=['tpe']", "['tpe', 'cmaes', 'gp', 'random']"),
    (_spec(sampler={"type": "bogus", "x": 1}), "sampler.type='bogus'", "'tpe', 'cmaes'"),
    (_spec(sampler={"type": "tpe", "seed": 3}), "sampler.seed=3", "top-level `seed`"),
    (_spec(sampler={"type": "tpe", "gamma": [3]}), "sampler.gamma=[3]", "must be scalars"),
    (_spec(pruner={"type": "none", "x": 1}), "pruner.x=1", "none takes no options"),
    (_spec(pruner={"type": "median", "bogus": 1}), "pruner.bogus='bogus'", "'n_warmup_steps'"),
    (_spec(seed=-1), "seed=-1", ">= 0"),
    (_spec(seed=False), "seed=False", "an integer"),
    (_spec(starts=2.0), "starts=2.0", "an integer"),
    (_spec(admissible=["sppo"]), "admissible=['sppo']", "algorithm -> {metric: minimum}"),
    (_spec(admissible={"sppo": {}}), "admissible.sppo={}", "metric -> minimum"),
    (_spec(admissible={"sppo": {"a/b": None}}), "admissible.sppo.a/b=None", "or 'critic_gate'"),
    # a NaN minimum would make every trial inadmissible: refused, not run
    (_spec(admissible={"sppo": {"a/b": float("nan")}}), "admissible.sppo.a/b=nan", "finite"),
    (_spec(enqueue="x"), "enqueue='x'", "list of {parameter: value}"),
    (_spec(enqueue=[{}]), "enqueue[0]={}", "non-empty mapping"),
    (
        _spec(enqueue=[{"algorithm": "ppo", "algorithm.sppo.actor_lr": 1e-4}]),
        "enqueue[0].algorithm='ppo'",
        "one of 'sppo'",
    ),
    (
        _spec(enqueue=[{"trainer.x": 1}]),
        "enqueue[0].trainer.x='trainer.x'",
        "one of 'algorithm.sppo.actor_lr'",
    ),
    (_spec(enqueue=[{"algorithm.sppo.actor_lr": 1.0}]), "actor_lr=1.0", "range or choices"),
    (_spec(enqueue=[{"algorithm.sppo.actor_lr": 1e-4}] * 3), "enqueue=3", "share of trials (2)"),
]


@pytest.mark.parametrize(("data", "field", "allowed"), REFUSED)
def test_a_refused_spec_names_the_field_the_value_and_what_is_allowed(data, field, allowed):
    with pytest.raises(SpecError) as e:
        parse_spec(data)
    message = str(e.value)
    assert field in message and allowed in message, message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("data", "key", "value", "tp"),
    [
        (_spec(trials="2"), "trials", "2", int),
        (_spec(seed="0"), "seed", "0", int),
        (_spec(starts="2"), "starts", "2", int),
        (_param(type="float", low="0.1", high=1), f"{SPACE}.low", "0.1", float),
        (_param(type="float", low=0, high=1, step="0.5"), f"{SPACE}.step", "0.5", float),
    ],
)
def test_text_is_not_a_number_in_a_spec(data, key, value, tp):
    """The kit reads text as a number (environment variables, overrides); YAML types its
    scalars, so a quoted number in a spec is refused, as it was before the kit checked it."""
    assert config_value(key, value, tp) == tp(value)
    with pytest.raises(SpecError, match=rf"^{key}='{value}' is invalid: expected {tp.__name__}"):
        parse_spec(data)


def test_a_spec_error_is_a_config_error_of_the_kit():
    assert issubclass(SpecError, ConfigError) and issubclass(SpecError, ValueError)
    with pytest.raises(ConfigError, match="starts=0 must be >= 1"):
        parse_spec(_spec(starts=0))


def test_ranges_keep_their_types():
    """An int range stays ints (YAML's 2.0 counts as 2), a float range becomes floats."""
    space = {
        "trainer.a": {"type": "int", "low": 1.0, "high": 8, "step": 2.0},
        "trainer.b": {"type": "float", "low": 1, "high": 2, "step": 1},
        "trainer.c": {"type": "categorical", "choices": [1, "a", None], "when_algorithm": ["ppo"]},
    }
    spec = parse_spec(_spec(**TWO, search_space=space, sampler={"type": "tpe", "gamma": None}))
    a, b, c = spec.search_space
    assert (a.low, a.high, a.step) == (1, 8, 2) and {type(a.low), type(a.step)} == {int}
    assert (b.low, b.high, b.step) == (1.0, 2.0, 1.0) and {type(b.low), type(b.step)} == {float}
    assert c == ParamSpec(
        "trainer.c", "categorical", choices=(1, "a", None), when_algorithm=("ppo",)
    )
    assert spec.sampler == ComponentSpec("tpe", (("gamma", None),))
    assert spec.with_trials(8).trials == 8
    with pytest.raises(SpecError, match=r"^--trials=6: .*a multiple of 4"):
        SweepSpec(**{**spec.__dict__, "algorithms": ("a", "b", "c", "d")}).with_trials(6)


@pytest.mark.parametrize("path", sorted(Path(sweeps.spec.__file__).parent.glob("*.yaml")))
def test_the_shipped_specs_parse(path):
    spec = load_spec(path.stem)
    assert spec == load_spec(path) and spec.name == path.stem and spec.search_space
