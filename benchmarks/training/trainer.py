"""The native RL trainer: one (algorithm, seed) run under a compute budget.

The loop is the same for every algorithm; everything that differs is asked of the registered
:class:`algorithms.Algorithm` (samples per prompt, critic kind, reward shaping, batch filter,
advantages, losses). Per step:

    sample prompts -> rollout (n per prompt; refills for dynamic sampling) -> grade -> shape ->
    filter -> old / reference log-probs and critic values -> advantages -> policy and critic
    updates -> meter -> log -> evaluate when the budget crosses one of its fractions.

Every algorithm sees the same prompt stream (a seeded permutation of the training set) and the
same sampling parameters; each consumes it at its own rate (``samples_per_step / n`` prompts).
Updates are sized in samples, not prompts, so every algorithm takes optimizer steps on batches of
the same size and the budget buys all of them the same number of sampled responses.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from algorithms import Algorithm, ConfigError
from benchmarks import faults
from benchmarks.engines.fastdecode import prefix_hidden, supports_backbone
from benchmarks.engines.rollout import Rollout, RolloutEngine
from benchmarks.engines.teacher_forced import bucketed_logprobs, by_length, sequence_inputs
from benchmarks.engines.torch_engine import TorchEngine
from benchmarks.evaluation.evaluate import EvalResult, evaluate_greedy
from benchmarks.tasks.base import Task, TaskProblem
from benchmarks.telemetry import metrics as M
from benchmarks.telemetry.meter import Budget, ComputeMeter, FlopModel
from benchmarks.telemetry.tracking import NullTracker, Tracker
from benchmarks.training.config import TrainerConfig
from benchmarks.training.modeling import ValueModel

if TYPE_CHECKING:
    from benchmarks.training.checkpoint import Checkpointer
log = logging.getLogger(__name__)

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


@dataclass
class _Batch:
    rollout: Rollout
    rewards: torch.Tensor  # (B,) shaped
    scores: torch.Tensor  # (B,) raw outcome
    group_ids: torch.Tensor  # (B,)
    baseline: torch.Tensor | None  # (B,) greedy reward (ReMax)


class RLTrainer:
    """Runs one algorithm from given starting weights until its budget is spent."""

    def __init__(
        self,
        *,
        algorithm: Algorithm,
        policy: torch.nn.Module,
        tokenizer,  # noqa: ANN001 - HF tokenizer
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
            self.critic = ValueModel(critic_base if critic_base is not None else policy)
            lr = config.critic_lr if config.critic_lr is not None else algorithm.critic_lr
            self.critic_opt = torch.optim.AdamW(
                self.critic.parameters(), lr=lr, weight_decay=config.weight_decay
            )
            self.critic_fm = FlopModel.from_config(self.critic.config)
        #: Skip the old-log-prob pass when the update is on-policy (see ``_on_policy``).
        self.skip_old_logprob = True
        self.step = 0
        self.skipped = 0
        self._consecutive_skips = 0
        self._eval_idx = 0
        self.evals: list[tuple[float, EvalResult]] = []
        self._step_cost = 0.0
        self.checkpointer = checkpointer

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
                stats = self._train_step()
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
        if fraction >= 1.0 and self.alg.critic == "prompt" and self.cfg.calibration_prompts > 0:
            self._log_calibration()
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
    def _log_calibration(self) -> None:
        """Prompt critic's predicted success p = sigmoid(v(x)) next to the policy's empirical
        success rate over k samples, per held-out prompt (the data of the paper's Fig. 7)."""
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
            scores = torch.tensor(
                self.task.grade(ro.texts, [p for p in probs for _ in range(k)]).scores
            ).view(len(probs), k)
            first = ro.select(torch.arange(0, len(ro.texts), k))
            predicted = torch.sigmoid(self._critic_values(first))
        self.tracker.log_table(
            {
                "prompt": [p.prompt for p in probs],
                "predicted": predicted.tolist(),
                "empirical": scores.mean(1).tolist(),
                "k": [k] * len(probs),
            },
            "critic_calibration.json",
        )

    # ------------------------------------------------------------------ one step

    def _collect(self) -> tuple[_Batch | None, dict[str, float]]:
        """Generate, grade, shape and filter until a full batch is kept (dynamic sampling)."""
        alg, cfg = self.alg, self.cfg
        n = alg.samples_per_prompt
        per_gen = cfg.samples_per_step // n
        kept: list[_Batch] = []
        n_kept = gen_batches = 0
        scores_all: list[torch.Tensor] = []
        lengths_all: list[torch.Tensor] = []
        timeouts = errors = 0
        while gen_batches < alg.max_gen_batches and n_kept < cfg.samples_per_step:
            if gen_batches > 0 and not self._fits():
                break  # refills stop where the budget does
            problems = self.stream.take(per_gen)
            prompts = [p.prompt for p in problems for _ in range(n)]
            seq_problems = [p for p in problems for _ in range(n)]
            gen_seed = (self.seed * 1_000_003 + self.step * 1009 + gen_batches) % 2**63
            with self.meter.phase("rollout"):
                ro = self.engine.generate(
                    prompts,
                    temperature=cfg.temperature,
                    top_p=cfg.top_p,
                    max_new_tokens=cfg.max_new_tokens,
                    seed=gen_seed,
                )
                greedy = None
                if alg.needs_greedy_baseline:
                    greedy = self.engine.generate(
                        [p.prompt for p in problems],
                        temperature=0.0,
                        top_p=1.0,
                        max_new_tokens=cfg.max_new_tokens,
                        seed=gen_seed,
                    )
            self._meter_rollout(ro)
            if greedy is not None:
                self._meter_rollout(greedy, prompts=0)
            self.meter.prompts += per_gen
            with self.meter.phase("reward"):
                g = self.task.grade(ro.texts, seq_problems)
                baseline = None
                if greedy is not None:
                    gb = self.task.grade(greedy.texts, problems)
                    baseline = torch.tensor(gb.scores).repeat_interleave(n)
                    timeouts += gb.timeouts
                    errors += gb.errors
            timeouts += g.timeouts
            errors += g.errors
            scores = torch.tensor(g.scores, dtype=torch.float32)
            shaped = alg.shape_rewards(scores, ro.lengths)
            group_ids = torch.arange(per_gen).repeat_interleave(n) + gen_batches * per_gen
            # Filter on the outcome score (verl's `filter_groups.metric=acc`): shaped rewards with a
            # length penalty almost never tie, so a zero-variance test on them would keep everything.
            keep = alg.filter_groups(scores, group_ids)
            scores_all.append(scores)
            lengths_all.append(ro.lengths.float())
            gen_batches += 1
            if keep.any():
                idx = keep.nonzero().squeeze(-1)
                kept.append(
                    _Batch(
                        ro.select(idx),
                        shaped[idx],
                        scores[idx],
                        group_ids[idx],
                        None if baseline is None else baseline[idx],
                    )
                )
                n_kept += int(keep.sum())
        scores_cat = torch.cat(scores_all)
        stats = {
            M.TRAIN_SCORE_MEAN: float(scores_cat.mean()),
            M.TRAIN_RESPONSE_LENGTH: float(torch.cat(lengths_all).mean()),
            M.TRAIN_GEN_BATCHES: float(gen_batches),
            M.TRAIN_KEPT_FRACTION: n_kept / max(1, len(scores_cat)),
            M.GRADER_TIMEOUTS: float(timeouts),
            M.GRADER_ERRORS: float(errors),
        }
        if not kept:
            return None, stats
        batch = _Batch(
            Rollout.cat([b.rollout for b in kept], self.tok.pad_token_id),
            torch.cat([b.rewards for b in kept]),
            torch.cat([b.scores for b in kept]),
            torch.cat([b.group_ids for b in kept]),
            None if kept[0].baseline is None else torch.cat([b.baseline for b in kept]),
        )
        if n_kept > cfg.samples_per_step:  # keep whole groups, as verl's dynamic sampling does
            batch = self._truncate(batch, cfg.samples_per_step)
        stats[M.TRAIN_REWARD_MEAN] = float(batch.rewards.mean())
        return batch, stats

    @staticmethod
    def _truncate(b: _Batch, size: int) -> _Batch:
        idx = torch.arange(size)
        return _Batch(
            b.rollout.select(idx),
            b.rewards[idx],
            b.scores[idx],
            b.group_ids[idx],
            None if b.baseline is None else b.baseline[idx],
        )

    def _meter_rollout(self, ro: Rollout, prompts: int | None = None) -> None:
        lengths = ro.lengths.tolist()
        plens = ro.prompt_mask.sum(-1).long().tolist()
        self.meter.samples += len(lengths)
        self.meter.rollout_tokens += int(sum(lengths))
        self.meter.add_flops(
            "rollout", sum(self.fm.generate(p, r) for p, r in zip(plens, lengths, strict=True))
        )

    def _seq_flops(
        self, fm: FlopModel, ro: Rollout, *, head: bool = True, prompt_only: bool = False
    ) -> float:
        plens = ro.prompt_mask.sum(-1).long().tolist()
        rlens = ro.lengths.tolist()
        if prompt_only:
            return float(sum(fm.forward(p, 0, logits=1, head=False) for p in plens))
        return float(
            sum(
                fm.forward(p + r, 0, logits=r, head=head) for p, r in zip(plens, rlens, strict=True)
            )
        )

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

            def values(pi, pm, ri, rm):  # noqa: ANN001, ANN202
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

    def _train_step(self) -> dict[str, float]:
        alg = self.alg
        batch, stats = self._collect()
        if batch is None:
            log.info("step %d: every group was filtered out; no update", self.step)
            return stats
        ro, mask = batch.rollout, batch.rollout.response_mask
        with torch.no_grad():
            old_lp = None  # on-policy: the update uses its own log-probs, detached (ratio 1)
            if not self._on_policy():
                with self.meter.phase("logprob"):
                    old_lp = self._teacher_forced(self.policy, ro)
                self.meter.add_flops("logprob", self._seq_flops(self.fm, ro))
                stats.update(rollout_logprob_mismatch(ro.log_probs, old_lp, mask))
            ref_lp = None
            if self.reference is not None:
                with self.meter.phase("reference"):
                    ref_lp = self._teacher_forced(self.reference, ro)
                self.meter.add_flops("reference", self._seq_flops(self.fm, ro))
            values = None
            if self.critic is not None:
                with self.meter.phase("critic"):
                    values = self._critic_values(ro)
                self.meter.add_flops("critic", self._critic_flops(ro))
        token_kl = (old_lp - ref_lp) * mask if (alg.kl_in_reward and ref_lp is not None) else None
        adv, returns = alg.advantages(
            batch.rewards,
            mask,
            batch.group_ids,
            values=values,
            baseline_rewards=batch.baseline,
            token_kl=token_kl,
        )
        stats.update(self._update(batch, old_lp, ref_lp, adv, returns, values))
        with self.meter.phase("rollout"):
            self.engine.sync_weights()  # the next rollout samples from the updated policy
        return stats

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

    def _critic_flops(self, ro: Rollout) -> float:
        return self._seq_flops(
            self.critic_fm, ro, head=False, prompt_only=self.alg.critic == "prompt"
        )

    def _update(self, batch: _Batch, old_lp, ref_lp, adv, returns, old_values) -> dict[str, float]:  # noqa: ANN001
        alg, cfg = self.alg, self.cfg
        ro = batch.rollout
        B = ro.response_ids.shape[0]
        mb = max(1, B // cfg.mini_batches)
        gen = torch.Generator().manual_seed(self.seed * 7919 + self.step)
        acc: dict[str, list[float]] = {}
        train_actor = self.step >= alg.critic_warmup_steps
        nonfinite = None
        for _epoch in range(alg.ppo_epochs):
            order = torch.randperm(B, generator=gen)
            for i in range(0, B, mb):
                idx = order[i : i + mb]
                sub = ro.select(idx)
                m = sub.response_mask
                if self.critic is not None:
                    with self.meter.phase("critic"):
                        v = self._critic_values(sub)
                        vloss, vm = alg.value_loss(
                            v, returns[idx], m, None if old_values is None else old_values[idx]
                        )
                        if torch.isfinite(vloss):
                            self.critic_opt.zero_grad(set_to_none=True)
                            vloss.backward()
                            gn = torch.nn.utils.clip_grad_norm_(
                                self.critic.parameters(), cfg.grad_clip
                            )
                            if torch.isfinite(gn):
                                self.critic_opt.step()
                                vm[M.CRITIC_GRAD_NORM] = float(gn)
                            else:
                                nonfinite = "critic gradient norm"
                        else:
                            nonfinite = "critic loss"
                    self.meter.add_flops("critic", 3 * self._critic_flops(sub))
                    for k, val in vm.items():
                        acc.setdefault(k, []).append(val)
                if not train_actor:
                    continue
                with self.meter.phase("update"):
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
                    old = lp.detach() if old_lp is None else old_lp[idx]
                    loss, pm = alg.policy_loss(
                        lp, old, adv[idx], m, None if ref_lp is None else ref_lp[idx]
                    )
                    if old_lp is None:  # on-policy: this forward is the trainer's log-prob pass
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
                            nonfinite = "policy gradient norm"
                    else:
                        nonfinite = "policy loss"
                    pm[M.TRAIN_ENTROPY] = float((ent.detach() * m).sum() / m.sum().clamp(min=1))
                self.meter.add_flops("update", 3 * self._seq_flops(self.fm, sub))
                for k, val in pm.items():
                    acc.setdefault(k, []).append(val)
        if nonfinite is not None:
            self.skipped += 1
            self._consecutive_skips += 1
            log.warning("step %d: non-finite %s; update skipped", self.step, nonfinite)
            if self._consecutive_skips >= cfg.max_consecutive_skips:
                raise FloatingPointError(
                    f"{alg.name}: {self._consecutive_skips} consecutive steps with non-finite "
                    f"{nonfinite} (last at step {self.step})"
                )
        else:
            self._consecutive_skips = 0
        out = {k: sum(v) / len(v) for k, v in acc.items()}
        out[M.TRAIN_SKIPPED_STEPS] = float(self.skipped)
        return out

    def _log(self, stats: dict[str, float]) -> None:
        m = {**stats, **self.meter.metrics()}
        self.tracker.log_metrics(m, step=self.step)
        self.on_progress(self.budget.fraction(self.meter), {})
