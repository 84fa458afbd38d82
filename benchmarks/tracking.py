"""Experiment tracking behind one thin interface: MLflow for real runs, a do-nothing tracker for
tests that do not care.

Layout (DESIGN section 4): one experiment per suite, one parent run per invocation, one nested
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
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "MlflowTracker",
    "NullTracker",
    "Tracker",
    "default_tracking_uri",
    "flatten",
    "git_commit",
    "prepare_store",
]

log = logging.getLogger(__name__)


class Tracker(Protocol):
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def log_table(self, data: Mapping[str, list], artifact_file: str) -> None: ...

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None: ...


class NullTracker:
    """Tracks nothing. Metrics it receives are kept in memory for inspection."""

    def __init__(self) -> None:
        self.history: list[tuple[int, dict[str, float]]] = []

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.history.append((step, dict(metrics)))

    def log_table(self, data: Mapping[str, list], artifact_file: str) -> None:
        pass

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


def prepare_store(uri: str, experiment: str) -> str:
    """Create the store and the experiment once, before any run or worker starts (SQLite races
    on its first migration), and fail early if the store cannot be written. Returns its id."""
    import mlflow
    from mlflow.tracking import MlflowClient

    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///") :])
        db.parent.mkdir(parents=True, exist_ok=True)
        if not os.access(db.parent, os.W_OK):
            raise PermissionError(f"tracking.uri={uri}: directory {db.parent} is not writable")
    mlflow.set_tracking_uri(uri)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return client.create_experiment(experiment, artifact_location=_artifact_root(uri))
    return exp.experiment_id


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


class MlflowTracker:
    """Logs one run. Metrics are batched per step (one ``log_batch`` call per step) and written
    asynchronously by MLflow's own logging queue (``synchronous=False``), so a step never waits
    for the store; :meth:`flush` (called before the run is ended) waits for every pending write."""

    def __init__(self, client, run_id: str, *, synchronous: bool = False) -> None:  # noqa: ANN001
        self.client = client
        self.run_id = run_id
        self.synchronous = synchronous
        self._pending: list = []

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        import time

        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        batch = [Metric(k, float(v), ts, step) for k, v in metrics.items()]
        for i in range(0, len(batch), 1000):
            op = self.client.log_batch(
                self.run_id, metrics=batch[i : i + 1000], synchronous=self.synchronous
            )
            if op is not None:
                self._pending.append(op)

    def flush(self) -> None:
        """Wait until every metric logged so far is in the store (raises a failed write)."""
        pending, self._pending = self._pending, []
        for op in pending:
            op.wait()

    def log_table(self, data: Mapping[str, list], artifact_file: str) -> None:
        self.client.log_table(self.run_id, data=dict(data), artifact_file=artifact_file)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_dict(self, data: Mapping[str, Any], artifact_file: str) -> None:
        self.client.log_dict(self.run_id, dict(data), artifact_file)

    @classmethod
    @contextmanager
    def start(
        cls,
        client,  # noqa: ANN001
        experiment_id: str,
        *,
        run_name: str,
        tags: Mapping[str, str],
        params: Mapping[str, str] | None = None,
        parent_run_id: str | None = None,
    ) -> Iterator[MlflowTracker]:
        """Create a run, yield its tracker, end it FINISHED or FAILED (with the error as a tag)."""
        from mlflow.entities import Param, RunTag
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

        all_tags = dict(tags)
        if parent_run_id:
            all_tags[MLFLOW_PARENT_RUN_ID] = parent_run_id
        run = client.create_run(experiment_id, run_name=run_name, tags=all_tags)
        rid = run.info.run_id
        if params:
            items = [Param(k, v[:6000]) for k, v in params.items()]
            for i in range(0, len(items), 100):
                client.log_batch(rid, params=items[i : i + 100])
        tracker = cls(client, rid)
        try:
            yield tracker
            tracker.flush()
        except BaseException as e:
            with contextlib.suppress(Exception):  # keep what was logged; the error wins
                tracker.flush()
            client.log_batch(rid, tags=[RunTag("error", f"{type(e).__name__}: {e}"[:5000])])
            client.set_terminated(rid, "KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED")
            raise
        else:
            client.set_terminated(rid, "FINISHED")
