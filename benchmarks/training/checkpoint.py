"""Checkpoints and ``resume=auto``: a run killed at any instant continues as if never stopped.

What a checkpoint holds (one file per (parent run, algorithm, seed), replaced atomically): the
trainer's :meth:`~benchmarks.training.trainer.RLTrainer.state_dict` (policy, critic and both
optimizers, the prompt stream with its own generator, the compute meter, the step and skip
counters, the evaluations so far, a fingerprint of the frozen reference model, which is rebuilt
from the shared warm start, then checked, and the state an algorithm carries between steps, such
as SPO's per-prompt tracker, under ``"algorithm"`` when it has any), with the process-wide random
generators (torch, Python, NumPy) beside it under ``"rng"``, and the MLflow run it belongs to.
This module moves those dicts and never knows the trainer: it reads only the step a state was
saved at (to know which points of the history it covers); the trainer alone knows what its state
is, and asks for it to be saved (:meth:`Checkpointer.after_step`) and given back
(:meth:`Checkpointer.resume`).

Written every ``trainer.checkpoint_every`` steps, after the step's metrics and evaluation are
logged: to a temporary file, fsync'ed, then ``os.replace``'d over the previous one, so a kill
during the save leaves the previous checkpoint whole.

No gap, no duplicate in the metric history. Steps up to the checkpoint were logged before it
was written. Steps after it may have been logged, wholly or partly, before the kill; on resume
they are recomputed from the checkpoint (identical values: every generator is restored and the
step's sampling seeds are functions of the step) and :class:`ResumableTracker` drops each point
whose (key, step) is already in the run's history, counting multiplicity (each (key, step) is
logged once, but an older history may hold two). MLflow cannot delete metric points, so "skip
what is already there" is the only way to make the history exactly that of an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import random
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from analysis.metrics import TAG_CONFIG_HASH
from benchmarks import faults

if TYPE_CHECKING:
    from mlflow import MlflowClient
log = logging.getLogger(__name__)

__all__ = [
    "Checkpointer",
    "RESUME_MODES",
    "ResumableTracker",
    "TAG_CONFIG_HASH",
    "child_runs",
    "config_hash",
    "find_resumable",
    "logged_counts",
    "rng_state",
    "set_rng_state",
]

RESUME_MODES = ("never", "auto")
_VERSION = 1


# --------------------------------------------------------------------------- finding runs


def config_hash(resolved: Mapping[str, Any]) -> str:
    """SHA-256 of the resolved config without ``resume``, ``jobs`` and ``ray``, which only say
    how to run it: the numbers do not depend on them, so a suite killed with ``jobs=2`` resumes
    with any other value, or on a Ray cluster."""
    data = {k: v for k, v in resolved.items() if k not in ("resume", "jobs", "ray")}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def find_resumable(client: MlflowClient, experiment_id: str, chash: str) -> Any | None:
    """The newest suite parent run with this config hash, if it did not finish; else None."""
    from analysis import metrics as M

    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{TAG_CONFIG_HASH}` = '{chash}' and tags.`{M.TAG_ROLE}` = 'suite'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if not runs or runs[0].info.status == "FINISHED":
        return None
    return runs[0]


def child_runs(
    client: MlflowClient, experiment_id: str, parent_id: str
) -> dict[tuple[str, int], Any]:
    """The parent's child runs by (algorithm, seed); the newest wins if there are several."""
    from analysis import metrics as M

    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}'",
        order_by=["attributes.start_time ASC"],
        max_results=10_000,
    )
    out = {}
    for r in runs:
        t = r.data.tags
        if M.TAG_ALGORITHM in t and M.TAG_SEED in t:
            out[(t[M.TAG_ALGORITHM], int(t[M.TAG_SEED]))] = r
    return out


def logged_counts(client: MlflowClient, run_id: str, from_step: int) -> Counter:
    """How many points each (key, step) with step >= ``from_step`` has in the run's history."""
    run = client.get_run(run_id)
    counts: Counter = Counter()
    for key in run.data.metrics:
        for m in client.get_metric_history(run_id, key):
            if m.step >= from_step:
                counts[(key, m.step)] += 1
    return counts


class ResumableTracker:
    """Forwards to a tracker, skipping points already logged before a kill (``skip``), and
    counts the points of the latest step (saved with a checkpoint taken at that step)."""

    def __init__(self, inner: Any, skip: Counter | None = None) -> None:
        self.inner = inner
        self.skip: Counter = skip or Counter()
        self.step = -1
        self.at_step: Counter = Counter()
        self.skipped_points = 0

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        if step != self.step:
            self.step, self.at_step = step, Counter()
        keep = {}
        for k, v in metrics.items():
            self.at_step[k] += 1
            if self.skip[(k, step)] > 0:
                self.skip[(k, step)] -= 1
                self.skipped_points += 1
            else:
                keep[k] = v
        if keep:
            self.inner.log_metrics(keep, step=step)

    def log_table(self, data: Mapping[str, list], artifact_file: str) -> None:
        self.inner.log_table(data, artifact_file)

    def __getattr__(self, name: str) -> Any:  # run_id, log_dict, ... of the wrapped tracker
        return getattr(self.inner, name)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self.inner.log_artifact(path, artifact_path)


