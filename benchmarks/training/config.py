"""``TrainerConfig``: the settings every algorithm of a suite shares (the ``trainer`` config node).

Its defaults have one home, the ``trainer`` node of ``benchmarks/conf/config.yaml``: that is
where a user reads them and overrides them (``sppo-bench run trainer.grad_clip=0.5``), and where
a suite, a sweep or a verl translation gets every value from. The dataclass holds no default of
its own that could drift from it: a field left out of ``TrainerConfig(...)`` (tests, the bench
build one from a few fields) takes the value a plain ``sppo-bench run`` composes, read once per
process. The learning rates are per algorithm (``algorithm/<name>.yaml``), so they are not in
that node; the suite passes them. ``__post_init__`` rejects bad values naming the
``trainer.<field>``.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any

from algorithms import ConfigError
from benchmarks.training.critic_model import check_critic_model

log = logging.getLogger(__name__)

__all__ = ["CRITIC_HEAD_INITS", "TrainerConfig", "trainer_defaults"]

#: ``trainer.critic_head_init``. zero: verl's zero head (a prompt critic starts at p = 0.5, a
#: token critic at V = 0); start_success: the bias set, before the first critic forward, to the
#: first batch's mean success s (the warm start's), as logit(s) for a prompt critic and s for a
#: token critic, so the critic starts at the constant predictor's optimum instead of learning it.
CRITIC_HEAD_INITS = ("zero", "start_success")


@functools.cache
def trainer_defaults() -> dict[str, Any]:
    """The ``trainer`` node of the config a plain ``sppo-bench run`` composes, resolved
    (``max_new_tokens`` follows the default task's)."""
    from omegaconf import OmegaConf

    from benchmarks.config import compose_config

    return OmegaConf.to_container(compose_config().trainer, resolve=True)  # type: ignore[return-value]


def _yaml(key: str) -> Any:
    """A field whose default is ``trainer.<key>`` of the default config."""
    return field(default_factory=lambda: trainer_defaults()[key])


@dataclass(frozen=True)
class TrainerConfig:
    """Settings shared by every algorithm of a suite (the ``trainer`` config node; the comments
    on each default are in config.yaml)."""

    samples_per_step: int = _yaml("samples_per_step")
    #: ``algorithm.<name>.actor_lr``, which every algorithm's YAML sets; this default serves
    #: code that builds a trainer without an algorithm node.
    actor_lr: float = 1e-4
    #: ``algorithm.<name>.critic_lr``; None: the algorithm's own (paper) default.
    critic_lr: float | None = None
    weight_decay: float = _yaml("weight_decay")
    grad_clip: float = _yaml("grad_clip")
    mini_batches: int = _yaml("mini_batches")
    temperature: float = _yaml("temperature")
    top_p: float = _yaml("top_p")
    max_new_tokens: int = _yaml("max_new_tokens")
    eval_batch_size: int = _yaml("eval_batch_size")
    length_buckets: int = _yaml("length_buckets")
    eval_samples_logged: int = _yaml("eval_samples_logged")
    max_consecutive_skips: int = _yaml("max_consecutive_skips")
    checkpoint_every: int = _yaml("checkpoint_every")
    eval_k: int = _yaml("eval_k")
    eval_k_every_checkpoint: bool = _yaml("eval_k_every_checkpoint")
    eval_k_problems: int | None = _yaml("eval_k_problems")
    eval_temperature: float = _yaml("eval_temperature")
    calibration_prompts: int = _yaml("calibration_prompts")
    calibration_samples: int = _yaml("calibration_samples")
    calibration_every_eval: bool = _yaml("calibration_every_eval")
    memory_profile_step: int = _yaml("memory_profile_step")
    critic_warmup_steps: int | None = _yaml("critic_warmup_steps")
    critic_mini_batches: int | None = _yaml("critic_mini_batches")
    critic_epochs: int | None = _yaml("critic_epochs")
    critic_head_init: str = _yaml("critic_head_init")
    #: None (the policy's copy), an HF id or directory, or a mapping of tiny-Llama fields
    #: (benchmarks/training/critic_model.py).
    critic_model: Any = _yaml("critic_model")

    def __post_init__(self) -> None:
        for name in (
            "samples_per_step",
            "mini_batches",
            "max_new_tokens",
            "eval_batch_size",
            "length_buckets",
            "max_consecutive_skips",
            "calibration_samples",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"trainer.{name}={getattr(self, name)} must be >= 1")
        if self.checkpoint_every < 0:
            raise ConfigError(f"trainer.checkpoint_every={self.checkpoint_every} must be >= 0")
        if self.samples_per_step % self.mini_batches:
            raise ConfigError(
                f"trainer.mini_batches={self.mini_batches} must divide "
                f"trainer.samples_per_step={self.samples_per_step}"
            )
        for name in ("eval_k", "eval_samples_logged", "calibration_prompts"):
            if getattr(self, name) < 0:
                raise ConfigError(f"trainer.{name}={getattr(self, name)} must be >= 0")
        if not self.grad_clip > 0:
            raise ConfigError(f"trainer.grad_clip={self.grad_clip} must be > 0")
        if not self.weight_decay >= 0:
            raise ConfigError(f"trainer.weight_decay={self.weight_decay} must be >= 0")
        if self.eval_k_problems is not None and self.eval_k_problems < 1:
            raise ConfigError(
                f"trainer.eval_k_problems={self.eval_k_problems} must be >= 1 or null"
            )
        if not 0.0 <= self.eval_temperature <= 10.0:
            raise ConfigError(
                f"trainer.eval_temperature={self.eval_temperature} must be in [0, 10]"
            )
        if not self.actor_lr > 0:
            raise ConfigError(f"trainer.actor_lr={self.actor_lr} must be > 0")
        if self.critic_lr is not None and not self.critic_lr > 0:
            raise ConfigError(f"trainer.critic_lr={self.critic_lr} must be > 0 or null")
        if self.memory_profile_step < -1:
            raise ConfigError(
                f"trainer.memory_profile_step={self.memory_profile_step} must be a step >= 0, "
                "or -1 (no profiled step)"
            )
        if self.critic_warmup_steps is not None and self.critic_warmup_steps < 0:
            raise ConfigError(
                f"trainer.critic_warmup_steps={self.critic_warmup_steps} must be >= 0 or null "
                "(null: the algorithm's own, e.g. algorithm.ppo.params.critic_warmup_steps)"
            )
        for name in ("critic_mini_batches", "critic_epochs"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ConfigError(
                    f"trainer.{name}={v} must be >= 1 or null (null: the critic steps with the "
                    "actor, on its mini-batches and epochs)"
                )
        if (
            self.critic_mini_batches is not None
            and self.samples_per_step % self.critic_mini_batches
        ):
            raise ConfigError(
                f"trainer.critic_mini_batches={self.critic_mini_batches} must divide "
                f"trainer.samples_per_step={self.samples_per_step}"
            )
        if self.critic_head_init not in CRITIC_HEAD_INITS:
            raise ConfigError(
                f"trainer.critic_head_init={self.critic_head_init!r}: allowed "
                f"{list(CRITIC_HEAD_INITS)}"
            )
        check_critic_model(self.critic_model)
        if not 0.0 <= self.temperature <= 10.0:
            raise ConfigError(f"trainer.temperature={self.temperature} must be in [0, 10]")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"trainer.top_p={self.top_p} must be in (0, 1]")
