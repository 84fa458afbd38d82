"""GMPO: Geometric-Mean Policy Optimization (Zhao et al. 2025, arXiv 2507.20673), as verl's
``compute_policy_loss_geo_mean`` (``policy_loss.loss_mode=geo_mean``).

GRPO maximises the *arithmetic* mean of token-level rewards ``r_t * A``, which one outlier
ratio can dominate; GMPO maximises their *geometric* mean, which outliers move far less, and so
can afford a wider clip range:

* per token, the log-ratio ``l_t = logp_t - old_t`` is clipped in log space to
  ``[-eps_low, eps_high]`` on the side the advantage's sign makes pessimistic:
  ``l'_t = sgn(A) * min(sgn(A) * l_t, sgn(A) * clip(l_t))``;
* sequence ratio ``exp(mean_t l'_t)`` (the geometric mean of the clipped token ratios) times the
  response's mean advantage: ``loss_i = -A_i * exp(mean_t l'_t)``, averaged over responses;
* GRPO's group-normalised advantage (inherited from :class:`~algorithms.grpo.GRPO`), no KL term.

Defaults are the paper's: clip range ``(e^-0.4, e^0.4)`` on the token ratio, i.e. 0.4 on each
side in log space (``clip_ratio_low`` and ``clip_ratio_high`` are log-space bounds here, as in
verl's ``geo_mean``). G = 8 as ``grpo``. The surrogate gives one loss per response, which the
shared aggregation averages over responses, so ``loss_agg_mode`` accepts only
``seq-mean-token-mean``; a fully masked row is left out of that mean (verl's ``torch.mean``
counts it as a zero).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from algorithms.base import register_algorithm
from algorithms.common import LossAggMode, masked_mean, masked_policy_inputs, zero_masked
from algorithms.configkit import ConfigError, config_field
from algorithms.grpo import GRPO, GRPOConfig

__all__ = ["GMPO", "GMPOConfig", "gmpo_surrogate"]


@dataclass(frozen=True, kw_only=True)
class GMPOConfig(GRPOConfig):
    """GMPO hyper-parameters; defaults are the paper's."""

    clip_ratio_low: float = config_field(
        0.4, "Log-ratio clipped below at -clip_ratio_low (paper: 0.4, i.e. e^-0.4).", gt=0.0
    )
    clip_ratio_high: float = config_field(
        0.4, "Log-ratio clipped above at +clip_ratio_high (paper: 0.4, i.e. e^0.4).", gt=0.0
    )
    loss_agg_mode: LossAggMode = config_field(
        "seq-mean-token-mean", "GMPO's loss is a mean over responses: seq-mean-token-mean only."
    )
    kl_loss_coef: float = config_field(
        0.0, "Weight (beta) of the KL-to-reference loss (GMPO: none).", ge=0.0
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loss_agg_mode != "seq-mean-token-mean":
            raise ConfigError(
                f"{type(self).__name__}.loss_agg_mode={self.loss_agg_mode!r} is invalid: GMPO's "
                "loss is a mean over responses; must be 'seq-mean-token-mean'"
            )


def gmpo_surrogate(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GMPO's per-response losses (verl's ``compute_policy_loss_geo_mean`` before its mean).

    Args:
        log_probs: ``(B, T)`` current-policy log-probs (requires grad).
        old_log_probs: ``(B, T)`` rollout-policy log-probs (constants).
        advantages: ``(B, T)`` (constants; GMPO reads each response's mean).
        response_mask: ``(B, T)``; masked positions may hold anything, NaN included.
        clip_ratio_low, clip_ratio_high: the log-space clip range.

    Returns:
        ``(losses (B,), stats)``: one loss per response (0 for a response without valid
        tokens), which :func:`algorithms.common.agg_loss` averages over the responses that have
        tokens; ``stats``: ``clip_frac`` (valid tokens clipped with a positive advantage),
        ``clip_frac_lower`` (with a negative one) and ``approx_kl`` (mean ``old - logp``).
    """
    valid, logp, old, adv = masked_policy_inputs(
        log_probs, old_log_probs, advantages, response_mask
    )
    log_ratio = logp - old
    sgn = torch.sign(adv)
    clipped = log_ratio.clamp(-clip_ratio_low, clip_ratio_high)
    pessimistic = sgn * torch.min(sgn * log_ratio, sgn * clipped)
    n = valid.sum(-1).clamp(min=1).to(logp.dtype)  # (B,)
    ratio = torch.exp(zero_masked(pessimistic, valid).sum(-1) / n)  # (B,)
    seq_adv = adv.sum(-1) / n  # (B,)
    was_clipped = (log_ratio != clipped).detach()
    stats = {
        "clip_frac": masked_mean((was_clipped & (adv > 0)).to(logp.dtype), valid),
        "clip_frac_lower": masked_mean((was_clipped & (adv < 0)).to(logp.dtype), valid),
        "approx_kl": masked_mean(-log_ratio.detach(), valid),
    }
    return -seq_adv * ratio, stats


@register_algorithm("gmpo")
class GMPO(GRPO):
    """GRPO's advantage under a geometric-mean sequence ratio (see the module docstring)."""

    Config = GMPOConfig
    config: GMPOConfig

    def surrogate(
        self,
        log_probs: Tensor,
        old_log_probs: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """:func:`gmpo_surrogate` with this config's log-space clip range: one loss per
        response (``train/clip_frac_lower`` among its statistics)."""
        cfg = self.config
        return gmpo_surrogate(
            log_probs,
            old_log_probs,
            advantages,
            response_mask,
            cfg.clip_ratio_low,
            cfg.clip_ratio_high,
        )
