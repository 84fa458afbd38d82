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
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from algorithms import Algorithm, ConfigError
from algorithms.common import kl_penalty
from benchmarks import faults
from benchmarks.engines.fastdecode import prefix_hidden, supports_backbone
from benchmarks.engines.rollout import Rollout, RolloutEngine
from benchmarks.engines.teacher_forced import bucketed_logprobs, by_length, sequence_inputs
from benchmarks.engines.torch_engine import TorchEngine
from benchmarks.evaluation.calibration import prompt_critic_calibration, token_critic_calibration
from benchmarks.evaluation.evaluate import EvalResult, evaluate_greedy, group_accuracies
from benchmarks.tasks.base import Task, TaskProblem
from benchmarks.telemetry import metrics as M
from benchmarks.telemetry.memory import component_metrics, module_memory
from benchmarks.telemetry.meter import Budget, ComputeMeter, FlopModel
from benchmarks.telemetry.tracking import NullTracker, Tracker
from benchmarks.training.config import TrainerConfig
from benchmarks.training.modeling import ValueModel

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from benchmarks.training.checkpoint import Checkpointer
log = logging.getLogger(__name__)

#: Per-mini-batch metrics that are undefined (NaN) when the mini-batch's targets are all equal.
_UNDEFINED_WHEN_CONSTANT = frozenset({M.CRITIC_EXPLAINED_VAR})

