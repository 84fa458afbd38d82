"""Hand-computed policy and value losses of the built-in algorithms with their default configs,
and the one policy loss every algorithm shares (check, surrogate, aggregate, KL).

The exact-value tests at the end pin what mutation testing found loose (docs/mutation.md): value
clipping on its low side, explained variance over valid tokens only, a zero KL weight beside an
infinite KL, losses in the critic's dtype and metrics on its device, and every error message in
full."""

from __future__ import annotations

import math
import re

import pytest
import torch

import algorithms.ppo as ppo_module
from algorithms import Algorithm, algorithm_class, get_algorithm, list_algorithms
from algorithms.common import agg_loss, kl_penalty
from algorithms.grpo import GRPO
from testkit.messages import assert_raises_exactly, message_cases
from testkit.tensors import INF, META, f64, meta, meta_mask

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


# --- one policy loss: check -> surrogate -> aggregate -> KL ------------------------------------

#: The built-ins whose objective is not PPO's clipped surrogate: each overrides only `surrogate`.
OWN_SURROGATE = ["cispo", "gspo", "gmpo"]


def test_no_builtin_writes_its_own_policy_loss():
    for name in list_algorithms():
        cls = algorithm_class(name)
        if cls.__module__.startswith("algorithms."):
            assert cls.policy_loss is Algorithm.policy_loss, name
            assert (cls.surrogate is not Algorithm.surrogate) == (name in OWN_SURROGATE), name


@pytest.mark.parametrize("name", OWN_SURROGATE)
def test_own_surrogates_share_the_input_checks(name):
    """A bad mask shape or a missing reference is refused before any surrogate runs, with the
    base's message for every algorithm."""

    def refusal(algo_name: str, **call) -> str:
        with pytest.raises(ValueError) as info:
            get_algorithm(algo_name, **call.pop("config", {})).policy_loss(**call)
        return str(info.value)

    bad_mask = dict(log_probs=LOGP, old_log_probs=OLD, advantages=ADV, response_mask=MASK[:, :3])
    expected = (
        "expected tensors of one (B, T) shape, got {'log_probs': (1, 4), 'old_log_probs': (1, 4), "
        "'advantages': (1, 4), 'response_mask': (1, 3)}"
    )
    assert refusal("ppo", **bad_mask) == refusal(name, **bad_mask) == expected
    one_d = dict(log_probs=LOGP[0], old_log_probs=OLD[0], advantages=ADV[0], response_mask=MASK[0])
    assert refusal(name, **one_d) == refusal("ppo", **one_d)
    no_ref = dict(
        log_probs=LOGP,
        old_log_probs=OLD,
        advantages=ADV,
        response_mask=MASK,
        config=dict(kl_loss_coef=0.5),
    )
    assert refusal(name, **no_ref) == (
        f"{name}: ref_log_probs is required when kl_loss_coef > 0 (kl_loss_coef=0.5)"
    )
    assert re.sub("^ppo", name, refusal("ppo", **no_ref)) == refusal(name, **no_ref)


@pytest.mark.parametrize("name", OWN_SURROGATE)
def test_own_surrogates_share_the_kl_term(name):
    """The KL term is added after aggregation, the same for every surrogate: the loss with
    ``kl_loss_coef = c`` is the loss without it plus ``c`` times the aggregated k3 KL."""
    torch.manual_seed(0)
    logp = -torch.rand(3, 5) * 2
    old = logp + torch.randn(3, 5) * 0.3
    adv = torch.randn(3, 5)
    ref = logp + torch.randn(3, 5) * 0.5
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    plain, plain_metrics = get_algorithm(name).policy_loss(logp, old, adv, mask, ref)
    with_kl, metrics = get_algorithm(name, kl_loss_coef=0.5).policy_loss(logp, old, adv, mask, ref)
    mode = get_algorithm(name).config.loss_agg_mode
    kl = kl_penalty(logp, ref, "k3")
    assert with_kl.item() == pytest.approx(plain.item() + 0.5 * agg_loss(kl, mask, mode).item())
    assert metrics["train/kl"] == plain_metrics["train/kl"]
    assert metrics["train/kl"] == pytest.approx(kl[mask != 0].mean().item())
    assert metrics["train/policy_loss"] == pytest.approx(with_kl.item())
    assert list(metrics) == list(plain_metrics)
    assert list(metrics)[-2:] == ["train/kl", "train/policy_loss"]


