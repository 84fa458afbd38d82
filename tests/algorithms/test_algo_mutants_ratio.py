"""Exact values of the newer ratio-shaping surrogates, GMPO, GSPO and CISPO (docs/mutation.md).

Their only value tests compared them with verl's own functions, which run in the verl tests and
so outside the mutation run: mutants of every line survived. Here each surrogate is recomputed
in float64, token by token in plain Python, from the formula its module docstring gives (the
paper's, as verl writes it), on inputs that reach every branch: log-ratios inside the clip
range, beyond each bound and on it, advantages of each sign and zero, rows of different lengths,
a one-token row, a fully masked row holding NaN, GSPO's cap on the log-ratio. The losses,
their gradients (the part that trains), every statistic under its exact key, and the config's
error message in full are compared; float64 inputs come out float64, and every output stays on
the ``meta`` device the inputs are on.

Configs are built inside the tests: mutmut forks its workers after the modules are imported.
"""

from __future__ import annotations

import math

import pytest
import torch

from algorithms import ConfigError, get_algorithm
from algorithms.cispo import cispo_surrogate
from algorithms.gmpo import GMPOConfig, gmpo_surrogate
from algorithms.gspo import gspo_surrogate
from tests.support.testkit.tolerances import fp_tol

F64 = torch.float64
NAN = math.nan
META = torch.device("meta")

#: Tolerance between the torch result and the plain-Python float64 recomputation, relative and
#: absolute. Each value is a sum of at most 4 log-ratios of magnitude < 1 (|sum| < 3), then one
#: division, one exp and one or two products: the first-order rounding bound is about
#: 4 * eps64 * 3 for the sum plus one ulp per later operation, under 32 * eps64 (7e-15) of the
#: value. Every mutant below moves a value or a gradient by more than 1e-3.
TOL = fp_tol(32, dtype=F64)

OLD = -1.0  # every valid old log-prob: the log-ratio is logp - old, computed the same way here


def _close(actual: torch.Tensor, expected: list) -> None:
    assert actual.dtype == F64
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=F64), rtol=TOL, atol=TOL)


def _inputs(rows: list[tuple[list[float], list[float]]], t: int):
    """``(log_probs, old_log_probs, advantages, mask)`` in float64 from rows of (log-ratios,
    advantages), one entry per valid token, left-aligned and padded to ``t`` with NaN (masked
    positions may hold anything)."""
    logp, old, adv, mask = [], [], [], []
    for ls, adv_row in rows:
        pad = [NAN] * (t - len(ls))
        logp.append([OLD + x for x in ls] + pad)
        old.append([OLD] * len(ls) + pad)
        adv.append(list(adv_row) + pad)
        mask.append([1] * len(ls) + [0] * (t - len(ls)))
    lp = torch.tensor(logp, dtype=F64, requires_grad=True)
    return lp, torch.tensor(old, dtype=F64), torch.tensor(adv, dtype=F64), torch.tensor(mask)


def _log_ratios(lp: torch.Tensor, mask: torch.Tensor) -> list[list[float]]:
    """Each row's valid log-ratios, ``logp - old`` as float64 computes it (the same rounding)."""
    return [
        [p - OLD for p, m in zip(row, mrow, strict=True) if m]
        for row, mrow in zip(lp.tolist(), mask.tolist(), strict=True)
    ]


def _padded(rows: list[list[float]], t: int) -> list[list[float]]:
    return [row + [0.0] * (t - len(row)) for row in rows]