__all__ = ["PromptStream", "RLTrainer", "rollout_logprob_mismatch"]


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
    ) -> None:
        self.alg, self.policy, self.tok, self.task = algorithm, policy, tokenizer, task
        self.budget, self.cfg, self.seed = budget, config, seed
        self.tracker = tracker or NullTracker()
        self.on_progress = on_progress or (lambda f, m: None)
        self.on_eval = on_eval or (lambda f, r: None)
        n = algorithm.samples_per_prompt
        if config.samples_per_step % n:
            raise ConfigError(
                f"trainer.samples_per_step={config.samples_per_step} must be a multiple of "
                f"{algorithm.name}'s samples per prompt ({n})"
            )
        if config.samples_per_step % config.mini_batches:
            raise ConfigError(
                f"trainer.mini_batches={config.mini_batches} must divide "
                f"trainer.samples_per_step={config.samples_per_step}"
            )
        torch.manual_seed(seed)
        algorithm.reset_state()  # an algorithm object may be reused across runs (seeds)
        self.engine = engine_factory(policy)
        self.stream = PromptStream(task.train_problems(), prompt_seed)
        self.meter = ComputeMeter()
        self.fm = FlopModel.from_config(policy.config)
        self.opt = torch.optim.AdamW(
            policy.parameters(), lr=config.actor_lr, weight_decay=config.weight_decay
        )
        if algorithm.uses_reference and reference is None:
            raise ValueError(f"{algorithm.name} needs a frozen reference model (its KL term)")
        self.reference = reference if algorithm.uses_reference else None
        self.critic: ValueModel | None = None
        if algorithm.critic != "none":
            base = critic_base if critic_base is not None else policy
            vocab = getattr(base.config, "vocab_size", None)
            if vocab is not None and vocab < len(tokenizer):
                raise ConfigError(
                    f"trainer.critic_model: the critic's vocabulary ({vocab} tokens) is smaller "
                    f"than the policy's tokenizer ({len(tokenizer)}); the critic must share the "
                    "policy's tokenizer"
                )
            self.critic = ValueModel(base)
            lr = config.critic_lr if config.critic_lr is not None else algorithm.critic_lr
            self.critic_opt = torch.optim.AdamW(
                self.critic.parameters(), lr=lr, weight_decay=config.weight_decay
            )
            self.critic_fm = FlopModel.from_config(self.critic.config)
            #: The head as initialised: how far training moved it is a diagnostic of whether the
            #: critic learns at all (``critic/head_delta_*``).
            self._head0 = self._head_vector()
        #: Skip the old-log-prob pass when the update is on-policy (see ``_on_policy``).
        self.skip_old_logprob = True
        self.step = 0
        self.skipped = 0
        self._consecutive_skips = 0
        self._eval_idx = 0
        self.evals: list[tuple[float, EvalResult]] = []
        self._step_cost = 0.0
        self.checkpointer = checkpointer

    # ------------------------------------------------------------------ main loop

    def train(self) -> list[tuple[float, EvalResult]]:
        """Train until the budget is spent; returns (budget fraction, eval) pairs."""
        self.meter.memory.start()
        try:
            state = self.checkpointer.load() if self.checkpointer is not None else None
            if state is not None:
                self.checkpointer.restore(self, state)
            # Each (metric, step) is logged once: a step's evaluation is logged with the step's
            # own metrics, after it, so the compute counters carry the evaluation's time too.
            first = self._maybe_eval(force_first=True)  # {} after a restore (evals restored too)
            if first:
                self._log(first)
            while self._fits():
                before = self.budget.spent(self.meter)
                self.meter.trace_memory = self.step == self.memory_profile_step
                try:
                    stats = self.train_step()
                finally:
                    self.meter.trace_memory = False
                self._step_cost = max(self._step_cost, self.budget.spent(self.meter) - before)
                self.step += 1
                self._log({**stats, **self._maybe_eval(last=not self._fits())})
                if self.checkpointer is not None:
                    self.checkpointer.after_step(self)
            if not self.evals or self.evals[-1][0] < 1.0:  # not even one step fitted the budget
                self._log(self._maybe_eval(last=True))
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
        batch, stats = self._kept_batch(drawn)
        if batch is None:
            log.info("step %d: every group was filtered out; no update", self.step)
            return stats
        ro, mask = batch.rollout, batch.rollout.response_mask

        with torch.no_grad():
            # logprob: the sampling policy's log-probs, the ratio's denominator. On-policy, the
            # update's own forward gives the same numbers (detached), so the pass is skipped.
            old_lp = None
            if not self._on_policy():
                with meter.phase("logprob", flops=self._seq_flops(self.fm, ro)):
                    old_lp = self._teacher_forced(self.policy, ro)
                stats.update(rollout_logprob_mismatch(ro.log_probs, old_lp, mask))
            # reference: the frozen start's log-probs, for the KL term.
            ref_lp = None
            if self.reference is not None:
                with meter.phase("reference", flops=self._seq_flops(self.fm, ro)):
                    ref_lp = self._teacher_forced(self.reference, ro)
            # critic: values before the update (baselines, GAE, value clipping).
            values = None
            if self.critic is not None:
                if self.step == 0 and self.cfg.critic_head_init == "start_success":
                    self._init_head(batch.scores)
                with meter.phase("critic", flops=self._critic_flops(ro)):
                    values = self._critic_values(ro)
                stats[M.CRITIC_VALUE_STD] = self._prediction_std(values, mask)

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

        # update: PPO epochs over mini-batches, each a critic step then an actor step.
        stats.update(self._update(batch, old_lp, ref_lp, adv, returns, values))
        stats.update(self._critic_metrics())
        # observe: an algorithm that carries state between steps (SPO's tracker) sees the step's
        # outcomes, and the updated policy's log-probs if it asks for them.
        new_lp = None
        if alg.needs_updated_log_probs:
            with torch.no_grad(), meter.phase("logprob", flops=self._seq_flops(self.fm, ro)):
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

    def _kept_batch(self, drawn: Sequence[_Drawn]) -> tuple[_Batch | None, dict[str, float]]:
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
        batch = _Batch.cat(kept, self.tok.pad_token_id)
        if n_kept > self.cfg.samples_per_step:
            batch = batch.select(torch.arange(self.cfg.samples_per_step))
        stats[M.TRAIN_REWARD_MEAN] = float(batch.rewards.mean())
        return batch, stats

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
        """``model``'s log-probs of the sampled responses (the old-policy and reference passes)."""
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

    def _critic_values(self, ro: Rollout) -> torch.Tensor:
        """Token critic: (B, T) values before each response token. Prompt critic: (B,) logit at
        the last prompt token (prompts are left-padded, so that is the last prompt column)."""
        assert self.critic is not None
        if self.alg.critic == "prompt":
            mask = ro.prompt_mask.long()
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            return self.critic(ro.prompt_ids, mask, pos)[:, -1]
        critic = self.critic
        if supports_backbone(critic.backbone):  # Llama: the policy's fast teacher-forced path

            def values(
                pi: torch.Tensor, pm: torch.Tensor, ri: torch.Tensor, rm: torch.Tensor
            ) -> tuple[torch.Tensor]:
                return (critic.head(prefix_hidden(critic.backbone, pi, pm, ri)).squeeze(-1),)

            (v,) = by_length(
                values,
                ro.prompt_ids,
                ro.prompt_mask,
                ro.response_ids,
                ro.response_mask,
                self.cfg.length_buckets,
            )
            return v
        ids, mask, pos = sequence_inputs(
            ro.prompt_ids, ro.prompt_mask, ro.response_ids, ro.response_mask
        )
        P, T = ro.prompt_ids.shape[1], ro.response_ids.shape[1]
        return critic(ids, mask, pos)[:, P - 1 : P - 1 + T]

    def _update(
        self,
        batch: _Batch,
        old_lp: torch.Tensor | None,
        ref_lp: torch.Tensor | None,
        adv: torch.Tensor,
        returns: torch.Tensor | None,
        old_values: torch.Tensor | None,
    ) -> dict[str, float]:
        """PPO epochs over shuffled mini-batches, each a critic step then an actor step (the
        actor waits ``critic_warmup_steps``); returns the mean of each step's metrics. A
        non-finite loss or gradient norm skips its optimizer step and counts the update as
        skipped (see :meth:`_count_skip`)."""
        alg, cfg = self.alg, self.cfg
        ro = batch.rollout
        B = ro.response_ids.shape[0]
        mb = max(1, B // cfg.mini_batches)
        gen = torch.Generator().manual_seed(self.seed * 7919 + self.step)
        acc: dict[str, list[float]] = {}
        train_actor = self.step >= self.critic_warmup_steps
        nonfinite = None
        # The critic's own schedule (trainer.critic_mini_batches / critic_epochs): its steps come
        # first, on a permutation of their own, so the actor's mini-batches are the ones they
        # would be without it.
        separate = self.critic is not None and (
            cfg.critic_mini_batches is not None or cfg.critic_epochs is not None
        )
        if separate:
            cmb = max(1, B // (cfg.critic_mini_batches or cfg.mini_batches))
            cgen = torch.Generator().manual_seed(self.seed * 7919 + self.step + 104729)
            for _epoch in range(cfg.critic_epochs or alg.ppo_epochs):
                corder = torch.randperm(B, generator=cgen)
                for i in range(0, B, cmb):
                    idx = corder[i : i + cmb]
                    old_v = None if old_values is None else old_values[idx]
                    vm, failed = self._critic_update(ro.select(idx), returns[idx], old_v)
                    nonfinite = failed or nonfinite
                    for k, val in vm.items():
                        acc.setdefault(k, []).append(val)
        for _epoch in range(alg.ppo_epochs):
            order = torch.randperm(B, generator=gen)
            for i in range(0, B, mb):
                idx = order[i : i + mb]
                sub = ro.select(idx)
                if self.critic is not None and not separate:
                    old_v = None if old_values is None else old_values[idx]
                    vm, failed = self._critic_update(sub, returns[idx], old_v)
                    nonfinite = failed or nonfinite
                    for k, val in vm.items():
                        acc.setdefault(k, []).append(val)
                if not train_actor:
                    if separate:
                        break
                    continue
                old = None if old_lp is None else old_lp[idx]
                ref = None if ref_lp is None else ref_lp[idx]
                pm, failed = self._actor_update(sub, old, ref, adv[idx])
                nonfinite = failed or nonfinite
                for k, val in pm.items():
                    acc.setdefault(k, []).append(val)
        self._count_skip(nonfinite)
        out = {k: sum(v) / len(v) for k, v in acc.items() if k not in _UNDEFINED_WHEN_CONSTANT}
        for k in _UNDEFINED_WHEN_CONSTANT & acc.keys():
            # Undefined on a mini-batch whose returns are all equal: the mean over the rest, and
            # nothing logged when every one is (NaN would match no history, a resumed run's
            # included, and says nothing a gap does not).
            defined = [v for v in acc[k] if math.isfinite(v)]
            if defined:
                out[k] = sum(defined) / len(defined)
        out[M.TRAIN_SKIPPED_STEPS] = float(self.skipped)
        return out

    def _critic_update(
        self, sub: Rollout, returns: torch.Tensor, old_values: torch.Tensor | None
    ) -> tuple[dict[str, float], str | None]:
        """One critic optimizer step; returns its metrics and what was non-finite, if anything."""
        assert self.critic is not None
        failed = None
        with self.meter.phase("critic", flops=3 * self._critic_flops(sub)):  # forward + backward
            v = self._critic_values(sub)
            vloss, vm = self.alg.value_loss(v, returns, sub.response_mask, old_values)
            if torch.isfinite(vloss):
                self.critic_opt.zero_grad(set_to_none=True)
                vloss.backward()
                gn = torch.nn.utils.clip_grad_norm_(self.critic.parameters(), self.cfg.grad_clip)
                if torch.isfinite(gn):
                    self.critic_opt.step()
                    vm[M.CRITIC_GRAD_NORM] = float(gn)
                else:
                    failed = "critic gradient norm"
            else:
                failed = "critic loss"
        return vm, failed

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
        failed = None
        with self.meter.phase("update", flops=3 * self._seq_flops(self.fm, sub)):
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
            if torch.isfinite(loss):
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                gn = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.grad_clip)
                if torch.isfinite(gn):
                    self.opt.step()
                    pm[M.TRAIN_GRAD_NORM] = float(gn)
                else:
                    failed = "policy gradient norm"
            else:
                failed = "policy loss"
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

    def _seq_flops(
        self, fm: FlopModel, ro: Rollout, *, head: bool = True, prompt_only: bool = False
    ) -> float:
        """FLOPs of one teacher-forced forward over the rollout (x3 with its backward)."""
        plens = ro.prompt_mask.sum(-1).long().tolist()
        rlens = ro.lengths.tolist()
        if prompt_only:
            return float(sum(fm.forward(p, 0, logits=1, head=False) for p in plens))
        return float(
            sum(
                fm.forward(p + r, 0, logits=r, head=head) for p, r in zip(plens, rlens, strict=True)
            )
        )

    def _critic_flops(self, ro: Rollout) -> float:
        return self._seq_flops(
            self.critic_fm, ro, head=False, prompt_only=self.alg.critic == "prompt"
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

    # ------------------------------------------------------------------ evaluation

    def _maybe_eval(self, force_first: bool = False, last: bool = False) -> dict[str, float]:
        """Evaluate if the budget crossed an eval fraction (or this is the ``last`` step: the
        budget's end, even if the last step could not fill it); returns the metrics to log."""
        fractions = self.budget.eval_fractions
        f = 0.0 if force_first else self.budget.fraction(self.meter)
        crossed = []
        while self._eval_idx < len(fractions) and f >= fractions[self._eval_idx] - 1e-9:
            crossed.append(fractions[self._eval_idx])
            self._eval_idx += 1
        if last and (crossed[-1] if crossed else -1.0) < 1.0:
            skipped = fractions[self._eval_idx : -1]
            if skipped:
                log.warning(
                    "%s: the budget ended at %.3f of its limit (the next step would not fit); "
                    "eval fractions %s were not reached",
                    self.alg.name,
                    self.budget.fraction(self.meter),
                    list(skipped),
                )
            self._eval_idx = len(fractions)
            crossed.append(1.0)
        if len(crossed) > 1:
            log.warning(
                "step %d crossed eval fractions %s at once; evaluating once, as %s",
                self.step,
                crossed,
                crossed[-1],
            )
        return self._eval(crossed[-1]) if crossed else {}

    def _eval(self, fraction: float) -> dict[str, float]:
        with self.meter.phase("eval"):
            res = evaluate_greedy(
                self.engine,
                self.task,
                self.task.eval_problems(),
                self.cfg.max_new_tokens,
                self.cfg.eval_batch_size,
            )
        self.evals.append((fraction, res))
        name = self.task.eval_name
        m = {
            M.eval_metric(name, "accuracy"): res.accuracy,
            M.eval_metric(name, "accuracy_se"): res.se,
            M.EVAL_BUDGET_FRACTION: fraction,
        }
        groups = self.task.eval_groups() if hasattr(self.task, "eval_groups") else {}
        for group, (acc, se) in group_accuracies(res, groups).items():  # e.g. one per horizon
            m[M.eval_metric(group, "accuracy")] = acc
            m[M.eval_metric(group, "accuracy_se")] = se
        if fraction >= 1.0 or fraction == 0.0:
            probs = self.task.eval_problems()[: self.cfg.eval_samples_logged]
            self.tracker.log_table(
                {
                    "prompt": [p.prompt for p in probs],
                    "answer": [p.answer for p in probs],
                    "response": res.responses[: len(probs)],
                    "score": res.scores[: len(probs)],
                },
                f"eval_samples/{name}_{'final' if fraction >= 1.0 else 'start'}.json",
            )
        if self.cfg.eval_k > 0 and (fraction >= 1.0 or self.cfg.eval_k_every_checkpoint):
            self._eval_sampled(fraction)
        if (
            self.critic is not None
            and self.cfg.calibration_prompts > 0
            and (fraction >= 1.0 or self.cfg.calibration_every_eval)
        ):
            m.update(self._calibration(table=fraction >= 1.0))
        self.on_progress(self.budget.fraction(self.meter), {"acc": res.accuracy})
        self.on_eval(fraction, res)
        return m

    def _eval_sampled(self, fraction: float) -> None:
        """avg@k and pass@k with sampling, through the same code as ``sppo-bench eval``."""
        from benchmarks.evaluation.evaluate import EvalRequest, evaluate_model, log_results

        cfg = self.cfg
        with self.meter.phase("eval"):
            res = evaluate_model(
                self.policy,
                self.tok,
                [self.task],
                EvalRequest(
                    k=cfg.eval_k,
                    temperature=cfg.eval_temperature,
                    top_p=cfg.top_p,
                    max_new_tokens=cfg.max_new_tokens,
                    limit=cfg.eval_k_problems,
                    greedy=False,
                    seed=self.seed,
                    batch_size=cfg.eval_batch_size,
                ),
                # The torch engine is rebuilt there at eval_batch_size (as before); others are
                # reused, e.g. vLLM's one engine with the current weights.
                engine=None if isinstance(self.engine, TorchEngine) else self.engine,
            )
        tag = "final" if fraction >= 1.0 else f"f{fraction:g}"
        log_results(
            self.tracker,
            res,
            step=self.step,
            samples_logged=cfg.eval_samples_logged,
            grader_totals=False,
            table_prefix=f"eval_samples_k/{tag}",
        )

    @torch.no_grad()
    def _calibration(self, table: bool) -> dict[str, float]:
        """The critic's predictions next to the policy's empirical success rate over k samples,
        per held-out prompt (the data of the paper's Fig. 7), as metrics; with ``table``, the
        prompt critic's per-prompt table artifact too. The samples' seed depends on the run's
        seed only, so every evaluation point asks the same prompts with the same draws."""
        assert self.critic is not None
        cfg = self.cfg
        probs = list(self.task.eval_problems()[: cfg.calibration_prompts])
        k = cfg.calibration_samples
        with self.meter.phase("eval"):
            ro = self.engine.generate(
                [p.prompt for p in probs for _ in range(k)],
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                max_new_tokens=cfg.max_new_tokens,
                seed=self.seed + 424242,
            )
            flat = torch.tensor(
                self.task.grade(ro.texts, [p for p in probs for _ in range(k)]).scores,
                dtype=torch.float64,
            )
            scores = flat.view(len(probs), k)
            if self.alg.critic == "prompt":
                first = ro.select(torch.arange(0, len(ro.texts), k))
                predicted = torch.sigmoid(self._critic_values(first))
                metrics = prompt_critic_calibration(predicted, scores)
            else:
                values = self._critic_values(ro)
                metrics = token_critic_calibration(values, ro.response_mask, flat, k)
        # Undefined (a critic that predicts one value for every prompt has no correlation) is
        # left out rather than logged as NaN, which no history comparison can match.
        metrics = {key: v for key, v in metrics.items() if math.isfinite(v)}
        if table and self.alg.critic == "prompt":
            self.tracker.log_table(
                {
                    "prompt": [p.prompt for p in probs],
                    "predicted": predicted.tolist(),
                    "empirical": scores.mean(1).tolist(),
                    "k": [k] * len(probs),
                },
                "critic_calibration.json",
            )
        return metrics

    # ------------------------------------------------------------------ critic diagnostics

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

    def _head_vector(self) -> torch.Tensor:
        assert self.critic is not None
        h = self.critic.head
        return torch.cat([h.weight.detach().flatten(), h.bias.detach().flatten()]).clone()

    @torch.no_grad()
    def _init_head(self, scores: torch.Tensor) -> None:
        """``trainer.critic_head_init=start_success``: the bias at the first batch's mean
        success s (logit(s) for a prompt critic, s for a token critic), the weights at 0, so
        the critic starts as the best constant predictor (see ``CRITIC_HEAD_INITS``)."""
        assert self.critic is not None
        s = float(scores.float().mean())
        if self.alg.critic == "prompt":
            s = min(max(s, 1e-3), 1 - 1e-3)
            bias = math.log(s / (1 - s))
        else:
            bias = s
        self.critic.head.weight.zero_()
        self.critic.head.bias.fill_(bias)
        self._head0 = self._head_vector()
        log.info("critic head initialised at bias %.4f (first batch's success %.4f)", bias, s)

    def _prediction_std(self, values: torch.Tensor, mask: torch.Tensor) -> float:
        """Spread of the critic's predictions over the batch: of sigmoid(v) for a prompt
        critic, of the value at the first response token for a token critic. Near 0, the
        critic predicts one number for every prompt."""
        pred = torch.sigmoid(values) if self.alg.critic == "prompt" else values[:, 0]
        return float(pred.double().std(unbiased=False)) if pred.numel() else 0.0

    def memory_metrics(self) -> dict[str, float]:
        """Bytes of the parameters, gradients and optimizer state of each component the run
        holds (``memory/<component>/<kind>_bytes``)."""
        parts = {"policy": module_memory(self.policy, self.opt)}
        if self.critic is not None:
            parts["critic"] = module_memory(self.critic, self.critic_opt)
        if self.reference is not None:
            parts["reference"] = {"params": module_memory(self.reference)["params"]}  # frozen
        return component_metrics(parts)

    def _critic_metrics(self) -> dict[str, float]:
        if self.critic is None:
            return {}
        delta = self._head_vector() - self._head0
        return {
            M.CRITIC_HEAD_DELTA_NORM: float(delta.double().norm()),
            M.CRITIC_HEAD_DELTA_MAX: float(delta.abs().max()),
        }

    # ------------------------------------------------------------------ state and logging

    def state_dict(self) -> dict[str, Any]:
        """Everything that decides the rest of the run, as tensors and plain containers, but the
        process-wide random generators (a checkpoint saves those with it): weights, optimizers,
        the prompt stream, the meter, the counters, the evaluations so far and, for an
        algorithm that carries state between steps, that state (``"algorithm"``; absent for
        the others, so their checkpoints keep the layout they always had). The frozen
        reference is rebuilt by whoever builds the trainer; only its fingerprint is kept, to
        check. Like torch's, the tensors are the live ones: save or copy them before training
        on."""
        algorithm_state = self.alg.state_dict()
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.opt.state_dict(),
            "critic": None if self.critic is None else self.critic.state_dict(),
            "critic_optimizer": None if self.critic is None else self.critic_opt.state_dict(),
            # The initial head is the zero head unless trainer.critic_head_init says otherwise;
            # only then is it kept (the default checkpoint keeps the layout it always had).
            **(
                {"critic_head_init": self._head0}
                if self.critic is not None and self.cfg.critic_head_init != "zero"
                else {}
            ),
            "reference_fingerprint": _fingerprint(self.reference),
            "stream": self.stream.state_dict(),
            "meter": self.meter.state_dict(),
            "step": self.step,
            "skipped": self.skipped,
            "consecutive_skips": self._consecutive_skips,
            "eval_idx": self._eval_idx,
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
            self.critic.load_state_dict(state["critic"])
            self.critic_opt.load_state_dict(state["critic_optimizer"])
            if "critic_head_init" in state:  # absent: the zero head
                self._head0 = state["critic_head_init"].clone()
        self.stream.load_state_dict(state["stream"])
        self.meter.load_state_dict(state["meter"])
        self.step, self.skipped = state["step"], state["skipped"]
        self._consecutive_skips = state["consecutive_skips"]
        self._eval_idx, self._step_cost = state["eval_idx"], state["step_cost"]
        self.evals = [(f, EvalResult(**r)) for f, r in state["evals"]]
        self.alg.load_state_dict(state.get("algorithm", {}))

    def _log(self, stats: dict[str, float]) -> None:
        m = {**stats, **self.meter.metrics(), **self.memory_metrics()}
        self.tracker.log_metrics(m, step=self.step)
        self.on_progress(self.budget.fraction(self.meter), {})
