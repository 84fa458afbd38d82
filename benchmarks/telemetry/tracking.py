"""Experiment tracking behind one thin interface: MLflow for real runs, a do-nothing tracker for
tests that do not care.

Layout (docs/design.md §4): one experiment per suite, one parent run per invocation, one nested
child run per (algorithm, seed). The default store is SQLite in the working directory
(``sqlite:///mlflow.db``: what ``mlflow ui`` opens with no flags); ``MLFLOW_TRACKING_URI`` wins.
Artifacts go to ``mlartifacts/`` beside the database, never into the current directory by
accident.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

log = logging.getLogger(__name__)

__all__ = [
    "EXPERIMENT_KIND",
    "EXPERIMENT_KIND_TAG",
    "MlflowTracker",
    "NullTracker",
    "Tracker",
    "default_tracking_uri",
    "flatten",
    "git_commit",
    "prepare_store",
    "retry_locked",
    "ui_runs_url",
]

_T = TypeVar("_T")

#: MLflow 3's experiment-type tag, set on every experiment the suite creates: a training
#: experiment. (The 3.17 UI picks an experiment's pages from its sidebar switch, "GenAI" or
#: "Model training", not from this tag: see docs/usage.md, "Comparing runs in the MLflow UI".)
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
#: Where ``mlflow ui`` (and ``mlflow server``) listen when started without ``--host``/``--port``.
DEFAULT_UI = "http://127.0.0.1:5000"


def _locked(e: BaseException | None) -> bool:
    while e is not None:
        if "database is locked" in str(e) or "database table is locked" in str(e):
            return True
        e = e.__cause__ or e.__context__
    return False


def retry_locked(fn: Callable[[], _T], what: str, attempts: int = 10) -> _T:
    """Call ``fn``; while SQLite reports a lock beyond its busy timeout (several processes
    writing one store), retry with jittered exponential backoff (about a minute in all). A locked
    SQLite write is rolled back, so a retry never duplicates it."""
    for i in range(attempts):
        try:
            return fn()
        except Exception as e:
            if not _locked(e) or i == attempts - 1:
                raise
            delay = min(8.0, 0.1 * 2**i) * (0.5 + random.random())
            log.warning(
                "%s: database is locked, retry %d/%d in %.1fs", what, i + 1, attempts, delay
            )
            time.sleep(delay)
    raise AssertionError("unreachable")


class Tracker(Protocol):
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def log_table(self, data: Mapping[str, list], artifact_file: str) -> None: ...

    def log_dict(self, data: Mapping[str, Any], artifact_file: str) -> None: ...

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None: ...


class NullTracker:
    """Tracks nothing. Metrics and dicts it receives are kept in memory for inspection."""

    def __init__(self) -> None:
        self.history: list[tuple[int, dict[str, float]]] = []
        self.dicts: dict[str, dict[str, Any]] = {}

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.history.append((step, dict(metrics)))

    def log_table(self, data: Mapping[str, list], artifact_file: str) -> None:
        pass

    def log_dict(self, data: Mapping[str, Any], artifact_file: str) -> None:
        self.dicts[artifact_file] = dict(data)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        pass


def default_tracking_uri() -> str:
    """``MLFLOW_TRACKING_URI`` if set, else SQLite ``mlflow.db`` in the working directory."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def _artifact_root(uri: str) -> str | None:
    """``mlartifacts/`` beside a SQLite database; None (server default) for other stores."""
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///") :])
        return (db.parent / "mlartifacts").resolve().as_uri()
    return None


@contextmanager
def _first_migration_lock(folder: Path | None) -> Iterator[None]:
    """Hold an exclusive lock on a SQLite store's directory while the store is first opened.

    Two processes that open a new SQLite store at once (two shards started together) both run
    MLflow's first migration, and one of them fails with ``table _alembic_tmp_experiments already
    exists``. The lock serialises that first open across processes; on the directory, so it
    leaves no file behind. ``folder`` None: not a SQLite store (a server migrates on its own
    side), no lock."""
    if folder is None:
        yield
        return
    import fcntl

    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def prepare_store(uri: str, experiment: str) -> str:
    """Create the store and the experiment once, before any run or worker starts (SQLite races
    on its first migration), and fail early if the store cannot be written. Returns its id.

    The experiment is tagged :data:`EXPERIMENT_KIND_TAG` = :data:`EXPERIMENT_KIND` (an existing
    one that lacks the tag gets it; one tagged with another kind is left as it is)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    folder = None
    if uri.startswith("sqlite:///"):
        folder = Path(uri[len("sqlite:///") :]).parent
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK):
            raise PermissionError(f"tracking.uri={uri}: directory {folder} is not writable")
    mlflow.set_tracking_uri(uri)
    with _first_migration_lock(folder):
        client = MlflowClient(uri)  # opening the store creates its tables
    exp = retry_locked(lambda: client.get_experiment_by_name(experiment), "get experiment")
    if exp is None:
        try:
            return retry_locked(
                lambda: client.create_experiment(
                    experiment,
                    artifact_location=_artifact_root(uri),
                    tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND},
                ),
                "create experiment",
            )
        except Exception:  # another process created it first
            exp = client.get_experiment_by_name(experiment)
            if exp is None:
                raise
    if EXPERIMENT_KIND_TAG not in exp.tags:  # created before the tag, or by another tool
        exp_id = exp.experiment_id
        retry_locked(
            lambda: client.set_experiment_tag(exp_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND),
            "tag experiment",
        )
    return exp.experiment_id


def ui_runs_url(tracking_uri: str, experiment_id: str, base: str | None = None) -> str:
    """The MLflow UI page that lists an experiment's runs: on the tracking server itself for an
    http(s) store, else on ``base`` (default: ``mlflow ui`` at its default address)."""
    if base is None:
        web = tracking_uri.startswith(("http://", "https://"))
        base = tracking_uri if web else DEFAULT_UI
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs"


def flatten(cfg: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config -> ``{"a.b.c": "value"}`` with values as strings (MLflow params)."""
    out: dict[str, str] = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = json.dumps(v) if isinstance(v, list | tuple) else str(v)
    return out


