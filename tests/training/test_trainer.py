"""The native RL trainer on a real tiny Llama: reproducibility, every algorithm, budgets, evals,
critics, dynamic sampling and the non-finite-loss guard; then, exactly, the quantities of one
step (what the meter counts per phase, seeds, mini-batch order, refills, the log-prob gap and
entropy, which non-finite value skipped an update, the budget's worst case)."""

from __future__ import annotations

import logging

import pytest
import torch

from algorithms import Algorithm, AlgorithmConfig, get_algorithm, list_algorithms
from algorithms.base import _restore_registry, register_algorithm
from algorithms.common import outcome_to_tokens
from algorithms.dapo import DAPO
from algorithms.grpo import GRPO
from algorithms.sppo import SPPO
from analysis import metrics as M
from benchmarks import faults
from benchmarks.tasks.arith import ArithTask
from benchmarks.tasks.grading import GradeResult
from benchmarks.telemetry.meter import Budget, FlopModel
from benchmarks.telemetry.tracking import NullTracker
from benchmarks.training.modeling import ValueModel
from benchmarks.training.trainer import rollout_logprob_mismatch
from testkit.tolerances import (
    F64_SAME_MATH,
    assert_close_to_scale,
    fp_tol,
    hf_rmsnorm_in_model_dtype,
)
from testkit.trainers import (
    MAX_NEW,
    OVERRIDES,
    SPS,
    EngineSpy,
    FirstDigitTask,
    make_trainer,
    rollout_logprobs,
    teacher_forced_flops,
)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def arith():
    return ArithTask(horizon=1, eval_size=16)


def series(tracker, key):
    return [m[key] for _, m in tracker.history if key in m]


def _same_params(a, b) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def _deterministic(history):
    return [
        (step, {k: v for k, v in m.items() if not k.startswith(("compute/wall_s", "memory/"))})
        for step, m in history
    ]


# --- (a) reproducibility ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sppo", "dapo"])
def test_same_seed_same_history(name, start, tok, dense):
    budget = Budget(kind="samples", limit=4 * SPS, eval_fractions=(0.0, 0.5, 1.0))
    runs = []
    for seed in (0, 0, 1):
        tracker = NullTracker()
        trainer = make_trainer(name, start, tok, dense, budget, seed=seed, tracker=tracker)
        trainer.train()
        runs.append((_deterministic(tracker.history), trainer))
    (h0, t0), (h1, t1), (h2, _) = runs
    assert M.TRAIN_POLICY_LOSS in {k for _, m in h0 for k in m}  # the actor really updated
    assert h0 == h1  # exact: every loss, count, FLOP and accuracy
    assert _same_params(t0.policy, t1.policy)
    assert not _same_params(t0.policy, start)
    assert h0 != h2  # a different seed changes the run: the comparison can fail


def test_a_batch_of_partial_groups_is_refused_before_any_compute(start, tok, dense):
    """A trainer built directly (sweeps, tests, the bench) checks what the plan checks: every
    step samples whole groups."""
    from algorithms import ConfigError

    budget = Budget(kind="samples", limit=4 * SPS, eval_fractions=(1.0,))
    with pytest.raises(ConfigError, match=r"samples_per_step=10 must be a multiple of rloo's"):
        make_trainer("rloo", start, tok, dense, budget, samples_per_step=10)


# --- (b) every algorithm ----------------------------------------------------------------------


@pytest.mark.parametrize("name", list(OVERRIDES))
def test_every_algorithm_runs_within_the_sample_budget(name, start, tok, dense):
    # Not a multiple of ReMax's 32 samples per step: its worst case must be counted to fit.
    limit = 5 * SPS
    tracker = NullTracker()
    trainer = make_trainer(
        name, start, tok, dense, Budget(kind="samples", limit=limit), tracker=tracker
    )
    evals = trainer.train()
    samples = series(tracker, M.COMPUTE_ROLLOUT_SAMPLES)
    assert samples and all(s <= limit for s in samples)
    assert samples == sorted(samples)
    assert trainer.meter.samples <= limit
    assert trainer.step >= 2
    assert series(tracker, M.TRAIN_POLICY_LOSS), "the actor never updated"
    assert not _same_params(trainer.policy, start)
    assert evals[0][0] == 0.0 and evals[-1][0] == 1.0
    assert all(0.0 <= r.accuracy <= 1.0 and r.n == 16 for _, r in evals)
    # Every logged step carries the whole compute meter.
    assert all(M.COMPUTE_FLOPS in m and M.MEMORY_PEAK_BYTES in m for _, m in tracker.history)
    flops = series(tracker, M.COMPUTE_FLOPS)
    assert flops == sorted(flops) and flops[-1] > 0
    if name == "remax":  # one greedy baseline per prompt is metered as a sample too
        assert trainer.meter.samples == trainer.step * 2 * SPS
        assert trainer.meter.prompts == trainer.step * SPS


