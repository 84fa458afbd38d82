"""Run a sweep: Optuna studies over the suite, W worker processes, one MLflow parent run.

Optuna is used directly, not through Hydra's Optuna sweeper (which needs optuna<3). Each trial
composes its config with Hydra (the spec's base overrides, the sampled point, one seed, one
algorithm), runs the normal training path (``run_suite``) as an MLflow child run of the sweep's
parent run, reports its evaluations to Optuna (``trial.report(value, step=<eval index>)``) and
stops when the pruner says so.

Choices worth knowing:

- Equal effort: with ``equal_effort: true`` each algorithm has its own study (``<name>-<alg>``)
  and ``trials / len(algorithms)`` trials. A study per algorithm (rather than a round-robin over a
  categorical in one study) keeps the sampler's model, the median pruner's comparison and the
  importances within one algorithm, so a weak algorithm's trials are not pruned for being that
  algorithm. Without it, one study samples ``algorithm`` like any categorical.
- Exact trial counts: the main process creates the studies and computes how many trials are
  missing; each missing trial is one task for the worker pool (``study.optimize(n_trials=1)``),
  so W workers never overshoot. ``--trials N`` counts every trial of the study whatever its
  state (COMPLETE, PRUNED, FAIL) but one an interrupted sweep left RUNNING: ``--resume`` marks
  such a trial FAIL (user attr ``error`` starting "interrupted"), does not count it, queues its
  point again when it was a queued one, and runs the rest, so a sweep killed mid-trial (a session
  that ends) loses no point of its grid. Several ``--resume`` processes (on several
  machines) may share one RDB storage: a running trial records a heartbeat, a trial with a fresh
  one is left to its process, and a task that finds its study full runs nothing (two processes
  that check the last free slot at the same instant may still run one trial too many).
- Reports: the evaluation at budget fraction 0 is not reported. It is the shared warm start, the
  same for every trial, and Optuna's median pruner compares a trial's best value so far: with
  it, a run that collapses from the start would still look as good as the start.
- Failures: a trial whose run fails (or whose config fails) is FAIL with its error in the user
  attr ``error``, and the study goes on. A pruned trial's MLflow run ends KILLED, tagged
  ``trial_state=PRUNED``.
- Storage: ``sqlite:///...`` (RDB, with a 60 s busy timeout and retries for "database is
  locked"), any other SQLAlchemy URL, or a file path for Optuna's JournalStorage (the choice when
  the storage sits on NFS). The MLflow store and experiment, and the Optuna studies, are created
  once by the main process before any worker starts.

The modules, one job each: :mod:`sweeps.storage` (Optuna storage, sampler, pruner, the studies
and the trials still to run), :mod:`sweeps.tracking` (the MLflow parent run and the per-trial
callback), :mod:`sweeps.objective` (one trial and its admissibility), :mod:`sweeps.execution`
(in-process, a process pool or Ray) and :mod:`sweeps.summary` (the best trials and the summary
files). This module resolves the arguments and composes them (:func:`run_sweep`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.config import compose_config
from benchmarks.suite.cluster import check_ray_address
from benchmarks.telemetry.store import PreflightError, check_tracking_uri, database_uri
from benchmarks.telemetry.tracking import default_tracking_uri
from sweeps.execution import run_tasks
from sweeps.objective import TrialContext
from sweeps.spec import SpecError, SweepSpec
from sweeps.spec_check import check_spec
from sweeps.storage import open_studies, pending_tasks
from sweeps.summary import SweepResult, write_summary
from sweeps.tracking import MlflowTrialCallback, open_parent_run

__all__ = ["run_sweep"]

log = logging.getLogger(__name__)


def _given(overrides: Sequence[str], key: str) -> bool:
    """Whether ``overrides`` set ``key`` (then the user's value wins over the sweep's default)."""
    return any(o.lstrip("+~").split("=", 1)[0] == key for o in overrides)


@dataclass(frozen=True)
class _Plan:
    """A sweep's settings, resolved and checked: what every later step reads."""

    spec: SweepSpec
    name: str
    storage: str
    tracking_uri: str
    experiment: str
    output_dir: Path
    #: Overrides every trial gets after the sampled point (tracking, output dir, threads).
    fixed: tuple[str, ...]
    workers: int
    #: The base config (the spec's base overrides and budget, the first algorithm).
    base_cfg: Any
    #: The composed config per algorithm, at the search space's representative point.
    configs: dict[str, Any]