class _Squared(GRPO):
    """A user's algorithm that overrides only the surrogate: loss ``(logp - old)^2`` per token."""

    def surrogate(self, log_probs, old_log_probs, advantages, response_mask):
        valid = response_mask != 0
        diff = torch.where(valid, log_probs - old_log_probs, torch.zeros(()))
        return diff**2, {"sq_mean": (diff**2).sum() / valid.sum()}


def test_a_surrogate_only_subclass_gets_checks_aggregation_and_kl():
    logp = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]])
    old = torch.zeros(2, 3)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    ref = logp.clone()
    ref[0, 0] = 1.0 + math.log(2)  # k3 of ln 2 on one token: 2 - ln 2 - 1 = 0.306853
    algo = _Squared(GRPO.Config(kl_loss_coef=0.1))  # seq-mean-token-mean
    loss, metrics = algo.policy_loss(logp, old, torch.zeros(2, 3), mask, ref)
    # per sequence: (1 + 4) / 2 = 2.5 and 9 -> 5.75; KL: (0.306853 / 2 + 0) / 2 = 0.0767132
    assert loss.item() == pytest.approx(5.75 + 0.1 * 0.0767132, rel=1e-6)
    assert metrics["train/sq_mean"] == pytest.approx(14 / 3)
    assert metrics["train/kl"] == pytest.approx(0.306853 / 3, rel=1e-5)
    assert list(metrics) == ["train/sq_mean", "train/kl", "train/policy_loss"]
    with pytest.raises(ValueError, match=r"^grpo: ref_log_probs is required when kl_loss_coef > 0"):
        algo.policy_loss(logp, old, torch.zeros(2, 3), mask)
    with pytest.raises(ValueError, match=r"^expected tensors of one \(B, T\) shape"):
        algo.policy_loss(logp, old, torch.zeros(2, 2), mask, ref)


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


# --- exact values where they differ from the general formula, and dtypes ---------------------


def test_ppo_value_clipping_on_the_low_side():
    # V = -1 moved below V_old - c = -0.5; target -2: clipped V = -0.5 is farther from it,
    # (1.5)^2 = 2.25 > (1)^2 = 1, so the clipped term is the max: loss 0.5 * 2.25.
    loss, metrics = get_algorithm("ppo").value_loss(
        f64([[-1.0]]), f64([[-2.0]]), torch.ones(1, 1), old_values=f64([[0.0]])
    )
    assert loss.item() == 1.125
    assert metrics["critic/clip_frac"] == 1.0