# --- (c) DAPO's discarded rollouts --------------------------------------------------------------


def test_dapo_counts_discarded_rollouts(start, tok, arith):
    """On an untrained model nearly every arith group scores all 0 and is dropped: DAPO refills,
    and every generated rollout (kept or not) is spent from the budget."""
    alg = get_algorithm("dapo", group_size=4, max_gen_batches=3)
    limit = 7 * SPS
    tracker = NullTracker()
    trainer = make_trainer(
        alg, start, tok, arith, Budget(kind="samples", limit=limit), tracker=tracker
    )
    trainer.train()
    gen = series(tracker, M.TRAIN_GEN_BATCHES)
    samples = series(tracker, M.COMPUTE_ROLLOUT_SAMPLES)
    kept = series(tracker, M.TRAIN_KEPT_FRACTION)
    assert max(gen) > 1
    assert min(kept) < 1.0
    assert all(g <= 3 for g in gen)
    # Cumulative samples after each step = 16 per generation batch so far.
    cumulative = [SPS * sum(gen[: i + 1]) for i in range(len(gen))]
    step_samples = [
        m[M.COMPUTE_ROLLOUT_SAMPLES] for _, m in tracker.history if M.TRAIN_GEN_BATCHES in m
    ]
    assert step_samples == cumulative
    assert trainer.meter.samples == SPS * sum(gen) <= limit
    assert samples[-1] == trainer.meter.samples
    # Refills stop where the budget does: the last step could not start another batch.
    assert trainer.meter.samples + SPS > limit


# --- (d) other budget kinds and evaluation points ---------------------------------------------


def test_rollout_token_budget_worst_case_fits(start, tok, dense):
    limit, worst = 1000, SPS * MAX_NEW  # a step costs at most 160 tokens
    tracker = NullTracker()
    budget = Budget(kind="rollout_tokens", limit=limit, eval_fractions=(0.0, 0.25, 0.5, 0.75, 1.0))
    trainer = make_trainer("sppo", start, tok, dense, budget, tracker=tracker)
    trainer.train()
    tokens = series(tracker, M.COMPUTE_ROLLOUT_TOKENS)
    assert all(t <= limit for t in tokens)
    # Cumulative tokens after each step: every step started only if its worst case fitted, and
    # the run stopped at the first step whose worst case did not.
    after = [m[M.COMPUTE_ROLLOUT_TOKENS] for _, m in tracker.history if M.TRAIN_GEN_BATCHES in m]
    assert len(after) == trainer.step >= 5
    assert all(before + worst <= limit for before in [0.0, *after[:-1]])
    assert after[-1] + worst > limit
    assert trainer.meter.rollout_tokens < trainer.meter.samples * MAX_NEW  # EOS ended some
    assert series(tracker, M.EVAL_BUDGET_FRACTION) == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_flop_budget(start, tok, dense):
    # Measure one step's FLOPs, then give a budget of about four and a half steps.
    probe = make_trainer("grpo", start, tok, dense, Budget(kind="samples", limit=SPS))
    probe.train()
    step_flops = probe.meter.total_flops
    assert step_flops > 0
    limit = 4.5 * step_flops
    tracker = NullTracker()
    budget = Budget(kind="flops", limit=limit, eval_fractions=(0.0, 0.5, 1.0))
    trainer = make_trainer("grpo", start, tok, dense, budget, tracker=tracker)
    trainer.train()
    spent = trainer.meter.total_flops
    # The largest step so far is the estimate: the run stops within one step of the limit.
    assert abs(spent - limit) < 1.5 * step_flops
    assert trainer.step >= 3
    assert series(tracker, M.EVAL_BUDGET_FRACTION) == [0.0, 0.5, 1.0]


