"""GSPO: Group Sequence Policy Optimization (Zheng et al. 2025, arXiv 2507.18071), as verl's
``compute_policy_loss_gspo`` (``policy_loss.loss_mode=gspo``).

The likelihood a reward judges is the whole response's, so GSPO puts the importance ratio and
its clipping at the sequence level instead of on every token:

* sequence ratio ``s_i = (pi(y_i | x) / pi_old(y_i | x)) ** (1 / |y_i|)``, the geometric mean of
  the token ratios (length-normalised, so long and short responses share one clip range);
* per-token form, as verl writes it: ``s_it = sg[s_i] * pi(y_it) / sg[pi(y_it)]`` (its value is
  ``s_i``, its gradient on token t is ``s_i`` times that token's score), log-ratio clamped at
  10 from above for stability; loss ``max(-A * s_it, -A * clip(s_it, 1 - eps_low, 1 + eps_high))``;
* aggregation ``seq-mean-token-mean``: each response's tokens averaged, then the responses;
* GRPO's group-normalised advantage (inherited from :class:`~algorithms.grpo.GRPO`), no KL.

Defaults are the paper's (Sec. 5.1): ``eps_low = 3e-4``, ``eps_high = 4e-4`` (a sequence ratio
moves far less than a token's, hence clip ranges two orders of magnitude below PPO's). The paper
splits each rollout batch into 4 mini-batches; that is the harness's ``trainer.mini_batches``
(1 by default), and with one mini-batch and one epoch the update is on-policy (``s_i = 1``,
nothing clipped), so GSPO's gradient is then GRPO's without the KL term. G = 8 as ``grpo``
(the paper does not tie the method to a group size).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from algorithms.base import register_algorithm
from algorithms.common import (
    LossAggMode,
    clipped_ratio_loss,
    masked_mean,
    masked_policy_inputs,
    zero_masked,
)
from algorithms.configkit import config_field
from algorithms.grpo import GRPO, GRPOConfig

__all__ = ["GSPO", "GSPOConfig", "gspo_surrogate"]

# verl clamps the sequence log-ratio from above only, at 10.
_SEQ_LOG_RATIO_MAX = 10.0


@dataclass(frozen=True, kw_only=True)
class GSPOConfig(GRPOConfig):
    """GSPO hyper-parameters; defaults are the paper's (Sec. 5.1)."""

    clip_ratio_low: float = config_field(
        3e-4, "Sequence ratio clipped at 1 - clip_ratio_low (paper: 3e-4).", gt=0.0, lt=1.0
    )
    clip_ratio_high: float = config_field(
        4e-4, "Sequence ratio clipped at 1 + clip_ratio_high (paper: 4e-4).", gt=0.0
    )
    loss_agg_mode: LossAggMode = config_field(
        "seq-mean-token-mean",
        "How per-token losses become one scalar (GSPO: per-sequence mean, then over sequences).",
    )
    kl_loss_coef: float = config_field(
        0.0, "Weight (beta) of the KL-to-reference loss (GSPO: none).", ge=0.0
    )


def gspo_surrogate(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO's per-token losses (verl's ``compute_policy_loss_gspo`` before aggregation).

    Args:
        log_probs: ``(B, T)`` current-policy log-probs (requires grad).
        old_log_probs: ``(B, T)`` rollout-policy log-probs (constants).
        advantages: ``(B, T)`` (constants).
        response_mask: ``(B, T)``; masked positions may hold anything, NaN included.
        clip_ratio_low, clip_ratio_high: the sequence ratio's clip range.

    Returns:
        ``(pg_losses (B, T), stats)``: 0 on masked positions; ``clip_frac`` (valid tokens whose
        clipped term is the active max) and ``approx_kl`` (mean ``old - logp``).
    """
    valid, logp, old, adv = masked_policy_inputs(
        log_probs, old_log_probs, advantages, response_mask
    )
    log_ratio = logp - old
    n = valid.sum(-1).clamp(min=1).to(logp.dtype)  # (B,)
    seq_log_ratio = log_ratio.sum(-1) / n  # (B,) log s_i
    token_log_ratio = logp - logp.detach() + seq_log_ratio.detach()[:, None]
    ratio = torch.exp(token_log_ratio.clamp(max=_SEQ_LOG_RATIO_MAX))
    pg, clipped = clipped_ratio_loss(adv, ratio, clip_ratio_low, clip_ratio_high)
    stats = {
        "clip_frac": masked_mean(clipped.to(ratio.dtype), valid),
        "approx_kl": masked_mean(-log_ratio.detach(), valid),
    }
    return zero_masked(pg, valid), stats


@register_algorithm("gspo")
class GSPO(GRPO):
    """GRPO's advantage under a sequence-level clipped ratio (see the module docstring)."""

    Config = GSPOConfig
    config: GSPOConfig

    def surrogate(
        self,
        log_probs: Tensor,
        old_log_probs: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """:func:`gspo_surrogate` with this config's clip range on the sequence ratio."""
        cfg = self.config
        return gspo_surrogate(
            log_probs,
            old_log_probs,
            advantages,
            response_mask,
            cfg.clip_ratio_low,
            cfg.clip_ratio_high,
        )
