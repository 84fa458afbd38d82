"""``TrainerConfig``: the settings every algorithm of a suite shares (the ``trainer`` config node).

Its defaults are those of ``benchmarks/conf/config.yaml``, the one place a user reads them; the
dataclass's own defaults serve code that builds a trainer directly (tests, the bench), and
``__post_init__`` rejects bad values naming the ``trainer.<field>``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from algorithms import ConfigError

log = logging.getLogger(__name__)

__all__ = ["TrainerConfig"]


@dataclass(frozen=True)
class TrainerConfig:
    """Settings shared by every algorithm of a suite (the ``trainer`` config node)."""

    samples_per_step: int = 64  # sampled responses per optimizer step, for every algorithm
    actor_lr: float = 1e-4
    critic_lr: float | None = None  # None: the algorithm's own (paper) default
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    mini_batches: int = 1  # optimizer steps per PPO epoch
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 32
    eval_batch_size: int = 512
    # Teacher-forced passes group rows by response length (at most this many groups of >= 32
    # rows), each trimmed to its longest response: less padding, the same log-probs.
    length_buckets: int = 4
    eval_samples_logged: int = 64  # rows of the eval-sample table artifact
    max_consecutive_skips: int = 5  # non-finite steps tolerated in a row
    checkpoint_every: int = (
        0  # steps between checkpoints (0: none; see benchmarks/training/checkpoint.py)
    )
    eval_k: int = 0  # > 0: also avg@k / pass@k with k samples per problem (final eval)
    eval_k_every_checkpoint: bool = False  # ... and at every budget checkpoint
    eval_k_problems: int | None = 200  # problems in the sampled evaluation (None: all)
    eval_temperature: float = 0.6
    # Prompt critics: held-out prompts in the final calibration table.
    calibration_prompts: int = 200
    calibration_samples: int = 8  # samples per prompt for the empirical success rate

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
        if not 0.0 <= self.temperature <= 10.0:
            raise ConfigError(f"trainer.temperature={self.temperature} must be in [0, 10]")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"trainer.top_p={self.top_p} must be in (0, 1]")
