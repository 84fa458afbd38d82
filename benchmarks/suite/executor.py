"""Where tasks run beside this process: a pool of spawned worker processes, or tasks of a Ray
cluster. A suite (each start's warm start, then its runs) and a sweep (one trial per task) both
run here, so the tree has one process pool and one Ray backend, and one loop that schedules
them (:func:`drive`).

A task is a module-level function, its arguments, and a label the caller reads its result by.
The backends differ only where they must:

- **Set-up.** A pool runs its initializer once in each worker. A Ray worker process serves
  many jobs, so each task carries the set-up and its arguments, and a worker runs it once per
  executor (a token tells whether it already has).
- **Losses.** A worker that dies breaks the whole pool, and every task still pending raises
  :class:`TaskLost`. Ray runs a task again (``max_retries``) when its worker or node dies, and
  raises :class:`TaskLost` once the retries are spent.
- **Several results.** A Ray task can return several objects (``returns``), and later tasks
  take the first ones as arguments from the object store (a warm start's model) while the
  caller reads the last (its info).

Workers are spawned, never forked: the parent holds MLflow's SQLite connections, torch's threads
and logging threads, none of which survive a fork.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["Pool", "RayCluster", "Task", "TaskLost", "drive"]

POLL_S = 0.2  # how often the loop comes back to its caller (progress bars, log records)


class TaskLost(RuntimeError):
    """A task's worker process (or node) died before the task reported: killed, or out of
    memory. Its own errors are not this: they come back as what the task raised."""


@dataclass(frozen=True)
class Task:
    """One call of ``fn(*args)`` in a worker; ``label`` is how the caller knows it again."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    label: Any
    returns: int = 1  # objects the task returns (Ray only; a pool task returns one)


@dataclass
class _Pending:
    task: Task
    #: The task's other results: every handle ``submit`` returned but the last, which is waited on.
    extra: tuple[Any, ...]


