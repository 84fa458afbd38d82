"""REINFORCE++ and REINFORCE++-baseline (Hu et al. 2025, arXiv 2501.03262), as verl's
``compute_reinforce_plus_plus_outcome_advantage`` and
``compute_reinforce_plus_plus_baseline_outcome_advantage``.

A per-prompt baseline (GRPO's group mean and std) overfits easy prompts and is biased for small
groups; REINFORCE++ normalises advantages over the *whole batch* instead, no critic:

* ``reinforce_pp`` (one sample per prompt): token rewards are the outcome ``R`` on the last
  valid token minus ``kl_coef * KL_t`` on every valid token (k1 against the reference, in the
  reward); the return ``G_t`` sums them from token t to the end (``gamma = 1``); advantages are
  the returns whitened over every valid token of the batch (verl's ``masked_whiten``);
* ``reinforce_pp_baseline`` (G = 8 samples per prompt): ``R' = R - kl_coef * sum_t KL_t``, then
  ``R' - mean`` of its group (a group of one keeps ``R'``, as verl), broadcast on the response's
  tokens and whitened over every valid token of the batch;
* policy loss: PPO's per-token clip 0.2, ``token-mean``, no KL loss term.

Defaults and simplifications: ``kl_coef = 0.001`` with the k1 estimator in the reward, verl's
default and the setting of verl's examples for both estimators. The paper's baseline variant
moves the KL into the loss with the k2 estimator, which the suite's KL estimators (k1, k3) do not
include; here both variants keep it in the reward. G = 8 for the baseline variant is verl's
example's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from algorithms.base import (
    Algorithm,
    AlgorithmConfig,
    GroupConfig,
    config_field,
    register_algorithm,
)
from algorithms.common import (
    KLPenalty,
    group_mean_std,
    masked_whiten,
    outcome_at_last_token,
    outcome_to_tokens,
)

__all__ = [
    "ReinforcePP",
    "ReinforcePPBaseline",
    "ReinforcePPBaselineConfig",
    "ReinforcePPConfig",
    "reward_to_go",
]


@dataclass(frozen=True, kw_only=True)
class ReinforcePPConfig(AlgorithmConfig):
    """REINFORCE++ hyper-parameters (see the module docstring for where each default comes from)."""

    n: int = config_field(1, "Responses per prompt (REINFORCE++: 1).", ge=1)
    gamma: float = config_field(1.0, "Discount of the reward-to-go.", ge=0.0, le=1.0)
    kl_in_reward: bool = config_field(
        True, "Subtract kl_coef * token_kl from the token rewards (needs a reference)."
    )
    kl_coef: float = config_field(0.001, "Weight of the KL penalty in the reward.", ge=0.0)
    kl_penalty: KLPenalty = config_field(
        "k1", "KL estimator for token_kl (and any KL loss); REINFORCE++ uses k1 in the reward."
    )


@dataclass(frozen=True, kw_only=True)
class ReinforcePPBaselineConfig(GroupConfig):
    """REINFORCE++-baseline hyper-parameters (see the module docstring)."""

    group_size: int = config_field(
        8, "Samples per prompt (G); the group mean is the baseline (must be >= 2).", ge=2
    )
    kl_in_reward: bool = config_field(
        True, "Subtract kl_coef * sum of token_kl from each response's reward."
    )
    kl_coef: float = config_field(0.001, "Weight of the KL penalty in the reward.", ge=0.0)
    kl_penalty: KLPenalty = config_field(
        "k1", "KL estimator for token_kl (and any KL loss); k1 in the reward here."
    )


def reward_to_go(token_rewards: Tensor, response_mask: Tensor, gamma: float) -> Tensor:
    """``G_t = r_t + gamma * G_next`` over each row's valid tokens (padding skipped, 0 there).

    Args:
        token_rewards: ``(B, T)`` per-token rewards (read on valid tokens only).
        response_mask: ``(B, T)``.
        gamma: discount in [0, 1].

    Returns:
        ``(B, T)`` returns, detached, 0 on masked positions.
    """
    with torch.no_grad():
        valid = response_mask != 0
        zero = torch.zeros((), dtype=token_rewards.dtype, device=token_rewards.device)
        r = torch.where(valid, token_rewards.detach(), zero)
        running = torch.zeros_like(r[:, 0])
        out = torch.zeros_like(r)
        for t in reversed(range(r.shape[1])):
            running = torch.where(valid[:, t], r[:, t] + gamma * running, running)
            out[:, t] = running
        return torch.where(valid, out, zero)


def _checked_kl(name: str, token_kl: Tensor | None, response_mask: Tensor) -> Tensor:
    if token_kl is None or token_kl.shape != response_mask.shape:
        got = None if token_kl is None else tuple(token_kl.shape)
        raise ValueError(
            f"{name}: token_kl {tuple(response_mask.shape)} is required when kl_in_reward=True, "
            f"got {got}"
        )
    zero = torch.zeros((), dtype=token_kl.dtype, device=token_kl.device)
    return torch.where(response_mask != 0, token_kl.detach(), zero)


@register_algorithm("reinforce_pp")
class ReinforcePP(Algorithm):
    """Reward-to-go with the KL in the reward, whitened over the batch (module docstring)."""

    Config = ReinforcePPConfig
    config: ReinforcePPConfig

    @property
    def kl_in_reward(self) -> bool:
        return self.config.kl_in_reward

    def advantages(
        self,
        rewards: Tensor,
        response_mask: Tensor,
        group_ids: Tensor | None,
        values: Tensor | None = None,
        baseline_rewards: Tensor | None = None,
        token_kl: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Whitened reward-to-go on valid tokens; no returns (no critic).

        Args:
            rewards: ``(B,)`` outcome rewards.
            response_mask: ``(B, T)``.
            group_ids, values, baseline_rewards: ignored (may be ``None``).
            token_kl: ``(B, T)`` KL to the reference per token, required when
                ``kl_in_reward``.

        Returns:
            ``(advantages (B, T), None)``.
        """
        cfg = self.config
        with torch.no_grad():
            token_rewards = outcome_at_last_token(rewards, response_mask)
            if cfg.kl_in_reward:
                kl = _checked_kl(self.name, token_kl, response_mask).to(token_rewards.dtype)
                token_rewards = token_rewards - cfg.kl_coef * kl
            returns = reward_to_go(token_rewards, response_mask, cfg.gamma)
            return masked_whiten(returns, response_mask), None


