"""A sweep's Optuna side: the storage, sampler and pruner factories, its studies, and the trials
still to run.

What a trial records in the storage (its user attributes: the error, whether it was
interrupted, whether it is admissible, the sweep's parent run) is named here once, because the
objective writes it and the summary, the export and ``--resume`` read it back. Trial counts are
exact because they are taken here, in the main process (:func:`pending_tasks`); a RUNNING trial
another live sweep process holds is told apart from one a killed process left by its heartbeat
(:func:`live_trials`).
"""

from __future__ import annotations

import datetime
import json
import logging
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy
from optuna.storages._rdb import models
from optuna.storages.journal import JournalFileBackend

from benchmarks.telemetry.store import PreflightError, check_database, database_uri
from benchmarks.telemetry.tracking import retry_locked
from sweeps.spec import SAMPLERS, SpecError, SweepSpec

__all__ = [
    "ATTR_ADMISSIBLE",
    "ATTR_ERROR",
    "ATTR_PARENT",
    "HEARTBEAT_GRACE_S",
    "HEARTBEAT_S",
    "INTERRUPTED",
    "NEW_TRIAL_S",
    "Studies",
    "interrupted",
    "live_trials",
    "make_pruner",
    "make_sampler",
    "make_storage",
    "open_studies",
    "pending_tasks",
    "spec_dict",
    "study_trials",
]

log = logging.getLogger(__name__)

#: User attributes of a study or trial: the sweep's parent MLflow run (on each study), a failed
#: trial's error, whether a trial reached the spec's ``admissible`` minimums.
ATTR_PARENT = "mlflow_parent_run_id"
ATTR_ERROR = "error"
ATTR_ADMISSIBLE = "admissible"
#: How the error of a trial ``--resume`` found left RUNNING starts.
INTERRUPTED = "interrupted"


#: A running trial's process records a heartbeat in an RDB storage this often (seconds); a
#: RUNNING trial whose last one is older than the grace period belongs to a dead process. Other
#: sweep processes sharing the storage (``--resume`` on several machines) leave a trial with a
#: fresh heartbeat alone.
HEARTBEAT_S = 10
HEARTBEAT_GRACE_S = 60
#: A RUNNING trial younger than this (seconds) belongs to a live process even before its first
#: heartbeat: two ``--resume`` processes starting together would otherwise fail each other's.
NEW_TRIAL_S = 5.0

# --------------------------------------------------------------------------- Optuna factories


