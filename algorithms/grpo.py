"""GRPO: Group Relative Policy Optimization (DeepSeekMath, Shao et al. 2024, arXiv 2402.03300),
as verl's ``compute_grpo_outcome_advantage`` and ``low_var_kl`` KL loss.

Sample G responses per prompt; the group is the baseline, no critic:

* advantage ``A_i = (R_i - mean_g) / (std_g + eps)`` on every response token, with the unbiased
  ``torch.std`` of the group and ``eps = 1e-6``; ``norm_adv_by_std=False`` drops the division
  (Dr. GRPO's choice);
* policy loss: per-token clip 0.2, ``seq-mean-token-mean`` (each response weighs the same, as
  in the paper), plus ``beta = 0.001`` times the k3 KL to the reference.

Groups of size 1 (a partial group reaching the loss): like verl, mean 0 and std 1, so
``A = R / (1 + eps)``; ``group_size`` itself must be >= 2.

``grpo2`` is a setting of GRPO, not another algorithm: 2-GRPO ("It Takes Two: Your GRPO Is
Secretly DPO", arXiv 2510.00977) argues that a group of two already gives GRPO's contrastive
signal (a pair's advantages are +-1/sqrt(2) or 0), so G = 2 spends an eighth of the rollouts per
prompt. It is registered under its own name only so that suites, tables and sweeps can name it
next to ``grpo``; everything but the group size is GRPO's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from algorithms.base import Algorithm, GroupConfig, register_algorithm
from algorithms.common import LossAggMode, group_mean_std, outcome_to_tokens
from algorithms.configkit import config_field

__all__ = ["GRPO", "GRPO2", "GRPO2Config", "GRPOConfig"]


@dataclass(frozen=True, kw_only=True)
class GRPOConfig(GroupConfig):
    """GRPO hyper-parameters; defaults follow docs/design.md §2 (DeepSeekMath + verl)."""

    group_size: int = config_field(8, "Samples per prompt (G); must be >= 2.", ge=2)
    norm_adv_by_std: bool = config_field(
        True, "Divide by the group's std (GRPO); False keeps only the mean baseline (Dr. GRPO)."
    )
    eps: float = config_field(1e-6, "Added to the group std before dividing.", gt=0.0)
    loss_agg_mode: LossAggMode = config_field(
        "seq-mean-token-mean", "How per-token losses become one scalar (GRPO: per-sequence mean)."
    )
    kl_loss_coef: float = config_field(
        0.001, "Weight (beta) of the KL-to-reference loss term.", ge=0.0
    )


@register_algorithm("grpo")
class GRPO(Algorithm):
    """Group-normalised outcome advantages, no critic (see the module docstring)."""

    Config = GRPOConfig
    config: GRPOConfig

    def advantages(
        self,
        rewards: Tensor,
        response_mask: Tensor,
        group_ids: Tensor | None,
        values: Tensor | None = None,
        baseline_rewards: Tensor | None = None,
        token_kl: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``(R - mean_g) / (std_g + eps)`` broadcast on valid tokens; no returns.

        Args:
            rewards: ``(B,)`` shaped outcome rewards.
            response_mask: ``(B, T)``.
            group_ids: ``(B,)`` integer prompt id per sample (required), any order.
            values, baseline_rewards, token_kl: ignored.

        Returns:
            ``(advantages (B, T), None)``.
        """
        if group_ids is None:
            raise ValueError(f"{self.name}: group_ids (B,) is required")
        with torch.no_grad():
            r = rewards.detach()
            mean, std, count = group_mean_std(r, group_ids)
            singleton = count == 1  # verl: mean 0, std 1 for a group of one
            mean = torch.where(singleton, torch.zeros_like(mean), mean)
            advantage = r - mean
            if self.config.norm_adv_by_std:
                std = torch.where(singleton, torch.ones_like(std), std)
                advantage = advantage / (std + self.config.eps)
            return outcome_to_tokens(advantage, response_mask), None


@dataclass(frozen=True, kw_only=True)
class GRPO2Config(GRPOConfig):
    """GRPO with a group of two (2-GRPO, arXiv 2510.00977); every other default is GRPO's."""

    group_size: int = config_field(
        2, "Samples per prompt (G); 2-GRPO's point is that 2 suffice (must be >= 2).", ge=2
    )


@register_algorithm("grpo2")
class GRPO2(GRPO):
    """GRPO's class under a preset: G = 2 (see the module docstring)."""

    Config = GRPO2Config
    config: GRPO2Config
