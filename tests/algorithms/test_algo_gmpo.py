"""GMPO's surrogate (algorithms/gmpo.py) recomputed token by token in float64 from its module
docstring: the geometric mean of the pessimistically clipped token ratios, on log-ratios inside
the clip range, beyond each bound and on it, advantages of each sign and zero, a one-token row and
a fully masked row holding NaN. Losses, gradients (the part that trains), every statistic under
its exact key and the config's error message in full; float64 in, float64 out, on the inputs'
device. Configs are built inside the tests: mutmut forks its workers after the modules are
imported (docs/mutation.md).
"""

from __future__ import annotations

import math

import pytest
import torch

from algorithms import ConfigError, get_algorithm
from algorithms.gmpo import GMPOConfig, gmpo_surrogate
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

#: (log-ratios, advantages) per response; clip range in log space [-0.2, 0.3].
GMPO_LOW, GMPO_HIGH = 0.2, 0.3
GMPO_ROWS = [
    # A > 0 (and below 1): above the upper bound (clipped to 0.3), inside, below the lower bound
    # (the pessimistic side keeps -0.6 itself, but the token counts as clipped), inside
    ([0.5, 0.1, -0.6, 0.25], [0.5] * 4),
    # A < 0: below the lower bound (clipped to -0.2), above the upper one (kept), inside
    ([-0.5, 0.6, -0.1], [-1.5] * 3),
    # A = 0: loss 0 whatever the ratio; its clipped token is in neither clip fraction
    ([0.7, 0.0], [0.0] * 2),
    # one valid token: its own log-ratio is the mean
    ([0.2], [2.0]),
    # no valid token: loss 0
    ([], []),
]


def _gmpo_reference(ls: list[float], adv: list[float]) -> tuple[float, list[float]]:
    """GMPO's loss of one response and its gradient in each token's log-prob, from the module
    docstring: ``l'_t = sgn(A) * min(sgn(A) * l_t, sgn(A) * clip(l_t))``,
    ``loss = -mean(A) * exp(mean_t l'_t)``; the gradient reaches a token only where its
    pessimistic term is its own log-ratio (not the constant bound)."""
    if not ls:
        return 0.0, []
    n = len(ls)
    a = sum(adv) / n
    pess, live = [], []
    for x, at in zip(ls, adv, strict=True):
        s = (at > 0) - (at < 0)
        c = min(max(x, -GMPO_LOW), GMPO_HIGH)
        pess.append(s * min(s * x, s * c))
        live.append(s != 0 and s * x <= s * c)
    ratio = math.exp(sum(pess) / n)
    return -a * ratio, [-a * ratio / n if ok else 0.0 for ok in live]


def test_gmpo_is_the_geometric_mean_of_the_pessimistically_clipped_token_ratios():
    lp, old, adv, mask = ratio_inputs(GMPO_ROWS, 4)
    losses, stats = gmpo_surrogate(lp, old, adv, mask, GMPO_LOW, GMPO_HIGH)
    ref = [
        _gmpo_reference(ls, a)
        for ls, a in zip(log_ratios(lp, mask), [r[1] for r in GMPO_ROWS], strict=True)
    ]
    assert_f64_close(losses, [loss for loss, _ in ref])
    assert losses[-1].item() == 0.0  # the fully masked row, NaN inputs and all
    losses.sum().backward()
    assert_f64_close(lp.grad, padded([g for _, g in ref], 4))  # 0 (not NaN) at masked positions

    # 10 valid tokens; clipped (log-ratio outside [-0.2, 0.3]): two with A > 0 (row 0), two with
    # A < 0 (row 1), one with A = 0 (row 2, counted in neither)
    assert list(stats) == ["clip_frac", "clip_frac_lower", "approx_kl"]
    assert all(v.dtype == F64 and v.shape == () for v in stats.values())
    assert stats["clip_frac"].item() == 2 / 10
    assert stats["clip_frac_lower"].item() == 2 / 10
    kl = -sum(sum(ls) for ls in log_ratios(lp, mask)) / 10  # mean old - logp over valid tokens
    assert stats["approx_kl"].item() == pytest.approx(kl, rel=TOL, abs=TOL)
    assert kl < -0.1  # the sign is told apart


def test_gmpo_hand_values():
    # one token above the upper bound with A = 1: ratio e^0.3 (clipped), loss -e^0.3, no
    # gradient; one below the lower bound with A = -1: ratio e^-0.2, loss e^-0.2; a log-ratio
    # exactly on a bound is not clipped (0.25 = -0.75 - (-1.0) exactly, high = 0.25)
    lp, old, adv, mask = ratio_inputs([([0.5], [1.0]), ([-0.5], [-1.0]), ([0.25], [1.0])], 1)
    losses, stats = gmpo_surrogate(lp, old, adv, mask, 0.2, 0.3)
    assert_f64_close(losses, [-math.exp(0.3), math.exp(-0.2), -math.exp(0.25)])
    losses.sum().backward()
    assert_f64_close(lp.grad, [[0.0], [0.0], [-math.exp(0.25)]])
    on_bound = gmpo_surrogate(lp[2:], old[2:], adv[2:], mask[2:], 0.2, 0.25)
    assert lp[2, 0].item() - OLD == 0.25
    assert_f64_close(on_bound[0], [-math.exp(0.25)])
    assert on_bound[1]["clip_frac"].item() == 0.0
    assert stats["clip_frac"].item() == stats["clip_frac_lower"].item() == 1 / 3


def test_gmpo_algorithm_passes_its_configured_log_space_bounds():
    """``GMPO.surrogate`` is :func:`gmpo_surrogate` with the config's two bounds, each in its
    place: tokens beyond each bound, with the advantage's sign that clips them."""
    rows = [([0.5, 0.05], [1.0, 1.0]), ([-0.5, -0.05], [-1.0, -1.0])]
    lp, old, adv, mask = ratio_inputs(rows, 2)
    alg = get_algorithm("gmpo", clip_ratio_low=0.1, clip_ratio_high=0.3)
    losses, stats = alg.surrogate(lp, old, adv, mask)
    expected, expected_stats = gmpo_surrogate(lp, old, adv, mask, 0.1, 0.3)
    assert torch.equal(losses, expected)
    assert stats.keys() == expected_stats.keys()
    assert all(torch.equal(stats[k], expected_stats[k]) for k in stats)
    # row 0: mean(0.3, 0.05) = 0.175; row 1: mean(-0.1, -0.05) = -0.075
    assert_f64_close(losses, [-math.exp(0.175), math.exp(-0.075)])


def test_gmpo_config_refuses_another_aggregation_with_the_full_message():
    with pytest.raises(ConfigError) as err:
        GMPOConfig(loss_agg_mode="token-mean")
    assert str(err.value) == (
        "GMPOConfig.loss_agg_mode='token-mean' is invalid: GMPO's loss is a mean over "
        "responses; must be 'seq-mean-token-mean'"
    )


def test_gmpo_stays_on_the_inputs_device_and_dtype():
    assert_stays_on_meta_in_f64(gmpo_surrogate)
