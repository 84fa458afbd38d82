"""Evaluation during training: what a run reports at each of its budget's eval fractions.

At each fraction the trainer's own engine (the current weights) answers the task's held-out
problems greedily, and every problem's score is logged as one small artifact per eval
(``eval_items/``, so an analysis can resample items); at the budget's end (and, if asked, at every fraction) the same problems are
also sampled k times (avg@k and pass@k, through :func:`evaluate_model`, the code of
``sppo-bench eval``), and a critic's predictions are set beside the policy's empirical success
(calibration). Evaluation is metered as its own phase, so it never eats the training budget.

The evaluator knows no trainer: its collaborators (engine, task, policy, meter, tracker, a
critic's values) are passed in.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, Protocol

import torch

from analysis import metrics as M
from benchmarks.engines.rollout import Rollout, RolloutEngine
from benchmarks.engines.torch_engine import TorchEngine
from benchmarks.evaluation.calibration import prompt_critic_calibration, token_critic_calibration
from benchmarks.evaluation.evaluate import (
    EvalRequest,
    EvalResult,
    evaluate_greedy,
    evaluate_model,
    group_accuracies,
    log_results,
)
from benchmarks.tasks.base import Task
from benchmarks.telemetry.meter import Budget, ComputeMeter
from benchmarks.telemetry.tracking import Tracker

log = logging.getLogger(__name__)

__all__ = ["CriticProbe", "EvalConfig", "TrainingEvaluator"]


class EvalConfig(Protocol):
    """The trainer settings an evaluation reads (``TrainerConfig`` has them all)."""

    @property
    def max_new_tokens(self) -> int: ...
    @property
    def temperature(self) -> float: ...
    @property
    def top_p(self) -> float: ...
    @property
    def eval_batch_size(self) -> int: ...
    @property
    def eval_samples_logged(self) -> int: ...
    @property
    def eval_k(self) -> int: ...
    @property
    def eval_k_problems(self) -> int | None: ...
    @property
    def eval_k_every_checkpoint(self) -> bool: ...
    @property
    def eval_temperature(self) -> float: ...
    @property
    def calibration_prompts(self) -> int: ...
    @property
    def calibration_samples(self) -> int: ...
    @property
    def calibration_every_eval(self) -> bool: ...


class CriticProbe(Protocol):
    """What calibration asks of a critic: its kind ("prompt" or "token") and its values."""

    @property
    def kind(self) -> str: ...
    def values(self, ro: Rollout) -> torch.Tensor: ...


class TrainingEvaluator:
    """Evaluates a run when its budget crosses an eval fraction, and keeps the results.

    ``evals`` holds (fraction, greedy result) per evaluation; with ``index`` (the next fraction
    not yet reached) it is the evaluator's state, which a checkpoint saves.
    """

    def __init__(
        self,
        *,
        name: str,
        task: Task,
        policy: torch.nn.Module,
        tokenizer: Any,
        config: EvalConfig,
        budget: Budget,
        meter: ComputeMeter,
        tracker: Tracker,
        seed: int,
        critic: CriticProbe | None = None,
        on_progress: Callable[[float, dict[str, float]], None],
        on_eval: Callable[[float, EvalResult], None],
    ) -> None:
        self.name, self.task, self.policy, self.tok = name, task, policy, tokenizer
        self.cfg, self.budget, self.meter, self.tracker = config, budget, meter, tracker
        self.seed, self.critic = seed, critic
        self.on_progress, self.on_eval = on_progress, on_eval
        self.index = 0
        self.evals: list[tuple[float, EvalResult]] = []

    def maybe_eval(
        self, engine: RolloutEngine, step: int, *, force_first: bool = False, last: bool = False
    ) -> dict[str, float]:
        """Evaluate if the budget crossed an eval fraction (or this is the ``last`` step: the
        budget's end, even if the last step could not fill it); returns the metrics to log."""
        fractions = self.budget.eval_fractions
        f = 0.0 if force_first else self.budget.fraction(self.meter)
        crossed = []
        while self.index < len(fractions) and f >= fractions[self.index] - 1e-9:
            crossed.append(fractions[self.index])
            self.index += 1
        if last and (crossed[-1] if crossed else -1.0) < 1.0:
            skipped = fractions[self.index : -1]
            if skipped:
                log.warning(
                    "%s: the budget ended at %.3f of its limit (the next step would not fit); "
                    "eval fractions %s were not reached",
                    self.name,
                    self.budget.fraction(self.meter),
                    list(skipped),
                )
            self.index = len(fractions)
            crossed.append(1.0)
        if len(crossed) > 1:
            log.warning(
                "step %d crossed eval fractions %s at once; evaluating once, as %s",
                step,
                crossed,
                crossed[-1],
            )
        return self.evaluate(engine, step, crossed[-1]) if crossed else {}

    def evaluate(self, engine: RolloutEngine, step: int, fraction: float) -> dict[str, float]:
        """Greedy accuracy (overall and per eval group) at ``fraction`` of the budget, with the
        sampled evaluation and the critic's calibration where they are due."""
        cfg = self.cfg
        with self.meter.phase("eval"):
            res = evaluate_greedy(
                engine,
                self.task,
                self.task.eval_problems(),
                cfg.max_new_tokens,
                cfg.eval_batch_size,
            )
        self.evals.append((fraction, res))
        name = self.task.eval_name
        m = {
            M.eval_metric(name, "accuracy"): res.accuracy,
            M.eval_metric(name, "accuracy_se"): res.se,
            M.EVAL_BUDGET_FRACTION: fraction,
        }
        groups = self.task.eval_groups() if hasattr(self.task, "eval_groups") else {}
        # Every item's score, so an analysis can resample items (the metrics are their means).
        self.tracker.log_dict(
            {
                "dataset": name,
                "step": step,
                "budget_fraction": fraction,
                "scores": [float(s) for s in res.scores],
                "groups": {g: list(idx) for g, idx in groups.items()},
            },
            M.eval_items_file(name, fraction),
        )
        for group, (acc, se) in group_accuracies(res, groups).items():  # e.g. one per horizon
            m[M.eval_metric(group, "accuracy")] = acc
            m[M.eval_metric(group, "accuracy_se")] = se
        if fraction >= 1.0 or fraction == 0.0:
            probs = self.task.eval_problems()[: cfg.eval_samples_logged]
            self.tracker.log_table(
                {
                    "prompt": [p.prompt for p in probs],
                    "answer": [p.answer for p in probs],
                    "response": res.responses[: len(probs)],
                    "score": res.scores[: len(probs)],
                },
                f"eval_samples/{name}_{'final' if fraction >= 1.0 else 'start'}.json",
            )
        if cfg.eval_k > 0 and (fraction >= 1.0 or cfg.eval_k_every_checkpoint):
            self._sampled(engine, step, fraction)
        if (
            self.critic is not None
            and cfg.calibration_prompts > 0
            and (fraction >= 1.0 or cfg.calibration_every_eval)
        ):
            m.update(self._calibration(engine, self.critic, table=fraction >= 1.0))
        self.on_progress(self.budget.fraction(self.meter), {"acc": res.accuracy})
        self.on_eval(fraction, res)
        return m

    def _sampled(self, engine: RolloutEngine, step: int, fraction: float) -> None:
        """avg@k and pass@k with sampling, through the same code as ``sppo-bench eval``."""
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
                # A torch engine is rebuilt there at eval_batch_size; others are reused, e.g.
                # vLLM's one engine with the current weights.
                engine=None if isinstance(engine, TorchEngine) else engine,
            )
        tag = "final" if fraction >= 1.0 else f"f{fraction:g}"
        log_results(
            self.tracker,
            res,
            step=step,
            samples_logged=cfg.eval_samples_logged,
            grader_totals=False,
            table_prefix=f"eval_samples_k/{tag}",
        )

    @torch.no_grad()
    def _calibration(
        self, engine: RolloutEngine, critic: CriticProbe, table: bool
    ) -> dict[str, float]:
        """The critic's predictions next to the policy's empirical success rate over k samples,
        per held-out prompt (the data of the paper's Fig. 7), as metrics; with ``table``, the
        prompt critic's per-prompt table artifact too. The samples' seed depends on the run's
        seed only, so every evaluation point asks the same prompts with the same draws."""
        cfg = self.cfg
        probs = list(self.task.eval_problems()[: cfg.calibration_prompts])
        k = cfg.calibration_samples
        with self.meter.phase("eval"):
            ro = engine.generate(
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
            if critic.kind == "prompt":
                first = ro.select(torch.arange(0, len(ro.texts), k))
                predicted = torch.sigmoid(critic.values(first))
                metrics = prompt_critic_calibration(predicted, scores)
            else:
                values = critic.values(ro)
                metrics = token_critic_calibration(values, ro.response_mask, flat, k)
        # Undefined (a critic that predicts one value for every prompt has no correlation) is
        # left out rather than logged as NaN, which no history comparison can match.
        metrics = {key: v for key, v in metrics.items() if math.isfinite(v)}
        if table and critic.kind == "prompt":
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
