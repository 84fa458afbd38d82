"""Exact checks of the trainer's step where mutation testing found the trainer tests loose
(docs/mutation.md): what the compute meter counts in each phase, the sampling seeds and the
mini-batch order, the refill loop of dynamic sampling, the sampler/trainer log-prob gap, the
entropy metric, which non-finite value skipped an update, and the worst case the budget reserves
for the next generation batch.

The meter is the basis of equal budgets, so each phase's FLOPs are recomputed here from the
step's recorded rollouts with the analytic model alone (docs/design.md §3): a pass counted
twice, a backward not counted, or a prompt critic billed for the responses changes them.
"""

from __future__ import annotations

import logging

import pytest
import torch

from algorithms import Algorithm, AlgorithmConfig, get_algorithm
from algorithms.common import outcome_to_tokens
from algorithms.dapo import DAPO
from algorithms.sppo import SPPO
from benchmarks import faults
from benchmarks.engines.teacher_forced import bucketed_logprobs
from benchmarks.tasks.grading import GradeResult
from benchmarks.telemetry import metrics as M
from benchmarks.telemetry.meter import Budget, FlopModel
from benchmarks.training.modeling import build_tiny_llama
from benchmarks.training.trainer import rollout_logprob_mismatch
from testkit.tolerances import fp_tol
from testkit.trainers import (
    MAX_NEW,
    OVERRIDES,
    SPEC,
    SPS,
    EngineSpy,
    FirstDigitTask,
    make_trainer,
    teacher_forced_flops,
)

pytestmark = pytest.mark.usefixtures("one_thread")

BUDGET = Budget(kind="samples", limit=1000 * SPS)  # never the limit here: steps are called


@pytest.fixture(scope="module")
def start(tok):
    return build_tiny_llama(SPEC, len(tok), seed=0)


@pytest.fixture(scope="module")
def dense():
    return FirstDigitTask(horizon=1, eval_size=16)


class ConstantTask(FirstDigitTask):
    """Every response scores ``value``: every DAPO group has one reward and is filtered out."""

    value = 0.0

    def grade(self, responses, problems):
        return GradeResult([self.value] * len(responses))


class AlternatingTask(FirstDigitTask):
    """Scores 0, 1, 0, 1, ... by position: every group of two or more has both rewards."""

    def grade(self, responses, problems):
        return GradeResult([float(i % 2) for i in range(len(responses))])


def spied(alg, start, tok, task, **cfg):
    trainer = make_trainer(alg, start, tok, task, BUDGET, **cfg)
    trainer.engine = EngineSpy(trainer.engine)
    return trainer


# --- the compute meter ------------------------------------------------------------------------


def _prompts(fm: FlopModel, ro) -> int:
    """One critic forward over each prompt alone (the prompt critic reads no response)."""
    return sum(fm.forward(p, 0, logits=1, head=False) for p in ro.prompt_mask.sum(-1).tolist())


def _generate(fm: FlopModel, ro) -> int:
    plens = ro.prompt_mask.sum(-1).tolist()
    return sum(fm.generate(p, r) for p, r in zip(plens, ro.lengths.tolist(), strict=True))


