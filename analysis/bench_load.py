"""Load-time benchmark: does `load_runs` read 1,000 runs x 50 points in under 10 s?

    python -m analysis.bench_load [--runs 1000 --points 50] [--keep DIR]

Builds a temporary SQLite MLflow store shaped like a real suite (one parent run, one child per
algorithm x seed with the harness's tags, params, compute counters every step and eval metrics
every fifth step), logged with ``MlflowClient.log_batch``; then times ``load_runs`` on it and
prints runs, rows, seconds and the ratio to the target. Building the store takes longer than
loading it (about 35 ms per run).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from analysis.metrics import (
    COMPUTE_FLOPS,
    COMPUTE_PROMPTS,
    COMPUTE_ROLLOUT_SAMPLES,
    COMPUTE_ROLLOUT_TOKENS,
    COMPUTE_WALL_S,
    EVAL_BUDGET_FRACTION,
    MEMORY_PEAK_BYTES,
    TAG_ALGORITHM,
    TAG_BUDGET_KIND,
    TAG_BUDGET_LIMIT,
    TAG_ENGINE,
    TAG_MODEL,
    TAG_ROLE,
    TAG_SEED,
    TAG_TASK,
    TRAIN_ENTROPY,
    TRAIN_REWARD_MEAN,
    eval_metric,
)

from ._common import MLFLOW_PARENT_TAG
from .load import load_runs

logger = logging.getLogger("analysis.bench_load")

TARGET_S = 10.0
_ALGORITHMS = ("sppo", "ppo", "grpo", "dapo")
_EVAL_EVERY = 5
_N_PARAMS = 60


def build_store(tracking_uri: str, runs: int, points: int, experiment: str = "bench") -> str:
    """Create ``experiment`` with ``runs`` child runs of ``points`` steps; returns its id."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp_id = client.create_experiment(experiment)
    parent = client.create_run(exp_id, tags={TAG_ROLE: "suite"}, run_name="suite")
    parent_id = parent.info.run_id
    now = int(time.time() * 1000)
    for i in range(runs):
        algo, seed = _ALGORITHMS[i % len(_ALGORITHMS)], i // len(_ALGORITHMS)
        tags = {
            MLFLOW_PARENT_TAG: parent_id,
            TAG_ROLE: "run",
            TAG_ALGORITHM: algo,
            TAG_SEED: str(seed),
            TAG_TASK: "arith",
            TAG_MODEL: "tiny",
            TAG_ENGINE: "torch",
            TAG_BUDGET_KIND: "rollout_tokens",
            TAG_BUDGET_LIMIT: str(1000 * points),
        }
        run_id = client.create_run(exp_id, tags=tags, run_name=f"{algo}-s{seed}").info.run_id
        metrics = []
        for step in range(points):
            ts = now + step
            values = {
                COMPUTE_ROLLOUT_TOKENS: 1000.0 * (step + 1),
                COMPUTE_ROLLOUT_SAMPLES: 16.0 * (step + 1),
                COMPUTE_PROMPTS: 16.0 * (step + 1),
                COMPUTE_FLOPS: 1e12 * (step + 1),
                COMPUTE_WALL_S: 0.5 * (step + 1),
                MEMORY_PEAK_BYTES: 2.0**30,
                TRAIN_REWARD_MEAN: step / points,
                TRAIN_ENTROPY: 1.0 - step / points,
            }
            if step % _EVAL_EVERY == 0 or step == points - 1:
                values[eval_metric("arith", "accuracy")] = step / points
                values[eval_metric("arith", "accuracy_se")] = 0.01
                values[EVAL_BUDGET_FRACTION] = step / max(points - 1, 1)
            metrics += [Metric(k, v, ts, step) for k, v in values.items()]
        params = [Param(f"cfg.p{j}", str(j)) for j in range(_N_PARAMS)]
        for start in range(0, len(metrics), 1000):  # log_batch takes at most 1,000 metrics
            client.log_batch(
                run_id, metrics=metrics[start : start + 1000], params=params if start == 0 else []
            )
        client.set_terminated(run_id)
    client.set_terminated(parent_id)
    return exp_id


def main(argv: list[str] | None = None) -> float:
    """Build the store, time `load_runs`, print the result; returns the load time in seconds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--points", type=int, default=50)
    parser.add_argument("--keep", type=Path, default=None, help="build the store here, keep it")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)

    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        uri = f"sqlite:///{(root / 'mlflow.db').resolve()}"
        t0 = time.perf_counter()
        build_store(uri, args.runs, args.points)
        built = time.perf_counter() - t0
        logger.info("built %d runs x %d points in %.1f s", args.runs, args.points, built)
        t0 = time.perf_counter()
        df = load_runs("bench", tracking_uri=uri)
        seconds = time.perf_counter() - t0
    logger.info(
        "load_runs: %d runs, %d rows in %.2f s (%.2fx of the %.0f s target)",
        df["run_id"].nunique(),
        len(df),
        seconds,
        seconds / TARGET_S,
        TARGET_S,
    )
    return seconds


if __name__ == "__main__":
    main()