# ----------------------------------------------------------------------------- process pool


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when the parent dies. A suite killed with ``kill -9`` must not
    leave workers writing its runs while ``resume=auto`` continues them elsewhere."""
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


def _pool_init(setup: Callable[..., None] | None, args: tuple[Any, ...]) -> None:
    _die_with_parent()
    if setup is not None:
        setup(*args)


class Pool:
    """``workers`` spawned processes, each set up once by ``setup(*setup_args)``."""

    def __init__(
        self,
        workers: int,
        setup: Callable[..., None] | None = None,
        setup_args: tuple[Any, ...] = (),
    ) -> None:
        self.workers, self.setup, self.setup_args = workers, setup, setup_args
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> Pool:
        self._pool = ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=mp.get_context("spawn"),
            initializer=_pool_init,
            initargs=(self.setup, self.setup_args),
        )
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._pool is not None
        self._pool.shutdown(wait=True, cancel_futures=True)

    def submit(self, task: Task) -> tuple[Future, ...]:
        if task.returns != 1:
            raise ValueError(f"a pool task returns one object, not {task.returns}")
        assert self._pool is not None
        return (self._pool.submit(task.fn, *task.args),)

    def wait(self, handles: list[Any], timeout: float) -> list[Any]:
        done, _ = wait(handles, timeout=timeout, return_when=FIRST_COMPLETED)
        return list(done)

    def result(self, handle: Future) -> Any:
        try:
            return handle.result()
        except BrokenProcessPool as e:
            raise TaskLost(
                "a worker process died without reporting an error (killed, or out of memory?)"
            ) from e

    def cancel(self, handle: Future) -> None:
        handle.cancel()


# ----------------------------------------------------------------------------- Ray

_JOINED: dict[str, str] = {}  # in a Ray worker: the token of the executor it is set up for


def _ray_task(
    token: str, setup: Callable[..., None] | None, n_setup: int, fn: Callable, *args: Any
) -> Any:
    """A task in a Ray worker: the executor's set-up first (once per worker and executor; Ray
    reuses a worker for the next task), then ``fn``. The set-up's arguments come first in
    ``args``, flat, so Ray resolves any object reference among them."""
    if setup is not None and _JOINED.get("token") != token:
        setup(*args[:n_setup])
        _JOINED["token"] = token
    return fn(*args[n_setup:])


class RayCluster:
    """Tasks of the Ray cluster at ``address`` (joined for the executor's lifetime), each with
    ``num_cpus`` CPUs, run again up to ``max_retries`` times when its worker or node dies (a
    task's own exception is never retried: it is the task's answer). Each worker is set up by
    what :meth:`set_up` names."""

    def __init__(
        self,
        address: str,
        *,
        num_cpus: int,
        max_retries: int,
        key: str = "ray.address",
    ) -> None:
        self.address, self.key = address, key
        self.opts = {"num_cpus": num_cpus, "max_retries": max_retries, "retry_exceptions": False}
        self.setup: Callable[..., None] | None = None
        self.setup_args: tuple[Any, ...] = ()
        self.token = uuid.uuid4().hex
        self._stack: Any = None

    def __enter__(self) -> RayCluster:
        import contextlib

        import ray  # optional (extra ``cluster``): only work on a cluster needs it

        from benchmarks.suite.cluster import connected

        self._ray = ray
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(connected(self.address, key=self.key))
        self._remote = ray.remote(_ray_task)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()

    def set_up(self, setup: Callable[..., None], *args: Any) -> None:
        """Run ``setup(*args)`` in each worker before its first task of this executor. Called
        once joined, so that ``args`` may hold object references (:meth:`put`) and Ray queues."""
        self.setup, self.setup_args = setup, args

    def put(self, value: Any) -> Any:
        """``value`` in the object store, so that many tasks share one copy."""
        return self._ray.put(value)

    def submit(self, task: Task) -> tuple[Any, ...]:
        refs = self._remote.options(num_returns=task.returns, **self.opts).remote(
            self.token, self.setup, len(self.setup_args), task.fn, *self.setup_args, *task.args
        )
        return tuple(refs) if task.returns > 1 else (refs,)

    def wait(self, handles: list[Any], timeout: float) -> list[Any]:
        done, _ = self._ray.wait(handles, num_returns=1, timeout=timeout)
        return done

    def result(self, handle: Any) -> Any:
        """The task's value; what it raised, as itself where it pickles (Ray's wrapper
        otherwise); :class:`TaskLost` where its worker or node died every time."""
        ray = self._ray
        try:
            return ray.get(handle)
        except ray.exceptions.RayTaskError as e:
            cause = e.cause
            if isinstance(cause, Exception):
                raise cause from None
            raise
        except ray.exceptions.RayError as e:
            first = str(e).splitlines()[0] if str(e) else ""
            raise TaskLost(
                f"a Ray task failed after {self.opts['max_retries']} retries: "
                f"{type(e).__name__}: {first}"
            ) from e

    def cancel(self, handle: Any) -> None:
        self._ray.cancel(handle, force=True)


# ----------------------------------------------------------------------------- the loop


def drive(
    executor: Pool | RayCluster,
    tasks: Iterable[Task],
    on_done: Callable[[Task, Any, tuple[Any, ...]], Iterable[Task]],
    *,
    on_error: Callable[[Task, Exception], None] | None = None,
    in_flight: int | None = None,
    tick: Callable[[], None] | None = None,
) -> None:
    """Run ``tasks`` on ``executor``; as each ends, ``on_done(task, value, others)`` (``others``:
    the handles of its other results) returns the tasks to run next.

    At most ``in_flight`` tasks are submitted at once (all, by default: the pool or the cluster
    queues them). A task that raises (or is lost) ends the loop with that exception, cancelling
    what is pending, unless ``on_error`` takes it; ``tick`` is called every :data:`POLL_S`
    while tasks run, and once at the end.
    """
    queue = list(tasks)
    pending: dict[Any, _Pending] = {}

    def fill() -> None:
        while queue and (in_flight is None or len(pending) < in_flight):
            task = queue.pop(0)
            handles = executor.submit(task)
            pending[handles[-1]] = _Pending(task, tuple(handles[:-1]))

    try:
        fill()
        while pending:
            done = executor.wait(list(pending), timeout=POLL_S)
            if tick is not None:
                tick()
            for handle in done:
                item = pending.pop(handle)
                try:
                    value = executor.result(handle)
                except Exception as e:
                    if on_error is None:
                        raise
                    on_error(item.task, e)
                    continue
                queue.extend(on_done(item.task, value, item.extra))
            fill()
    except BaseException:
        for handle in pending:
            executor.cancel(handle)
        raise
    finally:
        if tick is not None:
            tick()
