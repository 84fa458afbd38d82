"""Hand-computed advantages, reward shaping and batch filters of every built-in algorithm.

The shared example: 2 groups x 3 samples, 3 tokens, ids deliberately unsorted and
non-contiguous. Group 7 = samples 0, 2, 4 with R = [1, 0, 0]; group 3 = samples 1, 3, 5 with
R = [1, 1, 1] (all equal). Rows are right-padded to different lengths.

The exact-value tests at the end pin what mutation testing found loose (docs/mutation.md): a
group of one, GAE over one token, DAPO's shaping and filter in float64, ReMax's baseline cast to
the rewards' dtype, outputs on the rewards' device, and every error message in full.
"""

from __future__ import annotations

import math

import pytest
import torch

from algorithms import get_algorithm
from algorithms.ppo import gae
from testkit.messages import assert_raises_exactly, message_cases
from testkit.tensors import F64, IDS_CPU, INF, assert_on_meta, f64, meta, meta_mask

NAN = float("nan")
IDS = torch.tensor([7, 3, 7, 3, 7, 3])
R = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 1.0])
MASK = torch.tensor(
    [[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0], [1, 1, 1]], dtype=torch.bool
)


def rows(per_sample: list[float]) -> torch.Tensor:
    """Expected (B, T): each sample's scalar on its valid tokens, 0 on padding."""
    return torch.tensor(per_sample)[:, None] * MASK


# --- GRPO / DAPO ----------------------------------------------------------------------------


def test_grpo_hand():
    adv, returns = get_algorithm("grpo").advantages(R, MASK, IDS)
    # group 7: mean 1/3, std sqrt(1/3) = 0.57735
    #   -> (2/3) / 0.57735 = 1.1547 and (-1/3) / 0.57735 = -0.57735
    # (eps = 1e-6 shifts the 6th digit); group 3: (1 - 1) / (0 + 1e-6) = 0
    expected = rows([1.1547, 0.0, -0.57735, 0.0, -0.57735, 0.0])
    assert torch.allclose(adv, expected, atol=1e-5)
    assert returns is None
    assert (adv[~MASK] == 0).all()


def test_grpo_without_std_is_mean_baseline():
    adv, _ = get_algorithm("grpo", norm_adv_by_std=False).advantages(R, MASK, IDS)
    assert torch.allclose(adv, rows([2 / 3, 0.0, -1 / 3, 0.0, -1 / 3, 0.0]))


def test_dapo_advantage_is_grpo():
    a_grpo, _ = get_algorithm("grpo").advantages(R, MASK, IDS)
    a_dapo, _ = get_algorithm("dapo").advantages(R, MASK, IDS)
    assert torch.equal(a_grpo, a_dapo)


def test_group_of_size_one_follows_verl():
    ids, r = torch.tensor([1, 2, 2]), torch.tensor([1.0, 0.0, 1.0])
    mask = torch.ones(3, 2, dtype=torch.bool)
    # GRPO: singleton -> mean 0, std 1 -> 1 / (1 + 1e-6)
    #   group 2 [0, 1]: mean 0.5, std 0.7071 -> -/+ 0.5 / 0.7071 = -/+ 0.7071
    adv, _ = get_algorithm("grpo").advantages(r, mask, ids)
    assert adv[:, 0].tolist() == pytest.approx([1 / (1 + 1e-6), -0.707106, 0.707106], abs=1e-5)
    # RLOO: singleton keeps A = R; pair: 0 - 1 = -1, 1 - 0 = 1
    adv, _ = get_algorithm("rloo").advantages(r, mask, ids)
    assert adv[:, 0].tolist() == pytest.approx([1.0, -1.0, 1.0])
    # DAPO keeps the singleton (verl: std > 0 or size 1) and the mixed pair
    assert get_algorithm("dapo").filter_groups(r, ids).tolist() == [True, True, True]


def test_grpo_requires_group_ids():
    with pytest.raises(ValueError, match="group_ids"):
        get_algorithm("grpo").advantages(R, MASK, None)


# --- RLOO -----------------------------------------------------------------------------------


