"""Exact values for REINFORCE++ (with and without its group baseline) and SPO's tracker, where
mutation testing found the algorithm tests loose (docs/mutation.md).

The other tests compare these algorithms with verl (outside the mutation run's test selection)
or follow SPO's tracker through a whole training run, so a sign, a discount, a group-of-one or
group-of-two case, a metric averaged over the wrong count, or a state round trip that loses a
column went unnoticed. Here each documented formula is recomputed in float64 with plain Python
loops (the KL-in-reward return-to-go, the KL-adjusted group baseline, SPO's tracker update and
its step metrics), the tracker's ``state_dict``/``load_state_dict`` round trip is checked bit for
bit (and a state it cannot use is refused, not truncated), the edge cases where the code differs
from the general formula are pinned (one token, a group of one or two, two rows), every error
message is compared in full, and outputs keep the rewards' dtype and the inputs' device.

Everything that builds a config does it inside the test: mutmut forks its workers after the
modules are imported, so work done at import time runs unmutated.
"""

from __future__ import annotations

import math

import pytest
import torch

from algorithms import ConfigError, get_algorithm
from algorithms.reinforce_pp import reward_to_go
from algorithms.spo import SPOConfig
from testkit.tolerances import EPS32, fp_tol

F64 = torch.float64
NAN = math.nan
META = torch.device("meta")


def f64(x) -> torch.Tensor:
    return torch.tensor(x, dtype=F64)


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


# --- SPO: configuration and inputs ------------------------------------------------------------


def test_spo_rho_min_may_equal_rho_max_and_not_exceed_it():
    # equal bounds fix the forgetting factor whatever the drift: alpha = 0.75 * 0.5 + 1
    algo = get_algorithm("spo", rho_min=0.75, rho_max=0.75)
    zeros = torch.zeros(1, 1)
    for change in (0.0, 5.0):  # unseen (D = 0), then D = 5 (2^(-5 / 0.06) ~ 0)
        metrics = algo.observe(
            prompt_keys=["x"],
            rewards=torch.tensor([1.0]),
            response_mask=torch.ones(1, 1),
            old_log_probs=zeros,
            new_log_probs=zeros + change,
        )
        assert metrics["train/spo_rho"] == 0.75
    # alpha = 0.75 * (0.75 * 0.5 + 1) + 1 = 2.03125, beta = 0.75 * 0.75 * 0.5 = 0.28125
    assert algo.success_estimate("x") == 2.03125 / 2.3125
    with pytest.raises(ConfigError) as err:
        SPOConfig(rho_min=0.9, rho_max=0.8)
    assert str(err.value) == "SPOConfig.rho_min=0.9 is invalid: must be <= rho_max=0.8"


def _observe(algo, keys, rewards, new=0.0, mask=None):
    """One ``observe`` of ``len(keys)`` rows of two tokens: log-probs move from 0 by ``new``
    (a number or a (B, 2) tensor; None passes no new log-probs)."""
    b = len(keys)
    mask = torch.ones(b, 2) if mask is None else mask
    old = torch.zeros(b, 2, dtype=F64)
    return algo.observe(
        prompt_keys=keys,
        rewards=f64(rewards),
        response_mask=mask,
        old_log_probs=old,
        new_log_probs=None if new is None else old + new,
    )


SPO_NO_TRACKER = "spo: the saved state has no tracker ({}); it was not written by SPO.state_dict"
SPO_ERRORS = [
    (
        lambda: get_algorithm("spo").advantages(R2, MASK23, None),
        "spo: prompt_keys (one string per row naming its prompt) is required: the baseline is "
        "the prompt's tracked success rate",
    ),
    (
        lambda: get_algorithm("spo").observe(
            prompt_keys=None,
            rewards=R2,
            response_mask=MASK23,
            old_log_probs=torch.zeros(2, 3),
            new_log_probs=torch.zeros(2, 3),
        ),
        "spo: prompt_keys (one string per row naming its prompt) is required: the baseline is "
        "the prompt's tracked success rate",
    ),
    (
        lambda: get_algorithm("spo").advantages(R2, MASK23, None, prompt_keys=["a", "b", "c"]),
        "spo: 3 prompt_keys for 2 rewards",
    ),
    (
        lambda: _observe(get_algorithm("spo"), ["a", "b"], [1.0, 0.0], new=None),
        "spo: observe needs new_log_probs (the updated policy's)",
    ),
    (
        lambda: _observe(get_algorithm("spo"), ["a", "b", "c"], [0.25, -0.5, 1.0]),
        "spo: the tracker counts successes, so rewards must lie in [0, 1]; got min -0.5, max 1.0",
    ),
    (
        lambda: _observe(get_algorithm("spo"), ["a", "b"], [0.0, 1.5]),
        "spo: the tracker counts successes, so rewards must lie in [0, 1]; got min 0.0, max 1.5",
    ),
    (
        lambda: get_algorithm("spo").load_state_dict({}),
        SPO_NO_TRACKER.format("['alpha', 'beta', 'drift_mark', 'drift_total', 'keys'] missing"),
    ),
    (
        lambda: get_algorithm("spo").load_state_dict(
            {k: v for k, v in get_algorithm("spo").state_dict().items() if k != "drift_mark"}
        ),
        SPO_NO_TRACKER.format("['drift_mark'] missing"),
    ),
]


