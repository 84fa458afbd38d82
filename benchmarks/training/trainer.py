"""The native RL trainer: one (algorithm, seed) run under a compute budget.

A benchmark is only fair if the algorithms differ in nothing but the algorithm. So there is one
loop, and everything that differs (samples per prompt, critic kind, reward shaping, batch
filter, advantages, losses) is asked of the registered :class:`algorithms.Algorithm`. Every
algorithm sees the same prompt stream (a seeded permutation of the training set) and the same
sampling parameters, and each consumes it at its own rate (``samples_per_step / n`` prompts).
Updates are sized in samples, not prompts, so every algorithm takes optimizer steps on batches of
the same size and the budget buys all of them the same number of sampled responses.

The budget is only comparable if it is counted the same way for everyone, so each phase of a
step is timed and its analytic FLOPs are counted in the same statement (:meth:`ComputeMeter.phase`).
A run is only reproducible if a killed one can continue exactly, so the trainer's whole state is
one :meth:`RLTrainer.state_dict` and every sampling seed is a function of (seed, step).

The trainer owns the loop and the policy's update; the critic's model, optimizer and update are a
:class:`~benchmarks.training.critic.Critic`, evaluation at the budget's fractions a
:class:`~benchmarks.evaluation.trainer_evals.TrainingEvaluator`, and a
:class:`~benchmarks.training.checkpoint.Checkpointer` saves and gives back the trainer's state.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from algorithms import Algorithm, ConfigError
from algorithms.common import kl_penalty
from analysis import metrics as M
from benchmarks import faults
from benchmarks.engines.rollout import Rollout, RolloutEngine
from benchmarks.engines.teacher_forced import bucketed_logprobs
from benchmarks.evaluation.evaluate import EvalResult
from benchmarks.evaluation.trainer_evals import TrainingEvaluator
from benchmarks.tasks.base import Task, TaskProblem
from benchmarks.telemetry.memory import component_metrics, module_memory
from benchmarks.telemetry.meter import Budget, ComputeMeter, FlopModel
from benchmarks.telemetry.tracking import NullTracker, Tracker
from benchmarks.training.checkpoint import Checkpointer
from benchmarks.training.config import TrainerConfig
from benchmarks.training.critic import Critic, rollout_flops
from benchmarks.training.optim import guarded_step
from benchmarks.training.precision import autocast

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

#: Per-mini-batch metrics that are undefined (NaN) when the mini-batch's targets are all equal.
_UNDEFINED_WHEN_CONSTANT = frozenset({M.CRITIC_EXPLAINED_VAR})

__all__ = ["PromptStream", "RLTrainer", "memory_metrics", "rollout_logprob_mismatch"]


class PromptStream:
    """Endless seeded permutations of the training problems, identical for every algorithm."""

    def __init__(self, problems: Sequence[TaskProblem], seed: int) -> None:
        self.problems = problems
        self.rng = random.Random(seed)
        self.order: list[int] = []
        self.taken = 0

    def take(self, k: int) -> list[TaskProblem]:
        out = []
        for _ in range(k):
            if not self.order:
                self.order = list(range(len(self.problems)))
                self.rng.shuffle(self.order)
            out.append(self.problems[self.order.pop()])
        self.taken += k
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.getstate(), "order": list(self.order), "taken": self.taken}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        version, internal, gauss = state["rng"]  # a round trip may turn the tuples into lists
        self.rng.setstate((version, tuple(internal), gauss))
        self.order = list(state["order"])
        self.taken = state["taken"]


def rollout_logprob_mismatch(
    rollout_lp: torch.Tensor, trainer_lp: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """Mean and max of |sampler log-prob - trainer log-prob| over response tokens.

    The importance ratio uses the trainer's recomputation; a rollout engine whose numbers differ
    (another kernel, dtype or weight copy) samples from a slightly different policy, a silent
    off-policy bias. Near 0 for the torch engine; for vLLM it measures that gap.
    """
    valid = mask > 0
    if not bool(valid.any()):
        return {M.TRAIN_ROLLOUT_LOGPROB_DIFF_MEAN: 0.0, M.TRAIN_ROLLOUT_LOGPROB_DIFF_MAX: 0.0}
    diff = (rollout_lp.float() - trainer_lp.float()).abs()[valid]
    return {
        M.TRAIN_ROLLOUT_LOGPROB_DIFF_MEAN: float(diff.mean()),
        M.TRAIN_ROLLOUT_LOGPROB_DIFF_MAX: float(diff.max()),
    }


def _fingerprint(model: torch.nn.Module | None) -> float:
    """A cheap identity of frozen weights (sum of |w| in float64)."""
    if model is None:
        return 0.0
    return float(sum(p.detach().double().abs().sum() for p in model.parameters()))


@dataclass
class _Batch:
    """Sampled responses and their rewards, row-aligned."""

    rollout: Rollout
    rewards: torch.Tensor  # (B,) shaped
    scores: torch.Tensor  # (B,) raw outcome
    group_ids: torch.Tensor  # (B,)
    baseline: torch.Tensor | None  # (B,) greedy reward (ReMax)
    keys: tuple[str, ...]  # (B,) each row's problem id: its prompt's identity across steps

    def select(self, idx: torch.Tensor) -> _Batch:
        return _Batch(
            self.rollout.select(idx),
            self.rewards[idx],
            self.scores[idx],
            self.group_ids[idx],
            None if self.baseline is None else self.baseline[idx],
            tuple(self.keys[i] for i in idx.tolist()),
        )

    @staticmethod
    def cat(parts: Sequence[_Batch], pad_id: int) -> _Batch:
        return _Batch(
            Rollout.cat([b.rollout for b in parts], pad_id),
            torch.cat([b.rewards for b in parts]),
            torch.cat([b.scores for b in parts]),
            torch.cat([b.group_ids for b in parts]),
            None if parts[0].baseline is None else torch.cat([b.baseline for b in parts]),
            tuple(k for b in parts for k in b.keys),
        )


@dataclass
class _Drawn:
    """One generation batch after the reward phase: the rows the filter kept (None: none), and
    what the step's metrics count over every row drawn."""

    kept: _Batch | None
    scores: torch.Tensor  # (rows,) outcome scores of every row
    lengths: torch.Tensor  # (rows,) response lengths of every row
    timeouts: int
    errors: int

    @property
    def n_kept(self) -> int:
        return 0 if self.kept is None else len(self.kept.rewards)


