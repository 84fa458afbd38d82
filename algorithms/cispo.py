"""CISPO: Clipped IS-weight Policy Optimization (MiniMax-M1, arXiv 2506.13585), as verl's
``compute_policy_loss_cispo`` (``policy_loss.loss_mode=cispo``).

PPO's clip drops the gradient of every token whose ratio left the trust region, and in long
reasoning those are often the rare "fork" tokens (however, wait, ...) that matter most. CISPO
clips the importance-sampling *weight* instead and keeps every token's gradient:

* per-token loss ``-sg[clip(r_t, 1 - eps_low, 1 + eps_high)] * A_t * log pi(y_t)``, with
  ``r_t = exp(clamp(logp - old_logp, -20, 20))`` and ``sg`` the stop-gradient: the gradient is
  the REINFORCE one, ``-clip(r_t) * A_t * grad log pi``, for every token;
* ``token-mean`` aggregation (the paper normalises by the batch's total token count);
* GRPO's group-normalised advantage (inherited from :class:`~algorithms.grpo.GRPO`), no KL term
  (the paper's objective has none).

Defaults: the paper imposes no lower bound on the weight and tunes only the upper one; here
``clip_ratio_low = 1`` (the weight is clipped at 1 - 1 = 0, which a ratio never goes below) and
``clip_ratio_high = 0.2`` (verl's CISPO example; the paper gives no value). G = 8 as ``grpo``.
The loss *value* is ``A * log pi`` weighted, not a ratio, so it is not comparable across
algorithms; its gradient is what matters.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from algorithms.base import register_algorithm
from algorithms.common import (
    LossAggMode,
    importance_ratio,
    masked_mean,
    masked_policy_inputs,
    zero_masked,
)
from algorithms.configkit import config_field
from algorithms.grpo import GRPO, GRPOConfig

__all__ = ["CISPO", "CISPOConfig", "cispo_surrogate"]


@dataclass(frozen=True, kw_only=True)
class CISPOConfig(GRPOConfig):
    """CISPO hyper-parameters (see the module docstring for where each default comes from)."""

    clip_ratio_low: float = config_field(
        1.0,
        "IS weight clipped below at 1 - clip_ratio_low; 1 (or more) means no lower bound "
        "(the paper).",
        gt=0.0,
    )
    clip_ratio_high: float = config_field(
        0.2, "IS weight clipped above at 1 + clip_ratio_high (verl's example: 0.2).", gt=0.0
    )
    loss_agg_mode: LossAggMode = config_field(
        "token-mean",
        "How per-token losses become one scalar (CISPO: mean over the batch's tokens).",
    )
    kl_loss_coef: float = config_field(
        0.0, "Weight (beta) of the KL-to-reference loss (CISPO: none).", ge=0.0
    )


def cispo_surrogate(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """CISPO's per-token losses (verl's ``compute_policy_loss_cispo`` before aggregation).

    Args:
        log_probs: ``(B, T)`` current-policy log-probs (requires grad).
        old_log_probs: ``(B, T)`` rollout-policy log-probs (constants).
        advantages: ``(B, T)`` (constants).
        response_mask: ``(B, T)``; masked positions may hold anything, NaN included.
        clip_ratio_low, clip_ratio_high: the weight's clip range.

    Returns:
        ``(pg_losses (B, T), stats)``: 0 on masked positions; ``clip_frac`` (valid tokens whose
        weight was clipped) and ``approx_kl`` (mean ``old - logp``).
    """
    valid, logp, old, adv = masked_policy_inputs(
        log_probs, old_log_probs, advantages, response_mask
    )
    log_ratio, ratio = importance_ratio(logp, old)
    weight = ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    pg = -weight.detach() * adv * logp
    stats = {
        "clip_frac": masked_mean((ratio != weight).to(ratio.dtype).detach(), valid),
        "approx_kl": masked_mean(-log_ratio.detach(), valid),
    }
    return zero_masked(pg, valid), stats


@register_algorithm("cispo")
class CISPO(GRPO):
    """GRPO's advantage under a clipped, stop-gradient IS weight (see the module docstring)."""

    Config = CISPOConfig
    config: CISPOConfig

    def surrogate(
        self,
        log_probs: Tensor,
        old_log_probs: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """:func:`cispo_surrogate` with this config's clip range on the weight."""
        cfg = self.config
        return cispo_surrogate(
            log_probs,
            old_log_probs,
            advantages,
            response_mask,
            cfg.clip_ratio_low,
            cfg.clip_ratio_high,
        )
