"""GSPO's surrogate (algorithms/gspo.py) recomputed token by token in float64 from its module
docstring: the length-normalised sequence ratio, clipped, on sequences above, below and inside
the clip range, a one-token row, a row whose mean log-ratio hits the cap, and a fully masked row.
Losses, gradients and every statistic under its exact key; float64 in, float64 out, on the
inputs' device (docs/mutation.md says why these are exact).
"""

from __future__ import annotations

import math

import pytest

from algorithms.gspo import gspo_surrogate
from testkit.ratios import (
    TOL,
    assert_f64_close,
    assert_stays_on_meta_in_f64,
    log_ratios,
    padded,
    ratio_inputs,
)
from testkit.tensors import F64

#: (log-ratios, per-token advantages) per response; sequence ratio clipped to [0.9, 1.2].
GSPO_LOW, GSPO_HIGH = 0.1, 0.2
GSPO_ROWS = [
    # s = e^0.2 = 1.221 > 1.2: clipped (no gradient) where A > 0, kept where A < 0
    ([0.5, 0.1, -0.2, 0.4], [1.0, -1.0, 0.5, -0.5]),
    # s = e^-0.2 = 0.819 < 0.9: clipped where A < 0, kept where A > 0
    ([-0.3, -0.1, -0.2], [-1.0, 2.0, -1.0]),
    # s = e^0 = 1, inside
    ([0.1, -0.1], [0.3, 0.3]),
    # one token: s = e^0.05, inside
    ([0.05], [-2.0]),
    # mean log-ratio 12, capped at 10: s = e^10, no gradient through the cap
    ([12.0, 12.0], [-1.0, 1.0]),
    # no valid token
    ([], []),
]


def _gspo_reference(ls: list[float], adv: list[float]) -> tuple[list[float], list[float], int]:
    """GSPO's per-token losses of one response, their gradients in each token's own log-prob,
    and how many tokens are clipped, from the module docstring: ``s = exp(min(mean_t l_t, 10))``;
    ``loss_t = max(-A_t * s, -A_t * clip(s, 1 - eps_low, 1 + eps_high))``; the token form
    ``sg[s] * pi(y_t) / sg[pi(y_t)]`` gives token t the gradient ``-A_t * s`` where the unclipped
    term is the active max and the cap does not bind, else 0."""
    if not ls:
        return [], [], 0
    mean = sum(ls) / len(ls)
    s = math.exp(min(mean, 10.0))
    c = min(max(s, 1.0 - GSPO_LOW), 1.0 + GSPO_HIGH)
    losses, grads, clipped = [], [], 0
    for a in adv:
        losses.append(max(-a * s, -a * c))
        cut = -a * c > -a * s
        clipped += cut
        grads.append(0.0 if cut or mean > 10.0 else -a * s)
    return losses, grads, clipped


def test_gspo_clips_the_length_normalised_sequence_ratio():
    lp, old, adv, mask = ratio_inputs(GSPO_ROWS, 4)
    losses, stats = gspo_surrogate(lp, old, adv, mask, GSPO_LOW, GSPO_HIGH)
    ref = [
        _gspo_reference(ls, a)
        for ls, a in zip(log_ratios(lp, mask), [r[1] for r in GSPO_ROWS], strict=True)
    ]
    assert_f64_close(losses, padded([r[0] for r in ref], 4))
    assert losses[4, 0].item() == pytest.approx(math.exp(10.0), rel=TOL)  # the cap, not e^12
    losses.sum().backward()
    assert_f64_close(lp.grad, padded([r[1] for r in ref], 4))

    # 12 valid tokens, 5 clipped: two in row 0, two in row 1, the A > 0 one of the capped row
    assert sum(r[2] for r in ref) == 5
    assert list(stats) == ["clip_frac", "approx_kl"]
    assert all(v.dtype == F64 and v.shape == () for v in stats.values())
    assert stats["clip_frac"].item() == 5 / 12
    kl = -sum(sum(ls) for ls in log_ratios(lp, mask)) / 12
    assert stats["approx_kl"].item() == pytest.approx(kl, rel=TOL, abs=TOL)
    assert kl < -1.0


def test_gspo_hand_values():
    # log-ratios 0.3 and -0.1 -> s = e^0.1 = 1.105, inside [0.8, 1.2]: loss -A * s on each token
    # of the response (A = 2), gradient -A * s on each token's own log-prob; a second response
    # of one token, log-ratio -0.5 -> s = e^-0.5 = 0.607, clipped to 0.8 with A = -1: loss 0.8
    lp, old, adv, mask = ratio_inputs([([0.3, -0.1], [2.0, 2.0]), ([-0.5], [-1.0])], 2)
    losses, stats = gspo_surrogate(lp, old, adv, mask, 0.2, 0.2)
    s = math.exp(0.1)
    assert_f64_close(losses, [[-2 * s, -2 * s], [0.8, 0.0]])
    losses.sum().backward()
    assert_f64_close(lp.grad, [[-2 * s, -2 * s], [0.0, 0.0]])
    assert stats["clip_frac"].item() == 1 / 3


def test_gspo_stays_on_the_inputs_device_and_dtype():
    assert_stays_on_meta_in_f64(gspo_surrogate)
