"""A suite's runs spread over worker processes, one torch thread each (``jobs``).

On the CPU the tiny model's matmuls gain little from a second intra-op thread, but independent
runs use a second core fully: with ``jobs=2`` on 2 cores the default suite takes a little over
half its one-process time (docs/performance.md). Every run is a pure function of its config and
seed (the trainer seeds torch's global generator itself, and the warm start is read from its
cache), so a run's numbers do not depend on which process ran it or in which order
(``tests/suite/test_workers.py``).

The parent schedules two kinds of task: a seed's warm start, then, once it is cached, that seed's
runs (with ``warmstart.per_seed=false``, one warm start and then every seed's runs). Warm starts
are queued first, so while one seed's runs train the next seed's warm start is already being
built. The tasks run on the tree's one executor (``benchmarks/suite/executor.py``, which the
sweeps share); workers send their progress-bar updates and log records back through one queue,
which the parent renders. :func:`parallel_blocker` says when a suite must stay in one process.

With ``jobs=ray`` (:func:`run_on_ray`) the same tasks are Ray tasks on the cluster at
``ray.address``, each asking for ``threads`` CPUs. A warm start is returned through Ray's object
store and handed to its runs as an argument, so no node needs the driver's cache directory.
A task whose worker or node dies is run again by Ray (``ray.max_retries``); a run that starts
again finds its earlier attempt's MLflow run under the suite's parent and continues it, from
its checkpoint where ``output_dir`` is shared and from the start otherwise, logging no point
twice (``benchmarks/training/checkpoint.py``). Progress updates and log records come back
through a Ray queue, which the driver renders as it does the pool's."""

from __future__ import annotations

import functools
import logging
import logging.handlers
import multiprocessing as mp
import os
import pickle
import queue as queue_mod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from benchmarks.suite.executor import Pool, RayCluster, Task, TaskLost, drive

if TYPE_CHECKING:
    from benchmarks.suite.plan import SuitePlan

log = logging.getLogger(__name__)

__all__ = ["WorkerError", "parallel_blocker", "run_on_ray", "run_parallel"]

#: Per-worker state set by :func:`_init_worker`.
_W: dict[str, Any] = {}


class WorkerError(RuntimeError):
    """What a worker raised, as ``Type: message``. The original exception may not survive
    pickling back to the parent (transformers' validation errors do not), and a failing pool
    initializer would otherwise reach the user as an opaque ``BrokenProcessPool``."""


# ----------------------------------------------------------------------------- worker side


