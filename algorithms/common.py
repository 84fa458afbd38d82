"""Shared tensor math for every algorithm: masked statistics, loss aggregation, group statistics,
outcome rewards on tokens, the pieces of a policy surrogate, PPO's clipped surrogate and the KL
estimators.

Each piece lives here once so that two algorithms that "do the same thing" provably do: GRPO
and DAPO share :func:`group_mean_std`, PPO and REINFORCE++ :func:`outcome_at_last_token`; every
surrogate starts from :func:`masked_policy_inputs`, PPO's and GSPO's clip through
:func:`clipped_ratio_loss`, and every policy loss is aggregated by :func:`agg_loss`. Semantics
follow verl's ``verl/trainer/ppo/core_algos.py`` and ``verl/utils/torch_functional.py`` (cited
per function), with one systematic difference:

* **Masked positions never leak.** verl multiplies by the mask (``x * mask``), so a NaN or inf
  in a padded position poisons the result (``nan * 0 = nan``) and its gradient. Here every
  masked read goes through ``torch.where`` on *sanitised* inputs, so garbage in padding changes
  neither outputs nor gradients, and padded gradients are exactly zero.
* **Empty masks give 0, not an error or 0/0.** Means over no valid element are 0 (verl divides
  by ``mask.sum() + 1e-8``, which is the same for finite inputs).

Shapes: ``B`` sequences, ``T`` response tokens; masks are ``(B, T)`` and may be bool, int or
float (non-zero = valid).
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from torch import Tensor

__all__ = [
    "KL_PENALTIES",
    "LOSS_AGG_MODES",
    "KLPenalty",
    "LossAggMode",
    "agg_loss",
    "clipped_ratio_loss",
    "clipped_surrogate",
    "explained_variance",
    "group_index",
    "group_mean_std",
    "importance_ratio",
    "kl_penalty",
    "masked_mean",
    "masked_policy_inputs",
    "masked_var",
    "masked_whiten",
    "outcome_at_last_token",
    "outcome_to_tokens",
    "to_floats",
    "zero_masked",
]

LossAggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]
#: The loss aggregation modes :func:`agg_loss` understands (verl's names).
LOSS_AGG_MODES: tuple[str, ...] = get_args(LossAggMode)

KLPenalty = Literal["k1", "k3"]
#: KL estimators (Schulman's k1 / k3 naming; verl calls k3 ``low_var_kl``).
KL_PENALTIES: tuple[str, ...] = get_args(KLPenalty)

# verl clamps the log-ratio before exp() so one wild token cannot overflow the loss.
_LOG_RATIO_CLAMP = 20.0
# verl's low_var_kl clamps the k3 estimate to [-10, 10].
_K3_CLAMP = 10.0
# verl's masked_whiten adds this inside the rsqrt.
_WHITEN_EPS = 1e-8


def _valid(mask: Tensor) -> Tensor:
    """The mask as bool (non-zero = valid)."""
    return mask if mask.dtype == torch.bool else mask != 0


def zero_masked(x: Tensor, mask: Tensor) -> Tensor:
    """``x`` with masked positions set to 0 (NaN-safe: uses ``where``, not multiplication).

    Gradients flowing back through the result are exactly 0 at masked positions, even when
    ``x`` holds NaN/inf there.

    Args:
        x: any shape, e.g. ``(B, T)``.
        mask: same shape as ``x`` (bool, int or float; non-zero = valid).
    """
    return torch.where(_valid(mask), x, torch.zeros((), dtype=x.dtype, device=x.device))


def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``values`` over valid positions (all of them, or along ``dim``).

    Args:
        values: any shape, e.g. ``(B, T)``.
        mask: same shape as ``values``.
        dim: reduce only this dimension; ``None`` reduces everything to a scalar.

    Returns:
        The mean; 0 where there is no valid element (verl: ``sum / (count + 1e-8)``).
    """
    valid = _valid(mask)
    total = zero_masked(values, valid).sum() if dim is None else zero_masked(values, valid).sum(dim)
    count = valid.sum() if dim is None else valid.sum(dim)
    return total / count.clamp(min=1).to(values.dtype)