# --- GMPO -------------------------------------------------------------------------------------

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
    lp, old, adv, mask = _inputs(GMPO_ROWS, 4)
    losses, stats = gmpo_surrogate(lp, old, adv, mask, GMPO_LOW, GMPO_HIGH)
    ref = [
        _gmpo_reference(ls, a)
        for ls, a in zip(_log_ratios(lp, mask), [r[1] for r in GMPO_ROWS], strict=True)
    ]
    _close(losses, [loss for loss, _ in ref])
    assert losses[-1].item() == 0.0  # the fully masked row, NaN inputs and all
    losses.sum().backward()
    _close(lp.grad, _padded([g for _, g in ref], 4))  # 0 (not NaN) at masked positions

    # 10 valid tokens; clipped (log-ratio outside [-0.2, 0.3]): two with A > 0 (row 0), two with
    # A < 0 (row 1), one with A = 0 (row 2, counted in neither)
    assert list(stats) == ["clip_frac", "clip_frac_lower", "approx_kl"]
    assert all(v.dtype == F64 and v.shape == () for v in stats.values())
    assert stats["clip_frac"].item() == 2 / 10
    assert stats["clip_frac_lower"].item() == 2 / 10
    kl = -sum(sum(ls) for ls in _log_ratios(lp, mask)) / 10  # mean old - logp over valid tokens
    assert stats["approx_kl"].item() == pytest.approx(kl, rel=TOL, abs=TOL)
    assert kl < -0.1  # the sign is told apart


def test_gmpo_hand_values():
    # one token above the upper bound with A = 1: ratio e^0.3 (clipped), loss -e^0.3, no
    # gradient; one below the lower bound with A = -1: ratio e^-0.2, loss e^-0.2; a log-ratio
    # exactly on a bound is not clipped (0.25 = -0.75 - (-1.0) exactly, high = 0.25)
    lp, old, adv, mask = _inputs([([0.5], [1.0]), ([-0.5], [-1.0]), ([0.25], [1.0])], 1)
    losses, stats = gmpo_surrogate(lp, old, adv, mask, 0.2, 0.3)
    _close(losses, [-math.exp(0.3), math.exp(-0.2), -math.exp(0.25)])
    losses.sum().backward()
    _close(lp.grad, [[0.0], [0.0], [-math.exp(0.25)]])
    on_bound = gmpo_surrogate(lp[2:], old[2:], adv[2:], mask[2:], 0.2, 0.25)
    assert lp[2, 0].item() - OLD == 0.25
    _close(on_bound[0], [-math.exp(0.25)])
    assert on_bound[1]["clip_frac"].item() == 0.0
    assert stats["clip_frac"].item() == stats["clip_frac_lower"].item() == 1 / 3


def test_gmpo_algorithm_passes_its_configured_log_space_bounds():
    """``GMPO.surrogate`` is :func:`gmpo_surrogate` with the config's two bounds, each in its
    place: tokens beyond each bound, with the advantage's sign that clips them."""
    rows = [([0.5, 0.05], [1.0, 1.0]), ([-0.5, -0.05], [-1.0, -1.0])]
    lp, old, adv, mask = _inputs(rows, 2)
    alg = get_algorithm("gmpo", clip_ratio_low=0.1, clip_ratio_high=0.3)
    losses, stats = alg.surrogate(lp, old, adv, mask)
    expected, expected_stats = gmpo_surrogate(lp, old, adv, mask, 0.1, 0.3)
    assert torch.equal(losses, expected)
    assert stats.keys() == expected_stats.keys()
    assert all(torch.equal(stats[k], expected_stats[k]) for k in stats)
    # row 0: mean(0.3, 0.05) = 0.175; row 1: mean(-0.1, -0.05) = -0.075
    _close(losses, [-math.exp(0.175), math.exp(-0.075)])


def test_gmpo_config_refuses_another_aggregation_with_the_full_message():
    with pytest.raises(ConfigError) as err:
        GMPOConfig(loss_agg_mode="token-mean")
    assert str(err.value) == (
        "GMPOConfig.loss_agg_mode='token-mean' is invalid: GMPO's loss is a mean over "
        "responses; must be 'seq-mean-token-mean'"
    )