def _kept_batch(
    drawn: Sequence[_Drawn], samples_per_step: int, pad_id: int
) -> tuple[_Batch | None, dict[str, float]]:
    """The kept rows of every generation batch, cut to ``samples_per_step`` (whole groups,
    as verl's dynamic sampling keeps), and the rollout's metrics."""
    scores = torch.cat([d.scores for d in drawn])
    n_kept = sum(d.n_kept for d in drawn)
    stats = {
        M.TRAIN_SCORE_MEAN: float(scores.mean()),
        M.TRAIN_RESPONSE_LENGTH: float(torch.cat([d.lengths for d in drawn]).mean()),
        M.TRAIN_GEN_BATCHES: float(len(drawn)),
        M.TRAIN_KEPT_FRACTION: n_kept / max(1, len(scores)),
        M.GRADER_TIMEOUTS: float(sum(d.timeouts for d in drawn)),
        M.GRADER_ERRORS: float(sum(d.errors for d in drawn)),
    }
    kept = [d.kept for d in drawn if d.kept is not None]
    if not kept:
        return None, stats
    batch = _Batch.cat(kept, pad_id)
    if n_kept > samples_per_step:
        batch = batch.select(torch.arange(samples_per_step))
    stats[M.TRAIN_REWARD_MEAN] = float(batch.rewards.mean())
    return batch, stats


