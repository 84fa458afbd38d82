"""One sweep trial as Optuna's objective: compose its config, run the suite, report its
evaluations to the pruner, and screen it against the spec's ``admissible`` minimums.

The objective's value and each admissibility metric are read as the rest of the project reads
them: the value from the run's evaluations (:func:`objective_value`), the metrics per start as
the claims' gates read them (:mod:`analysis.claims.gates`), so a trial the sweep ships would
pass the same screen in a suite.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from mlflow.tracking import MlflowClient

from analysis import metrics as M
from analysis.claims.gates import (
    CRITIC_PEARSON_MIN,
    critic_gate,
    late_means_per_start,
    per_start_means,
    start_gate,
)
from benchmarks.config import compose_config
from benchmarks.suite.run import run_suite
from sweeps.spec import CRITIC_GATE, SweepSpec
from sweeps.spec_check import trial_overrides
from sweeps.storage import ATTR_ADMISSIBLE, ATTR_ERROR
from sweeps.tracking import TAG_STUDY, TAG_TRIAL

log = logging.getLogger(__name__)

__all__ = [
    "Objective",
    "TrialContext",
    "TrialFailed",
    "final_per_start",
    "late_per_start",
    "objective_value",
]


class TrialFailed(RuntimeError):
    """The suite recorded the trial's run as FAILED (it catches run errors itself)."""


def objective_value(metric: str, evals: Sequence[tuple[float, float]]) -> float:
    """The objective from (budget fraction, accuracy) pairs so far.

    ``auc``: trapezoidal area under accuracy versus budget fraction, divided by the fractions it
    covers (1 when the evaluations include 0 and 1), so it reads as a mean accuracy in [0, 1].
    Any ``eval/<task>/accuracy``: the last accuracy. Reported at every evaluation, each value is
    what the objective would be if the budget ended there.
    """
    if not evals:
        raise TrialFailed("the run made no evaluation")
    if metric != "auc" or len(evals) == 1:
        return float(evals[-1][1])
    area = sum(
        (f1 - f0) * (a0 + a1) / 2 for (f0, a0), (f1, a1) in zip(evals, evals[1:], strict=False)
    )
    span = evals[-1][0] - evals[0][0]
    return float(area / span) if span > 0 else float(sum(a for _, a in evals) / len(evals))


@dataclass(frozen=True)
class TrialContext:
    """What every trial of one sweep shares; picklable, sent to each worker."""

    spec: SweepSpec
    storage: str
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    fixed: tuple[str, ...]
    log_level: int = logging.INFO