def _prepare(
    spec: SweepSpec,
    *,
    trials: int | None,
    workers: int,
    storage: str | None,
    study_name: str | None,
    tracking_uri: str | None,
    extra_overrides: Sequence[str],
) -> _Plan:
    """Resolve the arguments against the spec and check everything that can be wrong.

    Runs before anything is created, so a bad spec, argument or tracking URI raises
    :class:`SpecError` without leaving a storage, a study or an MLflow run behind.
    """
    if extra_overrides:
        spec = replace(spec, base_overrides=(*spec.base_overrides, *extra_overrides))
    if trials is not None:
        spec = spec.with_trials(trials)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SpecError(f"--workers={workers!r}: must be an integer >= 1")
    name = study_name or spec.name
    if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise SpecError(f"--study-name={name!r}: use letters, digits, '_', '.' or '-'")
    base = spec.base_overrides
    storage = storage or f"sqlite:///{Path.cwd() / 'optuna.db'}"
    try:
        base_cfg = compose_config([*base, *spec.budget, f"algorithm=[{spec.algorithms[0]}]"])
    except Exception as e:
        raise SpecError(f"base_overrides: {str(e).splitlines()[0] if str(e) else e}") from e
    uri = database_uri(tracking_uri or base_cfg.tracking.uri or default_tracking_uri())
    experiment = (
        str(base_cfg.tracking.experiment)
        if _given(base, "tracking.experiment")
        else f"sppo-bench-sweep-{name}"
    )
    out_dir = Path(
        str(base_cfg.output_dir) if _given(base, "output_dir") else f"outputs/sweeps/{name}"
    ).resolve()
    fixed = [f"tracking.uri={uri}", f"tracking.experiment={experiment}", f"output_dir={out_dir}"]
    if workers > 1 and not _given(base, "threads"):
        fixed.append(f"threads={max(1, (os.cpu_count() or 1) // workers)}")  # no oversubscription
    configs = check_spec(spec, fixed)  # every remaining spec error, before anything is created
    try:
        check_tracking_uri(uri, key="--tracking-uri" if tracking_uri else "tracking.uri")
    except PreflightError as e:
        raise SpecError(str(e)) from e
    return _Plan(
        spec=spec,
        name=name,
        storage=storage,
        tracking_uri=uri,
        experiment=experiment,
        output_dir=out_dir,
        fixed=tuple(fixed),
        workers=workers,
        base_cfg=base_cfg,
        configs=configs,
    )


def run_sweep(
    spec: SweepSpec,
    *,
    trials: int | None = None,
    workers: int = 1,
    storage: str | None = None,
    resume: bool = False,
    study_name: str | None = None,
    tracking_uri: str | None = None,
    extra_overrides: Sequence[str] = (),
    ray_address: str | None = None,
) -> SweepResult:
    """Run (or resume) a sweep until its studies hold ``trials`` trials in all.

    Everything that can be wrong with the spec raises :class:`SpecError` before a storage, a
    study or an MLflow run is created. ``workers`` > 1 runs trials in that many spawned
    processes sharing the storage and the MLflow experiment; with ``ray_address`` (``auto`` or
    ``<host>:<port>``) they are ``workers`` tasks at a time of that Ray cluster instead. The
    parent run ends FINISHED, KILLED (interrupted) or FAILED.
    """
    if ray_address is not None:
        try:
            check_ray_address(ray_address, key="--ray-address")
        except PreflightError as e:
            raise SpecError(str(e)) from e

    t0 = time.perf_counter()
    plan = _prepare(
        spec,
        trials=trials,
        workers=workers,
        storage=storage,
        study_name=study_name,
        tracking_uri=tracking_uri,
        extra_overrides=extra_overrides,
    )
    spec = plan.spec
    opened = open_studies(spec, plan.name, plan.storage, resume)
    client, exp_id, parent_id = open_parent_run(
        spec,
        opened.studies,
        name=plan.name,
        storage=plan.storage,
        tracking_uri=plan.tracking_uri,
        experiment=plan.experiment,
        base_cfg=plan.base_cfg,
        resume=resume,
    )
    ctx = TrialContext(
        spec,
        plan.storage,
        plan.tracking_uri,
        exp_id,
        parent_id,
        plan.fixed,
        logging.getLogger().getEffectiveLevel(),
    )
    result = SweepResult(
        name=plan.name,
        studies=list(opened.studies),
        storage=plan.storage,
        tracking_uri=plan.tracking_uri,
        experiment=plan.experiment,
        parent_run_id=parent_id,
        output_dir=plan.output_dir,
        metric=spec.objective.metric,
        direction=spec.objective.direction,
    )
    status = "FAILED"
    try:
        callback = MlflowTrialCallback(plan.tracking_uri, exp_id, parent_id)
        tasks, existing = pending_tasks(spec, opened, callback)
        log.info(
            "sweep %s: %d trials to run (%d exist) over %s, %d worker(s); storage %s; MLflow %s run %s",
            plan.name,
            len(tasks),
            existing,
            list(opened.studies),
            plan.workers,
            plan.storage,
            plan.tracking_uri,
            parent_id,
        )
        seeds = [spec.seed + existing + i for i in range(len(tasks))]
        result.trials_run = run_tasks(
            ctx,
            tasks,
            seeds,
            workers=plan.workers,
            cfg=next(iter(plan.configs.values())),
            ray_address=ray_address,
        )
        write_summary(result, spec, opened, client, t0)
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        client.set_terminated(parent_id, status)
    return result