def masked_var(values: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Variance of ``values`` over all valid positions (scalar).

    Args:
        values: any shape, e.g. ``(B, T)``.
        mask: same shape as ``values``.
        unbiased: Bessel's correction, as verl's ``masked_var`` (default ``True``).

    Returns:
        Scalar variance. Deviation from verl: with fewer than two valid elements (one for the
        biased form) verl raises; here the variance is 0 so a degenerate batch whitens to 0
        instead of stopping a long run.
    """
    valid = _valid(mask)
    mean = masked_mean(values, valid)
    sq = zero_masked((values - mean) ** 2, valid).sum()
    count = valid.sum().to(values.dtype)
    denom = count - 1 if unbiased else count
    return torch.where(denom > 0, sq / denom.clamp(min=1), torch.zeros_like(sq))


def masked_whiten(values: Tensor, mask: Tensor, shift_mean: bool = True) -> Tensor:
    """Normalise valid positions to zero mean and unit (unbiased) variance over the whole batch.

    verl's ``masked_whiten``: ``(x - mean) * rsqrt(var + 1e-8)``, adding the mean back when
    ``shift_mean`` is False. Masked positions of the result are 0.

    Args:
        values: ``(B, T)`` (any shape works).
        mask: same shape as ``values``.
        shift_mean: subtract the mean (True) or only rescale (False).
    """
    valid = _valid(mask)
    mean = masked_mean(values, valid)
    var = masked_var(values, valid, unbiased=True)
    whitened = (values - mean) * torch.rsqrt(var + _WHITEN_EPS)
    if not shift_mean:
        whitened = whitened + mean
    return zero_masked(whitened, valid)


def agg_loss(loss_mat: Tensor, mask: Tensor, mode: str) -> Tensor:
    """Aggregate a per-token loss into a scalar (verl's ``agg_loss``).

    Args:
        loss_mat: ``(B, T)`` per-token losses, or ``(B,)`` losses already one per sequence (a
            sequence-level surrogate, GMPO's), which only the ``seq-mean-*`` modes accept.
        mask: ``(B, T)`` valid-token mask.
        mode: ``"token-mean"`` (mean over all valid tokens of the batch: long answers weigh
            more), ``"seq-mean-token-mean"`` (mean per sequence, then over sequences: every
            sequence weighs the same, as in the GRPO paper), or ``"seq-mean-token-sum"`` (sum
            per sequence, mean over sequences, as in Dr. GRPO up to a constant). Losses already
            one per sequence go straight to the mean over sequences.

    Returns:
        Scalar loss. Sequence means run over sequences with at least one valid token, so a
        fully padded row neither contributes nor dilutes; with no valid token at all the loss
        is 0 (still attached to the graph).
    """
    valid = _valid(mask)
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_mode={mode!r} is not one of {list(LOSS_AGG_MODES)}")
    if loss_mat.dim() == 1:  # (B,): one loss per sequence
        if mode == "token-mean":
            raise ValueError(
                "loss_agg_mode='token-mean' needs per-token (B, T) losses, got one loss per "
                f"sequence {tuple(loss_mat.shape)}"
            )
        return masked_mean(loss_mat, valid.any(-1))
    if mode == "token-mean":
        return masked_mean(loss_mat, valid)
    seq_sum = zero_masked(loss_mat, valid).sum(-1)  # (B,)
    n_tok = valid.sum(-1)  # (B,)
    if mode == "seq-mean-token-mean":
        seq_loss = seq_sum / n_tok.clamp(min=1).to(loss_mat.dtype)
    else:  # seq-mean-token-sum
        seq_loss = seq_sum
    return masked_mean(seq_loss, n_tok > 0)


def group_index(group_ids: Tensor) -> tuple[Tensor, int]:
    """Map arbitrary integer group ids to contiguous indices ``0..K-1``.

    Args:
        group_ids: ``(B,)`` integer ids, in any order, not necessarily contiguous.

    Returns:
        ``(index (B,) long, K)``: ``index[i]`` is the position of sample ``i``'s group.
    """
    if group_ids.dim() != 1:
        raise ValueError(f"group_ids must have shape (B,), got {tuple(group_ids.shape)}")
    uniq, index = torch.unique(group_ids, return_inverse=True)
    return index, int(uniq.numel())


def group_mean_std(
    values: Tensor, group_ids: Tensor, unbiased: bool = True
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sample statistics of the sample's group, vectorised with ``index_add``.

    Args:
        values: ``(B,)`` one scalar per sample (e.g. the outcome reward).
        group_ids: ``(B,)`` integer group (prompt) id per sample, arbitrary order.
        unbiased: Bessel-corrected std, like ``torch.std`` (what verl's GRPO uses).

    Returns:
        ``(mean, std, count)``, each ``(B,)`` in ``values``' dtype: the mean, standard deviation
        and size of the group each sample belongs to. A group of size 1 has std 0 (the unbiased
        estimate is undefined); callers decide what that means (GRPO follows verl: mean 0,
        std 1). Two-pass (mean first, then squared deviations) for numerical stability.
    """
    if values.shape != group_ids.shape:
        raise ValueError(
            f"values {tuple(values.shape)} and group_ids {tuple(group_ids.shape)} must both be (B,)"
        )
    index, k = group_index(group_ids)
    index = index.to(values.device)  # ids may live on the CPU, rewards on the accelerator
    zeros = torch.zeros(k, dtype=values.dtype, device=values.device)
    count = zeros.index_add(0, index, torch.ones_like(values))  # (K,)
    mean = zeros.index_add(0, index, values) / count  # (K,), count >= 1 by construction
    sq_dev = zeros.index_add(0, index, (values - mean[index]) ** 2)  # (K,)
    denom = count - 1 if unbiased else count
    var = torch.where(denom > 0, sq_dev / denom.clamp(min=1), torch.zeros_like(sq_dev))
    return mean[index], var.sqrt()[index], count[index]


def outcome_to_tokens(scores: Tensor, response_mask: Tensor) -> Tensor:
    """Broadcast one detached scalar per sequence onto its valid response tokens.

    Args:
        scores: ``(B,)`` sequence-level advantages (or returns).
        response_mask: ``(B, T)``.

    Returns:
        ``(B, T)``: ``scores[i]`` on the valid tokens of row ``i``, 0 on masked positions.
        Detached: advantages are constants of the policy update.
    """
    if scores.dim() != 1 or scores.shape[0] != response_mask.shape[0]:
        raise ValueError(
            f"scores must have shape (B,) = ({response_mask.shape[0]},), got {tuple(scores.shape)}"
        )
    expanded = scores.detach()[:, None].expand(response_mask.shape)
    return zero_masked(expanded, response_mask)


def outcome_at_last_token(scores: Tensor, response_mask: Tensor) -> Tensor:
    """Put one detached scalar per sequence on its last valid response token (0 elsewhere).

    The token rewards of an outcome-rewarded response, for algorithms that accumulate rewards
    along the tokens (PPO's GAE, REINFORCE++'s reward-to-go).

    Args:
        scores: ``(B,)`` outcome rewards.
        response_mask: ``(B, T)``; the last valid token need not be the last column (interleaved
            masks work).

    Returns:
        ``(B, T)``: ``scores[i]`` on the last valid token of row ``i``; a row without valid
        tokens is all 0.
    """
    valid = response_mask != 0
    t = valid.shape[1]
    # index of the last True per row: flip, argmax finds the first True of the reversed row
    last = (t - 1) - valid.flip(-1).to(torch.uint8).argmax(-1)  # (B,)
    out = torch.zeros(valid.shape, dtype=scores.dtype, device=scores.device)
    out.scatter_(1, last[:, None], scores.detach()[:, None])
    return torch.where(valid, out, torch.zeros_like(out))  # rows without valid tokens: none


def kl_penalty(log_probs: Tensor, ref_log_probs: Tensor, mode: str) -> Tensor:
    """Per-token KL(pi || pi_ref) estimate from sampled-token log-probabilities.

    Args:
        log_probs: ``(B, T)`` log pi(a_t | s_t) under the current policy.
        ref_log_probs: ``(B, T)`` the same under the reference policy.
        mode: ``"k1"``: ``logp - ref`` (unbiased, high variance, can be negative; verl ``kl``);
            ``"k3"``: ``exp(ref - logp) - (ref - logp) - 1`` (non-negative, low variance; verl
            ``low_var_kl``, with the same clamps: log-ratio to [-20, 20], result to [-10, 10]).

    Returns:
        ``(B, T)`` per-token estimates (not masked: mask them when aggregating).
    """
    if mode == "k1":
        return log_probs - ref_log_probs
    if mode == "k3":
        log_ratio = (ref_log_probs - log_probs).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
        return (torch.exp(log_ratio) - log_ratio - 1).clamp(-_K3_CLAMP, _K3_CLAMP)
    raise ValueError(f"kl_penalty={mode!r} is not one of {list(KL_PENALTIES)}")


def masked_policy_inputs(
    log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, response_mask: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """A surrogate's inputs with padding made harmless: where every policy surrogate starts.

    Args:
        log_probs: ``(B, T)`` current-policy log-probs of the sampled tokens (requires grad).
        old_log_probs: ``(B, T)`` rollout-policy log-probs.
        advantages: ``(B, T)``.
        response_mask: ``(B, T)``; masked positions may hold any value, NaN included.

    Returns:
        ``(valid, logp, old, adv)``: the mask as bool, and the three inputs with masked positions
        set to 0, ``old`` and ``adv`` detached (constants of the update).
    """
    valid = _valid(response_mask)
    logp = zero_masked(log_probs, valid)
    old = zero_masked(old_log_probs.detach(), valid)
    adv = zero_masked(advantages.detach(), valid)
    return valid, logp, old, adv


def importance_ratio(logp: Tensor, old: Tensor) -> tuple[Tensor, Tensor]:
    """Per-token importance ratio ``exp(clamp(logp - old, -20, 20))``, clamped as verl clamps it
    so that one wild token cannot overflow the loss.

    Args:
        logp: ``(B, T)`` current-policy log-probs (masked positions already 0).
        old: ``(B, T)`` rollout-policy log-probs (masked positions already 0).

    Returns:
        ``(log_ratio, ratio)``, both ``(B, T)``: the clamped log-ratio and its exponential.
    """
    log_ratio = (logp - old).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    return log_ratio, torch.exp(log_ratio)


def clipped_ratio_loss(
    advantages: Tensor, ratio: Tensor, clip_ratio_low: float, clip_ratio_high: float
) -> tuple[Tensor, Tensor]:
    """PPO's pessimistic clipped objective per token, for any importance ratio (PPO's per-token
    ratio in :func:`clipped_surrogate`, GSPO's per-sequence one).

    ``max(-A * ratio, -A * clip(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high))``.

    Args:
        advantages: ``(B, T)`` (constants).
        ratio: ``(B, T)`` importance ratios.
        clip_ratio_low: ``eps_low`` in ``1 - eps_low``.
        clip_ratio_high: ``eps_high`` in ``1 + eps_high``.

    Returns:
        ``(losses (B, T), clipped (B, T) bool)``: ``clipped`` marks the tokens where the clipped
        term is the active max (their gradient is cut).
    """
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    return torch.maximum(loss_unclipped, loss_clipped), loss_clipped > loss_unclipped


def clipped_surrogate(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_c: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO's per-token clipped surrogate with clip-higher and dual-clip (verl's
    ``compute_policy_loss_vanilla``).

    ``ratio = exp(clamp(logp - old_logp, -20, 20))``;
    ``pg = max(-A * ratio, -A * clip(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high))``;
    with dual-clip (Ye et al. 2020), for ``A < 0``: ``pg = min(pg, -A * clip_ratio_c)``, which
    bounds the loss of a token whose ratio exploded on a negative advantage.

    Args:
        log_probs: ``(B, T)`` current-policy log-probs of the sampled tokens (requires grad).
        old_log_probs: ``(B, T)`` rollout-policy log-probs (treated as constants).
        advantages: ``(B, T)`` (treated as constants).
        response_mask: ``(B, T)``; masked positions may hold any value, NaN included.
        clip_ratio_low: ``eps_low`` in ``1 - eps_low``.
        clip_ratio_high: ``eps_high`` in ``1 + eps_high`` (DAPO's clip-higher when > low).
        clip_ratio_c: dual-clip constant ``c > 1``, or ``None`` to disable.

    Returns:
        ``(pg_losses (B, T), stats)``: per-token losses, 0 on masked positions; ``stats`` holds
        scalar tensors ``clip_frac`` (valid tokens where the clipped term is the active max),
        ``approx_kl`` (mean ``old_logp - logp``, verl's ``ppo_kl``) and, with dual-clip,
        ``dual_clip_frac`` (valid negative-advantage tokens where the ``c`` bound is active).
    """
    valid, logp, old, adv = masked_policy_inputs(
        log_probs, old_log_probs, advantages, response_mask
    )
    log_ratio, ratio = importance_ratio(logp, old)
    pg, clipped = clipped_ratio_loss(adv, ratio, clip_ratio_low, clip_ratio_high)
    stats = {
        "clip_frac": masked_mean(clipped.to(ratio.dtype), valid),
        "approx_kl": masked_mean(-log_ratio.detach(), valid),
    }
    if clip_ratio_c is not None:
        loss_dual = -adv * clip_ratio_c
        negative = adv < 0
        stats["dual_clip_frac"] = masked_mean(((pg > loss_dual) & negative).to(ratio.dtype), valid)
        pg = torch.where(negative, torch.minimum(pg, loss_dual), pg)
    return zero_masked(pg, valid), stats


def explained_variance(pred: Tensor, target: Tensor, mask: Tensor | None = None) -> Tensor:
    """``1 - Var(target - pred) / Var(target)`` over valid elements (scalar tensor).

    1 is a perfect critic, 0 a critic no better than predicting the mean, negative worse.
    NaN when ``target`` has no variance (undefined, as in CleanRL), rather than verl's
    ``+1e-5`` in the denominator, which turns "undefined" into a huge negative number.

    Args:
        pred: any shape, e.g. ``(B,)`` or ``(B, T)``.
        target: same shape as ``pred``.
        mask: same shape, or ``None`` for all valid.
    """
    pred, target = pred.detach(), target.detach().to(pred.dtype)
    if mask is None:
        mask = torch.ones_like(pred, dtype=torch.bool)
    var_y = masked_var(target, mask, unbiased=False)
    var_resid = masked_var(target - pred, mask, unbiased=False)
    nan = torch.full_like(var_y, math.nan)
    return torch.where(
        var_y > 0, 1 - var_resid / var_y.clamp(min=torch.finfo(var_y.dtype).tiny), nan
    )


def to_floats(metrics: dict[str, Tensor]) -> dict[str, float]:
    """Scalar tensors to python floats with one device sync (not one ``.item()`` per metric)."""
    if not metrics:
        return {}
    values = torch.stack([v.detach().reshape(()).float() for v in metrics.values()]).tolist()
    return dict(zip(metrics.keys(), values, strict=True))
