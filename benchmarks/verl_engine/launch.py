"""``sppo-bench run engine=verl``: one verl launch per (algorithm, seed) under one MLflow parent.

Flow: validate the suite config (the same ``suite.validate`` as the native engine) -> export the
task to parquet (:mod:`.export`) -> per (seed, algorithm): translate to verl overrides
(:mod:`.translate`), create the MLflow child run under the suite's parent run, launch
``python -m verl.trainer.main_ppo <overrides>`` with ``MLFLOW_TRACKING_URI`` / ``MLFLOW_RUN_ID``
pointing at that child (verl's MLflow logger resumes it), then map verl's metric names onto the
suite's schema in the same run (:mod:`.metrics`). A failed launch marks its run FAILED and the
suite goes on.

``engine.dry_run=true`` (or ``sppo-bench run engine=verl --dry-run``) prints every command and
its configuration as verl resolves it (composed in verl's own Hydra tree and checked by verl's
``validate_config``), exports nothing and launches nothing: no GPU needed.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from analysis import metrics as M
from benchmarks.suite.plan import SuitePlan
from benchmarks.verl_engine.export import eval_splits, export_task
from benchmarks.verl_engine.translate import VerlPlan, translate, verl_engine

__all__ = ["planned_files", "plans", "run_verl_suite"]

log = logging.getLogger(__name__)


def _data_dir(plan: SuitePlan) -> Path:
    return Path(verl_engine(plan).data_dir or plan.output_dir / "verl_data").resolve()


def planned_files(plan: SuitePlan) -> tuple[str, list[str]]:
    """Where :func:`benchmarks.verl_engine.export.export_task` writes the task's files."""
    d = _data_dir(plan)
    evals = eval_splits(plan.task_config.node)  # the task's own settings
    return str(d / "train.parquet"), [str(d / f"{e}.parquet") for e in evals]


def plans(
    plan: SuitePlan, tracking: Callable[[str, int], dict[str, str]] | None = None
) -> list[tuple[int, str, VerlPlan]]:
    """``[(seed, name, VerlPlan)]`` for every (seed, algorithm) of a validated suite."""
    train, vals = planned_files(plan)
    out_dir = str(plan.output_dir.resolve() / "verl")
    result = []
    for seed in plan.seeds:
        for name in plan.algorithms:
            run_name = f"{name}-s{seed}"
            result.append(
                (
                    seed,
                    name,
                    translate(
                        plan,
                        name,
                        seed=seed,
                        train_file=train,
                        val_files=vals,
                        run_name=run_name,
                        output_dir=out_dir,
                        tracking=tracking(name, seed) if tracking else None,
                    ),
                )
            )
    return result


def _python(plan: SuitePlan) -> str:
    return str(verl_engine(plan).python or sys.executable)


def dry_run(plan: SuitePlan, out: TextIO | None = None) -> int:
    """Print each verl command and its resolved configuration; return 0 if verl accepts all."""
    out = out or sys.stdout
    import yaml

    from benchmarks.verl_engine.resolve import resolve_in_verl

    runs = plans(plan)
    results = resolve_in_verl([p.overrides for _, _, p in runs], python=_python(plan))
    bad = 0
    for (_seed, _name, p), res in zip(runs, results, strict=True):
        out.write(f"# --- {p.run_name}: verl command ---\n")
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in p.env.items())
        out.write(f"{env} {shlex.join(p.command(_python(plan)))}\n")
        if res["error"]:
            bad += 1
            message = str(res["error"]).strip().replace("\n", "\n#   ")
            out.write(f"# verl rejects this configuration: {message}\n")
        if res["config"] is not None:
            out.write(f"# --- {p.run_name}: resolved verl config ---\n")
            out.write(yaml.safe_dump(res["config"], sort_keys=False))
    out.write(f"# {len(runs)} verl run(s), {bad} rejected by verl's validation\n")
    return 1 if bad else 0


def _total_steps(p: VerlPlan) -> int:
    return int(p.values["trainer.total_training_steps"])


