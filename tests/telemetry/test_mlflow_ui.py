"""What the MLflow UI shows: a real `mlflow server` on 127.0.0.1 over the suite's store, read
through its REST API (the same API the UI uses)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

from benchmarks.telemetry import metrics as M


def _get(base: str, path: str, **params) -> dict:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def _post(base: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(
        f"{base}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def test_ui_api_shows_parent_children_and_history(server):
    base, result = server
    exp = _get(base, "/api/2.0/mlflow/experiments/get-by-name", experiment_name=result.experiment)
    exp_id = exp["experiment"]["experiment_id"]
    parent = _get(base, "/api/2.0/mlflow/runs/get", run_id=result.parent_run_id)["run"]
    parent_tags = {t["key"]: t["value"] for t in parent["data"]["tags"]}
    assert parent_tags[M.TAG_ROLE] == "suite"

    found = _post(
        base,
        "/api/2.0/mlflow/runs/search",
        {
            "experiment_ids": [exp_id],
            "filter": f"tags.mlflow.parentRunId = '{result.parent_run_id}'",
        },
    )["runs"]
    algos = sorted(
        {t["value"] for r in found for t in r["data"]["tags"] if t["key"] == M.TAG_ALGORITHM}
    )
    assert algos == ["dapo", "grpo", "ppo", "sppo"]

    sppo = next(
        r
        for r in found
        if any(t["key"] == M.TAG_ALGORITHM and t["value"] == "sppo" for t in r["data"]["tags"])
    )
    hist = _get(
        base,
        "/api/2.0/mlflow/metrics/get-history",
        run_id=sppo["info"]["run_id"],
        metric_key=M.COMPUTE_ROLLOUT_SAMPLES,
    )["metrics"]
    steps = [m["step"] for m in hist]
    values = [m["value"] for m in sorted(hist, key=lambda m: (m["step"], m["timestamp"]))]
    assert len(set(steps)) > 3 and values == sorted(values) and values[-1] > 0