def make_storage(url: str) -> Any:
    """An Optuna storage for ``url``: an RDB URL (``sqlite:///optuna.db``, ``postgresql://``),
    or a file path (optionally ``journal:<path>``) for JournalStorage. A database server is
    probed first, so one that does not answer fails in seconds naming ``--storage``
    (:class:`SpecError`), and ``postgresql://`` takes the driver installed here."""
    if "://" in url:
        kwargs: dict[str, Any] | None = None
        url = database_uri(url)
        if not url.startswith("sqlite:"):
            try:
                check_database("--storage", url)
            except PreflightError as e:
                raise SpecError(str(e)) from e
        if url.startswith("sqlite:///"):
            Path(url[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
            # Several workers write to one file: wait for the lock instead of failing at once.
            kwargs = {"connect_args": {"timeout": 60}}
        with warnings.catch_warnings():  # heartbeats are "experimental" since Optuna 2.9
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return retry_locked(
                lambda: optuna.storages.RDBStorage(
                    url,
                    engine_kwargs=kwargs,
                    heartbeat_interval=HEARTBEAT_S,
                    grace_period=HEARTBEAT_GRACE_S,
                ),
                "open storage",
            )
    path = Path(url.removeprefix("journal:"))
    path.parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(JournalFileBackend(str(path)))


def make_sampler(spec: SweepSpec, seed: int) -> Any:
    """The spec's sampler (Optuna 5 factories are keyword-only) with ``seed``. Trials of an
    ``admissible`` spec set their constraints themselves (``Trial.set_constraint``), which TPE
    and GP read."""
    cls = getattr(optuna.samplers, SAMPLERS[spec.sampler.type][0])
    return cls(seed=seed, **spec.sampler.kwargs)


def make_pruner(spec: SweepSpec) -> Any:
    """The spec's pruner; ``none`` is Optuna's NopPruner."""
    kind = spec.pruner.type
    if kind == "none":
        return optuna.pruners.NopPruner()
    cls = optuna.pruners.MedianPruner if kind == "median" else optuna.pruners.HyperbandPruner
    return cls(**spec.pruner.kwargs)


# --------------------------------------------------------------------------- studies


@dataclass
class Studies:
    """The sweep's Optuna storage and its studies (study name -> (study, fixed algorithm))."""

    storage: Any
    studies: dict[str, tuple[Any, str | None]]


def open_studies(spec: SweepSpec, name: str, storage: str, resume: bool) -> Studies:
    """Create the sweep's studies, or load them with ``resume``, in the main process.

    Done once before any worker starts, so workers only ever load a study (never race to create
    one). A new study gets the spec and the spec's enqueued points; an existing one is refused
    without ``resume`` and checked to optimise in the spec's direction. A resumed study also
    gets the spec's enqueued points it holds no trial for, so extending a queued grid (and
    ``trials``) in the spec and resuming runs only the new points.
    """
    direction = spec.objective.direction
    opt_storage = make_storage(storage)
    present = set(optuna.get_all_study_names(opt_storage))
    clash = [f"{name}{suffix}" for suffix in spec.studies if f"{name}{suffix}" in present]
    if clash and not resume:
        raise SpecError(
            f"--study-name={name!r}: study {clash[0]!r} already exists in {storage}; pass "
            "--resume to continue it, or another --study-name"
        )
    studies: dict[str, tuple[Any, str | None]] = {}
    for suffix, alg in spec.studies.items():
        sname = f"{name}{suffix}"
        if sname in present:
            study = optuna.load_study(study_name=sname, storage=opt_storage)
            if study.direction.name.lower() != direction:
                raise SpecError(
                    f"objective.direction={direction!r}: study {sname!r} was created to {study.direction.name.lower()}"
                )
        else:
            study = optuna.create_study(study_name=sname, storage=opt_storage, direction=direction)
            study.set_user_attr("spec", spec_dict(spec))
            if alg is not None:
                study.set_user_attr("algorithm", alg)
        for entry in spec.enqueue:
            params = dict(entry)
            if alg is not None and params["algorithm"] != alg:
                continue
            if alg is not None or len(spec.algorithms) == 1:
                params.pop("algorithm")
            # On resume only the points the study has not seen are queued: a grid extended in
            # the spec (more points, more trials) runs just its new points.
            study.enqueue_trial(params, user_attrs={"enqueued": True}, skip_if_exists=True)
        studies[sname] = (study, alg)
    return Studies(opt_storage, studies)


def spec_dict(spec: SweepSpec) -> dict[str, Any]:
    """The spec as plain JSON: each study records it, the parent run logs it, the export
    writes it."""
    return json.loads(json.dumps(asdict(spec), default=str))


def study_trials(study: Any) -> list[Any]:
    """The study's trials without Optuna's deep copy (they are only read)."""
    return study.get_trials(deepcopy=False)


def interrupted(trial: Any) -> bool:
    """A trial a killed sweep left RUNNING and ``--resume`` marked FAIL: not a result of its
    point, so it counts neither as a trial nor as a failure."""
    return str(trial.user_attrs.get(ATTR_ERROR, "")).startswith(INTERRUPTED)


def live_trials(storage: Any, study: Any, trials: Sequence[Any]) -> set[int]:
    """Ids of the study's RUNNING trials (of ``trials``) another sweep process is running: those
    whose heartbeat is fresh, and those younger than ``NEW_TRIAL_S``, which have none yet (Optuna
    records the first one just after creating the trial). A storage without heartbeats
    (JournalStorage) has only the young ones: there, every older RUNNING trial counts as
    interrupted. Heartbeats are read from Optuna's table, which its public API only exposes as
    the stale trials."""
    now = datetime.datetime.now()
    young = {
        t._trial_id
        for t in trials
        if t.datetime_start is not None and (now - t.datetime_start).total_seconds() < NEW_TRIAL_S
    }
    if not isinstance(storage, optuna.storages.RDBStorage) or storage.heartbeat_interval is None:
        return young
    stale = set(storage._get_stale_trial_ids(study._study_id))
    with storage.engine.connect() as conn:
        beating = set(conn.scalars(sqlalchemy.select(models.TrialHeartbeatModel.trial_id)))
    return (beating - stale) | young


def pending_tasks(
    spec: SweepSpec, opened: Studies, callback: Callable[[Any, Any], None]
) -> tuple[list[tuple[str, str | None]], int]:
    """The trials still to run, as (study, fixed algorithm) tasks; returns them and how many
    trials the studies already hold.

    Counting here, in the main process, is what makes trial counts exact: each task is one
    ``study.optimize(n_trials=1)``, so W workers never overshoot (and a task finds the study
    full, and runs nothing, when another sweep process sharing the storage filled it). A trial
    an interrupted sweep left RUNNING is marked FAIL first (it would otherwise count as done,
    and never finish), counted as no trial, and its queued point queued again; one whose
    heartbeat is fresh runs in another live sweep process and is counted as it is.
    Tasks go round-robin over the studies, so an interrupted equal-effort sweep leaves the
    algorithms with about the same number of trials.
    """
    opt_storage = opened.storage
    target = spec.trials // len(opened.studies)
    per_study: dict[str, list[tuple[str, str | None]]] = {}
    existing = 0
    for sname, (study, alg) in opened.studies.items():
        trials = study_trials(study)
        live = live_trials(opt_storage, study, trials)
        for t in trials:
            if t.state.name == "RUNNING" and t._trial_id not in live:
                why = f"{INTERRUPTED}: left RUNNING by an earlier sweep process"
                opt_storage.set_trial_user_attr(t._trial_id, ATTR_ERROR, why)
                study.tell(t.number, state=optuna.trial.TrialState.FAIL)
                callback(study, opt_storage.get_trial(t._trial_id))
                fixed = t.system_attrs.get("fixed_params")
                if fixed:  # a queued grid point: queue it again, or the grid would lose it
                    study.enqueue_trial(dict(fixed), user_attrs={"enqueued": True})
                log.warning("%s trial %d was left RUNNING; marked FAIL, run again", sname, t.number)
        done = [t for t in study_trials(study) if t.state.name != "WAITING" and not interrupted(t)]
        existing += len(done)
        missing = max(0, target - len(done))
        per_study[sname] = [(sname, alg)] * missing
        if len(done) > target:
            log.warning(
                "%s already holds %d trials (> %d requested); running none",
                sname,
                len(done),
                target,
            )
    tasks: list[tuple[str, str | None]] = []
    for i in range(max((len(v) for v in per_study.values()), default=0)):
        tasks += [v[i] for v in per_study.values() if i < len(v)]
    return tasks, existing
