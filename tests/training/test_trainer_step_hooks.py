"""What the trainer's step hands the parts it does not own, checked exactly: an algorithm that
carries state between steps (SPO's tracker: ``needs_prompt_keys``, ``observe``, the updated
policy's log-probs), the critic's own schedule (``critic_mini_batches``, ``critic_epochs``), its
``start_success`` head and the step's critic metrics.

Mutation testing found these paths reached by no test that reads what they pass: a tracker fed
the sampling policy's log-probs as the updated ones, or a critic walking the actor's
mini-batches under a schedule of its own, changes results without failing a run.
"""

from __future__ import annotations

import math

import pytest
import torch

from algorithms import Algorithm, AlgorithmConfig, get_algorithm
from algorithms.common import outcome_to_tokens
from algorithms.ppo import PPO, PPOConfig
from analysis import metrics as M
from benchmarks.telemetry.meter import Budget, FlopModel
from testkit.tolerances import fp_tol
from testkit.trainers import (
    SPEC,
    SPS,
    EngineSpy,
    make_trainer,
    rollout_logprobs,
    teacher_forced_flops,
)

pytestmark = pytest.mark.usefixtures("one_thread")

BUDGET = Budget(kind="samples", limit=1000 * SPS)  # never the limit here: steps are called


def _record(obj, name: str) -> list:
    """Wrap ``obj.name`` so that every call's positional arguments and result are kept."""
    calls, inner = [], getattr(obj, name)

    def wrapped(*args, **kw):
        out = inner(*args, **kw)
        calls.append((args, out))
        return out

    setattr(obj, name, wrapped)
    return calls


# --- an algorithm that carries state between steps -------------------------------------------


class _Observer(Algorithm):
    """Asks for prompt keys (and, with ``updated``, the updated policy's log-probs) and keeps
    what the step gives it."""

    def __init__(self, updated: bool, config: AlgorithmConfig | None = None) -> None:
        super().__init__(config)
        self.updated = updated
        self.extras: list[dict] = []
        self.observed: list[dict] = []

    @property
    def needs_prompt_keys(self) -> bool:
        return True

    @property
    def needs_updated_log_probs(self) -> bool:
        return self.updated

    def advantages(self, rewards, response_mask, group_ids, **extras):
        self.extras.append(extras)
        return outcome_to_tokens(rewards - rewards.mean(), response_mask), None

    def observe(self, **kw):
        self.observed.append(kw)
        return {"train/observed_rows": float(len(kw["prompt_keys"]))}


def _observed_step(alg, start, tok, task, **cfg):
    trainer = make_trainer(alg, start, tok, task, BUDGET, actor_lr=1e-2, **cfg)
    trainer.engine = EngineSpy(trainer.engine)
    taken = _record(trainer.stream, "take")
    stats = trainer.train_step()
    problems = [p for _, out in taken for p in out]
    ((_, ro),) = trainer.engine.calls
    return trainer, stats, problems, ro


@pytest.mark.parametrize("updated", [True, False], ids=["updated-log-probs", "none"])
def test_a_stateful_algorithm_observes_the_rows_it_was_trained_on(updated, start, tok, dense):
    """``advantages`` gets each row's prompt id; ``observe`` gets, after the update, the same
    ids, the outcome scores, the mask, the sampling policy's log-probs and, when it asks for
    them, the updated policy's (one more metered teacher-forced pass), else None."""
    alg = _Observer(updated)
    trainer, stats, problems, ro = _observed_step(alg, start, tok, dense)
    keys = [p.id for p in problems for _ in range(alg.samples_per_prompt)]
    assert alg.extras == [dict(values=None, baseline_rewards=None, token_kl=None, prompt_keys=keys)]
    (seen,) = alg.observed
    assert list(seen["prompt_keys"]) == keys
    scores = dense.grade(ro.texts, [p for p in problems for _ in range(alg.samples_per_prompt)])
    assert torch.equal(seen["rewards"], torch.tensor(scores.scores, dtype=torch.float32))
    assert torch.equal(seen["response_mask"], ro.response_mask)
    assert torch.equal(seen["old_log_probs"], ro.log_probs)  # on-policy: the sampler's
    assert stats["train/observed_rows"] == float(SPS)
    fm = FlopModel.from_config(start.config)
    if not updated:
        assert seen["new_log_probs"] is None
        assert trainer.meter.flops["logprob"] == 0.0
        return
    after, _ = rollout_logprobs(
        trainer.policy, ro, trainer.cfg.temperature, buckets=trainer.cfg.length_buckets
    )
    m = ro.response_mask.bool()
    new = seen["new_log_probs"]
    # the same forward of the same weights on the same batch; log-probs are O(log 19) < 3
    assert torch.allclose(new[m], after[m], rtol=0, atol=fp_tol(SPEC.hidden_size, scale=3.0))
    # ... of the updated policy: lr 1e-2 moves them far beyond that
    assert (new[m] - ro.log_probs[m]).abs().max() > 100 * fp_tol(SPEC.hidden_size, scale=3.0)
    # on-policy, this is the step's only log-prob pass
    assert trainer.meter.flops["logprob"] == float(teacher_forced_flops(fm, ro))


