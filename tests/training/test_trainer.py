"""The native RL trainer on a real tiny Llama: reproducibility, every algorithm, budgets, evals,
critics, dynamic sampling and the non-finite-loss guard."""

from __future__ import annotations

import pytest
import torch

from algorithms import get_algorithm, list_algorithms
from algorithms.base import _restore_registry, register_algorithm
from algorithms.grpo import GRPO
from benchmarks.tasks.arith import ArithTask
from benchmarks.telemetry import metrics as M
from benchmarks.telemetry.meter import Budget
from benchmarks.telemetry.tracking import NullTracker
from benchmarks.training.modeling import ValueModel, build_tiny_llama
from testkit.tolerances import (
    F64_SAME_MATH,
    assert_close_to_scale,
    fp_tol,
    hf_rmsnorm_in_model_dtype,
)
from testkit.trainers import MAX_NEW, OVERRIDES, SPEC, SPS, FirstDigitTask, make_trainer

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def start(tok):
    return build_tiny_llama(SPEC, len(tok), seed=0)


@pytest.fixture(scope="module")
def arith():
    return ArithTask(horizon=1, eval_size=16)


@pytest.fixture(scope="module")
def dense():
    return FirstDigitTask(horizon=1, eval_size=16)


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