def run_verl_suite(plan: SuitePlan) -> int:
    """Export, launch every (algorithm, seed) on verl, map metrics; returns an exit status."""
    from mlflow.entities import Param
    from mlflow.tracking import MlflowClient

    from benchmarks.telemetry.tracking import (
        MlflowTracker,
        flatten,
        git_commit,
        prepare_store,
    )
    from benchmarks.verl_engine.metrics import map_verl_run

    if verl_engine(plan).dry_run:
        return dry_run(plan)
    export_task(plan.task_config.node, _data_dir(plan))
    uri = plan.tracking.uri
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        uri = f"sqlite:///{Path(uri[len('sqlite:///') :]).resolve()}"  # workers' cwd differs
    exp_name = plan.tracking.experiment
    exp_id = prepare_store(uri, exp_name)
    client = MlflowClient(uri)
    resolved = plan.resolved
    tags = {
        M.TAG_TASK: plan.task_config.name,
        M.TAG_MODEL: str(plan.model.name_or_path),
        M.TAG_ENGINE: "verl",
        M.TAG_BUDGET_KIND: str(resolved["budget"]["kind"]),
        M.TAG_BUDGET_LIMIT: str(resolved["budget"]["limit"]),
        M.TAG_GIT_COMMIT: git_commit(),
    }
    logs = plan.output_dir.resolve() / "verl" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    failures = 0
    with MlflowTracker.start(
        client,
        exp_id,
        run_name=f"suite-{plan.suite_name}",
        tags={**tags, M.TAG_ROLE: "suite"},
        params=flatten(resolved),
    ) as parent:
        parent.log_dict(resolved, "config.yaml")
        child_ids: dict[tuple[str, int], str] = {}

        def tracking(name: str, seed: int) -> dict[str, str]:
            from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

            run = client.create_run(
                exp_id,
                run_name=f"{name}-s{seed}",
                tags={
                    **tags,
                    M.TAG_ROLE: "run",
                    M.TAG_ALGORITHM: name,
                    M.TAG_SEED: str(seed),
                    MLFLOW_PARENT_RUN_ID: parent.run_id,
                },
            )
            child_ids[(name, seed)] = run.info.run_id
            alg = plan.algorithms[name]
            params = flatten(
                {
                    **{k: v for k, v in resolved.items() if k != "algorithm"},
                    "algorithm": {"name": name, **resolved["algorithm"][name]},
                    "algorithm_resolved": {
                        f: getattr(alg.config, f) for f in alg.config.__dataclass_fields__
                    },
                }
            )  # "." keys; verl logs its own config under "/" keys into the same run
            items = [Param(k, v[:6000]) for k, v in params.items()]
            for i in range(0, len(items), 100):
                client.log_batch(run.info.run_id, params=items[i : i + 100])
            return {"MLFLOW_TRACKING_URI": uri, "MLFLOW_RUN_ID": run.info.run_id}

        for seed, name, p in plans(plan, tracking):
            run_id = child_ids[(name, seed)]
            cmd = p.command(_python(plan))
            log_path = logs / f"{p.run_name}.log"
            log.info("launching verl for %s (run %s), log: %s", p.run_name, run_id, log_path)
            t0 = time.perf_counter()
            with open(log_path, "w") as fh:
                fh.write(shlex.join(cmd) + "\n")
                fh.flush()
                proc = subprocess.run(
                    cmd, env={**os.environ, **p.env}, stdout=fh, stderr=subprocess.STDOUT
                )
            wall = time.perf_counter() - t0
            try:
                map_verl_run(
                    client,
                    run_id,
                    prompts_per_step=int(p.values["data.train_batch_size"]),
                    samples_per_prompt=int(p.values["actor_rollout_ref.rollout.n"]),
                    total_steps=_total_steps(p),
                    greedy_baseline=p.values.get("algorithm.adv_estimator") == "remax",
                )
            except Exception as e:  # a run without metrics (it crashed early) still ends
                log.warning("%s: mapping verl metrics failed: %s", p.run_name, e)
            status = "FINISHED" if proc.returncode == 0 else "FAILED"
            if status == "FAILED":
                failures += 1
                client.set_tag(run_id, "error", f"verl exited {proc.returncode}; see {log_path}")
                log.error("%s failed (exit %d), see %s", p.run_name, proc.returncode, log_path)
            client.log_artifact(run_id, str(log_path), "verl")
            client.log_metric(run_id, "suite/verl_wall_s", wall)
            client.set_terminated(run_id, status)
        parent.log_metrics({"suite/runs_failed": failures}, step=0)
    sys.stdout.write(
        f"MLflow:  {uri}  (experiment '{exp_name}', parent run {parent.run_id})\n"
        f"open it: mlflow ui --backend-store-uri {uri}\n"
    )
    return 1 if failures else 0
