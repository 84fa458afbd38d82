"""``TrainerConfig``'s defaults are the ``trainer`` node of benchmarks/conf/config.yaml: one
source, so a trainer built in code and a plain ``sppo-bench run`` cannot disagree."""

from __future__ import annotations

import dataclasses

from omegaconf import OmegaConf

from benchmarks.config import compose_config
from benchmarks.suite.plan import validate
from benchmarks.training.config import TrainerConfig, trainer_defaults

#: Per algorithm (``algorithm.<name>.actor_lr`` / ``critic_lr``), not in the ``trainer`` node.
PER_ALGORITHM = {"actor_lr", "critic_lr"}


def test_the_dataclass_holds_no_default_of_its_own_for_a_yaml_key():
    fields = {f.name: f for f in dataclasses.fields(TrainerConfig)}
    node = OmegaConf.to_container(compose_config().trainer, resolve=True)
    assert set(fields) == set(node) | PER_ALGORITHM  # no key only one side knows
    for name in node:  # a literal default here would be a second copy, free to drift
        assert fields[name].default is dataclasses.MISSING, name
        assert fields[name].default_factory is not dataclasses.MISSING, name


def test_defaults_are_those_of_a_plain_run():
    node = OmegaConf.to_container(compose_config().trainer, resolve=True)
    assert trainer_defaults() == node
    built = TrainerConfig()
    assert {k: getattr(built, k) for k in node} == node
    assert built == TrainerConfig(**node)
    # A few fields given, the rest from the YAML (what tests and the bench do).
    some = TrainerConfig(samples_per_step=16, max_new_tokens=6)
    assert (some.samples_per_step, some.max_new_tokens) == (16, 6)
    assert some.checkpoint_every == node["checkpoint_every"]


def test_a_suite_builds_the_same_trainer_config():
    cfg = compose_config(["algorithm=[grpo,sppo]"])
    plan = validate(cfg)
    for name in ("grpo", "sppo"):
        node = OmegaConf.to_container(cfg.algorithm[name], resolve=True)
        # an algorithm's own critic settings (algorithm.<name>.critic) in place of trainer's
        own = {f"critic_{k}": v for k, v in (node.get("critic") or {}).items() if v is not None}
        assert plan.trainer[name] == TrainerConfig(
            actor_lr=node["actor_lr"], critic_lr=node["critic_lr"], **own
        ), name