CASES = {
    # prompt critic, on-policy (no old-log-prob pass), no reference
    "sppo": ("sppo", {}, {}, False),
    # token critic warmed up for one step, two mini-batches: old-log-prob pass, actor from step 1
    "ppo": ("ppo", OVERRIDES["ppo"], {"mini_batches": 2}, True),
    # reference (k3 KL loss), two epochs: old-log-prob pass, the update counted twice
    "grpo": ("grpo", {"group_size": 4, "ppo_epochs": 2}, {}, True),
    # on-policy; the greedy baseline is generated and metered as samples too
    "remax": ("remax", {}, {}, False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_meter_counts_each_phase_of_two_steps(case, start, tok, dense):
    name, overrides, cfg, old_pass = CASES[case]
    alg = get_algorithm(name, **overrides)
    trainer = spied(alg, start, tok, dense, **cfg)
    fm = FlopModel.from_config(start.config)
    expected = dict.fromkeys(M.PHASES, 0)
    samples = tokens = prompts = 0
    for step in range(2):
        trainer.step = step
        first = len(trainer.engine.calls)
        trainer.train_step()
        calls = [ro for _, ro in trainer.engine.calls[first:]]
        ro = calls[0]  # the sampled batch; ReMax's greedy batch follows it
        expected["rollout"] += sum(_generate(fm, r) for r in calls)
        samples += sum(len(r.texts) for r in calls)
        tokens += sum(int(r.lengths.sum()) for r in calls)
        prompts += len(ro.texts) // alg.samples_per_prompt
        epochs = alg.ppo_epochs
        if old_pass:  # off-policy updates need the sampling policy's log-probs apart
            expected["logprob"] += teacher_forced_flops(fm, ro)
        if alg.uses_reference:
            expected["reference"] += teacher_forced_flops(fm, ro)
        if alg.critic != "none":
            # the values before the update, then a forward and backward per mini-batch step
            crit = (
                _prompts(fm, ro)
                if alg.critic == "prompt"
                else teacher_forced_flops(fm, ro, head=False)
            )
            expected["critic"] += crit + 3 * epochs * crit
        if step >= alg.critic_warmup_steps:
            expected["update"] += 3 * epochs * teacher_forced_flops(fm, ro)  # forward and backward
    meter = trainer.meter
    assert {p: meter.flops[p] for p in M.PHASES} == {p: float(v) for p, v in expected.items()}
    assert (meter.samples, meter.rollout_tokens, meter.prompts) == (samples, tokens, prompts)
    assert trainer.stream.taken == 2 * SPS // alg.samples_per_prompt


# --- sampling seeds, dynamic sampling -------------------------------------------------------


def test_every_generation_batch_has_its_own_seed(start, tok, caplog):
    """A rollout's seed is a function of (seed, step, generation batch) in the int64 range:
    a resumed step samples what it did before, and each refill samples anew."""
    seed, batches = 2**62 + 7, 3
    alg = get_algorithm("dapo", group_size=4, max_gen_batches=batches)
    trainer = make_trainer(alg, start, tok, ConstantTask(horizon=1), BUDGET, seed=seed)
    trainer.engine = EngineSpy(trainer.engine)
    caplog.set_level(logging.INFO, logger="benchmarks.training.trainer")
    for step in range(2):
        trainer.step = step
        stats = trainer.train_step()
        # every group had one reward: all filtered, every batch drawn, no update
        assert stats[M.TRAIN_GEN_BATCHES] == batches and stats[M.TRAIN_KEPT_FRACTION] == 0.0
        assert M.TRAIN_POLICY_LOSS not in stats
    seeds = [kw["seed"] for kw, _ in trainer.engine.calls]
    assert seeds == [
        (seed * 1_000_003 + step * 1009 + gen) % 2**63 for step in range(2) for gen in range(3)
    ]
    assert all(0 <= s < 2**63 for s in seeds)
    assert trainer.meter.samples == 2 * batches * SPS  # discarded rollouts are spent too
    filtered = [r.getMessage() for r in caplog.records if "filtered out" in r.getMessage()]
    assert filtered == [
        "step 0: every group was filtered out; no update",
        "step 1: every group was filtered out; no update",
    ]


def test_dynamic_sampling_stops_once_the_batch_is_full(start, tok):
    alg = get_algorithm("dapo", group_size=4, max_gen_batches=5)
    trainer = spied(alg, start, tok, AlternatingTask(horizon=1))
    stats = trainer.train_step()
    # every group kept at the first batch: exactly samples_per_step rows, no refill
    assert stats[M.TRAIN_GEN_BATCHES] == 1.0 and stats[M.TRAIN_KEPT_FRACTION] == 1.0
    assert len(trainer.engine.calls) == 1 and trainer.meter.samples == SPS
    assert stats[M.TRAIN_REWARD_MEAN] == 0.5  # shaped rewards of the batch (no length penalty)


class ScriptedTask(FirstDigitTask):
    """Grade call ``k`` scores its rows with ``script[k]``."""

    def __init__(self, script: list[list[float]]) -> None:
        super().__init__(horizon=1)
        self.script, self.calls = script, 0

    def grade(self, responses, problems):
        scores = self.script[self.calls]
        self.calls += 1
        assert len(scores) == len(responses)
        return GradeResult(list(scores))


class _RecordingDAPO(DAPO):
    def advantages(self, rewards, response_mask, group_ids, **kw):
        self.seen = (group_ids.clone(), rewards.clone())
        return super().advantages(rewards, response_mask, group_ids, **kw)


def test_refills_keep_groups_of_different_batches_apart(start, tok):
    """Prompt 1 of the first batch and prompt 0 of the fifth are kept; their groups stay two
    groups of four (a shared id would normalise them as one group of eight)."""
    zeros, split = [0.0] * 4, [0.0, 1.0, 0.0, 1.0]
    script = [zeros + split + zeros + zeros] + [zeros * 4] * 3 + [split + zeros * 3]
    alg = _RecordingDAPO(DAPO.Config(group_size=4, max_gen_batches=5))
    trainer = make_trainer(alg, start, tok, ScriptedTask(script), BUDGET)
    stats = trainer.train_step()
    assert stats[M.TRAIN_GEN_BATCHES] == 5 and stats[M.TRAIN_KEPT_FRACTION] == 8 / 80
    ids, rewards = alg.seen
    assert rewards.tolist() == split + split
    assert len(set(ids[:4].tolist())) == 1 and len(set(ids[4:].tolist())) == 1
    assert ids[0] != ids[4]


def test_a_step_of_one_sample(start, tok, dense):
    stats = make_trainer("sppo", start, tok, dense, BUDGET, samples_per_step=1).train_step()
    assert stats[M.TRAIN_KEPT_FRACTION] == 1.0


class _CountingGrader(FirstDigitTask):
    """Integer 0/1 scores (a grader may return ints), one timeout and two errors per call."""

    def grade(self, responses, problems):
        return GradeResult([i % 2 for i in range(len(responses))], timeouts=1, errors=2)


def test_remax_counts_both_gradings_and_asks_for_a_valid_greedy_decode(start, tok):
    trainer = spied("remax", start, tok, _CountingGrader(horizon=1), top_p=0.9)
    stats = trainer.train_step()
    # the sampled batch and the greedy baselines were graded once each
    assert stats[M.GRADER_TIMEOUTS] == 2.0 and stats[M.GRADER_ERRORS] == 4.0
    assert stats[M.TRAIN_SCORE_MEAN] == 0.5
    (sampled, _), (greedy, _) = trainer.engine.calls
    cfg = trainer.cfg
    assert (sampled["temperature"], sampled["top_p"]) == (cfg.temperature, 0.9)
    # greedy: temperature 0 and top_p 1, arguments every engine accepts (vLLM checks top_p)
    assert (greedy["temperature"], greedy["top_p"]) == (0.0, 1.0)
    assert greedy["seed"] == sampled["seed"]
    assert greedy["max_new_tokens"] == sampled["max_new_tokens"] == cfg.max_new_tokens


# --- the sampler/trainer gap and the entropy metric -----------------------------------------


def test_rollout_logprob_mismatch_reads_response_tokens_only():
    rollout = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 9.0, 9.0]])
    trainer = torch.tensor([[-1.25, -1.0, 5.0], [-0.5, -9.0, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])  # the 5 and 18 gaps are padding
    out = rollout_logprob_mismatch(rollout, trainer, mask)
    # |gaps| on response tokens: 0.25, 1.0, 0.0
    assert out == {
        M.TRAIN_ROLLOUT_LOGPROB_DIFF_MEAN: pytest.approx(1.25 / 3, abs=1e-7),
        M.TRAIN_ROLLOUT_LOGPROB_DIFF_MAX: 1.0,
    }
    empty = rollout_logprob_mismatch(rollout, trainer, torch.zeros(2, 3))
    assert empty == {M.TRAIN_ROLLOUT_LOGPROB_DIFF_MEAN: 0.0, M.TRAIN_ROLLOUT_LOGPROB_DIFF_MAX: 0.0}


def test_on_policy_step_reports_the_gap_and_the_token_mean_entropy(start, tok, dense):
    trainer = spied("sppo", start, tok, dense, temperature=1.3)
    assert trainer._on_policy()
    policy_before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    stats = trainer.train_step()
    ((_, ro),) = trainer.engine.calls
    trainer.policy.load_state_dict(policy_before)  # the update's forward saw these weights
    with torch.no_grad():
        lp, ent = bucketed_logprobs(
            trainer.policy,
            ro.prompt_ids,
            ro.prompt_mask,
            ro.response_ids,
            ro.response_mask,
            1.3,
            with_entropy=True,
        )
    m = ro.response_mask
    n = int(m.sum())
    entropy = float((ent * m).sum() / n)
    # the same fp32 forward and token mean (entropies <= log 19 < 3) in other summation orders
    assert stats[M.TRAIN_ENTROPY] == pytest.approx(entropy, abs=fp_tol(n, scale=3.0))
    gap = rollout_logprob_mismatch(ro.log_probs, lp, m)
    for key, value in gap.items():
        # sampler and trainer log-probs are both fp32 forwards of one model (<= 3.5 in size)
        assert stats[key] == pytest.approx(value, abs=fp_tol(64, scale=4.0))


# --- which non-finite value skipped the update ----------------------------------------------


def _skip_messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "non-finite" in r.getMessage()]