@register_algorithm("reinforce_pp_baseline")
class ReinforcePPBaseline(Algorithm):
    """Group-mean baseline, whitened over the batch's tokens (module docstring)."""

    Config = ReinforcePPBaselineConfig
    config: ReinforcePPBaselineConfig

    @property
    def kl_in_reward(self) -> bool:
        return self.config.kl_in_reward

    def advantages(
        self,
        rewards: Tensor,
        response_mask: Tensor,
        group_ids: Tensor | None,
        values: Tensor | None = None,
        baseline_rewards: Tensor | None = None,
        token_kl: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``R' - mean_g(R')`` on valid tokens, whitened over the batch's tokens; no returns.

        Args:
            rewards: ``(B,)`` outcome rewards.
            response_mask: ``(B, T)``.
            group_ids: ``(B,)`` integer prompt id per sample (required), any order.
            values, baseline_rewards: ignored.
            token_kl: ``(B, T)``, required when ``kl_in_reward``: ``R' = R - kl_coef * sum_t``.

        Returns:
            ``(advantages (B, T), None)``.
        """
        if group_ids is None:
            raise ValueError(f"{self.name}: group_ids (B,) is required")
        cfg = self.config
        with torch.no_grad():
            r = rewards.detach()
            if cfg.kl_in_reward:
                kl = _checked_kl(self.name, token_kl, response_mask).to(r.dtype)
                r = r - cfg.kl_coef * kl.sum(-1)
            mean, _std, count = group_mean_std(r, group_ids)
            centred = r - torch.where(count > 1, mean, torch.zeros_like(mean))
            return masked_whiten(outcome_to_tokens(centred, response_mask), response_mask), None
