"""``TrainerConfig``: the settings every algorithm of a suite shares (the ``trainer`` config node).

Each field is declared once, here, with its default, its help string and its bounds
(:func:`algorithms.configkit.config_field`, as an algorithm's hyper-parameters are). Hydra
composes the ``trainer`` node from these defaults (:func:`trainer_defaults`, registered by
:func:`benchmarks.config.compose_config`), and ``benchmarks/conf/config.yaml`` and the suites
only override them (``max_new_tokens`` follows the task's). The learning rates are per algorithm
(``algorithm/<name>.yaml``), so they are not in that node; the suite passes them.
``__post_init__`` checks every value's type and bounds, then the rules that tie fields together;
each error names the ``trainer.<field>`` and what it allows.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from algorithms.configkit import ConfigError, check_fields, config_field
from benchmarks.training.critic_model import check_critic_model

log = logging.getLogger(__name__)

__all__ = ["CRITIC_HEAD_INITS", "PER_ALGORITHM", "TrainerConfig", "trainer_defaults"]

#: ``trainer.critic_head_init``. zero: a zero head (a prompt critic starts at p = 0.5, a token
#: critic at V = 0); start_success: the bias set, before the first critic forward, to the
#: first batch's mean success s (the warm start's), as logit(s) for a prompt critic and s for a
#: token critic, so the critic starts at the constant predictor's optimum instead of learning it;
#: normal: HF's token-classification head (weights ~ N(0, initializer_range), bias 0, drawn from
#: the run's seed), so every hidden direction gets a gradient from the first step on; verl's critic
#: is built this way (its head is missing from the policy's checkpoint, so HF initialises it).
CRITIC_HEAD_INITS = ("zero", "start_success", "normal")

#: Fields set per algorithm (``algorithm.<name>.actor_lr`` / ``critic_lr``), not in ``trainer``.
PER_ALGORITHM = ("actor_lr", "critic_lr")

_NULL_CRITIC = "null: the critic steps with the actor, on its mini-batches and epochs"


@dataclass(frozen=True)
class TrainerConfig:
    """Settings shared by every algorithm of a suite (the ``trainer`` config node)."""

    samples_per_step: int = config_field(
        64, "Sampled responses per optimizer step, for every algorithm.", ge=1
    )
    actor_lr: float = config_field(
        1e-4,
        "The policy's learning rate: algorithm.<name>.actor_lr, which every algorithm's YAML "
        "sets; this default serves code that builds a trainer without an algorithm node.",
        gt=0,
    )
    critic_lr: float | None = config_field(
        None,
        "The critic's learning rate: algorithm.<name>.critic_lr; null: the algorithm's own "
        "(paper) default.",
        gt=0,
    )
    weight_decay: float = config_field(
        0.0, "AdamW weight decay of the policy and the critic.", ge=0
    )
    grad_clip: float = config_field(
        1.0, "Gradient-norm clip of each policy and critic optimizer step.", gt=0
    )
    mini_batches: int = config_field(
        1, "Optimizer steps per PPO epoch; divides samples_per_step.", ge=1
    )
    temperature: float = config_field(1.0, "Sampling temperature of the rollouts.", ge=0, le=10)
    top_p: float = config_field(1.0, "Nucleus-sampling mass of the rollouts.", gt=0, le=1)
    max_new_tokens: int = config_field(
        30,
        "Longest response in tokens; config.yaml sets it to the task's task.max_new_tokens "
        "(this default is the default task's).",
        ge=1,
    )
    eval_batch_size: int = config_field(512, "Prompts per batch of the evaluations.", ge=1)
    length_buckets: int = config_field(
        4,
        "Teacher-forced passes group rows by response length into this many (less padding).",
        ge=1,
    )
    eval_samples_logged: int = config_field(64, "Rows of the eval-sample table artifact.", ge=0)
    max_consecutive_skips: int = config_field(
        5, "Non-finite steps in a row before the run fails.", ge=1
    )
    checkpoint_every: int = config_field(
        10, "Steps between checkpoints, in <output_dir>/checkpoints; 0: none.", ge=0
    )
    eval_k: int = config_field(
        0, "k > 0: also avg@k and pass@k (k samples per problem) at the final eval.", ge=0
    )
    eval_k_every_checkpoint: bool = config_field(
        False,
        "avg@k and pass@k at every eval point (budget.eval_fractions), not only the final one.",
    )
    eval_k_problems: int | None = config_field(
        200, "Held-out problems of the avg@k / pass@k eval; null: all.", ge=1
    )
    eval_temperature: float = config_field(
        0.6, "Sampling temperature of the avg@k / pass@k eval.", ge=0, le=10
    )
    calibration_prompts: int = config_field(
        100,
        "Held-out prompts critics are scored on (predicted vs empirical success over "
        "calibration_samples each).",
        ge=0,
    )
    calibration_samples: int = config_field(
        8, "Samples per calibration prompt for its empirical success.", ge=1
    )
    calibration_every_eval: bool = config_field(
        True,
        "Critics' held-out calibration metrics (critic/calibration_*, ...) at every eval point; "
        "false: at the final eval only.",
    )
    memory_profile_step: int = config_field(
        1,
        "Step whose phases are profiled for memory/peak_tensor_bytes (-1: none), counted after "
        "any critic warm-up; not 0, whose update also creates the optimizers' states.",
        ge=-1,
    )
    # The critic settings serve SPPO's prompt critic and PPO's token critic alike; algorithms
    # without a critic ignore them. An algorithm's own values (algorithm.<name>.critic, its tuned
    # defaults) take their place for that algorithm.
    critic_warmup_steps: int | None = config_field(
        None,
        "Steps that train only the critic on the starting policy's rollouts (counted in every "
        "budget axis); null: the algorithm's own, e.g. algorithm.ppo.params.critic_warmup_steps.",
        ge=0,
    )
    critic_mini_batches: int | None = config_field(
        None, f"Critic optimizer steps per critic epoch; {_NULL_CRITIC}.", ge=1
    )
    critic_epochs: int | None = config_field(
        None, f"Critic passes over each batch; {_NULL_CRITIC} (the algorithm's ppo_epochs).", ge=1
    )
    critic_head_init: str = config_field(
        "zero",
        f"The critic head's start, one of {list(CRITIC_HEAD_INITS)}: zero, start_success (its "
        "bias at the first batch's mean success) or normal (HF's token-classification head: "
        "N(0, initializer_range) weights, zero bias; verl's critic starts this way).",
    )
    prompt_pool: int | None = config_field(
        None,
        "RL prompts come from the first N of the task's training problems only (the same N for "
        "every seed and algorithm), so prompts recur, as in SPO's setting; null: all of them. "
        "The warm start is unchanged.",
        ge=1,
    )
    critic_model: Any = config_field(
        None,
        "The critic's model: null (a copy of the policy's start), a mapping of tiny-Llama fields "
        "such as {hidden_size: 64} (warm-started and cached like the policy), or an HF id or "
        "directory (benchmarks/training/critic_model.py).",
    )

    def __post_init__(self) -> None:
        check_fields(self, "trainer")  # critic_model (Any): check_critic_model below
        for name in ("mini_batches", "critic_mini_batches"):
            v = getattr(self, name)
            if v is not None and self.samples_per_step % v:
                raise ConfigError(
                    f"trainer.{name}={v} must divide trainer.samples_per_step="
                    f"{self.samples_per_step}"
                )
        if self.critic_head_init not in CRITIC_HEAD_INITS:
            raise ConfigError(
                f"trainer.critic_head_init={self.critic_head_init!r}: allowed "
                f"{list(CRITIC_HEAD_INITS)}"
            )
        check_critic_model(self.critic_model)

    def check_algorithm(self, name: str, samples_per_prompt: int) -> None:
        """Raise ``ConfigError`` unless ``samples_per_step`` holds whole groups of algorithm
        ``name``'s ``samples_per_prompt``."""
        if self.samples_per_step % samples_per_prompt:
            raise ConfigError(
                f"trainer.samples_per_step={self.samples_per_step} must be a multiple of "
                f"{name}'s samples per prompt ({samples_per_prompt})"
            )

    @classmethod
    def field_help(cls) -> dict[str, str]:
        """``{field: help string}`` in declaration order, for CLI help and docs."""
        return {f.name: f.metadata["help"] for f in dataclasses.fields(cls)}


def trainer_defaults() -> dict[str, Any]:
    """The ``trainer`` config node's defaults: every field but the per-algorithm learning rates,
    in declaration order (what Hydra composes before config.yaml and the suite override it)."""
    return {
        f.name: f.default for f in dataclasses.fields(TrainerConfig) if f.name not in PER_ALGORITHM
    }