def test_the_nan_loss_fault_hits_its_algorithm_and_step_only(
    start, tok, dense, monkeypatch, caplog
):
    monkeypatch.setenv(faults.FAULTS_ENV, "nan_loss@grpo:1")
    trainer = make_trainer("grpo", start, tok, dense, BUDGET)
    caplog.set_level(logging.WARNING, logger="benchmarks.training.trainer")
    for step in range(3):
        trainer.step = step
        stats = trainer.train_step()
        assert (M.TRAIN_GRAD_NORM in stats) == (step != 1)
    assert trainer.skipped == 1
    assert _skip_messages(caplog) == ["step 1: non-finite policy loss; update skipped"]


@pytest.mark.parametrize("model", ["policy", "critic"])
def test_a_non_finite_gradient_norm_skips_the_optimizer_step(model, start, tok, dense, caplog):
    trainer = make_trainer("sppo", start, tok, dense, BUDGET)
    module = trainer.policy if model == "policy" else trainer.critic.model
    for p in module.parameters():
        p.register_hook(lambda g: torch.full_like(g, float("inf")))
    before = [p.detach().clone() for p in module.parameters()]
    caplog.set_level(logging.WARNING, logger="benchmarks.training.trainer")
    stats = trainer.train_step()
    assert all(torch.equal(p, q) for p, q in zip(module.parameters(), before, strict=True))
    grad_norm = M.TRAIN_GRAD_NORM if model == "policy" else M.CRITIC_GRAD_NORM
    assert grad_norm not in stats and trainer.skipped == 1
    assert _skip_messages(caplog) == [f"step 0: non-finite {model} gradient norm; update skipped"]


