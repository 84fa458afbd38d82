"""``TrainerConfig``'s fields are the one home of the ``trainer`` node's defaults: Hydra composes
the node from them (the ConfigStore entry ``sppo_bench_trainer_defaults``) and config.yaml only
overrides, so a trainer built in code and a plain ``sppo-bench run`` cannot disagree."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from omegaconf import OmegaConf

from algorithms import ConfigError
from benchmarks.config import CONF_DIR, TRAINER_DEFAULTS, compose_config
from benchmarks.suite.plan import validate
from benchmarks.training.config import PER_ALGORITHM, TrainerConfig, trainer_defaults


def test_every_field_has_a_default_and_a_help_string():
    for f in dataclasses.fields(TrainerConfig):
        assert f.default is not dataclasses.MISSING, f.name
        assert str(f.metadata.get("help", "")).strip(), f.name
    assert list(TrainerConfig.field_help()) == [f.name for f in dataclasses.fields(TrainerConfig)]


def test_the_yaml_only_overrides():
    # config.yaml's trainer node holds no copy of a default, only what differs from the field's
    node = yaml.safe_load((CONF_DIR / "config.yaml").read_text())["trainer"]
    assert node == {"max_new_tokens": "${task.max_new_tokens}"}
    assert TRAINER_DEFAULTS in yaml.safe_load((CONF_DIR / "config.yaml").read_text())["defaults"]


def test_defaults_are_those_of_a_plain_run():
    node = OmegaConf.to_container(compose_config().trainer, resolve=True)
    assert list(node) == list(trainer_defaults())  # every field but the learning rates, in order
    assert set(trainer_defaults()) | set(PER_ALGORITHM) == set(TrainerConfig.field_help())
    built = TrainerConfig()
    assert {k: getattr(built, k) for k in node} == node  # the default task's max_new_tokens too
    assert built == TrainerConfig(**node)
    # A few fields given, the rest from the fields' defaults (what tests and the bench do).
    some = TrainerConfig(samples_per_step=16, max_new_tokens=6)
    assert (some.samples_per_step, some.max_new_tokens) == (16, 6)
    assert some.checkpoint_every == node["checkpoint_every"]


def test_the_yaml_and_the_command_line_override_the_defaults():
    cfg = compose_config(["task.horizon=12", "trainer.grad_clip=0.5"])
    assert (
        cfg.trainer.max_new_tokens
        == cfg.task.max_new_tokens
        != trainer_defaults()["max_new_tokens"]
    )
    assert cfg.trainer.grad_clip == 0.5
    assert cfg.trainer.mini_batches == trainer_defaults()["mini_batches"]


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


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"grad_clip": "abc"}, r"trainer.grad_clip='abc' is invalid: expected float, got str"),
        ({"mini_batches": 1.5}, r"trainer.mini_batches=1.5 is invalid: expected int, got float"),
        ({"eval_k": True}, r"trainer.eval_k=True is invalid: expected int, got bool"),
        ({"eval_k_every_checkpoint": 1}, r"trainer.eval_k_every_checkpoint=1 is invalid"),
        ({"critic_epochs": "2"}, r"trainer.critic_epochs='2' is invalid: expected int \| None"),
        ({"temperature": float("nan")}, r"trainer.temperature=nan is invalid: must be a finite"),
        ({"top_p": 1.5}, r"trainer.top_p=1.5 must be in \(0, 1\]\. Nucleus"),
        ({"temperature": 11}, r"trainer.temperature=11 must be in \[0, 10\]"),
        ({"eval_k_problems": 0}, r"trainer.eval_k_problems=0 must be >= 1 or null\. "),
        ({"actor_lr": 0}, r"trainer.actor_lr=0 must be > 0\. "),
        ({"critic_lr": -1.0}, r"trainer.critic_lr=-1.0 must be > 0 or null\. "),
        ({"samples_per_step": 0}, r"trainer.samples_per_step=0 must be >= 1\. "),
    ],
)
def test_a_bad_value_names_its_field_and_what_is_allowed(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        TrainerConfig(**kw)


def test_ints_are_widened_for_float_fields():
    t = TrainerConfig(grad_clip=1, temperature=0, eval_k_problems=None)
    assert type(t.grad_clip) is float and type(t.temperature) is float
    assert t.eval_k_problems is None


def test_check_algorithm_wants_whole_groups():
    t = TrainerConfig(samples_per_step=30)
    t.check_algorithm("ppo", 1)
    t.check_algorithm("grpo2", 2)
    with pytest.raises(
        ConfigError,
        match=r"trainer.samples_per_step=30 must be a multiple of grpo's samples per prompt \(8\)",
    ):
        t.check_algorithm("grpo", 8)
