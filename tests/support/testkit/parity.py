"""What two invocations of one suite are compared on: every deterministic metric history, and
every run's status, params, tags and table artifacts less what names the store, the paths, the
way the runs were dispatched and the run ids (``tests/suite/test_workers.py``,
``tests/suite/test_cluster.py``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient

from testkit.paths import REPO

__all__ = ["PATH_PARAMS", "RUN_TAGS", "histories", "identity"]

#: Params naming where a suite writes or how its runs are dispatched: they differ by design.
PATH_PARAMS = {"jobs", "tracking.uri", "cache_dir", "output_dir", "ray.address"}
#: Tags that differ between any two invocations: the parent run's id (a child's
#: ``mlflow.parentRunId``) and the parent's config hash, which covers the paths above.
RUN_TAGS = {"mlflow.parentRunId", "sppo_bench.config_hash"}


def _dump_histories() -> Any:
    """scripts/dump_histories.py, imported from its path: every deterministic metric history
    of an experiment's newest suite, the dump a refactor is checked with."""
    spec = importlib.util.spec_from_file_location(
        "dump_histories", REPO / "scripts" / "dump_histories.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def histories(result: Any, out: Path) -> dict[str, dict[str, list[list[float]]]]:
    """Every deterministic metric history of ``result``'s experiment's newest suite, by run."""
    _dump_histories().main(result.tracking_uri, str(out), result.experiment)
    return json.loads(out.read_text())


def identity(result: Any, dst: Path) -> dict[str, Any]:
    """Per run (the parent as ``suite``): status, params, tags and, for a child run, the
    contents of its table artifacts, less what legitimately differs between two stores. (The
    session's suite parent also collects the reports other tests write: its files are not
    compared.)"""
    client = MlflowClient(result.tracking_uri)
    out = {}
    runs = [("suite", result.parent_run_id)] + [
        (f"{r.algorithm}-s{r.seed}", r.run_id) for r in result.runs
    ]
    for name, run_id in runs:
        run = client.get_run(run_id)
        files = {}
        if name != "suite":
            root = Path(client.download_artifacts(run_id, "", str(dst / name)))
            for f in sorted(root.rglob("*.json")):
                files[str(f.relative_to(root))] = json.loads(f.read_text())
        out[name] = {
            "status": run.info.status,
            "name": run.info.run_name,
            "params": {k: v for k, v in run.data.params.items() if k not in PATH_PARAMS},
            "tags": {k: v for k, v in run.data.tags.items() if k not in RUN_TAGS},
            "tables": files,
        }
        if name != "suite":
            assert run.data.tags["mlflow.parentRunId"] == result.parent_run_id
    return out