def git_commit() -> str:
    try:
        root = Path(__file__).resolve().parents[1]
        return subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine() -> dict[str, Any]:
    """This machine's kind, which wall times and fp32's last bits depend on: CPU model, usable
    cores, system."""
    import platform

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu, "cores": cores, "system": platform.system()}


def invocation_tags() -> dict[str, str]:
    """Tags of a suite's parent run that a results set's manifest reports: the command line
    that started it (as typed when it was the ``sppo-bench`` script) and the machine."""
    import shlex
    import sys

    from analysis.metrics import TAG_COMMAND, TAG_MACHINE

    prog = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    command = shlex.join([prog if prog == "sppo-bench" else sys.argv[0], *sys.argv[1:]])
    return {TAG_COMMAND: command, TAG_MACHINE: json.dumps(machine(), sort_keys=True)}


class MlflowTracker:
    """Logs one run. Metrics are batched per step (one ``log_batch`` call per step) and written
    asynchronously by MLflow's own logging queue (``synchronous=False``), so a step never waits
    for the store; :meth:`flush` (called before the run is ended) waits for every pending write."""

    def __init__(self, client, run_id: str, *, synchronous: bool = False) -> None:
        self.client = client
        self.run_id = run_id
        self.synchronous = synchronous
        self._pending: list = []

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        batch = [Metric(k, float(v), ts, step) for k, v in metrics.items()]
        for i in range(0, len(batch), 1000):
            part = batch[i : i + 1000]
            if self.synchronous:
                retry_locked(
                    lambda part=part: self.client.log_batch(
                        self.run_id, metrics=part, synchronous=True
                    ),
                    "log metrics",
                )
                continue
            op = self.client.log_batch(self.run_id, metrics=part, synchronous=False)
            if op is not None:
                self._pending.append((op, part))

    def flush(self) -> None:
        """Wait until every metric logged so far is in the store. A batch the queue could not
        write because SQLite stayed locked (a locked write is rolled back) is written again here,
        synchronously and with retries; any other failed write raises."""
        pending, self._pending = self._pending, []
        for op, part in pending:
            try:
                op.wait()
            except Exception as e:
                if not _locked(e):
                    raise
                retry_locked(
                    lambda part=part: self.client.log_batch(
                        self.run_id, metrics=part, synchronous=True
                    ),
                    "log metrics",
                )

    def log_table(self, data: Mapping[str, list], artifact_file: str) -> None:
        retry_locked(  # also tags the run (mlflow.loggedArtifacts): a database write
            lambda: self.client.log_table(
                self.run_id, data=dict(data), artifact_file=artifact_file
            ),
            "log table",
        )

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_dict(self, data: Mapping[str, Any], artifact_file: str) -> None:
        """Write ``data`` as a JSON artifact, replacing a file of the same name (``log_table``
        appends to one instead)."""
        self.client.log_dict(self.run_id, dict(data), artifact_file)

    @classmethod
    @contextmanager
    def start(
        cls,
        client,
        experiment_id: str,
        *,
        run_name: str,
        tags: Mapping[str, str],
        params: Mapping[str, str] | None = None,
        parent_run_id: str | None = None,
    ) -> Iterator[MlflowTracker]:
        """Create a run, yield its tracker, end it FINISHED or FAILED (with the error as a tag)."""
        from mlflow.entities import Param
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

        all_tags = dict(tags)
        if parent_run_id:
            all_tags[MLFLOW_PARENT_RUN_ID] = parent_run_id
        run = retry_locked(
            lambda: client.create_run(experiment_id, run_name=run_name, tags=all_tags), "create run"
        )
        rid = run.info.run_id
        if params:
            items = [Param(k, v[:6000]) for k, v in params.items()]
            for i in range(0, len(items), 100):
                part = items[i : i + 100]
                retry_locked(lambda part=part: client.log_batch(rid, params=part), "log params")
        with _lifecycle(cls(client, rid)) as tracker:
            yield tracker

    @classmethod
    @contextmanager
    def resume(cls, client, run_id: str) -> Iterator[MlflowTracker]:
        """Continue an existing run (``resume=auto``): RUNNING again, its old ``error`` tag
        removed, then ended FINISHED or FAILED like a new one."""
        run = client.get_run(run_id)
        if "error" in run.data.tags:
            retry_locked(lambda: client.delete_tag(run_id, "error"), "delete tag")
        retry_locked(lambda: client.update_run(run_id, status="RUNNING"), "update run")
        with _lifecycle(cls(client, run_id)) as tracker:
            yield tracker


@contextmanager
def _lifecycle(tracker: MlflowTracker) -> Iterator[MlflowTracker]:
    """End the run FINISHED, or FAILED (KILLED on Ctrl-C) with the error as its ``error`` tag,
    after every pending asynchronous metric write has landed."""
    from mlflow.entities import RunTag

    client, rid = tracker.client, tracker.run_id
    try:
        yield tracker
        tracker.flush()
    except BaseException as e:
        with contextlib.suppress(Exception):  # keep what was logged; the error wins
            tracker.flush()
        tag = [RunTag("error", f"{type(e).__name__}: {e}"[:5000])]
        retry_locked(lambda: client.log_batch(rid, tags=tag), "tag error")
        status = "KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED"
        retry_locked(lambda: client.set_terminated(rid, status), "end run")
        raise
    else:
        retry_locked(lambda: client.set_terminated(rid, "FINISHED"), "end run")