# --- GSPO -------------------------------------------------------------------------------------

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
    lp, old, adv, mask = _inputs(GSPO_ROWS, 4)
    losses, stats = gspo_surrogate(lp, old, adv, mask, GSPO_LOW, GSPO_HIGH)
    ref = [
        _gspo_reference(ls, a)
        for ls, a in zip(_log_ratios(lp, mask), [r[1] for r in GSPO_ROWS], strict=True)
    ]
    _close(losses, _padded([r[0] for r in ref], 4))
    assert losses[4, 0].item() == pytest.approx(math.exp(10.0), rel=TOL)  # the cap, not e^12
    losses.sum().backward()
    _close(lp.grad, _padded([r[1] for r in ref], 4))

    # 12 valid tokens, 5 clipped: two in row 0, two in row 1, the A > 0 one of the capped row
    assert sum(r[2] for r in ref) == 5
    assert list(stats) == ["clip_frac", "approx_kl"]
    assert all(v.dtype == F64 and v.shape == () for v in stats.values())
    assert stats["clip_frac"].item() == 5 / 12
    kl = -sum(sum(ls) for ls in _log_ratios(lp, mask)) / 12
    assert stats["approx_kl"].item() == pytest.approx(kl, rel=TOL, abs=TOL)
    assert kl < -1.0


def test_gspo_hand_values():
    # log-ratios 0.3 and -0.1 -> s = e^0.1 = 1.105, inside [0.8, 1.2]: loss -A * s on each token
    # of the response (A = 2), gradient -A * s on each token's own log-prob; a second response
    # of one token, log-ratio -0.5 -> s = e^-0.5 = 0.607, clipped to 0.8 with A = -1: loss 0.8
    lp, old, adv, mask = _inputs([([0.3, -0.1], [2.0, 2.0]), ([-0.5], [-1.0])], 2)
    losses, stats = gspo_surrogate(lp, old, adv, mask, 0.2, 0.2)
    s = math.exp(0.1)
    _close(losses, [[-2 * s, -2 * s], [0.8, 0.0]])
    losses.sum().backward()
    _close(lp.grad, [[-2 * s, -2 * s], [0.0, 0.0]])
    assert stats["clip_frac"].item() == 1 / 3


# --- CISPO ------------------------------------------------------------------------------------


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
    lp, old, adv, mask = _inputs(rows, 3)
    losses, stats = cispo_surrogate(lp, old, adv, mask, low, high)
    weights = [
        [min(max(math.exp(x), 1 - low), 1 + high) for x in ls] for ls in _log_ratios(lp, mask)
    ]
    logps = [[OLD + x for x in ls] for ls, _ in rows]
    _close(
        losses,
        _padded(
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
    _close(lp.grad, _padded(grads, 3))

    assert list(stats) == ["clip_frac", "approx_kl"]
    assert all(v.dtype == F64 and v.shape == () for v in stats.values())
    assert stats["clip_frac"].item() == 2 / 4
    kl = -sum(sum(ls) for ls in _log_ratios(lp, mask)) / 4
    assert stats["approx_kl"].item() == pytest.approx(kl, rel=TOL, abs=TOL)
    assert kl > 0.1


def test_cispo_default_has_no_lower_bound_on_the_weight():
    # clip_ratio_low = 1: the weight's floor is 0, which no ratio reaches (e^-5 stays e^-5);
    # the ceiling is 1.2
    lp, old, adv, mask = _inputs([([-5.0, 0.5], [1.0, 1.0])], 2)
    losses, stats = get_algorithm("cispo").surrogate(lp, old, adv, mask)
    _close(losses, [[-math.exp(-5.0) * (OLD - 5.0), -1.2 * (OLD + 0.5)]])
    assert stats["clip_frac"].item() == 1 / 2


# --- dtype and device -------------------------------------------------------------------------


@pytest.mark.parametrize("surrogate", [gmpo_surrogate, gspo_surrogate, cispo_surrogate])
def test_ratio_surrogates_stay_on_the_inputs_device_and_dtype(surrogate):
    """``meta`` stands in for an accelerator (a tensor made on the default device would be the
    bug it raises on); float64 in, float64 out, statistics included."""
    t = [torch.zeros(2, 3, dtype=F64, device=META) for _ in range(3)]
    mask = torch.ones(2, 3, dtype=torch.bool, device=META)
    losses, stats = surrogate(*t, mask, 0.2, 0.2)
    for v in (losses, *stats.values()):
        assert v.device == META and v.dtype == F64