def test_off_policy_observe_gets_the_log_prob_pass_of_the_sampling_policy(start, tok, dense):
    """Off-policy (two epochs) the ratio's denominator is the trainer's own log-prob pass, not
    the sampler's numbers; ``observe`` gets that tensor, the one the update used."""
    alg = _Observer(updated=False, config=AlgorithmConfig(ppo_epochs=2))
    trainer = make_trainer(alg, start, tok, dense, BUDGET, actor_lr=1e-2)
    passes = _record(trainer, "_teacher_forced")
    trainer.train_step()
    ((_, old_lp),) = passes  # the logprob phase; no reference, no updated pass
    (seen,) = alg.observed
    assert seen["old_log_probs"] is old_lp


# --- the critic's head, schedule and metrics ----------------------------------------------------


@pytest.mark.parametrize("alg_name", ["sppo", "ppo"])
def test_start_success_sets_the_head_once_from_the_first_batch(alg_name, start, tok, dense):
    """``critic_head_init=start_success`` sets the head from the first step's outcome scores,
    and only then: a resumed or later step keeps the head training moved. The step logs the
    spread of the values the critic predicted before its update."""
    alg = get_algorithm(alg_name, **({"critic_warmup_steps": 0} if alg_name == "ppo" else {}))
    trainer = make_trainer(alg, start, tok, dense, BUDGET, critic_head_init="start_success")
    trainer.engine = EngineSpy(trainer.engine)
    inits = _record(trainer.critic, "init_head")
    values = _record(trainer.critic, "values")
    for step in range(2):
        trainer.step = step
        first = len(values)
        stats = trainer.train_step()
        # the first values call of a step is the one before the update
        assert stats[M.CRITIC_VALUE_STD] == trainer.critic.prediction_std(values[first][1])
    ((args, _),) = inits
    _, ro = trainer.engine.calls[0]
    problems = [None] * len(ro.texts)  # FirstDigitTask grades the text alone
    expected = torch.tensor(dense.grade(ro.texts, problems).scores, dtype=torch.float32)
    assert torch.equal(args[0], expected)


class _RowPPO(PPO):
    """PPO whose advantages and returns are each row's index: every critic and actor
    mini-batch says which rows it holds. ``returns_of`` maps the row index to the return."""

    def __init__(self, returns_of=float, **kw) -> None:
        super().__init__(PPOConfig(critic_warmup_steps=0, **kw))
        self.returns_of = returns_of
        self.actor_visits: list[list[int]] = []

    def advantages(self, rewards, response_mask, group_ids, **extras):
        rows = torch.arange(len(rewards), dtype=torch.float32)
        ret = torch.tensor([self.returns_of(i) for i in range(len(rewards))], dtype=torch.float32)
        return outcome_to_tokens(rows, response_mask), outcome_to_tokens(ret, response_mask)

    def policy_loss(self, log_probs, old_log_probs, advantages, response_mask, ref_log_probs=None):
        self.actor_visits.append(advantages[:, 0].long().tolist())  # every response has a token
        return super().policy_loss(log_probs, old_log_probs, advantages, response_mask)


