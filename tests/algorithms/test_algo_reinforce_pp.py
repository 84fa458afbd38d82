"""REINFORCE++ (algorithms/reinforce_pp.py), with and without its group baseline, recomputed in
float64 with plain Python loops from the formulas its docstrings give: the KL-in-reward
return-to-go, the KL-adjusted group baseline, the whitening over valid tokens. The edge cases
where the code differs from the general formula are pinned (one token, a group of one or two),
every error message is compared in full, and outputs keep the rewards' dtype and the inputs'
device. The verl comparisons (tests/verl_engine) run outside the mutation run's test selection,
so these are the exact values that kill its mutants (docs/mutation.md).

Everything that builds a config does it inside the test: mutmut forks its workers after the
modules are imported, so work done at import time runs unmutated.
"""

from __future__ import annotations

import math

import pytest
import torch

from algorithms import get_algorithm
from algorithms.reinforce_pp import reward_to_go
from testkit.tensors import F64, META, NAN, f64, meta, meta_mask
from testkit.tolerances import fp_tol

# --- float64 references written from the docstrings ---------------------------------------


def _whiten(rows: list[list[float]], mask: list[list[int]]) -> list[list[float]]:
    """verl's ``masked_whiten`` over every valid token of the batch: ``(x - mean) / sqrt(var +
    1e-8)`` with the unbiased variance, 0 on padding."""
    xs = [x for row, m in zip(rows, mask, strict=True) for x, v in zip(row, m, strict=True) if v]
    mean = sum(xs) / len(xs)
    var = sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)
    scale = 1.0 / math.sqrt(var + 1e-8)
    return [
        [(x - mean) * scale if v else 0.0 for x, v in zip(row, m, strict=True)]
        for row, m in zip(rows, mask, strict=True)
    ]


def _kl_in_reward_returns(rewards, kl, mask, kl_coef, gamma) -> list[list[float]]:
    """REINFORCE++'s returns: token reward ``R`` on the last valid token minus ``kl_coef *
    KL_t`` on every valid token, summed from t to the end with discount ``gamma`` over valid
    tokens (padding skipped, 0 there)."""
    out = []
    for r, k, m in zip(rewards, kl, mask, strict=True):
        last = max(t for t, v in enumerate(m) if v)
        running, row = 0.0, [0.0] * len(m)
        for t in reversed(range(len(m))):
            if m[t]:
                running = (r if t == last else 0.0) - kl_coef * k[t] + gamma * running
                row[t] = running
        out.append(row)
    return out


# A float64 whitening of <= 16 valid tokens recomputed in another summation order: the mean and
# the variance are sums of <= 16 terms (relative rounding <= 16 * eps64 each), and the whitened
# values here are at most 4 in magnitude (|x - mean| <= 1.5, std >= 0.26), so 16 * eps64 * 4
# bounds each step and 4x that the chain (mean, variance, rsqrt, product): ~5.7e-14. A wrong
# term (a sign, a discount, a mean) moves the result by > 1e-2.
WHITEN_TOL = fp_tol(16, scale=4.0 * 4.0, dtype=F64)


# --- REINFORCE++: the return-to-go ------------------------------------------------------------


def test_reward_to_go_discounts_over_valid_tokens_and_skips_padding():
    # row 0: padding at t = 2 is skipped (99 never read), G_3 = 4, G_1 = 2 + 4/2, G_0 = 1 + 4/2
    # row 1: G_2 = -8, G_1 = 0 + (-8)/2, G_0 = 6 + (-4)/2; padding at t = 3
    rewards = f64([[1.0, 2.0, 99.0, 4.0], [6.0, 0.0, -8.0, 99.0]])
    mask = torch.tensor([[1, 1, 0, 1], [1, 1, 1, 0]])
    got = reward_to_go(rewards, mask, 0.5)
    assert got.dtype == F64
    assert got.tolist() == [[3.0, 4.0, 0.0, 4.0], [4.0, -4.0, -8.0, 0.0]]
    # gamma = 1: the plain sum of what is left
    assert reward_to_go(rewards, mask, 1.0).tolist() == [
        [7.0, 6.0, 0.0, 4.0],
        [-2.0, -8.0, -8.0, 0.0],
    ]


