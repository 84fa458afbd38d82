"""RLOO: REINFORCE Leave-One-Out (Kool et al. 2019; Ahmadian et al. 2024, arXiv 2402.14740), as
verl's ``compute_rloo_outcome_advantage``; a baseline in the SPPO paper (Table 1).

Sample G responses per prompt; each response's baseline is the mean reward of the *other*
G - 1: ``A_i = R_i - (sum_g - R_i) / (G - 1)``, i.e. ``G / (G - 1) * (R_i - mean_g)``, broadcast
on every response token, no std normalisation, no critic. Policy loss as GRPO (clip 0.2,
``seq-mean-token-mean``, k3 KL loss with beta 0.001), as the SPPO paper's setup describes the
baselines. Groups of size 1 keep ``A = R`` (verl: there is no "other" sample to subtract).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from algorithms.base import Algorithm, GroupConfig, register_algorithm
from algorithms.common import LossAggMode, group_mean_std, outcome_to_tokens
from algorithms.configkit import config_field

__all__ = ["RLOO", "RLOOConfig"]


@dataclass(frozen=True, kw_only=True)
class RLOOConfig(GroupConfig):
    """RLOO hyper-parameters (the SPPO paper's baseline setting)."""

    group_size: int = config_field(5, "Samples per prompt (G); must be >= 2.", ge=2)
    loss_agg_mode: LossAggMode = config_field(
        "seq-mean-token-mean", "How per-token losses become one scalar (as GRPO)."
    )
    kl_loss_coef: float = config_field(
        0.001, "Weight (beta) of the KL-to-reference loss term (as GRPO).", ge=0.0
    )


@register_algorithm("rloo")
class RLOO(Algorithm):
    """Leave-one-out group baseline (see the module docstring)."""

    Config = RLOOConfig
    config: RLOOConfig

    def advantages(
        self,
        rewards: Tensor,
        response_mask: Tensor,
        group_ids: Tensor | None,
        values: Tensor | None = None,
        baseline_rewards: Tensor | None = None,
        token_kl: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``R_i - mean of the other samples of its group`` on valid tokens; no returns.

        Args:
            rewards: ``(B,)`` outcome rewards.
            response_mask: ``(B, T)``.
            group_ids: ``(B,)`` integer prompt id per sample (required), any order.
            values, baseline_rewards, token_kl: ignored.

        Returns:
            ``(advantages (B, T), None)``.
        """
        if group_ids is None:
            raise ValueError("rloo: group_ids (B,) is required")
        with torch.no_grad():
            r = rewards.detach()
            mean, _, count = group_mean_std(r, group_ids)
            leave_one_out = (mean * count - r) / (count - 1).clamp(min=1)
            advantage = torch.where(count > 1, r - leave_one_out, r)
            return outcome_to_tokens(advantage, response_mask), None