def test_evals_at_exact_sample_fractions(start, tok, dense):
    limit = 4 * SPS
    tracker = NullTracker()
    budget = Budget(kind="samples", limit=limit, eval_fractions=(0.0, 0.25, 0.5, 0.75, 1.0))
    trainer = make_trainer("rloo", start, tok, dense, budget, tracker=tracker)
    evals = trainer.train()
    at_eval = [
        (m[M.EVAL_BUDGET_FRACTION], m[M.COMPUTE_ROLLOUT_SAMPLES], step)
        for step, m in tracker.history
        if M.EVAL_BUDGET_FRACTION in m
    ]
    assert at_eval == [
        (0.0, 0.0, 0),
        (0.25, 16.0, 1),
        (0.5, 32.0, 2),
        (0.75, 48.0, 3),
        (1.0, 64.0, 4),
    ]
    assert [f for f, _ in evals] == [0.0, 0.25, 0.5, 0.75, 1.0]
    acc = M.eval_metric("arith", "accuracy")
    assert [m[acc] for _, m in tracker.history if acc in m] == [r.accuracy for _, r in evals]


def test_unreached_eval_fractions_are_reported(start, tok, dense, caplog):
    # ReMax spends 2 x 16 x 10 = 320 tokens per step in the worst case, about 30% of the limit:
    # the run stops once a worst-case step no longer fits, short of 0.75 of the budget.
    tracker = NullTracker()
    budget = Budget(kind="rollout_tokens", limit=800, eval_fractions=(0.0, 0.25, 0.5, 0.75, 1.0))
    trainer = make_trainer("remax", start, tok, dense, budget, tracker=tracker)
    with caplog.at_level("WARNING", logger="benchmarks.training.trainer"):
        trainer.train()
    fractions = series(tracker, M.EVAL_BUDGET_FRACTION)
    assert fractions[0] == 0.0 and fractions[-1] == 1.0
    missing = [f for f in budget.eval_fractions if f not in fractions]
    assert missing and all(str(f) in caplog.text for f in missing)
    assert "were not reached" in caplog.text


# --- (e) critics ------------------------------------------------------------------------------


@pytest.mark.parametrize("name, kind", [("ppo", "token"), ("sppo", "prompt"), ("grpo", "none")])
def test_critic_is_a_fresh_value_model(name, kind, start, tok, arith):
    trainer = make_trainer(name, start, tok, arith, Budget(kind="samples", limit=SPS))
    assert trainer.alg.critic == kind
    if kind == "none":
        assert trainer.critic is None
        return
    critic = trainer.critic.model
    assert isinstance(critic, ValueModel)
    assert (
        torch.count_nonzero(critic.head.weight) == 0 and torch.count_nonzero(critic.head.bias) == 0
    )
    # The backbone is a copy of the starting weights, not shared with the policy.
    policy_ptrs = {p.data_ptr() for p in trainer.policy.parameters()}
    assert all(p.data_ptr() not in policy_ptrs for p in critic.parameters())
    for (n1, p1), (n2, p2) in zip(
        critic.backbone.named_parameters(), start.model.named_parameters(), strict=True
    ):
        assert n1 == n2 and torch.equal(p1, p2)
    # Zero head: every value starts at exactly 0, shaped as the algorithm expects.
    ro = trainer.engine.generate(["1+2=", "3*4="], temperature=1.0, max_new_tokens=5, seed=0)
    with torch.no_grad():
        v = trainer.critic.values(ro)
    assert v.shape == ((2,) if kind == "prompt" else tuple(ro.response_ids.shape))
    assert torch.count_nonzero(v) == 0


