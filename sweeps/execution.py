"""Where a sweep's trials run: in this process, in a pool of spawned worker processes, or as
tasks of a Ray cluster, on the executor the suites use (``benchmarks/suite/executor.py``); each
task is one trial (``study.optimize(n_trials=1)``).

Before W workers start, the warm starts are built once here (:func:`_prewarm`), so the workers
do not all train them and write the same cache directory at once. A trial's own errors end it
FAIL inside its task; a worker that dies is logged and the other tasks go on (a pool's death
ends the tasks still queued on it). A Ray task is not retried when its node dies: Optuna would
count a second trial; the first stays RUNNING until a ``--resume`` marks it FAIL.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import optuna

from benchmarks.suite.executor import Pool, RayCluster, Task, drive
from benchmarks.suite.plan import validate
from benchmarks.telemetry.tracking import retry_locked
from benchmarks.training.start import build_starts
from sweeps.objective import Objective, TrialContext
from sweeps.storage import interrupted, make_pruner, make_sampler, make_storage, study_trials
from sweeps.tracking import MlflowTrialCallback

__all__ = ["run_tasks"]

log = logging.getLogger(__name__)


def _init_worker(level: int) -> None:
    """Logging in a spawned worker (it inherits no configuration)."""
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s"
    )
    for noisy in ("alembic", "mlflow", "httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _run_trial(
    ctx: TrialContext, study_name: str, algorithm: str | None, seed: int
) -> dict[str, Any]:
    """Run one trial of ``study_name`` (in a worker process, or in-process for one worker)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    t0 = time.perf_counter()
    storage = make_storage(ctx.storage)
    study = retry_locked(
        lambda: optuna.load_study(
            study_name=study_name,
            storage=storage,
            sampler=make_sampler(ctx.spec, seed),
            pruner=make_pruner(ctx.spec),
        ),
        "load study",
    )
    target = ctx.spec.trials // len(ctx.spec.studies)
    held = sum(t.state.name != "WAITING" and not interrupted(t) for t in study_trials(study))
    if held >= target:  # another sweep process sharing the storage filled it meanwhile
        log.info(
            "%s holds %d trials (of %d) already: this task runs none", study_name, held, target
        )
        return {"study": study_name, "number": None, "state": "SKIPPED", "value": None}
    finished: list[Any] = []
    study.optimize(
        Objective(ctx, study_name, algorithm),
        n_trials=1,
        catch=(Exception,),
        callbacks=[
            MlflowTrialCallback(ctx.tracking_uri, ctx.experiment_id, ctx.parent_run_id),
            lambda _study, trial: finished.append(trial),
        ],
    )
    last = finished[-1]
    out = {
        "study": study_name,
        "number": last.number,
        "state": last.state.name,
        "value": last.value,
        "algorithm": last.user_attrs.get("algorithm", algorithm),
        "params": dict(last.params),
        "wall_s": time.perf_counter() - t0,
    }
    log.info(
        "%s trial %d (%s, %s): %s%s in %.0f s",
        study_name,
        out["number"],
        out["algorithm"],
        ", ".join(
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in out["params"].items()
        ),
        out["state"],
        "" if out["value"] is None else f" {out['value']:.4f}",
        out["wall_s"],
    )
    return out


def _prewarm(cfg: Any) -> None:
    """Build the warm starts (one per start of a trial) once in the main process. Best effort:
    on failure the first trials build them themselves."""
    try:
        plan = validate(cfg)  # builds the task once; the plan holds it
        if plan.model.real or not plan.warmstart.enabled:
            plan.task.close()
            return  # a real checkpoint, or fresh models: no warm start to build
        try:
            build_starts(plan.start_recipe, plan.start_seeds, plan.task)
        finally:
            plan.task.close()
    except Exception as e:
        log.warning("could not build the warm start before the workers start (%s); they will", e)


def run_tasks(
    ctx: TrialContext,
    tasks: Sequence[tuple[str, str | None]],
    seeds: Sequence[int],
    *,
    workers: int,
    cfg: Any,
    ray_address: str | None = None,
) -> int:
    """Run every task, in-process (one worker), in a pool of spawned workers, or as Ray tasks
    (``ray_address``); returns how many ran.

    Spawned, not forked: a worker starts clean of the main process's torch threads, SQLite
    connections and MLflow client. A trial's own errors are caught inside it (the trial ends
    FAIL); a worker that dies is logged and the other tasks go on.
    """
    trials = [
        Task(_run_trial, (ctx, s, a, seed), (s, a))
        for (s, a), seed in zip(tasks, seeds, strict=True)
    ]
    if not trials:
        return 0
    if ray_address is None and (workers <= 1 or len(trials) == 1):
        for t in trials:
            t.fn(*t.args)
        return len(trials)
    _prewarm(cfg)  # with Ray, this node's cache; other nodes build their own
    ran = 0

    def on_done(task: Task, value: Any, others: tuple[Any, ...]) -> list[Task]:
        nonlocal ran
        ran += 1
        return []

    def on_error(task: Task, e: Exception) -> None:  # the worker or node died
        log.error(
            "a sweep task failed: %s: %s",
            type(e).__name__,
            str(e).splitlines()[0] if str(e) else "",
        )

    if ray_address is not None:
        with RayCluster(
            ray_address, num_cpus=int(cfg.threads), max_retries=0, key="--ray-address"
        ) as cluster:
            cluster.set_up(_init_worker, ctx.log_level)
            drive(cluster, trials, on_done, on_error=on_error, in_flight=workers)
    else:
        with Pool(min(workers, len(trials)), _init_worker, (ctx.log_level,)) as pool:
            drive(pool, trials, on_done, on_error=on_error)
    return ran