def test_ppo_explained_variance_counts_valid_tokens_only():
    values = f64([[1.0, 2.0, 7.0], [3.0, 0.0, 0.0]])
    targets = f64([[1.0, 3.0, -5.0], [2.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    _, metrics = get_algorithm("ppo").value_loss(values, targets, mask)
    # valid: V = [1, 2, 3], G = [1, 3, 2]; Var(G) = 2/3, residual [0, 1, -1]: Var 2/3 -> EV 0
    assert metrics["critic/explained_variance"] == pytest.approx(0.0, abs=1e-15)


def test_a_zero_kl_coefficient_keeps_an_infinite_kl_out_of_the_loss():
    # k1 KL of a token the reference gives probability 0 is +inf: logged, but weight 0 disables
    # the term (0 * inf would be NaN)
    algo = get_algorithm("sppo", kl_penalty="k1")
    zeros, one = torch.zeros(1, 2), torch.ones(1, 2)
    loss, metrics = algo.policy_loss(
        zeros, zeros, one, one, ref_log_probs=torch.tensor([[-INF, 0.0]])
    )
    assert loss.item() == -1.0  # the surrogate alone: -A * ratio, token mean
    assert metrics["train/kl"] == INF


def test_ppo_value_loss_in_the_critic_dtype():
    # float64 targets and old values for a float32 critic: the loss stays float32
    values = torch.tensor([[0.5, -0.5]], requires_grad=True)
    loss, _ = get_algorithm("ppo").value_loss(
        values, f64([[1.0, 0.0]]), torch.ones(1, 2), old_values=f64([[0.0, 0.0]])
    )
    assert loss.dtype == torch.float32


def test_sppo_value_loss_in_the_critic_dtype():
    logits = torch.tensor([0.3, -0.2], requires_grad=True)
    loss, _ = get_algorithm("sppo").value_loss(logits, f64([1.0, 0.0]))
    assert loss.dtype == torch.float32


@pytest.mark.parametrize("old_values", [False, True], ids=["unclipped", "clipped"])
def test_ppo_value_loss_metrics_stay_on_the_critics_device(old_values, monkeypatch):
    """The metrics are stacked into one tensor before the one device sync (``to_floats``): a
    metric made on the CPU would fail that stack beside an accelerator's."""
    monkeypatch.setattr(ppo_module, "to_floats", lambda metrics: metrics)
    v = meta(2, 3)
    _, metrics = get_algorithm("ppo").value_loss(
        v, meta(2, 3), meta_mask(2, 3), meta(2, 3) if old_values else None
    )
    assert {k: t.device for k, t in metrics.items()} == dict.fromkeys(metrics, META)


MASK23 = torch.ones(2, 3, dtype=torch.bool)
R2 = torch.tensor([1.0, 0.0])


def _ppo_value_loss(**shapes: tuple[int, ...]):
    """PPO's value loss with (2, 3) tensors except those in ``shapes``."""
    t = {k: torch.zeros(shapes.get(k, (2, 3))) for k in ("values", "targets", "old_values")}
    return get_algorithm("ppo").value_loss(t["values"], t["targets"], MASK23, t["old_values"])


def _policy_loss(bad: str):
    """SPPO's policy loss with (2, 3) tensors, ``bad`` one (2, 4)."""
    names = ("log_probs", "old_log_probs", "advantages", "response_mask", "ref_log_probs")
    t = {k: torch.zeros((2, 4) if k == bad else (2, 3)) for k in names}
    return get_algorithm("sppo").policy_loss(*t.values())


def _shapes(bad: str) -> str:
    names = ("log_probs", "old_log_probs", "advantages", "response_mask", "ref_log_probs")
    return ", ".join(f"'{k}': {(2, 4) if k == bad else (2, 3)}" for k in names)


LOSS_ERRORS = [
    *(
        (
            lambda bad=bad: _policy_loss(bad),
            ValueError,
            f"expected tensors of one (B, T) shape, got {{{_shapes(bad)}}}",
        )
        for bad in ("log_probs", "old_log_probs", "advantages", "response_mask", "ref_log_probs")
    ),
    (
        lambda: get_algorithm("grpo").value_loss(R2, R2, None),
        NotImplementedError,
        "grpo has no critic (critic='none'); value_loss exists only for algorithms with critic "
        "'token' or 'prompt'",
    ),
    (
        lambda: get_algorithm("ppo").value_loss(torch.zeros(2, 3), torch.zeros(2, 3), None),
        ValueError,
        "ppo: value_loss needs the (B, T) response_mask",
    ),
    (
        lambda: _ppo_value_loss(values=(2, 4)),
        ValueError,
        "ppo: expected (B, T) = (2, 3), got {'values': (2, 4), 'targets': (2, 3), "
        "'old_values': (2, 3)}",
    ),
    (
        lambda: _ppo_value_loss(targets=(2, 4)),
        ValueError,
        "ppo: expected (B, T) = (2, 3), got {'values': (2, 3), 'targets': (2, 4), "
        "'old_values': (2, 3)}",
    ),
    (
        lambda: _ppo_value_loss(old_values=(2, 4)),
        ValueError,
        "ppo: expected (B, T) = (2, 3), got {'values': (2, 3), 'targets': (2, 3), "
        "'old_values': (2, 4)}",
    ),
    (
        lambda: get_algorithm("sppo").value_loss(torch.zeros(2, 2), torch.zeros(2, 2)),
        ValueError,
        "sppo: values and targets must both be (B,), got (2, 2) and (2, 2)",
    ),
    (
        # (B, 1) logits are refused, not squeezed into (B,)
        lambda: get_algorithm("sppo").value_loss(torch.zeros(2, 1), torch.zeros(2, 1)),
        ValueError,
        "sppo: values and targets must both be (B,), got (2, 1) and (2, 1)",
    ),
    (
        lambda: get_algorithm("sppo").value_loss(torch.zeros(2), torch.tensor([0.0, 1.5])),
        ValueError,
        "sppo: value_loss targets must lie in [0, 1] (the critic predicts a success "
        "probability); got min 0.0, max 1.5",
    ),
    (
        lambda: get_algorithm("sppo").value_loss(torch.zeros(2), torch.tensor([1.0, -0.5])),
        ValueError,
        "sppo: value_loss targets must lie in [0, 1] (the critic predicts a success "
        "probability); got min -0.5, max 1.0",
    ),
]


@message_cases(LOSS_ERRORS)
def test_error_message_in_full(call, kind, message):
    assert_raises_exactly(call, kind, message)
