"""SPPO: Sequence-Level PPO (arXiv 2604.08865, "SPPO: Sequence-Level PPO for Long-Horizon
Reasoning Tasks", ACL 2026; code: github sustech-nlp/SPPO, a verl fork,
``compute_sequence_level_advantage`` and ``dp_critic._forward_prompt_value``).

The whole response is one action of a contextual bandit whose context is the prompt. A *prompt*
critic reads only the prompt and outputs a logit ``v`` at the last prompt token;
``p = sigmoid(v)`` estimates the policy's probability of solving the prompt. With one sample per
prompt:

* advantage ``A = R - sigmoid(v)``, the same on every response token, **no** normalisation;
* critic loss: binary cross-entropy with logits between ``v`` and ``R`` (a calibrated success
  probability, not a regression to an arbitrary return);
* policy loss: PPO's per-token clipped ratio (0.2 / 0.2) with dual-clip ``c = 3``, token-mean,
  no KL, no entropy bonus, one PPO epoch.

Simplifications versus the paper: none in the math. The paper's "small critic" (a smaller model
than the policy) and the critic's own learning rate are harness concerns; ``critic_lr`` is
carried here (paper: 5e-6 at 1.5B, 1e-5 at 7B). The BCE targets must lie in [0, 1]: shaped
rewards outside that range are rejected rather than silently mis-trained.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from algorithms.base import Algorithm, AlgorithmConfig, CriticKind, register_algorithm
from algorithms.common import explained_variance, outcome_to_tokens, to_floats
from algorithms.configkit import config_field

__all__ = ["SPPO", "SPPOConfig"]


@dataclass(frozen=True, kw_only=True)
class SPPOConfig(AlgorithmConfig):
    """SPPO hyper-parameters; defaults are the paper's 1.5B setting."""

    n: int = config_field(1, "Responses per prompt; the paper uses 1 (its point: no groups).", ge=1)
    clip_ratio_c: float | None = config_field(
        3.0, "Dual-clip constant c for negative advantages (paper: 3.0); None disables.", gt=1.0
    )
    critic_lr: float = config_field(
        5e-6, "Learning rate of the prompt critic (paper: 5e-6 at 1.5B, 1e-5 at 7B).", gt=0.0
    )


@register_algorithm("sppo")
class SPPO(Algorithm):
    """Sequence-level PPO with a prompt-only scalar critic (see the module docstring)."""

    Config = SPPOConfig
    config: SPPOConfig
    critic: CriticKind = "prompt"

    @property
    def critic_lr(self) -> float | None:
        return self.config.critic_lr

    def advantages(
        self,
        rewards: Tensor,
        response_mask: Tensor,
        group_ids: Tensor | None,
        values: Tensor | None = None,
        baseline_rewards: Tensor | None = None,
        token_kl: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``A = R - sigmoid(v)`` on every valid token; returns ``R`` as the critic's target.

        Args:
            rewards: ``(B,)`` outcome rewards.
            response_mask: ``(B, T)``.
            group_ids: ignored (may be ``None``).
            values: ``(B,)`` critic logits at the last prompt token (required; detached here).
            baseline_rewards, token_kl: ignored.

        Returns:
            ``(advantages (B, T), returns (B,))`` with ``returns = R``.
        """
        if values is None:
            raise ValueError("sppo: values (the prompt critic's (B,) logits) is required")
        if values.shape != rewards.shape:
            raise ValueError(
                f"sppo: values must be the (B,) prompt-critic logits matching rewards "
                f"{tuple(rewards.shape)}, got {tuple(values.shape)}"
            )
        with torch.no_grad():
            advantage = rewards - torch.sigmoid(values.detach())  # (B,)
            return outcome_to_tokens(advantage, response_mask), rewards.detach().clone()

    def value_loss(
        self,
        values: Tensor,
        targets: Tensor,
        response_mask: Tensor | None = None,
        old_values: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        """Mean BCE-with-logits between the critic's logits and the outcome rewards.

        Args:
            values: ``(B,)`` critic logits (with grad).
            targets: ``(B,)`` rewards in [0, 1] (the ``returns`` of :meth:`advantages`).
            response_mask: ignored (the critic scores prompts, not tokens); may be ``None``.
            old_values: ignored (no value clipping for a probability).

        Returns:
            ``(loss, metrics)`` with ``critic/loss``, ``critic/value_mean`` (mean predicted
            success probability), ``critic/calibration_error`` (``|mean p - mean R|``) and
            ``critic/explained_variance`` (of ``R`` by ``p``).
        """
        if values.shape != targets.shape or values.dim() != 1:
            raise ValueError(
                f"sppo: values and targets must both be (B,), got {tuple(values.shape)} "
                f"and {tuple(targets.shape)}"
            )
        targets = targets.detach().to(values.dtype)
        if bool(((targets < 0) | (targets > 1)).any()):
            raise ValueError(
                "sppo: value_loss targets must lie in [0, 1] (the critic predicts a success "
                f"probability); got min {targets.min().item()}, max {targets.max().item()}"
            )
        loss = F.binary_cross_entropy_with_logits(values, targets)
        p = torch.sigmoid(values.detach())
        metrics = {
            "critic/loss": loss.detach(),
            "critic/value_mean": p.mean(),
            "critic/calibration_error": (p.mean() - targets.mean()).abs(),
            "critic/explained_variance": explained_variance(p, targets),
        }
        return loss, to_floats(metrics)
