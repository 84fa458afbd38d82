"""Critic calibration as numbers, for the trainer to log at every evaluation point.

A critic that predicts the same value for every prompt gives a low loss when the batch's mean
success is about that value, so the training loss cannot say whether the critic tells prompts
apart. These metrics can: they compare each held-out prompt's prediction with the policy's
empirical success over k samples of it (the paper's Fig. 7 reports a Pearson correlation of
0.642 on held-out prompts).

* prompt critic (SPPO): ``p = sigmoid(v(x))``; Pearson of p with the empirical rate, the
  expected calibration error (equal-width bins of p, prompt-weighted, as
  :func:`analysis.calibration.expected_calibration_error`) and the Brier score over every
  sample's outcome, ``mean_ij (p_i - y_ij)^2``;
* token critic (PPO): the explained variance of the returns by the values over valid response
  tokens, and the Pearson correlation of the value at the first response token (it reads only
  the prompt) with the empirical rate.

Undefined values (a constant prediction or outcome) are NaN, not 0: "no signal" and "cannot
tell" are different findings. The trainer leaves them out of the log.
"""

from __future__ import annotations

import logging
import math

import torch

from analysis import metrics as M

log = logging.getLogger(__name__)

__all__ = ["ece", "pearson", "prompt_critic_calibration", "token_critic_calibration"]


def pearson(x: torch.Tensor, y: torch.Tensor) -> float:
    """Pearson correlation of two 1-D tensors in float64; NaN when either is constant."""
    x, y = x.double().flatten(), y.double().flatten()
    if x.numel() < 2:
        return math.nan
    dx, dy = x - x.mean(), y - y.mean()
    den = math.sqrt(float((dx * dx).sum()) * float((dy * dy).sum()))
    return float((dx * dy).sum()) / den if den > 0 else math.nan


def ece(predicted: torch.Tensor, empirical: torch.Tensor, bins: int = 10) -> float:
    """Prompt-weighted mean over equal-width bins of ``predicted`` of |mean predicted - mean
    empirical| (a prediction of exactly 1 falls in the last bin)."""
    p, e = predicted.double().flatten(), empirical.double().flatten()
    if p.numel() == 0:
        return math.nan
    idx = torch.clamp((p * bins).floor().long(), 0, bins - 1)
    total = 0.0
    for b in range(bins):
        sel = idx == b
        n = int(sel.sum())
        if n:
            total += n * abs(float(p[sel].mean()) - float(e[sel].mean()))
    return total / p.numel()


def prompt_critic_calibration(predicted: torch.Tensor, outcomes: torch.Tensor) -> dict[str, float]:
    """Calibration of a prompt critic's success probabilities.

    Args:
        predicted: ``(P,)`` sigmoid(v(x)) per held-out prompt.
        outcomes: ``(P, k)`` 0/1 scores of k sampled responses per prompt.
    """
    outcomes = outcomes.double()
    empirical = outcomes.mean(1)
    brier = float(((predicted.double()[:, None] - outcomes) ** 2).mean())
    return {
        M.CRITIC_CALIBRATION_PEARSON: pearson(predicted, empirical),
        M.CRITIC_CALIBRATION_ECE: ece(predicted, empirical),
        M.CRITIC_CALIBRATION_BRIER: brier,
    }


def token_critic_calibration(
    values: torch.Tensor, response_mask: torch.Tensor, outcomes: torch.Tensor, k: int
) -> dict[str, float]:
    """Calibration of a token critic on held-out samples.

    Args:
        values: ``(P*k, T)`` values before each response token, rows grouped by prompt.
        response_mask: ``(P*k, T)``.
        outcomes: ``(P*k,)`` each sample's outcome: with gamma = lambda = 1 and no KL in the
            reward, the return at every one of its tokens.
        k: samples per prompt.
    """
    valid = response_mask > 0
    returns = outcomes.double()[:, None].expand_as(values)
    v, g = values.double()[valid], returns[valid]
    var_g = float(g.var(unbiased=False)) if g.numel() else 0.0
    ev = 1.0 - float((g - v).var(unbiased=False)) / var_g if var_g > 0 else math.nan
    first = values.double()[:, 0].view(-1, k)[:, 0]  # reads the prompt only: one per prompt
    empirical = outcomes.double().view(-1, k).mean(1)
    return {
        M.CRITIC_HELDOUT_EXPLAINED_VAR: ev,
        M.CRITIC_FIRST_VALUE_PEARSON: pearson(first, empirical),
    }
