"""One trainer step redone by hand: the policy and critic the trainer ends its update with equal
those of an update written here from the step's rollout alone.

The rollout is recorded as the trainer's engine returns it; everything after it (rewards, old and
reference log-probs, critic values, advantages, the mini-batch split, the epoch loop, clipping and
AdamW steps) is recomputed here with unpadded per-row forward passes of copies of the models as
they were before the step. Only the algorithm's registered ``policy_loss`` and ``value_loss`` are
reused; advantages are written out from docs/design.md §2, so a KL term of the wrong sign, a
mini-batch or epoch count the trainer ignores, or log-probs of the wrong policy make the two
disagree by the size of an update, not of a rounding error.

Float64 throughout (models and AdamW state): Adam's first steps move every weight by about
``lr * sign(grad)``, so in fp32 a gradient element that two summation orders round to opposite
signs would flip a whole step; in float64 the only rounding left is the one both paths keep by
design (``token_logprobs``' fp32 log-softmax, fp32 RoPE tables), see
:data:`testkit.tolerances.F64_SAME_MATH`.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from algorithms import Algorithm, get_algorithm
from algorithms.common import kl_penalty
from benchmarks.engines.rollout import Rollout
from benchmarks.tasks.arith import ArithTask
from benchmarks.telemetry.meter import Budget
from benchmarks.training.modeling import build_tiny_llama
from benchmarks.training.trainer import RLTrainer
from testkit.tolerances import F64_SAME_MATH, assert_close_to_scale, hf_rmsnorm_in_model_dtype
from testkit.trainers import SPEC, SPS, FirstDigitTask, make_trainer

pytestmark = pytest.mark.usefixtures("one_thread")

TEMPERATURE = 1.3  # not 1: the log-prob passes must temper as the sampler did
ACTOR_LR, CRITIC_LR, WEIGHT_DECAY = 3e-3, 2e-3, 0.01


class MixedLengthTask(FirstDigitTask):
    """FirstDigitTask's dense reward over prompts of one to three operations, so every batch is
    left-padded and an unpadded recomputation is a real check of the padding."""

    def __init__(self) -> None:
        super().__init__(horizon=1, eval_size=16)
        self._train = [
            p
            for h in (1, 2, 3)
            for p in ArithTask(horizon=h, max_problems=60).train_problems()[:40]
        ]


class RecordingEngine:
    """The trainer's engine, unchanged, keeping every rollout it returns."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.rollouts: list[Rollout] = []

    def generate(self, prompts: Sequence[str], **kw: Any) -> Rollout:
        ro = self.inner.generate(prompts, **kw)
        self.rollouts.append(ro)
        return ro

    def sync_weights(self) -> None:
        self.inner.sync_weights()


@pytest.fixture(scope="module")
def start64(tok):
    return build_tiny_llama(SPEC, len(tok), seed=0).double()


@pytest.fixture(scope="module")
def mixed():
    return MixedLengthTask()


@pytest.fixture(autouse=True)
def _float64_rmsnorm(monkeypatch):
    hf_rmsnorm_in_model_dtype(monkeypatch)  # else HF's norm rounds to fp32 in each path apart


# --- the recomputation --------------------------------------------------------------------------


def _rows(ro: Rollout) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each row's real prompt and response tokens, padding stripped."""
    return [
        (ro.prompt_ids[i][ro.prompt_mask[i] > 0], ro.response_ids[i][ro.response_mask[i] > 0])
        for i in range(ro.prompt_ids.shape[0])
    ]


def _pad_rows(rows: list[torch.Tensor], t: int) -> torch.Tensor:
    return torch.stack([F.pad(r, (0, t - r.shape[0])) for r in rows])


def _logprobs(model: torch.nn.Module, ro: Rollout) -> torch.Tensor:
    """(B, T) log-probs of the sampled tokens from one unpadded forward per row, 0 past the
    response; the tempered log-softmax in fp32 as the trainer's passes do by design."""
    out = []
    for p, r in _rows(ro):
        logits = model(input_ids=torch.cat([p, r])[None]).logits[0]
        pred = logits[p.shape[0] - 1 : p.shape[0] - 1 + r.shape[0]]  # position j predicts j + 1
        lp = torch.log_softmax(pred.float() / TEMPERATURE, -1)
        out.append(lp.gather(-1, r[:, None]).squeeze(-1))
    return _pad_rows(out, ro.response_ids.shape[1])


