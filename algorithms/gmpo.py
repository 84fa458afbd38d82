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
verl's ``geo_mean``). G = 8 as ``grpo``. The loss is a mean over responses whatever
``loss_agg_mode`` says, so only ``seq-mean-token-mean`` is accepted; a fully masked row is left
out of that mean (verl's ``torch.mean`` counts it as a zero).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from algorithms.base import ConfigError, config_field, register_algorithm
from algorithms.common import LossAggMode, masked_mean
from algorithms.grpo import GRPO, GRPOConfig

__all__ = ["GMPO", "GMPOConfig", "gmpo_sequence_losses"]


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


def gmpo_sequence_losses(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """GMPO's per-response losses (verl's ``compute_policy_loss_geo_mean`` before its mean).

    Args:
        log_probs: ``(B, T)`` current-policy log-probs (requires grad).
        old_log_probs: ``(B, T)`` rollout-policy log-probs (constants).
        advantages: ``(B, T)`` (constants; GMPO reads each response's mean).
        response_mask: ``(B, T)``; masked positions may hold anything, NaN included.
        clip_ratio_low, clip_ratio_high: the log-space clip range.

    Returns:
        ``(losses (B,), has_tokens (B,) bool, stats)``; ``stats``: ``clip_frac`` (valid tokens
        clipped with a positive advantage), ``clip_frac_lower`` (with a negative one) and
        ``approx_kl`` (mean ``old - logp``).
    """
    valid = response_mask != 0
    zero = torch.zeros((), dtype=log_probs.dtype, device=log_probs.device)
    logp = torch.where(valid, log_probs, zero)
    old = torch.where(valid, old_log_probs.detach(), zero)
    adv = torch.where(valid, advantages.detach(), zero)
    log_ratio = logp - old
    sgn = torch.sign(adv)
    clipped = log_ratio.clamp(-clip_ratio_low, clip_ratio_high)
    pessimistic = sgn * torch.min(sgn * log_ratio, sgn * clipped)
    n_tok = valid.sum(-1)
    n = n_tok.clamp(min=1).to(logp.dtype)
    ratio = torch.exp(torch.where(valid, pessimistic, zero).sum(-1) / n)  # (B,)
    seq_adv = adv.sum(-1) / n  # (B,)
    was_clipped = (log_ratio != clipped).detach()
    stats = {
        "clip_frac": masked_mean((was_clipped & (adv > 0)).to(logp.dtype), valid),
        "clip_frac_lower": masked_mean((was_clipped & (adv < 0)).to(logp.dtype), valid),
        "approx_kl": masked_mean(-log_ratio.detach(), valid),
    }
    return -seq_adv * ratio, n_tok > 0, stats


@register_algorithm("gmpo")
class GMPO(GRPO):
    """GRPO's advantage under a geometric-mean sequence ratio (see the module docstring)."""

    Config = GMPOConfig
    config: GMPOConfig

    def policy_loss(
        self,
        log_probs: Tensor,
        old_log_probs: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        ref_log_probs: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        """The mean over responses of :func:`gmpo_sequence_losses`, plus the KL term when
        ``kl_loss_coef > 0``; shapes and metrics as
        :meth:`algorithms.base.Algorithm.policy_loss` (and ``train/clip_frac_lower``)."""
        cfg = self.config
        self._check_policy_inputs(
            log_probs, old_log_probs, advantages, response_mask, ref_log_probs
        )
        losses, has_tokens, stats = gmpo_sequence_losses(
            log_probs,
            old_log_probs,
            advantages,
            response_mask,
            cfg.clip_ratio_low,
            cfg.clip_ratio_high,
        )
        loss = masked_mean(losses, has_tokens)
        return self._with_kl_term(loss, stats, log_probs, response_mask, ref_log_probs)