def _orders(seed: int, mini_batches: int, epochs: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    size = SPS // mini_batches
    orders = [torch.randperm(SPS, generator=gen).tolist() for _ in range(epochs)]
    return [o[i : i + size] for o in orders for i in range(0, SPS, size)]


@pytest.mark.parametrize(
    ("critic_mini_batches", "critic_epochs"), [(None, None), (4, None), (None, 3), (8, 2)]
)
def test_the_critic_walks_its_own_schedule_only_when_it_has_one(
    critic_mini_batches, critic_epochs, start, tok, dense
):
    """Without a schedule of its own the critic visits the actor's mini-batches; with either
    setting, a permutation of its own (seed + 104729) in its own sizes and epochs, and the
    actor's mini-batches stay what they are without it."""
    seed, step, mini_batches, epochs = 5, 3, 2, 2
    alg = _RowPPO(ppo_epochs=epochs)
    trainer = make_trainer(
        alg,
        start,
        tok,
        dense,
        BUDGET,
        seed=seed,
        mini_batches=mini_batches,
        critic_mini_batches=critic_mini_batches,
        critic_epochs=critic_epochs,
    )
    updates = _record(trainer.critic, "update")
    trainer.step = step
    trainer.train_step()
    base = seed * 7919 + step
    own = critic_mini_batches is not None or critic_epochs is not None
    critic_expected = _orders(
        base + 104729 if own else base,
        critic_mini_batches or mini_batches,
        critic_epochs or epochs,
    )
    assert [args[1][:, 0].long().tolist() for args, _ in updates] == critic_expected
    assert alg.actor_visits == _orders(base, mini_batches, epochs)


def test_a_step_logs_the_mean_explained_variance_of_the_mini_batches_that_define_it(
    start, tok, dense
):
    """Explained variance is undefined on a mini-batch whose returns are equal: the step logs
    the mean over the others, every other critic metric the mean over all mini-batches."""
    alg = _RowPPO(returns_of=lambda i: float(i >= SPS // 2))
    trainer = make_trainer(alg, start, tok, dense, BUDGET, critic_mini_batches=SPS // 2)
    updates = _record(trainer.critic, "update")
    stats = trainer.train_step()
    per_step = [metrics for _, (metrics, _) in updates]
    ev = [m[M.CRITIC_EXPLAINED_VAR] for m in per_step]
    defined = [v for v in ev if math.isfinite(v)]
    # pairs drawn from one permutation: some hold one return twice, some both
    assert 0 < len(defined) < len(ev)
    assert stats[M.CRITIC_EXPLAINED_VAR] == sum(defined) / len(defined)
    loss = [m["critic/loss"] for m in per_step]
    assert stats["critic/loss"] == sum(loss) / len(loss)


def test_a_step_whose_mini_batches_all_have_constant_returns_logs_no_explained_variance(
    start, tok, dense
):
    alg = _RowPPO(returns_of=lambda i: 1.0)
    trainer = make_trainer(alg, start, tok, dense, BUDGET, critic_mini_batches=2)
    stats = trainer.train_step()
    assert M.CRITIC_EXPLAINED_VAR not in stats
    assert math.isfinite(stats["critic/loss"])


@pytest.mark.parametrize(
    ("alg_name", "scores", "bias"),
    [
        ("sppo", [1.0, 0.0, 0.0, 0.0], math.log(0.25 / 0.75)),  # a prompt critic: logit(s)
        ("sppo", [0.0, 0.0], math.log(1e-3 / (1 - 1e-3))),  # s clamped into [1e-3, 1 - 1e-3]
        ("sppo", [1.0, 1.0], math.log((1 - 1e-3) / 1e-3)),
        ("ppo", [1.0, 0.0, 0.0, 0.0], 0.25),  # a token critic: s itself
        ("ppo", [0.0, 0.0], 0.0),
    ],
)
def test_start_success_is_the_best_constant_predictor(alg_name, scores, bias, start, tok, dense):
    """The head starts as the constant that best predicts the first batch: zero weights and
    the bias at its mean success (a logit for a prompt critic's sigmoid, clamped so that an
    all-fail or all-pass batch gives a finite one). The initial head is where the
    ``critic/head_delta_*`` diagnostics measure from."""
    trainer = make_trainer(alg_name, start, tok, dense, BUDGET)
    critic = trainer.critic
    critic.init_head(torch.tensor(scores))
    head = critic.model.head
    assert torch.count_nonzero(head.weight) == 0
    assert head.bias.tolist() == pytest.approx([bias], rel=fp_tol(1))
    assert torch.equal(critic.head0[-1:], head.bias.detach())
    assert critic.metrics() == {M.CRITIC_HEAD_DELTA_NORM: 0.0, M.CRITIC_HEAD_DELTA_MAX: 0.0}


def test_value_spread_reads_what_each_critic_predicts(start, tok, dense):
    """A prompt critic predicts a success probability, sigmoid(v); a token critic the return,
    read at the first response token. The spread is the population standard deviation."""
    prompt = make_trainer("sppo", start, tok, dense, BUDGET).critic
    v = torch.tensor([0.0, math.log(3.0)])  # p = 0.5, 0.75
    # fp32 sigmoids (a few ulps each) and a std of two, computed in float64
    assert prompt.prediction_std(v) == pytest.approx(0.125, rel=fp_tol(8))
    token = make_trainer("ppo", start, tok, dense, BUDGET).critic
    v = torch.tensor([[1.0, 9.0], [3.0, -9.0], [5.0, 0.0]])  # first tokens 1, 3, 5
    assert token.prediction_std(v) == pytest.approx(math.sqrt(8 / 3), rel=fp_tol(8))
    assert token.prediction_std(torch.zeros(0, 2)) == 0.0