def _minibatches(rows: int, mini_batches: int, epochs: int, seed: int) -> Iterator[torch.Tensor]:
    """Row indices of each mini-batch, epoch by epoch, each epoch a fresh permutation drawn from
    one generator seeded with ``seed``."""
    size = max(1, rows // mini_batches)
    gen = torch.Generator().manual_seed(seed)
    for _epoch in range(epochs):
        order = torch.randperm(rows, generator=gen)
        for i in range(0, rows, size):
            yield order[i : i + size]


def _mean_metrics(steps: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each metric's mean over the optimizer steps that report it, in the steps' order."""
    acc: dict[str, list[float]] = {}
    for metrics in steps:
        for k, val in metrics.items():
            acc.setdefault(k, []).append(val)
    out = {k: sum(v) / len(v) for k, v in acc.items() if k not in _UNDEFINED_WHEN_CONSTANT}
    for k in _UNDEFINED_WHEN_CONSTANT & acc.keys():
        # Undefined on a mini-batch whose returns are all equal: the mean over the rest, and
        # nothing logged when every one is (NaN would match no history, a resumed run's
        # included, and says nothing a gap does not).
        defined = [v for v in acc[k] if math.isfinite(v)]
        if defined:
            out[k] = sum(defined) / len(defined)
    return out


def memory_metrics(
    policy: torch.nn.Module,
    opt: torch.optim.Optimizer,
    critic: Any | None,
    reference: torch.nn.Module | None,
) -> dict[str, float]:
    """Bytes of the parameters, gradients and optimizer state of each component a run holds
    (``memory/<component>/<kind>_bytes``); the frozen reference has parameters alone."""
    parts = {"policy": module_memory(policy, opt)}
    if critic is not None:
        parts["critic"] = critic.memory()
    if reference is not None:
        parts["reference"] = {"params": module_memory(reference)["params"]}
    return component_metrics(parts)


class RLTrainer:
    """Runs one algorithm from given starting weights until its budget is spent."""

    def __init__(
        self,
        *,
        algorithm: Algorithm,
        policy: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        task: Task,
        engine_factory: Callable[[torch.nn.Module], RolloutEngine],
        budget: Budget,
        config: TrainerConfig,
        seed: int,
        prompt_seed: int,
        tracker: Tracker | None = None,
        reference: torch.nn.Module | None = None,
        critic_base: torch.nn.Module | None = None,
        on_progress: Callable[[float, dict[str, float]], None] | None = None,
        on_eval: Callable[[float, EvalResult], None] | None = None,
        checkpointer: Checkpointer | None = None,
        precision: str = "fp32",
    ) -> None:
        self.alg, self.policy, self.tok, self.task = algorithm, policy, tokenizer, task
        #: The resolved precision of the models' matmuls (``fp32`` or ``bf16``,
        #: :mod:`~benchmarks.training.precision`): the forwards run under its autocast, and the
        #: log-probs, values, advantages and losses they feed are fp32 whatever it is.
        self.precision = precision
        autocast(precision)  # a ValueError now for anything but fp32 / bf16
        self.budget, self.cfg, self.seed = budget, config, seed
        self.tracker = tracker or NullTracker()
        self.on_progress = on_progress or (lambda f, m: None)
        config.check_algorithm(algorithm.name, algorithm.samples_per_prompt)
        torch.manual_seed(seed)
        algorithm.reset_state()  # an algorithm object may be reused across runs (seeds)
        self.engine = engine_factory(policy)
        problems = task.train_problems()
        if config.prompt_pool is not None:
            if config.prompt_pool > len(problems):
                raise ConfigError(
                    f"trainer.prompt_pool={config.prompt_pool}: the task has only "
                    f"{len(problems)} training problems"
                )
            problems = problems[: config.prompt_pool]
        self.stream = PromptStream(problems, prompt_seed)
        self.meter = ComputeMeter()
        self.fm = FlopModel.from_config(policy.config)
        self.opt = torch.optim.AdamW(
            policy.parameters(), lr=config.actor_lr, weight_decay=config.weight_decay
        )
        if algorithm.uses_reference and reference is None:
            raise ValueError(f"{algorithm.name} needs a frozen reference model (its KL term)")
        self.reference = reference if algorithm.uses_reference else None
        self.critic: Critic | None = None
        if algorithm.critic != "none":
            self.critic = Critic(
                critic_base if critic_base is not None else policy,
                algorithm=algorithm,
                config=config,
                meter=self.meter,
                tokenizer_size=len(tokenizer),
                precision=precision,
                seed=seed,
            )
        self.evaluator = TrainingEvaluator(
            name=algorithm.name,
            task=task,
            policy=policy,
            tokenizer=tokenizer,
            config=config,
            budget=budget,
            meter=self.meter,
            tracker=self.tracker,
            seed=seed,
            critic=self.critic,
            on_progress=self.on_progress,
            on_eval=on_eval or (lambda f, r: None),
        )
        #: Skip the old-log-prob pass when the update is on-policy (see ``_on_policy``).
        self.skip_old_logprob = True
        self.step = 0
        self.skipped = 0
        self._consecutive_skips = 0
        self._step_cost = 0.0
        self.checkpointer = checkpointer

    # ------------------------------------------------------------------ main loop

    def train(self) -> list[tuple[float, EvalResult]]:
        """Train until the budget is spent; returns (budget fraction, eval) pairs."""
        self.meter.memory.start()
        try:
            state = self.checkpointer.resume() if self.checkpointer is not None else None
            if state is not None:
                self.load_state_dict(state)
            # Each (metric, step) is logged once: a step's evaluation is logged with the step's
            # own metrics, after it, so the compute counters carry the evaluation's time too.
            # {} after a restore (the evaluations are restored too)
            first = self.evaluator.maybe_eval(self.engine, self.step, force_first=True)
            if first:
                self.log_step(first)
            while self._fits():
                before = self.budget.spent(self.meter)
                self.meter.trace_memory = self.step == self.memory_profile_step
                try:
                    stats = self.train_step()
                finally:
                    self.meter.trace_memory = False
                self._step_cost = max(self._step_cost, self.budget.spent(self.meter) - before)
                self.step += 1
                evals = self.evaluator.maybe_eval(self.engine, self.step, last=not self._fits())
                self.log_step({**stats, **evals})
                if self.checkpointer is not None:
                    self.checkpointer.after_step(self.alg.name, self.step, self.state_dict)
            if not self.evals or self.evals[-1][0] < 1.0:  # not even one step fitted the budget
                self.log_step(self.evaluator.maybe_eval(self.engine, self.step, last=True))
        finally:
            self.meter.memory.stop()
        return self.evals

    def train_step(self) -> dict[str, float]:
        """One optimizer step at ``self.step``, phase by phase; returns the step's metrics.
        The caller advances ``self.step`` (:meth:`train` does, after its bookkeeping)."""
        alg, meter = self.alg, self.meter

        # rollout, reward: generate, grade, shape and filter; dynamic sampling (DAPO) refills
        # the batch with more generation batches until enough rows are kept.
        drawn: list[_Drawn] = []
        while self._draw_more(drawn):
            problems = self.stream.take(self.cfg.samples_per_step // alg.samples_per_prompt)
            ro, greedy = self._rollout(problems, gen=len(drawn))
            drawn.append(self._reward(problems, ro, greedy, gen=len(drawn)))
        batch, stats = _kept_batch(drawn, self.cfg.samples_per_step, self.tok.pad_token_id)
        if batch is None:
            log.info("step %d: every group was filtered out; no update", self.step)
            return stats
        ro, mask = batch.rollout, batch.rollout.response_mask

        with torch.no_grad():
            # logprob: the sampling policy's log-probs, the ratio's denominator. On-policy, the
            # update's own forward gives the same numbers (detached), so the pass is skipped.
            old_lp = None
            if not self._on_policy():
                with meter.phase("logprob", flops=rollout_flops(self.fm, ro)):
                    old_lp = self._teacher_forced(self.policy, ro)
                stats.update(rollout_logprob_mismatch(ro.log_probs, old_lp, mask))
            # reference: the frozen start's log-probs, for the KL term.
            ref_lp = None
            if self.reference is not None:
                with meter.phase("reference", flops=rollout_flops(self.fm, ro)):
                    ref_lp = self._teacher_forced(self.reference, ro)
            # critic: values before the update (baselines, GAE, value clipping).
            values = None
            if self.critic is not None:
                if self.step == 0 and self.cfg.critic_head_init == "start_success":
                    self.critic.init_head(batch.scores)
                with meter.phase("critic", flops=self.critic.flops(ro)):
                    values = self.critic.values(ro)
                stats[M.CRITIC_VALUE_STD] = self.critic.prediction_std(values)

        # advantages
        token_kl = None
        if alg.kl_in_reward and ref_lp is not None:  # the algorithm's own estimator (k1, k3)
            token_kl = kl_penalty(old_lp, ref_lp, alg.config.kl_penalty) * mask
        adv, returns = alg.advantages(
            batch.rewards,
            mask,
            batch.group_ids,
            values=values,
            baseline_rewards=batch.baseline,
            token_kl=token_kl,
            **({"prompt_keys": list(batch.keys)} if alg.needs_prompt_keys else {}),
        )

        # update: the critic's epochs over mini-batches, then the actor's.
        stats.update(self._update(batch, old_lp, ref_lp, adv, returns, values))
        if self.critic is not None:
            stats.update(self.critic.metrics())
        # observe: an algorithm that carries state between steps (SPO's tracker) sees the step's
        # outcomes, and the updated policy's log-probs if it asks for them.
        new_lp = None
        if alg.needs_updated_log_probs:
            with torch.no_grad(), meter.phase("logprob", flops=rollout_flops(self.fm, ro)):
                new_lp = self._teacher_forced(self.policy, ro)
        stats.update(
            alg.observe(
                prompt_keys=batch.keys,
                rewards=batch.scores,
                response_mask=mask,
                old_log_probs=ro.log_probs if old_lp is None else old_lp,
                new_log_probs=new_lp,
            )
        )
        with meter.phase("rollout"):
            self.engine.sync_weights()  # the next rollout samples from the updated policy
        return stats

    # ------------------------------------------------------------------ the step's phases

    def _draw_more(self, drawn: Sequence[_Drawn]) -> bool:
        """Another generation batch? The first always; refills while fewer than
        ``samples_per_step`` rows are kept, up to ``max_gen_batches`` and where the budget
        allows."""
        if len(drawn) >= self.alg.max_gen_batches:
            return False
        if sum(d.n_kept for d in drawn) >= self.cfg.samples_per_step:
            return False
        return not drawn or self._fits()

    def _rollout(self, problems: Sequence[TaskProblem], gen: int) -> tuple[Rollout, Rollout | None]:
        """``n`` sampled responses per prompt, and ReMax's greedy one. The seed is a function of
        (seed, step, generation batch): a resumed step samples exactly what it did before."""
        cfg, meter = self.cfg, self.meter
        n = self.alg.samples_per_prompt
        seed = (self.seed * 1_000_003 + self.step * 1009 + gen) % 2**63
        # FLOPs follow the lengths sampled: counted once the phase has run (``lambda``).
        with meter.phase("rollout", flops=lambda: self._meter_rollout(ro)):
            ro = self.engine.generate(
                [p.prompt for p in problems for _ in range(n)],
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                max_new_tokens=cfg.max_new_tokens,
                seed=seed,
            )
        greedy = None
        if self.alg.needs_greedy_baseline:
            with meter.phase("rollout", flops=lambda: self._meter_rollout(greedy)):
                greedy = self.engine.generate(
                    [p.prompt for p in problems],
                    temperature=0.0,
                    top_p=1.0,
                    max_new_tokens=cfg.max_new_tokens,
                    seed=seed,
                )
        meter.prompts += len(problems)
        return ro, greedy

    def _meter_rollout(self, ro: Rollout) -> float:
        """Count a finished rollout's samples and tokens; return its FLOPs."""
        lengths = ro.lengths.tolist()
        plens = ro.prompt_mask.sum(-1).long().tolist()
        self.meter.samples += len(lengths)
        self.meter.rollout_tokens += int(sum(lengths))
        return sum(self.fm.generate(p, r) for p, r in zip(plens, lengths, strict=True))

    def _reward(
        self, problems: Sequence[TaskProblem], ro: Rollout, greedy: Rollout | None, gen: int
    ) -> _Drawn:
        """Grade (the reward phase), shape, and keep the groups the algorithm's filter keeps."""
        alg = self.alg
        n = alg.samples_per_prompt
        with self.meter.phase("reward"):
            g = self.task.grade(ro.texts, [p for p in problems for _ in range(n)])
            timeouts, errors = g.timeouts, g.errors
            baseline = None
            if greedy is not None:
                gb = self.task.grade(greedy.texts, problems)
                baseline = torch.tensor(gb.scores).repeat_interleave(n)
                timeouts, errors = timeouts + gb.timeouts, errors + gb.errors
        scores = torch.tensor(g.scores, dtype=torch.float32)
        shaped = alg.shape_rewards(scores, ro.lengths)
        group_ids = torch.arange(len(problems)).repeat_interleave(n) + gen * len(problems)
        # Filter on the outcome score (verl's `filter_groups.metric=acc`): shaped rewards with a
        # length penalty almost never tie, so a zero-variance test on them would keep everything.
        keep = alg.filter_groups(scores, group_ids)
        kept = None
        if keep.any():
            keys = tuple(p.id for p in problems for _ in range(n))
            kept = _Batch(ro, shaped, scores, group_ids, baseline, keys).select(
                keep.nonzero().squeeze(-1)
            )
        return _Drawn(kept, scores, ro.lengths.float(), timeouts, errors)

    def _on_policy(self) -> bool:
        """One epoch of one mini-batch, no KL in the reward: the policy the update differentiates
        is exactly the one that produced the batch, so the old log-probs equal the update's own
        forward (detached) and a separate old-log-prob pass would recompute the same numbers."""
        return (
            self.skip_old_logprob
            and self.alg.ppo_epochs == 1
            and self.cfg.mini_batches == 1
            and not self.alg.kl_in_reward
        )

    def _teacher_forced(self, model: torch.nn.Module, ro: Rollout) -> torch.Tensor:
        """``model``'s log-probs of the sampled responses (the old-policy and reference passes),
        fp32 at any precision."""
        with autocast(self.precision):
            lp, _ = bucketed_logprobs(
                model,
                ro.prompt_ids,
                ro.prompt_mask,
                ro.response_ids,
                ro.response_mask,
                self.cfg.temperature,
                buckets=self.cfg.length_buckets,
            )
        return lp

    def _update(
        self,
        batch: _Batch,
        old_lp: torch.Tensor | None,
        ref_lp: torch.Tensor | None,
        adv: torch.Tensor,
        returns: torch.Tensor | None,
        old_values: torch.Tensor | None,
    ) -> dict[str, float]:
        """The critic's epochs over shuffled mini-batches, then the actor's (which waits
        ``critic_warmup_steps``); returns the mean of each step's metrics. A non-finite loss or
        gradient norm skips its optimizer step, and the update counts as skipped, named by the
        last failure (:meth:`_count_skip`).

        The two models are independent and the advantages are computed before either steps, so
        the critic's steps all come first. Without a schedule of its own the critic walks the
        actor's mini-batches (a generator seeded as the actor's); with one
        (``trainer.critic_mini_batches`` / ``critic_epochs``), a permutation of its own, so the
        actor's mini-batches are the ones they would be without it."""
        alg, cfg = self.alg, self.cfg
        ro = batch.rollout
        B = ro.response_ids.shape[0]
        seed = self.seed * 7919 + self.step
        steps: list[tuple[dict[str, float], str | None]] = []
        if self.critic is not None:
            own = cfg.critic_mini_batches is not None or cfg.critic_epochs is not None
            for idx in _minibatches(
                B,
                cfg.critic_mini_batches or cfg.mini_batches,
                cfg.critic_epochs or alg.ppo_epochs,
                seed + 104729 if own else seed,
            ):
                old_v = None if old_values is None else old_values[idx]
                steps.append(self.critic.update(ro.select(idx), returns[idx], old_v))
        if self.step >= self.critic_warmup_steps:
            for idx in _minibatches(B, cfg.mini_batches, alg.ppo_epochs, seed):
                old = None if old_lp is None else old_lp[idx]
                ref = None if ref_lp is None else ref_lp[idx]
                steps.append(self._actor_update(ro.select(idx), old, ref, adv[idx]))
        self._count_skip(next((failed for _, failed in reversed(steps) if failed), None))
        out = _mean_metrics([metrics for metrics, _ in steps])
        out[M.TRAIN_SKIPPED_STEPS] = float(self.skipped)
        return out

    def _actor_update(
        self,
        sub: Rollout,
        old_lp: torch.Tensor | None,
        ref_lp: torch.Tensor | None,
        adv: torch.Tensor,
    ) -> tuple[dict[str, float], str | None]:
        """One policy optimizer step (``old_lp`` None: on-policy, this forward is the trainer's
        log-prob pass); returns its metrics and what was non-finite, if anything."""
        alg, cfg = self.alg, self.cfg
        m = sub.response_mask
        with self.meter.phase("update", flops=3 * rollout_flops(self.fm, sub)):
            # The forward under the precision's autocast (its backward follows it); the
            # log-probs, entropies, ratio and loss from here on are fp32.
            with autocast(self.precision):
                lp, ent = bucketed_logprobs(
                    self.policy,
                    sub.prompt_ids,
                    sub.prompt_mask,
                    sub.response_ids,
                    m,
                    cfg.temperature,
                    with_entropy=True,
                    buckets=cfg.length_buckets,
                )
            old = lp.detach() if old_lp is None else old_lp
            loss, pm = alg.policy_loss(lp, old, adv, m, ref_lp)
            if old_lp is None:
                pm.update(rollout_logprob_mismatch(sub.log_probs, old, m))
            if faults.active("nan_loss", alg.name, self.step):  # tests only
                loss = loss * float("nan")
            gn, failed = guarded_step(
                loss, self.opt, self.policy.parameters(), cfg.grad_clip, "policy"
            )
            if gn is not None:
                pm[M.TRAIN_GRAD_NORM] = gn
            pm[M.TRAIN_ENTROPY] = float((ent.detach() * m).sum() / m.sum().clamp(min=1))
        return pm, failed

    def _count_skip(self, nonfinite: str | None) -> None:
        """Count a step whose update met a non-finite value; too many in a row fail the run."""
        if nonfinite is None:
            self._consecutive_skips = 0
            return
        self.skipped += 1
        self._consecutive_skips += 1
        log.warning("step %d: non-finite %s; update skipped", self.step, nonfinite)
        if self._consecutive_skips >= self.cfg.max_consecutive_skips:
            raise FloatingPointError(
                f"{self.alg.name}: {self._consecutive_skips} consecutive steps with non-finite "
                f"{nonfinite} (last at step {self.step})"
            )

    # ------------------------------------------------------------------ budget

    def _gen_cost(self) -> float:
        """Worst-case budget cost of one generation batch (before it runs)."""
        k, cfg = self.budget.kind, self.cfg
        extra = 1.0 / self.alg.samples_per_prompt if self.alg.needs_greedy_baseline else 0.0
        if k == "samples":
            return cfg.samples_per_step * (1 + extra)
        if k == "rollout_tokens":
            return cfg.samples_per_step * (1 + extra) * cfg.max_new_tokens
        return self._step_cost  # flops / wall_s: the largest step seen so far

    def _fits(self) -> bool:
        return self.budget.spent(self.meter) + self._gen_cost() <= self.budget.limit * (1 + 1e-9)

    # ------------------------------------------------------------------ evaluation and memory

    @property
    def evals(self) -> list[tuple[float, EvalResult]]:
        """(budget fraction, greedy evaluation) of every evaluation so far."""
        return self.evaluator.evals

    @property
    def memory_profile_step(self) -> int:
        """The step ``trainer.memory_profile_step`` counts from the first that updates the actor:
        a critic warm-up step updates the critic alone, and profiling one would report a peak
        without the actor's update in it (-1 stays off)."""
        step = self.cfg.memory_profile_step
        return step if step < 0 else step + self.critic_warmup_steps

    @property
    def critic_warmup_steps(self) -> int:
        """Steps that train only the critic: ``trainer.critic_warmup_steps``, else the
        algorithm's own. The actor stays at the start, so these steps sample from it, and they
        are budgeted like any other."""
        if self.critic is None:
            return 0
        own = self.cfg.critic_warmup_steps
        return self.alg.critic_warmup_steps if own is None else own

    # ------------------------------------------------------------------ state and logging

    def state_dict(self) -> dict[str, Any]:
        """Everything that decides the rest of the run, as tensors and plain containers, except
        the process-wide random generators (a checkpoint saves those beside it): weights,
        optimizers, the prompt stream, the meter, the counters, the evaluations so far and, for
        an algorithm that carries state between steps, that state (``"algorithm"``, absent for
        the others). The frozen reference is rebuilt by whoever builds the trainer; only its
        fingerprint is kept, to check. The tensors are the live ones, as torch's are: save or
        copy them before training on."""
        algorithm_state = self.alg.state_dict()
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.opt.state_dict(),
            **(
                {"critic": None, "critic_optimizer": None}
                if self.critic is None
                else self.critic.state_dict()
            ),
            "reference_fingerprint": _fingerprint(self.reference),
            "stream": self.stream.state_dict(),
            "meter": self.meter.state_dict(),
            "step": self.step,
            "skipped": self.skipped,
            "consecutive_skips": self._consecutive_skips,
            "eval_idx": self.evaluator.index,
            "step_cost": self._step_cost,
            "evals": [(f, dataclasses.asdict(r)) for f, r in self.evals],
            **({"algorithm": algorithm_state} if algorithm_state else {}),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state_dict`'s ``state`` (a trainer built as the saved one was)."""
        ref, saved = _fingerprint(self.reference), state["reference_fingerprint"]
        if abs(ref - saved) > 1e-9 * max(1.0, abs(ref)):
            raise RuntimeError(
                "checkpoint: the reference model differs from the one the run started with "
                f"(fingerprint {ref!r} != {saved!r}); was the warm-start cache changed? Resume "
                "with the same cache_dir, or start afresh (resume=never)"
            )
        self.policy.load_state_dict(state["policy"])
        self.opt.load_state_dict(state["optimizer"])
        if self.critic is not None:
            self.critic.load_state_dict(state)
        self.stream.load_state_dict(state["stream"])
        self.meter.load_state_dict(state["meter"])
        self.step, self.skipped = state["step"], state["skipped"]
        self._consecutive_skips = state["consecutive_skips"]
        self.evaluator.index, self._step_cost = state["eval_idx"], state["step_cost"]
        self.evaluator.evals = [(f, EvalResult(**r)) for f, r in state["evals"]]
        self.alg.load_state_dict(state.get("algorithm", {}))

    def log_step(self, stats: dict[str, float]) -> None:
        """Log a step's metrics with the meter's counters and the components' memory, so every
        point of every metric shares the step's compute coordinates."""
        memory = memory_metrics(self.policy, self.opt, self.critic, self.reference)
        m = {**stats, **self.meter.metrics(), **memory}
        self.tracker.log_metrics(m, step=self.step)
        self.on_progress(self.budget.fraction(self.meter), {})
