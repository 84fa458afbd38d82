"""ReMax (Li et al. 2024, arXiv 2310.10505), as verl's ``compute_remax_outcome_advantage``; a
baseline in the SPPO paper (Table 1).

One sampled response per prompt; the baseline is the reward of the *greedy* response to the
same prompt, which the harness decodes and grades (:attr:`ReMax.needs_greedy_baseline`):
``A = R - R_greedy`` on every response token, no normalisation, no critic. Policy loss as PPO
(clip 0.2, token-mean, no KL).

Deviation from verl: verl also returns the reward-to-go as "returns"; with no critic nothing
consumes them, so :meth:`ReMax.advantages` returns ``None`` like the other critic-free
algorithms.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from algorithms.base import Algorithm, AlgorithmConfig, register_algorithm
from algorithms.common import outcome_to_tokens
from algorithms.configkit import config_field

__all__ = ["ReMax", "ReMaxConfig"]


@dataclass(frozen=True, kw_only=True)
class ReMaxConfig(AlgorithmConfig):
    """ReMax hyper-parameters."""

    n: int = config_field(1, "Sampled responses per prompt (plus one greedy baseline).", ge=1)


@register_algorithm("remax")
class ReMax(Algorithm):
    """Greedy-response baseline (see the module docstring)."""

    Config = ReMaxConfig
    config: ReMaxConfig

    @property
    def needs_greedy_baseline(self) -> bool:
        return True

    def advantages(
        self,
        rewards: Tensor,
        response_mask: Tensor,
        group_ids: Tensor | None,
        values: Tensor | None = None,
        baseline_rewards: Tensor | None = None,
        token_kl: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``R - R_greedy`` broadcast on valid tokens; no returns.

        Args:
            rewards: ``(B,)`` outcome rewards of the sampled responses.
            response_mask: ``(B, T)``.
            group_ids: ignored (may be ``None``).
            values: ignored.
            baseline_rewards: ``(B,)`` reward of the greedy response to each sample's prompt
                (required; repeat it per sample when ``n > 1``).
            token_kl: ignored.

        Returns:
            ``(advantages (B, T), None)``.
        """
        if baseline_rewards is None or baseline_rewards.shape != rewards.shape:
            got = None if baseline_rewards is None else tuple(baseline_rewards.shape)
            raise ValueError(
                f"remax: baseline_rewards (the greedy responses' rewards, shape "
                f"{tuple(rewards.shape)}) is required, got {got}"
            )
        with torch.no_grad():
            advantage = rewards.detach() - baseline_rewards.detach().to(rewards.dtype)
            return outcome_to_tokens(advantage, response_mask), None