def test_rloo_hand():
    adv, returns = get_algorithm("rloo").advantages(R, MASK, IDS)
    # group 7: 1 - (0 + 0)/2 = 1; 0 - (1 + 0)/2 = -0.5 (twice); group 3: 1 - 1 = 0
    assert torch.allclose(adv, rows([1.0, 0.0, -0.5, 0.0, -0.5, 0.0]))
    assert returns is None


def _verl_rloo_loop(r: torch.Tensor, ids: torch.Tensor) -> list[float]:
    """verl's compute_rloo_outcome_advantage, as its python loop."""
    groups: dict[int, list[float]] = {}
    for value, gid in zip(r.tolist(), ids.tolist(), strict=True):
        groups.setdefault(gid, []).append(value)
    out = []
    for value, gid in zip(r.tolist(), ids.tolist(), strict=True):
        n = len(groups[gid])
        mean = sum(groups[gid]) / n
        out.append(value * n / (n - 1) - mean * n / (n - 1) if n > 1 else value)
    return out


def _verl_grpo_loop(r: torch.Tensor, ids: torch.Tensor, eps: float = 1e-6) -> list[float]:
    """verl's compute_grpo_outcome_advantage, as its python loop."""
    groups: dict[int, list[float]] = {}
    for value, gid in zip(r.tolist(), ids.tolist(), strict=True):
        groups.setdefault(gid, []).append(value)
    out = []
    for value, gid in zip(r.tolist(), ids.tolist(), strict=True):
        xs = torch.tensor(groups[gid], dtype=torch.float64)
        mean, std = (0.0, 1.0) if len(xs) == 1 else (xs.mean().item(), xs.std().item())
        out.append((value - mean) / (std + eps))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_group_advantages_match_verl_loops(seed):
    g = torch.Generator().manual_seed(seed)
    b = 37
    ids = torch.randint(-3, 9, (b,), generator=g) * 11
    r = torch.randint(0, 2, (b,), generator=g).double() + 0.1 * torch.randn(b, generator=g).double()
    mask = torch.ones(b, 1, dtype=torch.bool)
    adv, _ = get_algorithm("grpo").advantages(r, mask, ids)
    assert adv[:, 0].tolist() == pytest.approx(_verl_grpo_loop(r, ids), abs=1e-9)
    adv, _ = get_algorithm("rloo").advantages(r, mask, ids)
    assert adv[:, 0].tolist() == pytest.approx(_verl_rloo_loop(r, ids), abs=1e-9)


# --- SPPO / ReMax ---------------------------------------------------------------------------


def test_sppo_hand():
    r = torch.tensor([1.0, 0.0, 1.0])
    logits = torch.tensor([0.0, math.log(3), -math.log(3)], requires_grad=True)
    mask = torch.tensor([[1, 1], [1, 0], [0, 0]])
    adv, returns = get_algorithm("sppo").advantages(r, mask, None, values=logits)
    # sigmoid: 0.5, 0.75, 0.25 -> A = 0.5, -0.75, 0.75 on valid tokens, no normalisation
    assert torch.allclose(adv, torch.tensor([[0.5, 0.5], [-0.75, 0.0], [0.0, 0.0]]))
    assert torch.equal(returns, r)
    assert not adv.requires_grad  # sigmoid(v) is detached from the critic's graph
    with pytest.raises(ValueError, match="values"):
        get_algorithm("sppo").advantages(r, mask, None)
    with pytest.raises(ValueError, match="values"):
        get_algorithm("sppo").advantages(r, mask, None, values=torch.zeros(3, 2))


def test_remax_hand():
    r, base = torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.tensor([1.0, 1.0, 0.0, 0.0])
    mask = torch.tensor([[1, 1], [1, 1], [1, 0], [1, 1]])
    adv, returns = get_algorithm("remax").advantages(r, mask, None, baseline_rewards=base)
    # R - R_greedy = 0, -1, 1, 0
    assert torch.equal(adv, torch.tensor([[0.0, 0.0], [-1.0, -1.0], [1.0, 0.0], [0.0, 0.0]]))
    assert returns is None
    with pytest.raises(ValueError, match="baseline_rewards"):
        get_algorithm("remax").advantages(r, mask, None)


# --- PPO / GAE ------------------------------------------------------------------------------


