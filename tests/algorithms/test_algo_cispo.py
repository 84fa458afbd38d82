"""CISPO's surrogate (algorithms/cispo.py) recomputed token by token in float64 from its
module docstring: each token weighted by its clipped, stop-gradient ratio, so every token keeps a
REINFORCE gradient. Losses, gradients and every statistic under its exact key; the default's
missing lower bound; float64 in, float64 out, on the inputs' device (docs/mutation.md).
"""

from __future__ import annotations

import math

import pytest

from algorithms import get_algorithm
from algorithms.cispo import cispo_surrogate
from testkit.ratios import (
    OLD,
    TOL,
    assert_f64_close,
    assert_stays_on_meta_in_f64,
    log_ratios,
    padded,
    ratio_inputs,
)
from testkit.tensors import F64


def test_cispo_weights_each_token_by_its_clipped_stop_gradient_ratio():
    """``loss_t = -sg[clip(r_t, 1 - eps_low, 1 + eps_high)] * A_t * log pi(y_t)``: every token
    keeps the REINFORCE gradient ``-clip(r_t) * A_t``, the clipped ones included."""
    low, high = 0.5, 0.2  # weight in [0.5, 1.2]
    rows = [
        # r = e^-1 = 0.368 (clipped up to 0.5), e^0.1 (inside), e^0.5 = 1.65 (down to 1.2)
        ([-1.0, 0.1, 0.5], [1.0, -2.0, 0.5]),
        # e^-0.3 = 0.741 (inside), one token
        ([-0.3], [-1.0]),
        ([], []),
    ]
    lp, old, adv, mask = ratio_inputs(rows, 3)
    losses, stats = cispo_surrogate(lp, old, adv, mask, low, high)
    weights = [
        [min(max(math.exp(x), 1 - low), 1 + high) for x in ls] for ls in log_ratios(lp, mask)
    ]
    logps = [[OLD + x for x in ls] for ls, _ in rows]
    assert_f64_close(
        losses,
        padded(
            [
                [-w * a * p for w, a, p in zip(ws, r[1], ps, strict=True)]
                for ws, r, ps in zip(weights, rows, logps, strict=True)
            ],
            3,
        ),
    )
    assert weights[0][0] == 0.5 and weights[0][2] == 1.2
    losses.sum().backward()
    grads = [
        [-w * a for w, a in zip(ws, r[1], strict=True)] for ws, r in zip(weights, rows, strict=True)
    ]
    assert_f64_close(lp.grad, padded(grads, 3))

    assert list(stats) == ["clip_frac", "approx_kl"]
    assert all(v.dtype == F64 and v.shape == () for v in stats.values())
    assert stats["clip_frac"].item() == 2 / 4
    kl = -sum(sum(ls) for ls in log_ratios(lp, mask)) / 4
    assert stats["approx_kl"].item() == pytest.approx(kl, rel=TOL, abs=TOL)
    assert kl > 0.1


def test_cispo_default_has_no_lower_bound_on_the_weight():
    # clip_ratio_low = 1: the weight's floor is 0, which no ratio reaches (e^-5 stays e^-5);
    # the ceiling is 1.2
    lp, old, adv, mask = ratio_inputs([([-5.0, 0.5], [1.0, 1.0])], 2)
    losses, stats = get_algorithm("cispo").surrogate(lp, old, adv, mask)
    assert_f64_close(losses, [[-math.exp(-5.0) * (OLD - 5.0), -1.2 * (OLD + 0.5)]])
    assert stats["clip_frac"].item() == 1 / 2


def test_cispo_stays_on_the_inputs_device_and_dtype():
    assert_stays_on_meta_in_f64(cispo_surrogate)
