"""What the MLflow UI shows: a real `mlflow server` on 127.0.0.1 over the suite's store, read
through its REST API (the same API the UI uses)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

from mlflow.tracking import MlflowClient

from analysis import metrics as M


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


def test_ui_api_shows_parent_children_and_history(server, micro_suite):
    base, result = server
    _, cfg = micro_suite
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
    run_id = sppo["info"]["run_id"]

    def history(key: str) -> list[tuple[int, float]]:
        hist = _get(base, "/api/2.0/mlflow/metrics/get-history", run_id=run_id, metric_key=key)
        return sorted((int(m["step"]), float(m["value"])) for m in hist["metrics"])

    # sppo samples one response per prompt, samples_per_step per step, until the budget's limit:
    # the chart's points are known from the config alone.
    sps, limit = cfg.trainer.samples_per_step, cfg.budget.limit
    assert history(M.COMPUTE_ROLLOUT_SAMPLES) == [
        (s, float(s * sps)) for s in range(limit // sps + 1)
    ]
    # Every chart of the run shows what the store holds, point for point (read through the
    # Python client, not the server), and its latest values are the histories' last points.
    client = MlflowClient(result.tracking_uri)
    stored = client.get_run(run_id).data.metrics
    latest = {m["key"]: m["value"] for m in sppo["data"]["metrics"]}
    assert set(latest) == set(stored) and len(latest) > 20
    for key in stored:
        points = history(key)
        assert points == sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))
        assert latest[key] == stored[key] == points[-1][1], key
    # ... and the accuracy curve is the one the suite reported for sppo.
    (summary,) = [r for r in result.runs if r.algorithm == "sppo"]
    accuracy = history(M.eval_metric("arith", "accuracy"))
    assert (accuracy[0][1], accuracy[-1][1]) == (summary.start_accuracy, summary.final_accuracy)
    # evaluated where the step's samples reach each budget fraction
    assert [s for s, _ in accuracy] == [round(f * limit / sps) for f in cfg.budget.eval_fractions]
