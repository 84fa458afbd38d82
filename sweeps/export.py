"""A tuning sweep's trials as data: ``results/tuning/<spec>.json`` (read back and tabled by
:mod:`analysis.tuning`), exported from the Optuna storage and MLflow store only the sweep's
machine holds."""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path
from typing import Any

import optuna
from mlflow.tracking import MlflowClient

from analysis import metrics as M
from analysis.tuning import SCHEMA_VERSION
from sweeps.spec_fields import load_spec
from sweeps.storage import spec_dict
from sweeps.summary import best_trials, trial_rows

__all__ = ["export_tuning"]

logger = logging.getLogger(__name__)


def export_tuning(
    spec_name: str,
    storage: str,
    out: str | Path,
    *,
    tracking_uri: str | None = None,
    study_name: str | None = None,
    machine: dict[str, Any] | None = None,
) -> Path:
    """Write ``<out>/<study>.json``: the sweep's spec, every trial's row and where they ran.

    The commits and machines come from the trials' MLflow runs (their ``git_commit`` tag and the
    parent's machine tag) when ``tracking_uri`` is given; without it they are left out, never
    guessed; ``machine`` (``--here``) records this machine when the runs carry none. The file is
    written whole or not at all (temporary file, then rename).
    """
    spec = load_spec(spec_name)
    name = study_name or Path(spec_name).stem
    studies = {}
    for suffix, alg in spec.studies.items():
        try:
            studies[name + suffix] = (
                optuna.load_study(study_name=name + suffix, storage=storage),
                alg,
            )
        except KeyError as err:
            raise ValueError(f"study {name + suffix!r} is not in {storage}") from err
    rows = trial_rows(spec, studies)
    commits: set[str] = set()
    machines: set[str] = set()
    if tracking_uri is not None:
        client = MlflowClient(tracking_uri)
        for study, _ in studies.values():
            for t in study.get_trials(deepcopy=False):
                rid = t.user_attrs.get("mlflow_run_id")
                if not rid:
                    continue
                tags = client.get_run(rid).data.tags
                if tags.get(M.TAG_GIT_COMMIT):
                    commits.add(tags[M.TAG_GIT_COMMIT])
                parent = tags.get("mlflow.parentRunId")
                if parent and not machines:
                    ptags = client.get_run(parent).data.tags
                    if ptags.get(M.TAG_MACHINE):
                        machines.add(ptags[M.TAG_MACHINE])
    if machine is not None and not machines:
        machines.add(json.dumps(machine, sort_keys=True))
    payload = {
        "schema_version": SCHEMA_VERSION,
        "sweep": name,
        "spec": spec_dict(spec),
        "objective": {"metric": spec.objective.metric, "direction": spec.objective.direction},
        "commits": sorted(commits),
        "machines": [json.loads(m) for m in sorted(machines)],
        "exported": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"),
        "trials": rows,
        # the trial each algorithm ships, chosen by the sweep's own rule (best_trials)
        "selected": {b.algorithm: b.number for b in best_trials(spec, studies)},
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=True, default=str) + "\n")
    tmp.replace(path)
    logger.info("wrote %s: %d trials of %d studies", path, len(rows), len(studies))
    return path