class _NaNCritic(SPPO):
    """SPPO whose critic loss is NaN (its policy loss is untouched)."""

    def value_loss(self, *args, **kwargs):
        loss, metrics = super().value_loss(*args, **kwargs)
        return loss * float("nan"), metrics


def test_a_non_finite_critic_loss_skips_the_critic_step(start, tok, dense, caplog):
    trainer = make_trainer(_NaNCritic(), start, tok, dense, BUDGET)
    critic_before = [p.detach().clone() for p in trainer.critic.model.parameters()]
    caplog.set_level(logging.WARNING, logger="benchmarks.training.trainer")
    stats = trainer.train_step()
    assert all(
        torch.equal(p, q)
        for p, q in zip(trainer.critic.model.parameters(), critic_before, strict=True)
    )
    assert M.CRITIC_GRAD_NORM not in stats and M.TRAIN_GRAD_NORM in stats  # the actor stepped
    assert trainer.skipped == 1
    assert _skip_messages(caplog) == ["step 0: non-finite critic loss; update skipped"]


# --- the update loop ------------------------------------------------------------------------


class _RowIds(Algorithm):
    """Each sample's advantage is its row in the batch, and every policy-loss call records the
    rows it was given: the mini-batches, in the order the update visits them."""

    def __init__(self, config: AlgorithmConfig | None = None) -> None:
        super().__init__(config)
        self.visits: list[list[int]] = []
        self.extras: list[dict] = []

    def advantages(self, rewards, response_mask, group_ids, **extras):
        self.extras.append(extras)
        rows = torch.arange(len(rewards), dtype=torch.float32)
        return outcome_to_tokens(rows, response_mask), None

    def policy_loss(self, log_probs, old_log_probs, advantages, response_mask, ref_log_probs=None):
        self.visits.append(advantages[:, 0].long().tolist())  # every response has a token
        return super().policy_loss(log_probs, old_log_probs, advantages, response_mask)