def _hidden(critic: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return critic.backbone(input_ids=ids[None]).last_hidden_state[0]


def _prompt_logits(critic: torch.nn.Module, ro: Rollout) -> torch.Tensor:
    """(B,) the prompt critic's logit at each prompt's last token, each prompt alone."""
    return torch.stack([critic.head(_hidden(critic, p)[-1]).squeeze(-1) for p, _ in _rows(ro)])


def _token_values(critic: torch.nn.Module, ro: Rollout) -> torch.Tensor:
    """(B, T) the token critic's value before each response token, each row alone."""
    out = []
    for p, r in _rows(ro):
        h = _hidden(critic, torch.cat([p, r]))[p.shape[0] - 1 : p.shape[0] - 1 + r.shape[0]]
        out.append(critic.head(h).squeeze(-1))
    return _pad_rows(out, ro.response_ids.shape[1])


def _whiten(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Zero mean, unit unbiased variance over the valid tokens (verl's masked_whiten)."""
    v = x[valid]
    out = torch.zeros_like(x)
    out[valid] = (v - v.mean()) / torch.sqrt(v.var(unbiased=True) + 1e-8)
    return out


def _advantages(
    alg: Algorithm,
    rewards: torch.Tensor,
    mask: torch.Tensor,
    values: torch.Tensor | None,
    kl: torch.Tensor | None,
    kl_sign: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """docs/design.md §2, written out: advantages (B, T) and the critic's targets."""
    valid = mask > 0
    if alg.name == "sppo":  # A = R - sigmoid(v) on every token; the critic's target is R
        return (rewards - torch.sigmoid(values))[:, None] * mask, rewards
    if alg.name == "ppo":  # gamma = lambda = 1: A_t = (sum of rewards from t) - V_t, whitened
        last = mask.sum(-1).long() - 1
        token_r = torch.zeros_like(values)
        token_r[torch.arange(len(rewards)), last] = rewards.to(values.dtype)
        if kl is not None:  # the KL penalty: r_t -= beta * (log pi_old - log pi_ref)
            token_r = token_r - kl_sign * alg.config.kl_coef * kl.to(values.dtype) * mask
        to_go = token_r.flip(-1).cumsum(-1).flip(-1) * mask
        return _whiten((to_go - values) * mask, valid), to_go
    if alg.name == "grpo":  # (R - mean) / (std + 1e-6) over each prompt's group
        g = alg.samples_per_prompt
        r = rewards.view(-1, g)
        a = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)
        return a.reshape(-1)[:, None] * mask, None
    raise AssertionError(f"no hand-written advantage for {alg.name}")


def _hand_update(
    trainer: RLTrainer,
    policy0: torch.nn.Module,
    critic0: torch.nn.Module | None,
    reference: torch.nn.Module,
    ro: Rollout,
    kl_sign: float = 1.0,
) -> tuple[torch.nn.Module, torch.nn.Module | None]:
    """The step's update from its rollout and the models as they were before it."""
    alg, cfg = trainer.alg, trainer.cfg
    mask = ro.response_mask
    # FirstDigitTask's reward, from its definition: 1 for a response that starts with a digit
    rewards = torch.tensor([1.0 if t[:1].isdigit() else 0.0 for t in ro.texts])
    with torch.no_grad():
        old_lp = _logprobs(policy0, ro)
        ref_lp = _logprobs(reference, ro) if alg.uses_reference else None
        values = None
        if critic0 is not None:
            values = (_prompt_logits if alg.critic == "prompt" else _token_values)(critic0, ro)
    kl = (old_lp - ref_lp) * mask if alg.kl_in_reward else None
    adv, returns = _advantages(alg, rewards, mask, values, kl, kl_sign)

    policy = copy.deepcopy(policy0)
    opt = torch.optim.AdamW(policy.parameters(), lr=cfg.actor_lr, weight_decay=cfg.weight_decay)
    critic = copy.deepcopy(critic0)
    if critic is not None:
        copt = torch.optim.AdamW(
            critic.parameters(), lr=cfg.critic_lr, weight_decay=cfg.weight_decay
        )
    B, M = len(rewards), cfg.mini_batches
    size = B // M
    # The trainer's one seeded shuffle per (seed, step), drawn anew each epoch: the only detail
    # copied from it, since the order of the mini-batch steps changes where the update lands.
    gen = torch.Generator().manual_seed(trainer.seed * 7919 + trainer.step)
    for _epoch in range(alg.ppo_epochs):
        order = torch.randperm(B, generator=gen)
        for k in range(M):
            idx = order[k * size : (k + 1) * size]
            sub = ro.select(idx)
            if critic is not None:
                v = (_prompt_logits if alg.critic == "prompt" else _token_values)(critic, sub)
                old_v = values[idx] if alg.critic == "token" else None
                vloss, _ = alg.value_loss(v, returns[idx], sub.response_mask, old_v)
                copt.zero_grad()
                vloss.backward()
                torch.nn.utils.clip_grad_norm_(critic.parameters(), cfg.grad_clip)
                copt.step()
            lp = _logprobs(policy, sub)
            ref = None if ref_lp is None else ref_lp[idx]
            loss, _ = alg.policy_loss(lp, old_lp[idx], adv[idx], sub.response_mask, ref)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.grad_clip)
            opt.step()
    return policy, critic


def _max_gap(a: torch.nn.Module, b: torch.nn.Module, before: torch.nn.Module) -> float:
    """Largest difference between two updated models, relative to the update's own scale."""
    gaps = []
    for p, q, p0 in zip(a.parameters(), b.parameters(), before.parameters(), strict=True):
        scale = (q - p0).abs().max().item()
        if scale > 0:
            gaps.append((p - q).abs().max().item() / scale)
    return max(gaps)


def _assert_same_update(
    got: torch.nn.Module, want: torch.nn.Module, before: torch.nn.Module
) -> None:
    moved = [
        (q - p0).abs().max().item()
        for q, p0 in zip(want.parameters(), before.parameters(), strict=True)
    ]
    assert max(moved) > ACTOR_LR / 10, "the hand-written update moved nothing"
    for (name, p), q, p0 in zip(
        got.named_parameters(), want.parameters(), before.parameters(), strict=True
    ):
        # Compared as updates (weights are O(1), steps O(lr)), to F64_SAME_MATH of each tensor's
        # update: the same maths in float64 (observed ~1e-13 of the scale); a mini-batch or epoch
        # the trainer skips, a KL term of the other sign or a wrong row moves it by O(1).
        try:
            assert_close_to_scale(p - p0, q - p0, F64_SAME_MATH)
        except AssertionError as e:
            raise AssertionError(
                f"{name}: the trainer's update differs from the hand-written one"
            ) from e


def _trainer(alg: Algorithm, start64: Any, tok: Any, task: Any, **cfg: Any) -> RLTrainer:
    trainer = make_trainer(
        alg,
        start64,
        tok,
        task,
        Budget(kind="samples", limit=SPS),
        temperature=TEMPERATURE,
        actor_lr=ACTOR_LR,
        critic_lr=CRITIC_LR,
        weight_decay=WEIGHT_DECAY,
        **cfg,
    )
    if trainer.critic is not None:
        trainer.critic.model.double()  # a fresh fp32 head; .double() keeps the optimizer's tensors
    trainer.engine = RecordingEngine(trainer.engine)
    return trainer


def _one_step(trainer: RLTrainer) -> tuple[torch.nn.Module, torch.nn.Module | None, Rollout]:
    policy0 = copy.deepcopy(trainer.policy)
    critic0 = None if trainer.critic is None else copy.deepcopy(trainer.critic.model)
    trainer.train_step()
    (ro,) = trainer.engine.rollouts
    assert (ro.prompt_mask == 0).any() and ro.lengths.min() < ro.lengths.max()  # real padding
    return policy0, critic0, ro


def _adam_steps(opt: torch.optim.Optimizer) -> set[float]:
    return {float(s["step"]) for s in opt.state.values()}


# --- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, mini_batches, epochs",
    [("sppo", 1, 1), ("sppo", 4, 1), ("sppo", 2, 3), ("grpo", 2, 2)],
)
def test_step_equals_hand_written_update(name, mini_batches, epochs, start64, tok, mixed):
    """SPPO on- and off-policy, several mini-batches, several epochs; GRPO (groups, KL loss
    against the reference) over two mini-batches and two epochs."""
    alg = get_algorithm(name, ppo_epochs=epochs)
    trainer = _trainer(alg, start64, tok, mixed, mini_batches=mini_batches)
    policy0, critic0, ro = _one_step(trainer)
    # As many optimizer steps as mini-batches times epochs, for the policy and the critic.
    assert _adam_steps(trainer.opt) == {float(mini_batches * epochs)}
    if trainer.critic is not None:
        assert _adam_steps(trainer.critic.opt) == {float(mini_batches * epochs)}
    policy, critic = _hand_update(trainer, policy0, critic0, start64, ro)
    _assert_same_update(trainer.policy, policy, policy0)
    if critic is not None:
        _assert_same_update(trainer.critic.model, critic, critic0)


def test_ppo_kl_in_reward_has_the_penalty_sign(start64, tok, mixed):
    """PPO with the KL penalty in the reward, two mini-batches, two epochs: the trainer's update
    is the hand-written one with ``r_t -= beta * (log pi_old - log pi_ref)`` and far from the
    one with the opposite sign. The policy is moved off the reference first (at the start they
    are equal and the penalty is 0 whatever its sign)."""
    alg = get_algorithm("ppo", kl_in_reward=True, kl_coef=0.5, critic_warmup_steps=0, ppo_epochs=2)
    trainer = _trainer(alg, start64, tok, mixed, mini_batches=2)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in trainer.policy.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    policy0, critic0, ro = _one_step(trainer)
    assert _adam_steps(trainer.opt) == _adam_steps(trainer.critic.opt) == {4.0}
    with torch.no_grad():  # the penalty is not negligible next to the outcome reward
        kl = (_logprobs(policy0, ro) - _logprobs(start64, ro)) * ro.response_mask
    assert alg.config.kl_coef * kl.sum(-1).abs().mean() > 0.1

    policy, critic = _hand_update(trainer, policy0, critic0, start64, ro)
    _assert_same_update(trainer.policy, policy, policy0)
    _assert_same_update(trainer.critic.model, critic, critic0)
    flipped, flipped_critic = _hand_update(trainer, policy0, critic0, start64, ro, kl_sign=-1.0)
    # The opposite sign lands elsewhere, by far more than the tolerance above.
    assert _max_gap(trainer.policy, flipped, policy0) > 1e3 * F64_SAME_MATH
    assert _max_gap(trainer.critic.model, flipped_critic, critic0) > 1e3 * F64_SAME_MATH


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_kl_in_reward_uses_the_configured_estimator(start64, tok, mixed, monkeypatch, estimator):
    """``kl_penalty`` decides the in-reward ``token_kl`` the algorithm receives: k3 (non-negative,
    verl's low_var_kl) is not silently replaced by k1."""
    alg = get_algorithm("ppo", kl_in_reward=True, kl_coef=0.5, kl_penalty=estimator)
    trainer = _trainer(alg, start64, tok, mixed)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in trainer.policy.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    seen: dict[str, torch.Tensor] = {}
    original = alg.advantages

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen["token_kl"] = kwargs["token_kl"]
        return original(*args, **kwargs)

    monkeypatch.setattr(alg, "advantages", spy)
    policy0, _, ro = _one_step(trainer)
    with torch.no_grad():
        expected = kl_penalty(_logprobs(policy0, ro), _logprobs(start64, ro), estimator)
    mask = ro.response_mask.to(expected.dtype)
    got = seen["token_kl"]
    scale = float((expected * mask).abs().max())
    assert scale > 1e-3  # the policy is off the reference: the estimators differ
    torch.testing.assert_close(got, expected * mask, atol=F64_SAME_MATH * scale, rtol=0.0)
    if estimator == "k3":
        assert float(got.min()) >= 0.0  # k3 is never negative; k1 is, somewhere
