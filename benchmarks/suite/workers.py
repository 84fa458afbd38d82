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
built. Workers are spawned (never forked: the parent holds MLflow's SQLite connections and
logging threads), and send their progress-bar updates and log records back through one queue,
which the parent renders. :func:`parallel_blocker` says when a suite must stay in one process."""

from __future__ import annotations

import functools
import logging
import logging.handlers
import multiprocessing as mp
import os
import pickle
import queue as queue_mod
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.suite.plan import SuitePlan

log = logging.getLogger(__name__)

__all__ = ["WorkerError", "parallel_blocker", "run_parallel"]

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


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when the suite's process dies. A suite killed with ``kill -9``
    must not leave workers writing its runs while ``resume=auto`` continues them elsewhere."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's exit still ends the pool
        return
    parent = mp.parent_process()
    if parent is not None and os.getppid() != parent.pid:  # it died before the call above
        os._exit(1)


def _init_worker(plan: Any, level: int, q: Any) -> None:
    _die_with_parent()
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
    from mlflow.tracking import MlflowClient

    from benchmarks.suite.run_one import RunContext, run_one
    from benchmarks.training import checkpoint as ckpt
    from benchmarks.training.start import policy_start

    plan = _W["plan"]
    start_seed = plan.start_seed(seed)  # its warm start is cached by now
    start, _ = policy_start(plan.start_recipe, start_seed, plan.task, _tokenizer())
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
    if shared["previous_parent"] is not None:
        ctx.previous = ckpt.child_runs(client, shared["exp_id"], shared["previous_parent"])
    return run_one(ctx, shared["parent_id"], name, plan.algorithms[name], seed, start)


# ----------------------------------------------------------------------------- parent side


def parallel_blocker(plan: SuitePlan, *, on_eval: bool) -> str | None:
    """Why this suite must run in one process, or None when workers can run it."""
    if on_eval:
        return "an on_eval callback (a sweep trial) is called in this process"
    if plan.model.real:
        return "a real checkpoint is loaded once and shared"
    if plan.device != "cpu":
        return f"engine.device={plan.device} (one accelerator)"
    rollout = str(plan.engine.get("rollout", "torch"))
    if rollout != "torch":
        return f"engine.rollout={rollout}"
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
    the parent's handlers."""
    while True:
        try:
            item = q.get_nowait()
        except queue_mod.Empty:
            return
        if isinstance(item, logging.LogRecord):
            logging.getLogger(item.name).handle(item)
        elif item[0] == "add":
            bar_ids[item[1]] = bar.add_task(item[1], **item[2])
        elif item[1] in bar_ids:
            bar.update(bar_ids[item[1]], **item[2])


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
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    bar_ids: dict[str, Any] = {}
    level = logging.getLogger().getEffectiveLevel()
    out: dict[tuple[str, int], Any] = {}
    log.info("running %d seeds' runs in %d worker processes", len(work), jobs)
    with ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(plan, level, q),
    ) as pool:
        starts: dict[int, list[tuple[int, list[str]]]] = {}  # start seed -> its seeds' runs
        for seed, names in work:
            starts.setdefault(plan.start_seed(seed), []).append((seed, names))
        pending: dict[Future, tuple[str, int, Any]] = {}
        for start, group in starts.items():  # warm starts first: the next is built meanwhile
            pending[pool.submit(_warm_start, start)] = ("warm start", start, group)
        try:
            while pending:
                done, _ = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                _drain(q, bar, bar_ids)
                for fut in done:
                    kind, seed, what = pending.pop(fut)
                    if kind == "warm start":
                        on_warm_start(seed, fut.result())
                        for run_seed, names in what:
                            for name in names:
                                run = pool.submit(_run, name, run_seed, shared)
                                pending[run] = ("run", run_seed, name)
                    else:
                        out[(str(what), seed)] = fut.result()
        except BrokenProcessPool as e:
            raise WorkerError(
                "a worker process died without reporting an error (killed, or out of memory?); "
                "fewer workers (jobs=1) run everything in this process"
            ) from e
        except BaseException:
            for fut in pending:
                fut.cancel()
            raise
        finally:
            _drain(q, bar, bar_ids)
    return out