def test_mini_batches_are_a_seeded_shuffle_of_the_batch(start, tok, dense):
    """Each epoch visits the batch once, in mini-batches of samples_per_step / mini_batches
    rows, in an order drawn from (seed, step): a resumed step updates as it did before."""
    seed, step = 3, 2
    alg = _RowIds(AlgorithmConfig(ppo_epochs=2))
    trainer = make_trainer(alg, start, tok, dense, BUDGET, seed=seed, mini_batches=4)
    trainer.step = step
    trainer.train_step()
    gen = torch.Generator().manual_seed(seed * 7919 + step)
    orders = [torch.randperm(SPS, generator=gen).tolist() for _ in range(2)]
    assert alg.visits == [order[i : i + 4] for order in orders for i in range(0, SPS, 4)]
    # no critic, no greedy baseline, no KL in the reward: what the interface promises then
    assert alg.extras == [dict(values=None, baseline_rewards=None, token_kl=None)]


def test_one_row_mini_batches(start, tok, dense):
    """A mini-batch of one row of one token: its entropy is that token's, each row an optimizer
    step of its own."""
    trainer = spied("sppo", start, tok, dense, max_new_tokens=1, mini_batches=SPS, actor_lr=1e-30)
    stats = trainer.train_step()
    # lr 1e-30 moves a weight by at most 1e-30: every mini-batch saw, to far below rounding, the
    # weights the rollout was drawn with, so each row's entropy can be recomputed after the step
    ((_, ro),) = trainer.engine.calls
    assert ro.response_mask.sum(-1).tolist() == [1] * SPS
    with torch.no_grad():
        _, ent = bucketed_logprobs(
            trainer.policy,
            ro.prompt_ids,
            ro.prompt_mask,
            ro.response_ids,
            ro.response_mask,
            trainer.cfg.temperature,
            with_entropy=True,
        )
    # the mean of 16 one-token entropies (each < log 19 < 3), fp32 forwards of other batch shapes
    expected = float(ent[:, 0].mean())
    assert stats[M.TRAIN_ENTROPY] == pytest.approx(expected, abs=fp_tol(64, scale=3.0))
    steps = {float(s["step"]) for s in trainer.opt.state.values()}
    assert steps == {float(SPS)}


def test_value_clipping_reaches_the_critic_update(start, tok, dense):
    """The second epoch's values have moved from the rollout's by more than a 1e-6 clip range:
    the clipped term is active on some tokens, which needs the old values in every update."""
    alg = get_algorithm("ppo", critic_warmup_steps=0, cliprange_value=1e-6, ppo_epochs=2)
    trainer = make_trainer(alg, start, tok, dense, BUDGET, critic_lr=1e-2)
    stats = trainer.train_step()
    assert stats["critic/clip_frac"] > 0.0


# --- budgets: the worst case of the next generation batch ------------------------------------


def test_a_rollout_token_budget_below_one_worst_case_step_takes_no_step(start, tok, dense):
    budget = Budget(kind="rollout_tokens", limit=SPS * MAX_NEW - 1, eval_fractions=(0.0, 1.0))
    trainer = make_trainer("sppo", start, tok, dense, budget)
    trainer.train()
    assert trainer.step == 0 and trainer.meter.rollout_tokens == 0


def test_remax_greedy_samples_are_part_of_the_worst_case(start, tok, dense):
    # n = 2: 16 samples of 8 prompts, and 8 greedy baselines: 24 per step; a 24 budget fits one
    alg = get_algorithm("remax", n=2)
    budget = Budget(kind="samples", limit=1.5 * SPS, eval_fractions=(0.0, 1.0))
    trainer = make_trainer(alg, start, tok, dense, budget)
    trainer.train()
    assert trainer.step == 1 and trainer.meter.samples == 1.5 * SPS
