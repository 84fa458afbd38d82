"""Reading back what a command wrote to an MLflow store."""

from __future__ import annotations

from typing import Any


def last_eval_run(uri: str) -> tuple[Any, Any]:
    """The newest run of ``sppo-bench eval``'s experiment, with its client."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("sppo-bench-eval")
    assert exp is not None
    (run,) = client.search_runs([exp.experiment_id], order_by=["start_time DESC"], max_results=1)
    return client, run
