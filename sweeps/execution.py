"""Where a sweep's trials run: in this process, in a pool of spawned worker processes, or as
tasks of a Ray cluster; each task is one trial (``study.optimize(n_trials=1)``).

Before W workers start, the warm starts are built once here (:func:`_prewarm`), so the workers
do not all train them and write the same cache directory at once. A trial's own errors end it
FAIL inside its task; a worker that dies is logged and the other tasks go on.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

import optuna
import torch

from benchmarks.suite.cluster import connected
from benchmarks.suite.plan import validate
from benchmarks.tasks.base import CharTask
from benchmarks.telemetry.tracking import retry_locked
from benchmarks.training.modeling import build_char_tokenizer
from benchmarks.training.start import policy_start
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
        "%s trial %d (%s): %s%s in %.0f s",
        study_name,
        out["number"],
        out["algorithm"],
        out["state"],
        "" if out["value"] is None else f" {out['value']:.4f}",
        out["wall_s"],
    )
    return out


def _prewarm(cfg: Any) -> None:
    """Build the warm starts (one per start of a trial) once in the main process, so W workers
    do not all train them and write the same cache directory at once. Best effort: on failure the first trials build
    it themselves."""
    try:
        if cfg.model.name_or_path is not None or not cfg.warmstart.enabled:
            return
        plan = validate(cfg)  # builds the task once; the plan holds it
        try:
            if not isinstance(plan.task, CharTask):
                return
            torch.set_num_threads(int(cfg.threads))  # as a trial would (threads per worker)
            tokenizer = build_char_tokenizer(plan.task.alphabet)
            for seed in sorted({plan.start_seed(s) for s in plan.seeds}):
                policy_start(plan.start_recipe, seed, plan.task, tokenizer)
        finally:
            plan.task.close()
    except Exception as e:
        log.warning("could not build the warm start before the workers start (%s); they will", e)


def _ray_trial(ctx: TrialContext, study_name: str, algorithm: str | None, seed: int) -> dict:
    """:func:`_run_trial` as a Ray task (its worker process configures its own logging)."""
    _init_worker(ctx.log_level)
    return _run_trial(ctx, study_name, algorithm, seed)


def _run_on_ray(
    ctx: TrialContext,
    tasks: Sequence[tuple[str, str | None]],
    seeds: Sequence[int],
    workers: int,
    threads: int,
    address: str,
) -> int:
    """Every task as a Ray task of the cluster at ``address``, ``workers`` in flight, each
    with the trials' ``threads`` CPUs; returns how many ran. A task is not retried when its
    node dies: Optuna would count a second trial; the first stays RUNNING until a
    ``--resume`` marks it FAIL."""
    import ray  # optional (extra ``cluster``): only a sweep on a cluster needs it

    queue = list(zip(tasks, seeds, strict=True))
    ran = 0
    with connected(address, key="--ray-address"):
        trial = ray.remote(_ray_trial).options(num_cpus=threads, max_retries=0)
        pending: list[Any] = []
        while queue or pending:
            while queue and len(pending) < workers:
                (s, a), seed = queue.pop(0)
                pending.append(trial.remote(ctx, s, a, seed))
            done, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(done[0])
                ran += 1
            except ray.exceptions.RayError as e:  # the task's worker or node died
                log.error("a sweep task failed: %s", str(e).splitlines()[0] if str(e) else e)
    return ran


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
    ran = 0
    if ray_address is not None and tasks:
        _prewarm(cfg)  # this node's cache; others build their own
        return _run_on_ray(ctx, tasks, seeds, workers, int(cfg.threads), ray_address)
    if workers > 1 and len(tasks) > 1:
        _prewarm(cfg)
        with ProcessPoolExecutor(
            max_workers=min(workers, len(tasks)),
            mp_context=mp.get_context("spawn"),
            initializer=_init_worker,
            initargs=(ctx.log_level,),
        ) as pool:
            futures = [
                pool.submit(_run_trial, ctx, s, a, seed)
                for (s, a), seed in zip(tasks, seeds, strict=True)
            ]
            for f in as_completed(futures):
                try:
                    f.result()
                    ran += 1
                except Exception as e:  # the worker itself died; trials inside are caught
                    log.error("a sweep worker failed: %s: %s", type(e).__name__, e)
    else:
        for (s, a), seed in zip(tasks, seeds, strict=True):
            _run_trial(ctx, s, a, seed)
            ran += 1
    return ran