SPO_ERROR_IDS = [
    "advantages-no-keys",
    "observe-no-keys",
    "key-count",
    "no-new-log-probs",
    "reward-below-0",
    "reward-above-1",
    "empty-state",
    "state-without-drift-mark",
]


@pytest.mark.parametrize("call, message", SPO_ERRORS, ids=SPO_ERROR_IDS)
def test_spo_error_message_in_full(call, message):
    with pytest.raises(ValueError) as err:
        call()
    assert str(err.value) == message


# --- SPO: the tracker, its metrics and its state ----------------------------------------------


def test_spo_observe_updates_the_tracker_and_reports_the_steps_means():
    """Hand-computed with D_half = 0.5 (rho = 2^(-D / 0.5)), clipped to [0.1, 1]."""
    algo = get_algorithm("spo", rho_min=0.1, rho_max=1.0, drift_half_life=0.5)
    # step 1: the policy moves by 0.25 per token; "a" is new, so D = 0 and rho = 1:
    # a = (1 * 0.5 + 1, 1 * 0.5 + 0), marked at the drift total 0.25; the baseline the step
    # used is the prior's 0.5
    m1 = _observe(algo, ["a"], [1.0], new=0.25)
    assert m1 == {
        "train/spo_drift": 0.25,
        "train/spo_rho": 1.0,
        "train/spo_baseline": 0.5,
        "train/spo_tracked_prompts": 1.0,
    }
    assert algo.success_estimate("a") == 0.75
    # step 2: "a" twice (0 and 1) and "b" once (1); a padded token changes by NaN, never read.
    # drift 0.5 -> total 0.75; a: D = 0.75 - 0.25 = 0.5, rho = 1/2: alpha = 0.5 * 1.5 + 1,
    # beta = 0.5 * 0.5 + 1; b: new, rho = 1. Baseline: mean p over the rows, (0.75 + 0.5 +
    # 0.75) / 3; rho: mean over the prompts, (0.5 + 1) / 2
    mask = torch.tensor([[1, 1], [1, 1], [1, 0]])
    new = f64([[0.5, 0.5], [0.5, 0.5], [0.5, NAN]])
    m2 = _observe(algo, ["a", "b", "a"], [0.0, 1.0, 1.0], new=new, mask=mask)
    # the metrics travel as float32 tensors (one device sync): 2/3 is rounded to float32
    assert m2["train/spo_baseline"] == pytest.approx(2 / 3, rel=EPS32, abs=0)
    assert {k: v for k, v in m2.items() if k != "train/spo_baseline"} == {
        "train/spo_drift": 0.5,
        "train/spo_rho": 0.75,
        "train/spo_tracked_prompts": 2.0,
    }
    state = algo.state_dict()
    assert state["keys"] == ["a", "b"]
    assert state["alpha"].tolist() == [1.75, 1.5]
    assert state["beta"].tolist() == [1.25, 0.5]
    assert state["drift_mark"].tolist() == [0.75, 0.75]
    assert state["drift_total"] == 0.75
    assert (algo.success_estimate("a"), algo.success_estimate("b")) == (1.75 / 3, 0.75)
    assert algo.success_estimate("unseen") == 0.5


