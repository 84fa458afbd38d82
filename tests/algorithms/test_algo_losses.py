"""Hand-computed policy and value losses of the built-in algorithms with their default configs."""

from __future__ import annotations

import math

import pytest
import torch

from algorithms import get_algorithm

NAN = float("nan")
# Four tokens: A=+1 ratio 1.25 | A=-1 ratio 4 | A=-1 ratio 0.5 | padding (NaN garbage).
LOGP = torch.tensor([[math.log(1.25), math.log(4.0), math.log(0.5), NAN]])
OLD = torch.tensor([[0.0, 0.0, 0.0, NAN]])
ADV = torch.tensor([[1.0, -1.0, -1.0, NAN]])
MASK = torch.tensor([[1, 1, 1, 0]])


@pytest.mark.parametrize(
    "name, expected",
    [
        # clip 0.2/0.2, dual-clip 3: [-1.2, min(4, 3) = 3, 0.8] -> token-mean 2.6 / 3
        ("sppo", 2.6 / 3),
        # clip 0.2/0.2, no dual-clip: [-1.2, 4, 0.8] -> 3.6 / 3
        ("ppo", 1.2),
        ("remax", 1.2),
        # clip-higher 0.28: 1.25 is inside [0.8, 1.28] -> [-1.25, 4, 0.8] -> 3.55 / 3
        ("dapo", 3.55 / 3),
    ],
)
def test_policy_loss_defaults_hand(name, expected):
    loss, metrics = get_algorithm(name).policy_loss(LOGP, OLD, ADV, MASK)
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert metrics["train/policy_loss"] == pytest.approx(expected, abs=1e-6)
    assert all(type(v) is float for v in metrics.values())
    assert ("train/dual_clip_frac" in metrics) == (name == "sppo")


def test_grpo_policy_loss_with_kl_hand():
    # two sequences, ratio 1, advantage 0 -> surrogate 0; only the KL term remains.
    # ref - logp = [[ln 2, 0], [0, -]]: k3 = [[2 - ln 2 - 1 = 0.306853, 0], [0, pad]]
    # seq-mean-token-mean: (0.306853 / 2 + 0 / 1) / 2 = 0.0767132; times beta 0.001
    logp = torch.zeros(2, 2)
    ref = torch.tensor([[math.log(2), 0.0], [0.0, NAN]])
    mask = torch.tensor([[1, 1], [1, 0]])
    algo = get_algorithm("grpo")
    assert algo.uses_reference
    loss, metrics = algo.policy_loss(logp, logp, torch.zeros(2, 2), mask, ref_log_probs=ref)
    assert loss.item() == pytest.approx(0.001 * 0.0767132, rel=1e-5)
    # train/kl is the token mean, comparable across aggregation modes: 0.306853 / 3
    assert metrics["train/kl"] == pytest.approx(0.306853 / 3, rel=1e-5)
    with pytest.raises(ValueError, match="ref_log_probs"):
        algo.policy_loss(logp, logp, torch.zeros(2, 2), mask)


def test_kl_metric_without_kl_loss():
    algo = get_algorithm("sppo")
    assert not algo.uses_reference
    ref = torch.tensor([[math.log(2), 0.0]])
    loss, metrics = algo.policy_loss(
        torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), ref
    )
    assert loss.item() == 0.0
    assert metrics["train/kl"] == pytest.approx(0.306853 / 2, rel=1e-5)


def test_k1_kl_loss():
    # k1 = logp - ref = -ln 2 on the one token -> loss = 0.1 * -0.693147
    algo = get_algorithm("sppo", kl_loss_coef=0.1, kl_penalty="k1")
    loss, _ = algo.policy_loss(
        torch.zeros(1, 1),
        torch.zeros(1, 1),
        torch.zeros(1, 1),
        torch.ones(1, 1),
        torch.full((1, 1), math.log(2)),
    )
    assert loss.item() == pytest.approx(-0.0693147, rel=1e-5)


def test_policy_loss_shape_mismatch():
    with pytest.raises(ValueError, match="advantages"):
        get_algorithm("ppo").policy_loss(LOGP, OLD, ADV[:, :3], MASK)


# --- value losses ---------------------------------------------------------------------------


def test_sppo_value_loss_hand():
    logits = torch.tensor([0.0, 0.0, math.log(3)], requires_grad=True)
    r = torch.tensor([1.0, 0.0, 1.0])
    loss, metrics = get_algorithm("sppo").value_loss(logits, r, None)
    # BCE: ln 2, ln 2, -ln 0.75 = 0.287682 -> mean 0.557992
    assert loss.item() == pytest.approx(0.557992, abs=1e-6)
    # p = [0.5, 0.5, 0.75]: mean 0.583333; |0.583333 - 0.666667| = 0.083333; EV 0.1875
    assert metrics["critic/value_mean"] == pytest.approx(0.583333, abs=1e-6)
    assert metrics["critic/calibration_error"] == pytest.approx(1 / 12, abs=1e-6)
    assert metrics["critic/explained_variance"] == pytest.approx(0.1875, abs=1e-6)
    assert metrics["critic/loss"] == pytest.approx(0.557992, abs=1e-6)
    loss.backward()
    # d BCE / d logit = (sigmoid - R) / B = [-0.5, 0.5, -0.25] / 3
    assert logits.grad.tolist() == pytest.approx([-1 / 6, 1 / 6, -1 / 12], abs=1e-6)


def test_sppo_value_loss_rejects_targets_outside_unit_interval():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        get_algorithm("sppo").value_loss(torch.zeros(2), torch.tensor([1.0, -0.5]), None)


def test_ppo_value_loss_hand():
    values = torch.tensor([[1.0, 0.0, NAN]], requires_grad=True)
    old = torch.tensor([[0.0, 0.0, NAN]])
    targets = torch.tensor([[2.0, 0.2, NAN]])
    mask = torch.tensor([[1, 1, 0]])
    # t0: (1 - 2)^2 = 1 vs (clip(1, -0.5, 0.5) - 2)^2 = 2.25 -> 2.25; t1: 0.04 both
    # 0.5 * token-mean = 0.5 * (2.25 + 0.04) / 2 = 0.5725
    loss, metrics = get_algorithm("ppo").value_loss(values, targets, mask, old_values=old)
    assert loss.item() == pytest.approx(0.5725)
    assert metrics["critic/clip_frac"] == pytest.approx(0.5)
    assert metrics["critic/value_mean"] == pytest.approx(0.5)
    loss.backward()
    # t0 clipped: no gradient; t1: 0.5 * 2 * (0 - 0.2) / 2 = -0.1; padding exactly 0
    assert values.grad.tolist()[0] == pytest.approx([0.0, -0.1, 0.0])
    # without old values: unclipped 0.5 * (1 + 0.04) / 2 = 0.26
    loss, _ = get_algorithm("ppo").value_loss(values, targets, mask)
    assert loss.item() == pytest.approx(0.26)


@pytest.mark.parametrize("name", ["grpo", "dapo", "rloo", "remax"])
def test_value_loss_without_critic_raises(name):
    with pytest.raises(NotImplementedError, match="no critic"):
        get_algorithm(name).value_loss(torch.zeros(2), torch.zeros(2), None)