# --------------------------------------------------------------------------- checkpoint file


def rng_state() -> dict[str, Any]:
    """The process-wide generators a run draws from (torch, Python, NumPy, CUDA)."""
    import numpy as np

    np_state = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype("int64")), *np_state[2:]],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    import numpy as np

    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]  # a round trip may turn the tuples into lists
    random.setstate((version, tuple(internal), gauss))
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype("uint32"), *rest))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Checkpointer:
    """Saves and restores one run's state in ``directory`` (see the module docstring).

    ``meta`` (parent and child run ids, algorithm, seed, config hash) is stored with the state
    and must match on restore, so a checkpoint is never loaded into another run.
    """

    FILE = "checkpoint.pt"

    def __init__(
        self,
        directory: str | Path,
        every: int,
        meta: Mapping[str, Any],
        tracker: ResumableTracker | None = None,
    ) -> None:
        self.dir = Path(directory)
        self.every = every
        self.meta = dict(meta)
        self.tracker = tracker
        self.path = self.dir / self.FILE
        self._state: dict[str, Any] | None = None

    def exists(self) -> bool:
        return self.path.is_file()

    def load(self) -> dict[str, Any] | None:
        """The saved state, or None if there is none. Stale temporary files are removed."""
        if self._state is not None:
            return self._state
        for tmp in self.dir.glob(f".{self.FILE}.*.tmp"):
            tmp.unlink(missing_ok=True)  # a save that was killed half-way
        if not self.exists():
            return None
        state = torch.load(self.path, map_location="cpu", weights_only=True)
        if state.get("version") != _VERSION or state.get("meta") != self.meta:
            raise RuntimeError(
                f"checkpoint {self.path} belongs to another run or version: "
                f"{state.get('meta')} (version {state.get('version')}), expected {self.meta} "
                f"(version {_VERSION}); delete it to start this run afresh"
            )
        self._state = state
        return state

    def already_logged(self, client: MlflowClient) -> Counter:
        """Points of the run logged after the checkpoint (all of them if there is none): the
        resumed run recomputes those steps and must not log them again."""
        state = self.load()
        if state is None:
            return logged_counts(client, self.meta["run_id"], 0)
        step = state["trainer"]["step"]
        counts = logged_counts(client, self.meta["run_id"], step)
        for key, n in state["logged_at_step"].items():  # logged at that step before the save
            counts[(key, step)] -= n
        return +counts

    def resume(self) -> dict[str, Any] | None:
        """The saved trainer state (as its ``state_dict()`` gave it), or None if there is none.
        The process-wide generators are set as they were at the save, and the tracker learns
        which points of the saved step were already logged."""
        state = self.load()
        if state is None:
            return None
        saved = dict(state["trainer"])
        set_rng_state(saved.pop("rng"))
        self._state = None  # free the memory
        if self.tracker is not None:
            self.tracker.step = saved["step"]
            self.tracker.at_step = Counter(state["logged_at_step"])
        log.info(
            "%s seed %s: resumed from %s at step %d",
            self.meta.get("algorithm"),
            self.meta.get("seed"),
            self.path,
            saved["step"],
        )
        return saved

    def after_step(self, name: str, step: int, state_dict: Callable[[], Mapping[str, Any]]) -> None:
        """Called once per finished ``step`` of algorithm ``name``, after its metrics and
        evaluation are logged; saves ``state_dict()`` every ``every`` steps."""
        faults.maybe_kill(name, step, "step")
        if self.every > 0 and step % self.every == 0:
            self.save(name, step, state_dict())
            faults.maybe_kill(name, step, "saved")

    def save(self, name: str, step: int, trainer_state: Mapping[str, Any]) -> None:
        """Atomically replace the checkpoint with ``trainer_state`` (algorithm ``name`` at
        ``step``) and the process-wide generators. A failed save (e.g. a full disk) keeps the
        previous one and the run goes on: a resume then recomputes a few more steps."""
        state = {
            "version": _VERSION,
            "meta": self.meta,
            "trainer": {**trainer_state, "rng": rng_state()},
            "logged_at_step": dict(self.tracker.at_step) if self.tracker is not None else {},
        }
        # Metrics are logged asynchronously: the points up to this step must be in the store
        # before a checkpoint says they are, or a kill right after the save would leave a gap.
        flush = getattr(self.tracker, "flush", None)
        if flush is not None:
            flush()
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f".{self.FILE}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            faults.maybe_kill(name, step, "save")
            os.replace(tmp, self.path)
            with contextlib.suppress(OSError):  # make the rename itself durable
                fd = os.open(self.dir, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        except (OSError, RuntimeError) as e:  # torch.save reports a full disk as RuntimeError
            tmp.unlink(missing_ok=True)
            log.error("checkpoint at step %d not saved (%s); keeping the previous one", step, e)

    def remove(self) -> None:
        """Delete the checkpoint once its run has FINISHED (nothing left to resume)."""
        self.path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # and the folders, once empty
            self.dir.rmdir()
            self.dir.parent.rmdir()