def test_gae_hand_gamma_lam_half():
    # row 0: r = [0, 0, 1], V = [0.5, 0.25, 1.0]
    #   t2: delta = 1 - 1.0 = 0                          -> A2 = 0
    #   t1: delta = 0 + 0.5 * 1.0 - 0.25 = 0.25          -> A1 = 0.25 + 0.25 * 0 = 0.25
    #   t0: delta = 0 + 0.5 * 0.25 - 0.5 = -0.375        -> A0 = -0.375 + 0.25 * 0.25 = -0.3125
    # row 1 (padded at t2, garbage value): r = [0, 1, -], V = [0.5, 0.25, nan]
    #   t1: delta = 1 - 0.25 = 0.75                      -> A1 = 0.75
    #   t0: delta = 0.125 - 0.5 = -0.375                 -> A0 = -0.375 + 0.25 * 0.75 = -0.1875
    values = torch.tensor([[0.5, 0.25, 1.0], [0.5, 0.25, NAN]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    algo = get_algorithm("ppo", gamma=0.5, lam=0.5, whiten_advantages=False)
    adv, returns = algo.advantages(torch.tensor([1.0, 1.0]), mask, None, values=values)
    assert torch.allclose(adv, torch.tensor([[-0.3125, 0.25, 0.0], [-0.1875, 0.75, 0.0]]))
    # returns = A + V
    assert torch.allclose(returns, torch.tensor([[0.1875, 0.5, 1.0], [0.3125, 1.0, 0.0]]))


def test_gae_gamma_lam_one_is_reward_minus_value():
    values = torch.tensor([[0.5, 0.75, 1.0]])
    adv, returns = get_algorithm("ppo", whiten_advantages=False).advantages(
        torch.tensor([1.0]), torch.ones(1, 3), None, values=values
    )
    assert torch.allclose(adv, 1.0 - values)  # telescoping: A_t = R - V_t
    assert torch.allclose(returns, torch.ones(1, 3))


def test_ppo_kl_in_reward_hand():
    # V = 0, gamma = lam = 1: A_t = sum_{s >= t} r_s; r = [-0.05, -0.1, 1 - 0.15]
    algo = get_algorithm("ppo", whiten_advantages=False, kl_in_reward=True, kl_coef=0.5)
    assert algo.uses_reference and algo.kl_in_reward
    token_kl = torch.tensor([[0.1, 0.2, 0.3, NAN]])
    mask = torch.tensor([[1, 1, 1, 0]])
    adv, _ = algo.advantages(
        torch.tensor([1.0]), mask, None, values=torch.zeros(1, 4), token_kl=token_kl
    )
    assert torch.allclose(adv, torch.tensor([[0.7, 0.75, 0.85, 0.0]]))
    with pytest.raises(ValueError, match="token_kl"):
        algo.advantages(torch.tensor([1.0]), mask, None, values=torch.zeros(1, 4))


def test_ppo_whitening_uses_valid_tokens_only():
    values = torch.tensor([[0.5, 0.75, 1.0, NAN]])
    mask = torch.tensor([[1, 1, 1, 0]])
    adv, _ = get_algorithm("ppo").advantages(torch.tensor([1.0]), mask, None, values=values)
    # raw A = [0.5, 0.25, 0]: mean 0.25, unbiased std 0.25 -> [1, 0, -1]
    assert torch.allclose(adv, torch.tensor([[1.0, 0.0, -1.0, 0.0]]), atol=1e-5)


def _gae_loop(rewards, values, mask, gamma, lam):
    """Reference: per row, over its valid positions only, the textbook recursion."""
    adv = torch.zeros_like(values)
    for i in range(values.shape[0]):
        idx = mask[i].nonzero().flatten().tolist()
        last, next_v = 0.0, 0.0
        for t in reversed(idx):
            delta = rewards[i, t].item() + gamma * next_v - values[i, t].item()
            last = delta + gamma * lam * last
            next_v = values[i, t].item()
            adv[i, t] = last
    return adv


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("gamma, lam", [(0.9, 0.8), (1.0, 0.95), (0.5, 1.0), (1.0, 1.0)])
def test_gae_matches_loop_with_holes(seed, gamma, lam):
    g = torch.Generator().manual_seed(seed)
    b, t = 5, 7
    mask = torch.rand(b, t, generator=g) > 0.3  # interleaved holes, not only right padding
    mask[0] = False  # a row with no valid token
    rewards = torch.randn(b, t, generator=g, dtype=torch.float64)
    values = torch.randn(b, t, generator=g, dtype=torch.float64)
    adv, returns = gae(rewards, values, mask, gamma, lam)
    expected = _gae_loop(rewards, values, mask, gamma, lam)
    assert torch.allclose(adv, expected, atol=1e-12)
    assert torch.allclose(returns, (expected + values) * mask, atol=1e-12)


def test_ppo_reward_goes_on_last_valid_token():
    # interleaved mask [1, 0, 1, 0]: the last valid token is t=2; V = 0, gamma = 0.5, lam = 1
    # r = [0, -, 1, -] -> A2 = 1; A0 = 0 + 0.5 * 1 * A2 (next valid is t2, t1 skipped) = 0.5
    mask = torch.tensor([[1, 0, 1, 0]])
    adv, _ = get_algorithm("ppo", gamma=0.5, whiten_advantages=False).advantages(
        torch.tensor([1.0]), mask, None, values=torch.zeros(1, 4)
    )
    assert torch.allclose(adv, torch.tensor([[0.5, 0.0, 1.0, 0.0]]))


# --- DAPO shaping and filtering -------------------------------------------------------------


def test_overlong_penalty_boundaries():
    # L_max = 20, L_buf = 4 -> ramp from 16 (0) to 20 (-1); verl applies no clamp beyond
    algo = get_algorithm("dapo", max_response_length=20, overlong_buffer=4)
    lengths = torch.tensor([10, 16, 18, 20, 22])
    shaped = algo.shape_rewards(torch.ones(5), lengths)
    assert shaped.tolist() == pytest.approx([1.0, 1.0, 0.5, 0.0, -0.5])
    doubled = get_algorithm(
        "dapo", max_response_length=20, overlong_buffer=4, overlong_penalty_factor=2
    )
    assert doubled.shape_rewards(torch.zeros(1), torch.tensor([18])).item() == pytest.approx(-1.0)
    off = get_algorithm("dapo", overlong_penalty=False)
    assert torch.equal(off.shape_rewards(torch.ones(2), torch.tensor([10**6, 3])), torch.ones(2))


def test_shaping_is_identity_for_others():
    for name in ("sppo", "ppo", "grpo", "rloo", "remax"):
        r = torch.tensor([1.0, 0.0])
        assert torch.equal(get_algorithm(name).shape_rewards(r, torch.tensor([10**6, 1])), r)


def test_dapo_dynamic_sampling_drops_all_equal_groups():
    keep = get_algorithm("dapo").filter_groups(R, IDS)
    assert keep.tolist() == [True, False, True, False, True, False]  # group 3 is all ones
    all_zero = get_algorithm("dapo").filter_groups(torch.zeros(4), torch.tensor([1, 1, 2, 2]))
    assert not all_zero.any()
    off = get_algorithm("dapo", dynamic_sampling=False)
    assert off.filter_groups(R, IDS).all() and off.max_gen_batches == 1
    assert get_algorithm("grpo").filter_groups(R, IDS).all()


# --- exact values where they differ from the general formula, and dtypes ---------------------


def test_rloo_group_of_one_keeps_its_reward_exactly():
    adv, _ = get_algorithm("rloo").advantages(
        f64([INF, 1.0, 0.0]), torch.ones(3, 1), torch.tensor([5, 6, 6])
    )
    # singleton: A = R (inf - inf would be NaN); pair [1, 0]: 1 - 0 = 1 and 0 - 1 = -1
    assert adv[:, 0].tolist() == [INF, 1.0, -1.0]


def test_gae_over_a_single_token():
    adv, returns = gae(f64([[1.0]]), f64([[0.25]]), torch.ones(1, 1), 1.0, 1.0)
    assert adv.tolist() == [[0.75]] and returns.tolist() == [[1.0]]


def test_dapo_filter_without_dynamic_sampling_is_a_bool_keep_mask():
    keep = get_algorithm("dapo", dynamic_sampling=False).filter_groups(
        torch.zeros(3), torch.tensor([0, 0, 1])
    )
    assert keep.dtype == torch.bool and keep.tolist() == [True, True, True]


def test_dapo_overlong_penalty_in_float64():
    dapo = get_algorithm("dapo", max_response_length=10, overlong_buffer=3)
    # ramp from L_max - L_buf = 7: len 8 -> -1/3, len 10 -> -1, len 5 -> 0
    shaped = dapo.shape_rewards(f64([1.0, 0.0, 1.0]), torch.tensor([5, 8, 10]))
    assert shaped.dtype == F64
    assert shaped.tolist() == [1.0, -1 / 3, 0.0]  # exact: the same IEEE operations in float64


def test_dapo_filter_in_float64():
    # rewards differing by less than float32 resolves: a float32 max/min would call them equal
    r = f64([0.5, 0.5 + 1e-12, 1.0, 1.0])
    keep = get_algorithm("dapo").filter_groups(r, torch.tensor([0, 0, 1, 1]))
    assert keep.tolist() == [True, True, False, False]


def test_remax_advantage_in_the_rewards_dtype():
    adv, _ = get_algorithm("remax").advantages(
        torch.tensor([1.0, 0.0]), torch.ones(2, 1), None, baseline_rewards=f64([0.1, 0.0])
    )
    assert adv.dtype == torch.float32  # the baseline is cast to the rewards, not the reverse
    assert adv[:, 0].tolist() == [(torch.tensor(1.0) - torch.tensor(0.1)).item(), 0.0]


MASK23 = torch.ones(2, 3, dtype=torch.bool)
R2 = torch.tensor([1.0, 0.0])
ADVANTAGE_ERRORS = [
    (
        lambda: get_algorithm("dapo").shape_rewards(R2, torch.tensor([1, 2, 3])),
        ValueError,
        "dapo: response_lengths (3,) must match rewards (2,)",
    ),
    (
        lambda: get_algorithm("ppo").advantages(R2, MASK23, None),
        ValueError,
        "ppo: values must be the critic's (B, T) token values (2, 3), got None",
    ),
    (
        lambda: get_algorithm("ppo").advantages(R2, MASK23, None, values=torch.zeros(2, 4)),
        ValueError,
        "ppo: values must be the critic's (B, T) token values (2, 3), got (2, 4)",
    ),
    (
        lambda: get_algorithm("ppo", kl_in_reward=True).advantages(
            R2, MASK23, None, values=torch.zeros(2, 3)
        ),
        ValueError,
        "ppo: token_kl (B, T) is required when kl_in_reward=True",
    ),
    (
        lambda: get_algorithm("remax").advantages(R2, MASK23, None),
        ValueError,
        "remax: baseline_rewards (the greedy responses' rewards, shape (2,)) is required, got None",
    ),
    (
        lambda: get_algorithm("remax").advantages(
            R2, MASK23, None, baseline_rewards=torch.zeros(3)
        ),
        ValueError,
        "remax: baseline_rewards (the greedy responses' rewards, shape (2,)) is required, got (3,)",
    ),
    (
        lambda: get_algorithm("rloo").advantages(R2, MASK23, None),
        ValueError,
        "rloo: group_ids (B,) is required",
    ),
    (
        lambda: get_algorithm("sppo").advantages(R2, MASK23, None),
        ValueError,
        "sppo: values (the prompt critic's (B,) logits) is required",
    ),
]

META_CALLS = {
    "dapo.filter_groups": lambda: get_algorithm("dapo").filter_groups(meta(3), IDS_CPU),
    "grpo.advantages": lambda: get_algorithm("grpo").advantages(meta(3), meta_mask(3, 4), IDS_CPU),
    "rloo.advantages": lambda: get_algorithm("rloo").advantages(meta(3), meta_mask(3, 4), IDS_CPU),
    "ppo.gae": lambda: gae(meta(3, 4), meta(3, 4), meta_mask(3, 4), 1.0, 1.0),
}


@pytest.mark.parametrize("name", list(META_CALLS))
def test_outputs_stay_on_the_inputs_device(name):
    """Advantages, filters and GAE on ``meta`` rewards (an accelerator's stand-in) with group
    ids left on the CPU: every output on the rewards' device."""
    assert_on_meta(META_CALLS[name]())


@message_cases(ADVANTAGE_ERRORS)
def test_error_message_in_full(call, kind, message):
    assert_raises_exactly(call, kind, message)