def _trained_spo(**overrides):
    """SPO after three steps whose drifts (0.1, 0.2, 0.3 per token) float32 cannot hold."""
    algo = get_algorithm("spo", **overrides)
    for step, keys in enumerate((["a", "b"], ["b", "c"], ["a", "c", "c"])):
        _observe(algo, keys, [1.0, 0.0, 1.0][: len(keys)], new=0.1 * (step + 1))
    return algo


def test_spo_state_dict_round_trip_is_exact():
    algo = _trained_spo()
    state = algo.state_dict()
    assert state["keys"] == ["a", "b", "c"]
    assert [state[k].dtype for k in ("alpha", "beta", "drift_mark")] == [F64] * 3
    assert state["drift_total"] == 0.1 + 0.2 + 0.1 * 3  # each step's float64 mean, summed
    resumed = get_algorithm("spo")
    resumed.load_state_dict(state)
    again = resumed.state_dict()
    assert again["keys"] == state["keys"] and again["drift_total"] == state["drift_total"]
    for k in ("alpha", "beta", "drift_mark"):
        assert torch.equal(again[k], state[k])
    # and the two continue alike, bit for bit: the next step reads every mark and the total
    m_algo, m_resumed = (
        _observe(a, ["a", "b", "d"], [0.0, 1.0, 1.0], new=0.05) for a in (algo, resumed)
    )
    assert m_algo == m_resumed
    final, resumed_final = algo.state_dict(), resumed.state_dict()
    assert final["keys"] == resumed_final["keys"] == ["a", "b", "c", "d"]
    assert final["drift_total"] == resumed_final["drift_total"]
    for k in ("alpha", "beta", "drift_mark"):
        assert torch.equal(final[k], resumed_final[k])


@pytest.mark.parametrize("column", ["keys", "alpha", "beta", "drift_mark"])
def test_spo_refuses_a_state_whose_columns_differ_in_length(column):
    """A state cut short in one column is refused and the tracker left as it was, not read as
    the prompts the shorter columns happen to cover."""
    algo = _trained_spo()
    before = algo.state_dict()
    state = dict(before)
    state[column] = state[column][:2]
    with pytest.raises(ValueError, match=r"^zip\(\) argument \d is (shorter|longer) than argument"):
        algo.load_state_dict(state)
    after = algo.state_dict()
    assert after["keys"] == before["keys"]
    for k in ("alpha", "beta", "drift_mark"):
        assert torch.equal(after[k], before[k])


# --- SPO: the advantage -----------------------------------------------------------------------


def test_spo_advantage_of_two_rows_is_normalised():
    # unseen prompts: A = r - 0.5 = [0.5, -0.5], mean 0, unbiased std sqrt(0.5)
    adv, returns = get_algorithm("spo").advantages(
        f64([1.0, 0.0]), torch.ones(2, 2), None, prompt_keys=["a", "b"]
    )
    assert returns is None and adv.dtype == F64
    a = 0.5 / (math.sqrt(0.5) + 1e-8)
    torch.testing.assert_close(adv, f64([[a, a], [-a, -a]]), atol=fp_tol(2, dtype=F64), rtol=0)


# --- the inputs' device -----------------------------------------------------------------------


def _meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype, device=META)


META_CALLS = {
    "reward_to_go": lambda: (
        reward_to_go(_meta(3, 4), _meta(3, 4, dtype=torch.bool), 0.5),
        None,
    ),
    "reinforce_pp.advantages": lambda: get_algorithm("reinforce_pp").advantages(
        _meta(3), _meta(3, 4, dtype=torch.bool), None, token_kl=_meta(3, 4)
    ),
    "reinforce_pp_baseline.advantages": lambda: get_algorithm("reinforce_pp_baseline").advantages(
        _meta(3), _meta(3, 4, dtype=torch.bool), torch.tensor([0, 0, 1]), token_kl=_meta(3, 4)
    ),
    "spo.advantages": lambda: get_algorithm("spo").advantages(
        _meta(3), _meta(3, 4, dtype=torch.bool), None, prompt_keys=["a", "b", "c"]
    ),
}


@pytest.mark.parametrize("name", list(META_CALLS))
def test_outputs_stay_on_the_inputs_device(name):
    """``meta`` stands in for an accelerator: like CUDA it refuses a non-scalar CPU tensor in
    an operation on its tensors (SPO's baseline is built from the tracker's Python floats, so
    it must be built on the rewards' device)."""
    adv, returns = META_CALLS[name]()
    assert adv.device == META and returns is None