def test_token_critic_fast_path_gives_hf_values_and_gradients(start, tok, arith, monkeypatch):
    """PPO's token critic runs the policy's shared-prompt teacher-forced path, in length buckets:
    its values at every real response position, and every gradient of a masked loss, equal its
    HF forward's (the path a non-Llama critic takes). The same maths, so compared in float64:
    in fp32 the two paths' gradients (sums over every position of products through the model)
    differ by CPU kind (1.06e-4 in one element on an Intel Xeon); in float64 by ~1e-15 of their
    scale."""
    import benchmarks.training.critic as critic_mod
    from benchmarks.engines.fastdecode import supports_backbone

    trainer = make_trainer(
        "ppo", start, tok, arith, Budget(kind="samples", limit=SPS), length_buckets=2
    )
    critic = trainer.critic.model
    assert supports_backbone(critic.backbone)  # the fp32 critic takes the fast path
    with torch.no_grad():  # a non-zero head, so the values depend on the hidden states
        critic.head.weight.normal_(generator=torch.Generator().manual_seed(0))
        critic.head.bias.fill_(0.1)
    distinct = ["7=", "1+2=", "3*4-5=", "9-9*9+1=", "4+4=", "0*1*2*3*4=", "5-2=", "8*8+1="]
    prompts = [p for p in distinct for _ in range(8)]  # 64 rows: two buckets of 32
    ro = trainer.engine.generate(prompts, temperature=1.5, max_new_tokens=MAX_NEW, seed=3)
    assert ro.lengths.min() < ro.lengths.max()  # the two buckets are trimmed differently
    assert (ro.prompt_mask == 0).any()  # left padding really present
    valid = ro.response_mask.bool()
    critic.double()  # this trainer's own copy; the fast path's fp32-only gate is lifted below
    hf_rmsnorm_in_model_dtype(monkeypatch)  # HF's norm would round to fp32 on its side only
    got = {}
    for name in ("fast", "hf"):
        fast = name == "fast"  # the fast arm gets the float64 critic past the fp32 gate
        monkeypatch.setattr(critic_mod, "supports_backbone", lambda backbone, fast=fast: fast)
        critic.zero_grad(set_to_none=True)
        v = trainer.critic.values(ro)
        assert v.dtype == torch.float64
        (v * ro.response_mask).pow(2).sum().backward()
        got[name] = (v.detach(), [p.grad.clone() for p in critic.parameters()])
    (v_fast, g_fast), (v_hf, g_hf) = got["fast"], got["hf"]
    # float64, same maths: F64_SAME_MATH of each tensor's scale (fp32 RoPE tables aside, ~eps64)
    assert_close_to_scale(v_fast[valid], v_hf[valid], F64_SAME_MATH)
    for a, b in zip(g_fast, g_hf, strict=True):
        assert_close_to_scale(a, b, F64_SAME_MATH)  # to the scale: elements near 0 cancel


class _RecordingEngine:
    """The trainer's engine, unchanged, keeping the rollouts it returns."""

    def __init__(self, inner):
        self.inner, self.rollouts = inner, []

    def generate(self, prompts, **kw):
        self.rollouts.append(self.inner.generate(prompts, **kw))
        return self.rollouts[-1]

    def sync_weights(self):
        self.inner.sync_weights()


def test_critic_trains_apart_from_the_policy(start, tok, dense):
    """PPO's critic warm-up: the critic learns from step 0, the actor only from step 1. Learns:
    its value loss on the step's own batch falls (tests/training/test_learning.py checks that
    it predicts held-out rollouts)."""
    alg = get_algorithm("ppo", critic_warmup_steps=1)
    trainer = make_trainer(
        alg, start, tok, dense, Budget(kind="samples", limit=SPS), critic_lr=1e-2
    )
    trainer.engine = _RecordingEngine(trainer.engine)
    stats = trainer.train_step()
    assert _same_params(trainer.policy, start)  # warm-up: no actor update yet
    assert M.CRITIC_LOSS in stats and M.TRAIN_POLICY_LOSS not in stats
    (ro,) = trainer.engine.rollouts
    # The zero-head critic valued every token 0, so with gamma = lambda = 1 and no KL every
    # valid token's return is the outcome R: before the step the loss is 0.5 * mean R^2.
    rewards = torch.tensor(dense.grade(ro.texts, [None] * SPS).scores)
    mask = ro.response_mask
    returns = rewards[:, None] * mask
    before = 0.5 * (returns**2 * mask).sum() / mask.sum()
    # two fp32 token-means of the same terms (each <= 0.5), summed in other orders
    assert stats[M.CRITIC_LOSS] == pytest.approx(float(before), abs=fp_tol(int(mask.sum())))
    ids = torch.cat([ro.prompt_ids, ro.response_ids], 1)
    full = torch.cat([ro.prompt_mask, mask], 1)
    pos = (full.cumsum(-1) - 1).clamp(min=0).long()
    P, T = ro.prompt_ids.shape[1], ro.response_ids.shape[1]
    with torch.no_grad():
        values = trainer.critic.model(ids, full.long(), pos)[:, P - 1 : P - 1 + T]
    after = 0.5 * ((values - returns) ** 2 * mask).sum() / mask.sum()
    assert after < 0.95 * before, (float(after), float(before))  # observed 0.81
    trainer.step += 1
    stats = trainer.train_step()  # past the warm-up: the actor updates
    assert M.TRAIN_POLICY_LOSS in stats and not _same_params(trainer.policy, start)


