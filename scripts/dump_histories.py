"""Dump every deterministic metric history of a suite's newest child runs as JSON.

Two dumps of the same config on one machine must be equal: this is how a refactor is shown to
change no number (wall time and memory, which vary, are left out).

    python scripts/dump_histories.py sqlite:///mlflow.db before.json [experiment]
"""

from __future__ import annotations

import json
import sys

from mlflow.tracking import MlflowClient


def main(uri: str, out: str, experiment: str = "sppo-bench-default") -> None:
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name(experiment)
    parent = c.search_runs(
        [exp.experiment_id],
        filter_string="tags.`sppo_bench.role` = 'suite'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )[0]
    runs = c.search_runs(
        [exp.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'"
    )
    res = {}
    for r in runs:
        h = {}
        for k in sorted(r.data.metrics):
            if "wall_s" in k or k.startswith("memory/"):
                continue
            h[k] = sorted((m.step, m.value) for m in c.get_metric_history(r.info.run_id, k))
        res[f"{r.data.tags['algorithm']}-s{r.data.tags['seed']}"] = h
    with open(out, "w") as f:
        json.dump(res, f, sort_keys=True)
    sys.stdout.write(f"{len(res)} runs, {sum(len(v) for v in res.values())} histories\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
