"""DAPO: Decoupled Clip and Dynamic sAmpling Policy Optimization (Yu et al. 2025, arXiv
2503.14476), as verl's DAPO recipe (``recipe/dapo``, the ``dapo`` reward manager).

GRPO's group-normalised advantage (inherited from :class:`~algorithms.grpo.GRPO`) plus:

* **clip-higher**: ``clip_ratio_low = 0.2``, ``clip_ratio_high = 0.28``;
* **token-level loss**: ``token-mean`` over the batch, no KL term;
* **dynamic sampling**: :meth:`DAPO.filter_groups` drops every sample of a group whose rewards
  are all equal (zero advantage, zero gradient); the harness regenerates up to
  ``max_gen_batches`` batches to refill. Pass the *unshaped* scores (verl filters on ``acc`` by
  default): with the overlong penalty on, shaped rewards of equally wrong answers rarely tie;
* **overlong reward shaping**: ``R + min(-(len - (L_max - L_buf)) / L_buf * factor, 0)``,
  i.e. 0 up to ``L_max - L_buf`` tokens, falling linearly to ``-factor`` at ``L_max``; like
  verl there is no extra clamp beyond ``L_max``.

Groups of size 1 are *kept* by the filter, as verl does (``std > 0 or len == 1``): their
advantage is not zero (GRPO's size-1 rule gives ``A = R``), and dropping them would silently
shrink batches whose last group was cut.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from algorithms.base import register_algorithm
from algorithms.common import LossAggMode, group_index
from algorithms.configkit import ConfigError, config_field
from algorithms.grpo import GRPO, GRPOConfig

__all__ = ["DAPO", "DAPOConfig"]


@dataclass(frozen=True, kw_only=True)
class DAPOConfig(GRPOConfig):
    """DAPO hyper-parameters; defaults are the paper's (Qwen2.5-32B, AIME) recipe."""

    group_size: int = config_field(16, "Samples per prompt (G); must be >= 2.", ge=2)
    clip_ratio_high: float = config_field(
        0.28, "Clip-higher: ratio clipped at 1 + clip_ratio_high (paper: 0.28).", gt=0.0
    )
    loss_agg_mode: LossAggMode = config_field(
        "token-mean", "How per-token losses become one scalar (DAPO: token-level mean)."
    )
    kl_loss_coef: float = config_field(
        0.0, "Weight of the KL-to-reference loss (DAPO: none).", ge=0.0
    )
    dynamic_sampling: bool = config_field(
        True, "Drop groups whose rewards are all equal and refill the batch."
    )
    max_gen_batches: int = config_field(
        10, "Most generation rounds per step when refilling after dynamic sampling.", ge=1
    )
    overlong_penalty: bool = config_field(True, "Apply the soft overlong length penalty.")
    max_response_length: int = config_field(
        20480, "L_max: the generation limit in tokens, where the penalty reaches -factor.", ge=1
    )
    overlong_buffer: int = config_field(
        4096,
        "L_buf: the ramp before L_max over which the overlong penalty grows from 0 to -factor.",
        ge=1,
    )
    overlong_penalty_factor: float = config_field(
        1.0, "Penalty at L_max (the ramp's depth).", ge=0.0
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.overlong_buffer >= self.max_response_length:
            raise ConfigError(
                f"{type(self).__name__}.overlong_buffer={self.overlong_buffer} is invalid: must "
                f"be < max_response_length={self.max_response_length}"
            )


@register_algorithm("dapo")
class DAPO(GRPO):
    """GRPO advantages with clip-higher, dynamic sampling and overlong shaping."""

    Config = DAPOConfig
    config: DAPOConfig

    @property
    def max_gen_batches(self) -> int:
        return self.config.max_gen_batches if self.config.dynamic_sampling else 1

    def shape_rewards(self, rewards: Tensor, response_lengths: Tensor) -> Tensor:
        """Add the soft overlong penalty (identity when ``overlong_penalty`` is off).

        Args:
            rewards: ``(B,)`` outcome rewards.
            response_lengths: ``(B,)`` long, generated tokens per response.

        Returns:
            ``(B,)`` ``R + min(-(len - (L_max - L_buf)) / L_buf * factor, 0)``.
        """
        cfg = self.config
        if not cfg.overlong_penalty:
            return rewards
        if response_lengths.shape != rewards.shape:
            raise ValueError(
                f"dapo: response_lengths {tuple(response_lengths.shape)} must match rewards "
                f"{tuple(rewards.shape)}"
            )
        exceed = response_lengths.to(rewards.dtype) - (
            cfg.max_response_length - cfg.overlong_buffer
        )
        penalty = (-exceed / cfg.overlong_buffer * cfg.overlong_penalty_factor).clamp(max=0.0)
        return rewards + penalty

    def filter_groups(self, rewards: Tensor, group_ids: Tensor) -> Tensor:
        """Keep-mask dropping groups of two or more samples whose rewards are all equal.

        Args:
            rewards: ``(B,)`` rewards (pass the unshaped scores; see the module docstring).
            group_ids: ``(B,)`` integer prompt id per sample.

        Returns:
            ``(B,)`` bool, all True when ``dynamic_sampling`` is off.
        """
        keep = torch.ones_like(rewards, dtype=torch.bool)
        if not self.config.dynamic_sampling:
            return keep
        r = rewards.detach()
        index, k = group_index(group_ids)
        index = index.to(r.device)
        big = torch.full((k,), float("inf"), dtype=r.dtype, device=r.device)
        hi = (-big).scatter_reduce(0, index, r, "amax")  # (K,)
        lo = big.scatter_reduce(0, index, r, "amin")  # (K,)
        count = torch.zeros(k, dtype=torch.long, device=r.device).index_add(
            0, index, torch.ones_like(index)
        )
        return ((hi > lo) | (count == 1))[index]