# --- (f) non-finite losses ----------------------------------------------------------------------


def _nan_algorithm(nan_calls):
    """A registered GRPO variant whose policy loss is NaN on the given (0-based) calls."""

    @register_algorithm("nan_loss_test")
    class NaNLoss(GRPO):
        calls = 0

        def policy_loss(self, *args, **kwargs):
            loss, metrics = super().policy_loss(*args, **kwargs)
            i, type(self).calls = type(self).calls, type(self).calls + 1
            return (loss * float("nan") if i in nan_calls else loss), metrics

    return get_algorithm("nan_loss_test", group_size=4, kl_loss_coef=0.0)


def test_non_finite_loss_is_skipped_then_raises(start, tok, dense):
    tracker = NullTracker()
    with _restore_registry():
        alg = _nan_algorithm(nan_calls=range(100))
        trainer = make_trainer(
            alg,
            start,
            tok,
            dense,
            Budget(kind="samples", limit=10 * SPS),
            tracker=tracker,
            max_consecutive_skips=3,
        )
        with pytest.raises(
            FloatingPointError, match=r"nan_loss_test: 3 consecutive .*policy loss.*step 2"
        ):
            trainer.train()
    assert series(tracker, M.TRAIN_SKIPPED_STEPS) == [1.0, 2.0]  # steps 0 and 1 were logged
    assert trainer.skipped == 3
    assert _same_params(trainer.policy, start)  # no update from a NaN loss


def test_a_finite_step_resets_the_consecutive_count(start, tok, dense):
    tracker = NullTracker()
    with _restore_registry():
        alg = _nan_algorithm(nan_calls={0, 1, 3, 4})  # step 2 is finite
        trainer = make_trainer(
            alg,
            start,
            tok,
            dense,
            Budget(kind="samples", limit=6 * SPS),
            tracker=tracker,
            max_consecutive_skips=3,
        )
        trainer.train()
    assert series(tracker, M.TRAIN_SKIPPED_STEPS) == [1.0, 2.0, 2.0, 3.0, 4.0, 4.0]
    assert trainer.step == 6
    assert not _same_params(trainer.policy, start)  # the finite steps did update
    assert "nan_loss_test" not in list_algorithms()  # the registry was restored


# === the step's exact quantities ===============================================================
#
# Where mutation testing found the tests above loose (docs/mutation.md): what the compute meter
# counts in each phase, the sampling seeds and the mini-batch order, the refill loop of dynamic
# sampling, the sampler/trainer log-prob gap, the entropy metric, which non-finite value skipped
# an update, and the worst case the budget reserves for the next generation batch. The meter is
# the basis of equal budgets, so each phase's FLOPs are recomputed from the step's recorded
# rollouts with the analytic model alone (docs/design.md §3): a pass counted twice, a backward
# not counted, or a prompt critic billed for the responses changes them.

BUDGET = Budget(kind="samples", limit=1000 * SPS)  # never the limit here: steps are called


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
    lp, ent = rollout_logprobs(trainer.policy, ro, 1.3, with_entropy=True)
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
    _, ent = rollout_logprobs(trainer.policy, ro, trainer.cfg.temperature, with_entropy=True)
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
