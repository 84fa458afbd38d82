"""A sweep's MLflow side: the parent run every trial's child run hangs from, and the callback
that mirrors each finished trial's Optuna state onto its child run.

The suite (``run_suite``) creates and ends each trial's child run; only Optuna knows afterwards
whether the trial was pruned, what it sampled and what value it scored, so that is written here.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from analysis import metrics as M
from benchmarks.telemetry.tracking import flatten, prepare_store
from sweeps.spec import SweepSpec
from sweeps.storage import ATTR_ERROR, ATTR_PARENT, spec_dict

__all__ = ["TAG_STUDY", "TAG_TRIAL", "TAG_TRIAL_STATE", "MlflowTrialCallback", "open_parent_run"]

log = logging.getLogger(__name__)

#: Tags on each trial's MLflow child run.
TAG_STUDY = "study_name"
TAG_TRIAL = "trial_number"
TAG_TRIAL_STATE = "trial_state"


class MlflowTrialCallback:
    """Mirror each finished trial onto its MLflow child run (an Optuna ``callbacks`` entry).

    The suite creates the child run and ends it FINISHED or FAILED; this adds what only Optuna
    knows afterwards: tag ``trial_state`` (COMPLETE, PRUNED, FAIL), the sampled parameters as
    params ``optuna.<name>``, metric ``sweep/objective``, status KILLED for a pruned run, and a
    placeholder run for a trial that failed before its run existed, so every trial has one.
    Written here because optuna-integration's MLflowCallback is deprecated; it never raises.
    """

    def __init__(self, tracking_uri: str, experiment_id: str, parent_run_id: str) -> None:
        self.tracking_uri, self.experiment_id = tracking_uri, experiment_id
        self.parent_run_id = parent_run_id

    def __call__(self, study: Any, trial: Any) -> None:
        try:
            self._mirror(study.study_name, trial)
        except Exception as e:  # tracking trouble must not end the study
            log.warning("MLflow: could not record trial %d: %s", trial.number, e)

    def _mirror(self, study_name: str, trial: Any) -> None:
        client = MlflowClient(self.tracking_uri)
        state = trial.state.name
        runs = client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.{TAG_STUDY} = '{study_name}' AND tags.{TAG_TRIAL} = '{trial.number}'",
        )
        ids = [r.info.run_id for r in runs]
        error = trial.user_attrs.get(ATTR_ERROR)
        if not ids:
            alg = trial.user_attrs.get("algorithm") or trial.params.get("algorithm", "")
            run = client.create_run(
                self.experiment_id,
                run_name=f"trial-{trial.number}-{alg}".rstrip("-"),
                tags={
                    MLFLOW_PARENT_RUN_ID: self.parent_run_id,
                    M.TAG_ROLE: "trial",
                    M.TAG_ALGORITHM: str(alg),
                    TAG_STUDY: study_name,
                    TAG_TRIAL: str(trial.number),
                },
            )
            ids = [run.info.run_id]
        ts = int(time.time() * 1000)
        for rid in ids:
            tags = [RunTag(TAG_TRIAL_STATE, state)]
            if error:
                tags.append(RunTag("error", str(error)[:5000]))
            params = [Param(f"optuna.{k}", str(v)[:6000]) for k, v in trial.params.items()]
            metrics = []
            if trial.value is not None and math.isfinite(trial.value):
                metrics.append(Metric("sweep/objective", float(trial.value), ts, 0))
            client.log_batch(rid, metrics=metrics, params=params, tags=tags)
            status = client.get_run(rid).info.status
            if state == "PRUNED":
                client.set_terminated(rid, "KILLED")
            elif state == "FAIL" and status in ("RUNNING", "SCHEDULED"):
                client.set_terminated(rid, "FAILED")


def open_parent_run(
    spec: SweepSpec,
    studies: Mapping[str, tuple[Any, str | None]],
    *,
    name: str,
    storage: str,
    tracking_uri: str,
    experiment: str,
    base_cfg: Any,
    resume: bool,
) -> tuple[Any, str, str]:
    """The MLflow store, the experiment and the sweep's parent run; returns (client, experiment
    id, parent run id).

    Created once in the main process, so workers only add child runs to it. With ``resume`` the
    parent run recorded on the studies is reopened (when it still exists), so a resumed sweep
    stays one run; each study records the parent's id for the next resume.
    """
    uri = tracking_uri
    exp_id = prepare_store(uri, experiment)
    client = MlflowClient(uri)
    parent_id = None
    if resume:
        for study, _ in studies.values():
            rid = study.user_attrs.get(ATTR_PARENT)
            if rid:
                try:
                    client.get_run(rid)
                    parent_id = rid
                    client.update_run(rid, status="RUNNING")
                    break
                except Exception:
                    log.warning("sweep parent run %s not found in %s; starting a new one", rid, uri)
    if parent_id is None:
        parent = client.create_run(
            exp_id,
            run_name=f"sweep-{name}",
            tags={
                M.TAG_ROLE: "sweep",
                "sweep.name": spec.name,
                "sweep.studies": ",".join(studies),
                "sweep.storage": storage,
                M.TAG_TASK: str(base_cfg.task.name),
                M.TAG_BUDGET_KIND: str(base_cfg.budget.kind),
                M.TAG_BUDGET_LIMIT: str(base_cfg.budget.limit),
            },
        )
        parent_id = parent.info.run_id
        as_dict = spec_dict(spec)
        params = flatten(
            {"sweep": {k: v for k, v in as_dict.items() if k not in ("search_space", "enqueue")}}
        )
        client.log_batch(parent_id, params=[Param(k, v[:6000]) for k, v in params.items()])
        client.log_dict(parent_id, as_dict, "sweep/spec.json")
    for study, _ in studies.values():
        study.set_user_attr(ATTR_PARENT, parent_id)
    return client, exp_id, parent_id