def test_reward_to_go_of_one_token():
    got = reward_to_go(f64([[2.5], [3.0]]), torch.tensor([[1], [0]]), 0.9)
    assert got.tolist() == [[2.5], [0.0]]


# --- REINFORCE++: the advantage ---------------------------------------------------------------

REWARDS = [1.0, 0.0, 1.0, 0.5]
MASK = [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
KL = [[0.5, -0.25, 1.0, NAN], [2.0, 0.75, NAN, NAN], [0.1, 0.2, -0.3, 0.4], [1.5, NAN, NAN, NAN]]


@pytest.mark.parametrize("gamma", [1.0, 0.5])
def test_reinforce_pp_whitens_the_kl_in_reward_return_to_go(gamma):
    """Padding holds NaN KL: it is never read."""
    algo = get_algorithm("reinforce_pp", kl_coef=0.25, gamma=gamma)
    adv, returns = algo.advantages(f64(REWARDS), torch.tensor(MASK), None, token_kl=f64(KL))
    assert returns is None and adv.dtype == F64
    expected = _whiten(_kl_in_reward_returns(REWARDS, KL, MASK, 0.25, gamma), MASK)
    torch.testing.assert_close(adv, f64(expected), atol=WHITEN_TOL, rtol=0)


def test_reinforce_pp_without_kl_whitens_the_outcome_return():
    algo = get_algorithm("reinforce_pp", kl_in_reward=False, gamma=0.5)
    adv, _ = algo.advantages(f64(REWARDS), torch.tensor(MASK), None)  # no token_kl needed
    zero_kl = [[0.0] * 4 for _ in MASK]
    expected = _whiten(_kl_in_reward_returns(REWARDS, zero_kl, MASK, 0.0, 0.5), MASK)
    torch.testing.assert_close(adv, f64(expected), atol=WHITEN_TOL, rtol=0)


def _baseline_advantages(rewards, kl, mask, ids, kl_coef) -> list[list[float]]:
    """REINFORCE++-baseline: ``R' = R - kl_coef * sum_t KL_t`` (valid tokens), minus the mean
    of its group's ``R'`` (a group of one keeps ``R'``), on every valid token, whitened."""
    adjusted = [
        r - kl_coef * sum(k for k, v in zip(row, m, strict=True) if v)
        for r, row, m in zip(rewards, kl, mask, strict=True)
    ]
    centred = []
    for i, g in enumerate(ids):
        group = [a for a, h in zip(adjusted, ids, strict=True) if h == g]
        centred.append(adjusted[i] - (sum(group) / len(group) if len(group) > 1 else 0.0))
    return _whiten([[c] * len(m) for c, m in zip(centred, mask, strict=True)], mask)


def test_reinforce_pp_baseline_centres_each_group_on_its_kl_adjusted_mean():
    """Groups of three, two and one, interleaved; padding holds NaN KL."""
    rewards = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    ids = [7, 3, 7, 9, 3, 7]
    mask = [[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1], [1, 1, 0], [1, 1, 1]]
    kl = [[0.5, 1.0, NAN], [0.25, -0.5, 2.0], [3.0, NAN, NAN], [1.0, 1.0, 1.0], [0.0, 4.0, NAN],
          [-1.0, 0.5, 0.5]]  # fmt: skip
    algo = get_algorithm("reinforce_pp_baseline", kl_coef=0.25)
    adv, returns = algo.advantages(
        f64(rewards), torch.tensor(mask), torch.tensor(ids), token_kl=f64(kl)
    )
    assert returns is None and adv.dtype == F64
    expected = _baseline_advantages(rewards, kl, mask, ids, 0.25)
    torch.testing.assert_close(adv, f64(expected), atol=WHITEN_TOL, rtol=0)


def test_reinforce_pp_baseline_of_groups_of_one_keeps_the_adjusted_reward():
    # every group a singleton: R' = R - 0.5 * sum KL = [1 - 0.5, 0 - 1, 1 - 0] = [0.5, -1, 1],
    # mean 1/6, deviations [1/3, -7/6, 5/6], unbiased var (1/9 + 49/36 + 25/36) / 2 = 13/12
    algo = get_algorithm("reinforce_pp_baseline", kl_coef=0.5)
    adv, _ = algo.advantages(
        f64([1.0, 0.0, 1.0]),
        torch.ones(3, 1),
        torch.tensor([0, 1, 2]),
        token_kl=f64([[1.0], [2.0], [0.0]]),
    )
    scale = 1 / math.sqrt(13 / 12 + 1e-8)
    expected = [[1 / 3 * scale], [-7 / 6 * scale], [5 / 6 * scale]]
    torch.testing.assert_close(adv, f64(expected), atol=fp_tol(3, scale=2.0, dtype=F64), rtol=0)


@pytest.mark.parametrize("name", ["reinforce_pp", "reinforce_pp_baseline"])
def test_the_kl_is_cast_to_the_rewards_dtype(name):
    """float32 rewards with a float64 KL give float32 advantages, those of the KL rounded to
    float32 first (as ReMax's baseline: the side inputs follow the rewards, not the reverse)."""
    algo = get_algorithm(name, kl_coef=0.1)
    rewards = torch.tensor([1.0, 0.0, 0.5, 1.0])
    mask = torch.tensor(MASK)
    kl = f64(KL)
    ids = torch.tensor([0, 0, 1, 1])
    adv, _ = algo.advantages(rewards, mask, ids, token_kl=kl)
    assert adv.dtype == torch.float32
    same, _ = algo.advantages(rewards, mask, ids, token_kl=kl.float())
    assert torch.equal(adv, same)


MASK23 = torch.ones(2, 3, dtype=torch.bool)
R2 = torch.tensor([1.0, 0.0])


def _rpp(name: str, token_kl, grouped: bool = True):
    group_ids = torch.tensor([0, 0]) if grouped else None
    return get_algorithm(name).advantages(R2, MASK23, group_ids, token_kl=token_kl)


ERRORS = [
    *(
        (
            lambda name=name: _rpp(name, None),
            f"{name}: token_kl (2, 3) is required when kl_in_reward=True, got None",
        )
        for name in ("reinforce_pp", "reinforce_pp_baseline")
    ),
    *(
        (
            lambda name=name: _rpp(name, torch.zeros(2, 4)),
            f"{name}: token_kl (2, 3) is required when kl_in_reward=True, got (2, 4)",
        )
        for name in ("reinforce_pp", "reinforce_pp_baseline")
    ),
    (
        lambda: _rpp("reinforce_pp_baseline", torch.zeros(2, 3), grouped=False),
        "reinforce_pp_baseline: group_ids (B,) is required",
    ),
]


ERROR_IDS = [
    "reinforce_pp-no-kl",
    "baseline-no-kl",
    "reinforce_pp-kl-shape",
    "baseline-kl-shape",
    "baseline-no-group-ids",
]


@pytest.mark.parametrize("call, message", ERRORS, ids=ERROR_IDS)
def test_reinforce_pp_error_message_in_full(call, message):
    with pytest.raises(ValueError) as err:
        call()
    assert str(err.value) == message


# --- the inputs' device -----------------------------------------------------------------------


META_CALLS = {
    "reward_to_go": lambda: (reward_to_go(meta(3, 4), meta_mask(3, 4), 0.5), None),
    "reinforce_pp.advantages": lambda: get_algorithm("reinforce_pp").advantages(
        meta(3), meta_mask(3, 4), None, token_kl=meta(3, 4)
    ),
    "reinforce_pp_baseline.advantages": lambda: get_algorithm("reinforce_pp_baseline").advantages(
        meta(3), meta_mask(3, 4), torch.tensor([0, 0, 1]), token_kl=meta(3, 4)
    ),
}


@pytest.mark.parametrize("name", list(META_CALLS))
def test_outputs_stay_on_the_inputs_device(name):
    """``meta`` stands in for an accelerator: like CUDA it refuses a non-scalar CPU tensor in
    an operation on its tensors."""
    adv, returns = META_CALLS[name]()
    assert adv.device == META and returns is None