class Objective:
    """One trial: compose the config, run the suite for one algorithm and seed, report evals."""

    def __init__(self, ctx: TrialContext, study_name: str, algorithm: str | None) -> None:
        self.ctx, self.study_name, self.algorithm = ctx, study_name, algorithm

    def __call__(self, trial: Any) -> float:
        spec = self.ctx.spec
        try:
            alg = self.algorithm or trial.suggest_categorical("algorithm", list(spec.algorithms))
            sampled = [p.override(alg, p.suggest(trial, alg)) for p in spec.params_for(alg)]
            trial.set_user_attr("algorithm", alg)
            trial.set_user_attr("overrides", sampled)
            # Trial numbers follow the order trials start (a resumed sweep reruns a killed one
            # under a new number), so the log names each trial's point, not only its number.
            log.info("%s trial %d (%s) starts: %s", self.study_name, trial.number, alg, sampled)
            cfg = compose_config(trial_overrides(spec, alg, sampled, self.ctx.fixed))
            evals: dict[int, list[tuple[float, float]]] = {}

            def on_eval(_alg: str, seed: int, fraction: float, accuracy: float) -> None:
                mine = evals.setdefault(seed, [])
                mine.append((fraction, accuracy))
                if fraction <= 0.0 or spec.starts > 1:
                    # fraction 0: the warm start, the same for every trial; several starts:
                    # the value is their mean, known at the end (the spec allows no pruner)
                    return
                value = objective_value(spec.objective.metric, mine)
                trial.report(value, step=len(mine) - 1)
                if trial.should_prune():
                    raise optuna.TrialPruned(
                        f"pruned at evaluation {len(mine) - 1} (budget fraction {fraction:.3g}), "
                        f"{spec.objective.metric}={value:.4f}"
                    )

            result = run_suite(
                cfg,
                progress=False,
                parent_run_id=self.ctx.parent_run_id,
                extra_tags={TAG_TRIAL: str(trial.number), TAG_STUDY: self.study_name},
                on_eval=on_eval,
            )
            ids = [r.run_id for r in result.runs if r.run_id]
            if ids:
                trial.set_user_attr("mlflow_run_id", ids[0])
                trial.set_user_attr("mlflow_run_ids", ids)
            failed = [r for r in result.runs if r.status != "FINISHED"]
            if failed:
                raise TrialFailed(failed[0].error or f"run ended {failed[0].status}")
            per_start = [objective_value(spec.objective.metric, evals[s]) for s in sorted(evals)]
            trial.set_user_attr("values_per_start", per_start)
            self._check_admissible(trial, alg, ids)
            return float(sum(per_start) / len(per_start))
        except optuna.TrialPruned:
            raise
        except Exception as e:
            trial.set_user_attr(ATTR_ERROR, f"{type(e).__name__}: {e}"[:2000])
            raise

    def _check_admissible(self, trial: Any, algorithm: str, run_ids: Sequence[str]) -> None:
        """Record the spec's ``admissible`` metrics, whether the trial reaches every minimum, and
        the constraint values the sampler reads (``Trial.set_constraint``, <= 0: feasible).

        Each metric is read per start as the claims' gates read it (:mod:`analysis.claims.gates`,
        the one implementation of "can this testbed separate the algorithms"), at the trial's
        weakest start. A critic (``critic_gate``) is the claims' critic gate itself
        (:func:`analysis.claims.gates.critic_gate`): its prompt-level Pearson, per run the mean of
        the second half of its evals, per start the mean over its runs, against the threshold
        calibrated on the inert critic. Any other metric: its final value, per start the mean
        over its runs (:func:`final_per_start`), against the spec's minimum. Why the weakest
        start and not the claims' 95% lower bound over starts: a trial has two starts, where the
        bound has t = 6.31 and admits almost nothing, and the screen's two starts are fixed, so
        its pass rate does not fall as a suite adds starts. A metric a run never logged counts as
        missed."""
        rules = self.ctx.spec.admissible_for(algorithm)
        if not rules:
            return
        client = MlflowClient(self.ctx.tracking_uri)
        runs = [(rid, client.get_run(rid).data) for rid in run_ids]
        finals = [(d.tags.get(M.TAG_START, ""), d.metrics) for _, d in runs]
        ok = True
        for metric, minimum in rules.items():
            if minimum == CRITIC_GATE:
                histories = [
                    (d.tags.get(M.TAG_START, ""), _history(client, rid, metric)) for rid, d in runs
                ]
                per_start = late_per_start(histories)
                gate = critic_gate(metric, per_start, confidence=None)
                threshold = CRITIC_PEARSON_MIN
            else:
                per_start = final_per_start(finals, metric)
                threshold = float(minimum)
                gate = start_gate(metric, per_start, threshold, confidence=None)
            value = gate.value if per_start else None
            trial.set_user_attr(f"final/{metric}", value)
            trial.set_user_attr(f"final_per_start/{metric}", per_start)
            ok = ok and gate.passes
            margin = 1.0 if value is None or not math.isfinite(value) else threshold - value
            trial.set_constraint(metric, margin)
        trial.set_user_attr(ATTR_ADMISSIBLE, ok)


def _history(client: Any, run_id: str, metric: str) -> list[float]:
    """A run's logged values of ``metric`` in step order (empty: never logged)."""
    points = client.get_metric_history(run_id, metric)
    return [m.value for m in sorted(points, key=lambda m: (m.step, m.timestamp))]


def late_per_start(runs: Sequence[tuple[str, Sequence[float]]]) -> dict[str, float]:
    """A critic metric per start as the claims' critic gate reads it
    (:func:`analysis.claims.gates.late_means_per_start`), from (start, the run's values in step
    order) pairs, one per run; empty when any run never logged it (the trial then misses)."""
    if not runs or any(not len(values) for _, values in runs):
        return {}
    return late_means_per_start(runs)


def final_per_start(
    finals: Sequence[tuple[str, Mapping[str, float]]], metric: str
) -> dict[str, float]:
    """``metric``'s final value per start, averaged over the start's runs
    (:func:`analysis.claims.gates.per_start_means`), from (start, final metrics) pairs, one per run;
    empty when any run lacks the metric (the trial then misses)."""
    if not finals or any(metric not in m for _, m in finals):
        return {}
    return per_start_means((start, float(m[metric])) for start, m in finals)