def _reported(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a worker task; raise what it (or the worker's start-up) raised as a WorkerError."""

    @functools.wraps(fn)
    def task(*args: Any) -> Any:
        if "init_error" in _W:
            raise WorkerError(_W["init_error"])
        try:
            return fn(*args)
        except WorkerError:
            raise
        except Exception as e:
            raise WorkerError(f"{type(e).__name__}: {e}") from e

    return task


class _QueueBar:
    """The progress bar interface ``run_one`` uses, forwarded to the parent's real bar."""

    def __init__(self, q: Any) -> None:
        self.q = q

    def add_task(self, description: str, **fields: Any) -> str:
        self.q.put(("add", description, fields))
        return description

    def update(self, task_id: str, **fields: Any) -> None:
        self.q.put(("update", task_id, fields))


def _init_worker(plan: Any, level: int, q: Any) -> None:
    """Set up a worker (a pool's, or a Ray worker joining this suite)."""
    _W.clear()  # a Ray worker may have served another suite before
    try:
        _start_worker(plan, level, q)
    except Exception as e:  # raised again by the worker's first task (see _reported)
        _W["init_error"] = f"{type(e).__name__}: {e}"


def _start_worker(plan: Any, level: int, q: Any) -> None:
    """Set up a worker from the parent's validated plan (sent, not validated again). The user's
    plugins are imported first: they may register what the runs look up by name."""
    import importlib
    import sys

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no bars behind the parent's
    root = logging.getLogger()
    root.handlers[:] = [logging.handlers.QueueHandler(q)]
    root.setLevel(level)
    for noisy in ("alembic", "mlflow", "httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    import torch

    plugins = plan.plugins
    if plugins and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module in plugins:
        importlib.import_module(str(module))
    torch.set_num_threads(plan.threads)
    _W.update(plan=plan, q=q)


def _tokenizer() -> Any:
    from benchmarks.training.modeling import build_char_tokenizer

    if "tok" not in _W:
        _W["tok"] = build_char_tokenizer(_W["plan"].task.alphabet)
    return _W["tok"]


@_reported
def _warm_start(seed: int) -> dict:
    """Build (or read) the warm start of start seed ``seed``; its info."""
    from benchmarks.training.start import policy_start

    plan = _W["plan"]
    _, info = policy_start(plan.start_recipe, seed, plan.task, _tokenizer())
    return info


@_reported
def _run(name: str, seed: int, shared: dict) -> Any:
    from benchmarks.training.start import policy_start

    plan = _W["plan"]
    start_seed = plan.start_seed(seed)  # its warm start is cached by now
    start, _ = policy_start(plan.start_recipe, start_seed, plan.task, _tokenizer())
    return _train(name, seed, shared, start, shared["previous_parent"])


def _train(name: str, seed: int, shared: dict, start: Any, previous_parent: str | None) -> Any:
    """Run (algorithm ``name``, ``seed``) from ``start``; with ``previous_parent``, that
    parent's earlier child run of the pair (if any) is continued rather than started again."""
    from mlflow.tracking import MlflowClient

    from benchmarks.suite.run_one import RunContext, run_one
    from benchmarks.training import checkpoint as ckpt

    plan = _W["plan"]
    client = MlflowClient(shared["uri"])
    ctx = RunContext(
        plan,
        client,
        shared["exp_id"],
        shared["tags"],
        plan.resolved,
        plan.task,
        _tokenizer(),
        _QueueBar(_W["q"]),
        None,
        out_dir=shared["out_dir"],
        config_hash=shared["config_hash"],
        checkpoints=shared["checkpoints"],
    )
    if previous_parent is not None:
        ctx.previous = ckpt.child_runs(client, shared["exp_id"], previous_parent)
    return run_one(ctx, shared["parent_id"], name, plan.algorithms[name], seed, start)


@_reported
def _ray_warm_start(seed: int) -> tuple[Any, dict]:
    """The warm start of start seed ``seed`` and its info: the model goes to the object store."""
    from benchmarks.training.start import policy_start

    plan = _W["plan"]
    start, info = policy_start(plan.start_recipe, seed, plan.task, _tokenizer())
    return start, info


@_reported
def _ray_run(name: str, seed: int, shared: dict, start: Any) -> Any:
    """One run from ``start`` (a warm start Ray fetched from its object store). The suite's
    parent is searched for an earlier attempt of this run: Ray runs a task again after its node
    died, and that attempt's MLflow run is continued, not duplicated."""
    return _train(name, seed, shared, start, shared["parent_id"])


# ----------------------------------------------------------------------------- parent side


def parallel_blocker(plan: SuitePlan, *, on_eval: bool) -> str | None:
    """Why this suite must run in one process, or None when workers can run it."""
    if on_eval:
        return "an on_eval callback (a sweep trial) is called in this process"
    if plan.model.real:
        return "a real checkpoint is loaded once and shared"
    if plan.device != "cpu":
        return f"engine.device={plan.device} (one accelerator)"
    if plan.engine.rollout != "torch":
        return f"engine.rollout={plan.engine.rollout}"
    for name, alg in plan.algorithms.items():
        module = type(alg).__module__
        if module == "__main__":
            return f"algorithm {name!r} is defined in __main__, which a worker cannot import"
        try:
            pickle.dumps(alg)
        except Exception as e:  # a local class, a lambda in its config, ...
            return f"algorithm {name!r} cannot be sent to a worker ({type(e).__name__}: {e})"
    return None


def _drain(q: Any, bar: Any, bar_ids: dict[str, Any]) -> None:
    """Render what the workers sent: progress updates on the parent's bar, log records through
    the parent's handlers. A Ray queue is read in batches (each read is a call to its actor)."""
    while True:
        try:
            if hasattr(q, "get_nowait_batch"):
                n = q.size()
                if not n:
                    return
                items = q.get_nowait_batch(n)
            else:
                items = [q.get_nowait()]
        except queue_mod.Empty:
            return
        for item in items:
            _render(item, bar, bar_ids)


def _render(item: Any, bar: Any, bar_ids: dict[str, Any]) -> None:
    if isinstance(item, logging.LogRecord):
        logging.getLogger(item.name).handle(item)
    elif item[0] == "add" and item[1] in bar_ids:  # a Ray task run again: its bar starts over
        bar.update(bar_ids[item[1]], completed=0.0, **item[2])
    elif item[0] == "add":
        bar_ids[item[1]] = bar.add_task(item[1], **item[2])
    elif item[1] in bar_ids:
        bar.update(bar_ids[item[1]], **item[2])


def _by_start(
    plan: Any, work: list[tuple[int, list[str]]]
) -> dict[int, list[tuple[int, list[str]]]]:
    """``work`` grouped by warm-start seed, so each start is built once and its seeds' runs are
    submitted when it is ready (seeds share a start unless ``warmstart.per_seed``)."""
    starts: dict[int, list[tuple[int, list[str]]]] = {}
    for seed, names in work:
        starts.setdefault(plan.start_seed(seed), []).append((seed, names))
    return starts


def _schedule(
    executor: Pool | RayCluster,
    plan: Any,
    work: list[tuple[int, list[str]]],
    q: Any,
    bar: Any,
    on_warm_start: Callable[[int, dict], None],
    run_task: Callable[[str, int, tuple[Any, ...]], Task],
    warm_returns: int,
) -> dict[tuple[str, int], Any]:
    """Each start's warm start, then, once it is built, that start's runs (``run_task`` makes
    one from the warm start's other results); the run summaries by (algorithm, seed). Warm
    starts go first, so the next is built while a start's runs train."""
    out: dict[tuple[str, int], Any] = {}
    bar_ids: dict[str, Any] = {}
    warm_fn = _ray_warm_start if warm_returns > 1 else _warm_start
    starts = [
        Task(warm_fn, (start,), ("warm start", start, group), returns=warm_returns)
        for start, group in _by_start(plan, work).items()
    ]

    def on_done(task: Task, value: Any, others: tuple[Any, ...]) -> list[Task]:
        kind, seed, what = task.label
        if kind == "run":
            out[(str(what), seed)] = value
            return []
        on_warm_start(seed, value)
        return [run_task(name, run_seed, others) for run_seed, names in what for name in names]

    drive(executor, starts, on_done, tick=lambda: _drain(q, bar, bar_ids))
    return out


def run_parallel(
    *,
    jobs: int,
    plan: Any,
    work: list[tuple[int, list[str]]],
    shared: dict,
    bar: Any,
    on_warm_start: Callable[[int, dict], None],
) -> dict[tuple[str, int], Any]:
    """Run ``work`` (per seed, the algorithms still to run) in ``jobs`` spawned processes.

    Returns the run summaries by (algorithm, seed). An exception a run raises past its own
    handling (``run_one`` records failed runs) ends the suite, as it would in one process.
    """
    q = mp.get_context("spawn").Queue()
    level = logging.getLogger().getEffectiveLevel()
    log.info("running %d seeds' runs in %d worker processes", len(work), jobs)

    def run_task(name: str, seed: int, _: tuple[Any, ...]) -> Task:
        return Task(_run, (name, seed, shared), ("run", seed, name))

    try:
        with Pool(jobs, _init_worker, (plan, level, q)) as pool:
            return _schedule(pool, plan, work, q, bar, on_warm_start, run_task, warm_returns=1)
    except TaskLost as e:
        raise WorkerError(f"{e}; fewer workers (jobs=1) run everything in this process") from e


def run_on_ray(
    *,
    plan: Any,
    work: list[tuple[int, list[str]]],
    shared: dict,
    bar: Any,
    on_warm_start: Callable[[int, dict], None],
) -> dict[tuple[str, int], Any]:
    """Run ``work`` (per seed, the algorithms still to run) as tasks of the Ray cluster at
    ``plan.ray.address``, each with ``plan.threads`` CPUs; the run summaries by (algorithm,
    seed). Each start seed's warm start is one task whose model the runs of that start receive
    through the object store."""
    import ray
    from ray.util.queue import Queue
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    level = logging.getLogger().getEffectiveLevel()
    cluster = RayCluster(plan.ray.address, num_cpus=plan.threads, max_retries=plan.ray.max_retries)
    with cluster:
        # The queue's actor lives on this node: it fails with the driver, never before it.
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        q = Queue(actor_options={"num_cpus": 0, "scheduling_strategy": here})
        cluster.set_up(_init_worker, cluster.put(plan), level, q)
        log.info(
            "running %d seeds' runs as Ray tasks of %d CPU(s) each on %s",
            len(work),
            plan.threads,
            plan.ray.address,
        )
        hosts = {n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
        if len(hosts) > 1 and str(shared["uri"]).startswith("sqlite:"):
            log.warning(
                "tracking.uri=%s is a file on this machine, and the cluster has %d machines: runs "
                "placed elsewhere cannot write it; use postgresql://... or an MLflow server "
                "(docs/cluster.md)",
                shared["uri"],
                len(hosts),
            )

        def run_task(name: str, seed: int, others: tuple[Any, ...]) -> Task:
            model = others[0]  # the warm start's model, in the object store
            return Task(_ray_run, (name, seed, shared, model), ("run", seed, name))

        try:
            return _schedule(cluster, plan, work, q, bar, on_warm_start, run_task, warm_returns=2)
        except TaskLost as e:
            raise WorkerError(str(e)) from e
        finally:
            q.shutdown()
