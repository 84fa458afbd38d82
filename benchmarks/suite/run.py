"""A suite: every selected algorithm x seed, from one shared warm start, under one budget.

``run_suite`` is what ``sppo-bench run`` calls. It validates the whole config before any compute,
prepares the MLflow store once, runs each (algorithm, seed) as a nested child run of one parent
run, and ends with a table, a plot of accuracy versus compute and an analysis report.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from algorithms import ConfigError
from analysis import metrics as M
from benchmarks.suite.plan import SuitePlan, validate
from benchmarks.suite.run_one import (
    RunContext,
    RunSummary,
    finished,
    load_hf,
    package_version,
    run_one,
)
from benchmarks.tasks.build import build_task
from benchmarks.telemetry.tracking import (
    MlflowTracker,
    flatten,
    git_commit,
    invocation_tags,
    prepare_store,
)
from benchmarks.training import checkpoint as ckpt
from benchmarks.training.modeling import build_char_tokenizer
from benchmarks.training.start import policy_start

log = logging.getLogger(__name__)

__all__ = ["RunSummary", "SuiteResult", "grid_configs", "run_grid", "run_suite"]


@dataclass
class SuiteResult:
    runs: list[RunSummary]
    tracking_uri: str
    experiment: str
    parent_run_id: str | None
    output_dir: Path
    plot: Path | None = None
    report: Path | None = None
    results: Path | None = None
    wall_s: float = 0.0
    warmstart: dict[str, Any] = field(default_factory=dict)
    experiment_id: str | None = None


def run_suite(
    suite: SuitePlan | Any,
    *,
    progress: bool = True,
    parent_run_id: str | None = None,
    extra_tags: Mapping[str, str] | None = None,
    on_eval: Callable[[str, int, float, float], None] | None = None,
) -> SuiteResult:
    """Run the suite of a plan, or of a composed config (see ``benchmarks/conf/config.yaml``),
    which is then validated and preflighted here (the CLI does both once, and passes the plan).

    By default the runs nest under a new parent run, and the suite ends with a plot and a report.
    With ``parent_run_id`` (a sweep's trial) the runs nest under that run instead, and no plot or
    report is made. ``on_eval(algorithm, seed, budget_fraction, accuracy)`` is called at every
    evaluation; an exception it raises (e.g. ``optuna.TrialPruned``) ends the suite.
    """
    from mlflow.tracking import MlflowClient

    t0 = time.perf_counter()
    plan = suite if isinstance(suite, SuitePlan) else _validated(suite)
    torch.set_num_threads(plan.threads)
    device = torch.device(plan.device)
    if plan.engine.name != "torch":
        raise ConfigError(
            f"engine.name={plan.engine.name!r}: the native trainer supports ['torch']"
        )

    real_model = plan.model.real
    if real_model:
        base_model, tokenizer = load_hf(plan)
        task = build_task(plan.task_config.node, tokenizer=tokenizer)  # chat templates need it
    else:
        tokenizer = build_char_tokenizer(plan.task.alphabet)  # a CharTask (plan.validate)
        task = plan.task

    uri = plan.tracking.uri
    exp_name = plan.tracking.experiment
    exp_id = prepare_store(uri, exp_name)
    client = MlflowClient(uri)
    out_dir = plan.output_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    resolved = plan.resolved
    task_name = plan.task_config.name
    tags = {
        M.TAG_TASK: task_name,
        M.TAG_MODEL: str(plan.model.name_or_path or "tiny-llama"),
        M.TAG_ENGINE: plan.engine.name,
        M.TAG_BUDGET_KIND: plan.budget.kind,
        M.TAG_BUDGET_LIMIT: str(plan.budget.limit),
        M.TAG_GIT_COMMIT: git_commit(),
        M.TAG_VERSION: package_version(),
        **({"horizon": str(plan.task_config.horizon)} if task_name == "arith" else {}),
        **dict(extra_tags or {}),
    }
    result = SuiteResult([], uri, exp_name, parent_run_id, out_dir, experiment_id=exp_id)
    chash = ckpt.config_hash(resolved)
    previous = None
    if parent_run_id is None and plan.resume == "auto":
        previous = ckpt.find_resumable(client, exp_id, chash)
        log.info(
            "resume=auto: %s",
            f"continuing parent run {previous.info.run_id}" if previous else "nothing to resume",
        )
    with contextlib.ExitStack() as stack:
        parent = None
        if previous is not None:
            parent = stack.enter_context(MlflowTracker.resume(client, previous.info.run_id))
            result.parent_run_id = parent.run_id
        elif parent_run_id is None:
            parent = stack.enter_context(
                MlflowTracker.start(
                    client,
                    exp_id,
                    run_name=f"suite-{plan.suite_name}",
                    tags={
                        **tags,
                        **invocation_tags(),
                        M.TAG_ROLE: "suite",
                        ckpt.TAG_CONFIG_HASH: chash,
                    },
                    params=flatten(resolved),
                )
            )
            result.parent_run_id = parent.run_id
            parent.log_dict(resolved, "config.yaml")
        bar = stack.enter_context(_progress(progress))
        ctx = RunContext(plan, client, exp_id, tags, resolved, task, tokenizer, bar, on_eval)
        ctx.out_dir, ctx.config_hash, ctx.checkpoints = out_dir, chash, parent is not None
        if previous is not None:
            ctx.previous = ckpt.child_runs(client, exp_id, previous.info.run_id)
        try:
            jobs = _jobs(plan, on_eval)
            if jobs == "ray" or jobs > 1:
                shared = {
                    "uri": uri,
                    "exp_id": exp_id,
                    "tags": tags,
                    "out_dir": out_dir,
                    "config_hash": chash,
                    "checkpoints": ctx.checkpoints,
                    "previous_parent": None if previous is None else previous.info.run_id,
                    "parent_id": result.parent_run_id,
                }
                result.runs = _run_in_workers(ctx, result, jobs, shared)
            else:
                for seed in plan.seeds:
                    done = [finished(ctx, n, seed) for n in plan.algorithms]
                    if all(done):  # resume=auto: nothing left for this seed, no warm start needed
                        result.runs += done  # type: ignore[arg-type]
                        continue
                    start_seed = plan.start_seed(seed)
                    if real_model:
                        start, ws_info = base_model, {"steps": 0, "val_accuracy": float("nan")}
                    else:
                        start, ws_info = policy_start(
                            plan.start_recipe, start_seed, task, tokenizer
                        )
                    result.warmstart[str(start_seed)] = ws_info
                    start.to(device)
                    for name, alg in plan.algorithms.items():
                        result.runs.append(
                            run_one(ctx, result.parent_run_id, name, alg, seed, start)
                        )
        finally:
            task.close()
        result.wall_s = time.perf_counter() - t0
        if parent is not None:
            failed = sum(r.status != "FINISHED" for r in result.runs)
            parent.log_metrics({"suite/wall_s": result.wall_s, "suite/failed_runs": failed}, step=0)
            _finish(result, plan, parent)
    return result


def _validated(cfg: Any) -> SuitePlan:
    """Validate and preflight a composed config: a bad field, a full disk or an unwritable store
    fails here, before any compute."""
    from benchmarks.suite.preflight import preflight

    plan = validate(cfg)
    preflight(plan)
    return plan


def _jobs(plan: SuitePlan, on_eval: Callable | None) -> int | str:
    """Worker processes for this suite (``jobs``), or ``"ray"`` (tasks of the Ray cluster); 1
    where the runs must share this process."""
    from benchmarks.suite.jobs import RAY, is_ray, resolve_jobs
    from benchmarks.suite.workers import parallel_blocker

    jobs: int | str = (
        RAY
        if is_ray(plan.jobs)
        else resolve_jobs(plan.jobs, len(plan.seeds) * len(plan.algorithms))
    )
    if jobs == RAY or jobs > 1:
        why = parallel_blocker(plan, on_eval=on_eval is not None)
        if why is not None:
            log.info("jobs=%s: running in one process: %s", plan.jobs, why)
            return 1
    return jobs


def _run_in_workers(
    ctx: RunContext, result: SuiteResult, jobs: int | str, shared: dict
) -> list[RunSummary]:
    """Every run not yet FINISHED, in ``jobs`` worker processes or as Ray tasks (``jobs=ray``)
    (``benchmarks/suite/workers.py``); the summaries in the one-process order (seed, then
    algorithm)."""
    from benchmarks.suite.workers import run_on_ray, run_parallel

    plan = ctx.plan
    summaries: dict[tuple[str, int], RunSummary] = {}
    work = []
    for seed in plan.seeds:
        todo = []
        for name in plan.algorithms:
            done = finished(ctx, name, seed)
            if done is not None:
                summaries[(name, seed)] = done
            else:
                todo.append(name)
        if todo:
            work.append((seed, todo))

    def on_warm_start(seed: int, info: dict) -> None:
        result.warmstart[str(seed)] = info

    if work and jobs == "ray":
        summaries.update(
            run_on_ray(
                plan=plan, work=work, shared=shared, bar=ctx.bar, on_warm_start=on_warm_start
            )
        )
    elif work:
        summaries.update(
            run_parallel(
                jobs=min(jobs, sum(len(t) for _, t in work)),
                plan=plan,
                work=work,
                shared=shared,
                bar=ctx.bar,
                on_warm_start=on_warm_start,
            )
        )
    return [summaries[(n, s)] for s in plan.seeds for n in plan.algorithms]


def grid_configs(cfg: Any, overrides: Sequence[str]) -> list[tuple[Any, Any]]:
    """The points of ``suite.grid`` (one config key and its values, e.g. ``task.horizon: [1, 2,
    4, 8]``), each composed anew so interpolations that depend on the key (the horizon's token
    limit) follow it. Empty when the suite has no grid."""
    from omegaconf import ListConfig

    from benchmarks.config import compose_config

    grid = cfg.suite.get("grid") or {}
    if not grid:
        return []
    if len(grid) != 1:
        raise ConfigError(f"suite.grid: exactly one key is supported, got {sorted(grid)}")
    key, values = next(iter(grid.items()))
    if not isinstance(values, ListConfig | list | tuple) or not values:
        raise ConfigError(f"suite.grid.{key}={values}: needs a non-empty list of values")
    points = []
    for v in values:
        extra = [f"{key}={v}"]
        if key == "task.horizon":
            extra.append(f"task.eval_name=arith_h{v}")
        points.append((v, compose_config([*overrides, *extra])))
    return points


def run_grid(
    cfg: Any, points: Sequence[tuple[Any, SuitePlan | Any]], *, progress: bool = True
) -> SuiteResult:
    """Run one suite per grid point under a single parent run; one report over all of them.
    ``points`` are (value, plan) pairs, or (value, config) pairs that are validated here."""
    from mlflow.tracking import MlflowClient

    t0 = time.perf_counter()
    root = _validated(cfg) if not isinstance(cfg, SuitePlan) else cfg
    if root.resume != "never":
        raise ConfigError("resume=auto: not supported with suite.grid yet; use resume=never")
    key = next(iter(root.resolved["suite"]["grid"]))
    uri = root.tracking.uri
    exp_id = prepare_store(uri, root.tracking.experiment)
    client = MlflowClient(uri)
    resolved = root.resolved
    out_dir = root.output_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    result = SuiteResult([], uri, root.tracking.experiment, None, out_dir, experiment_id=exp_id)
    with MlflowTracker.start(
        client,
        exp_id,
        run_name=f"suite-{root.suite_name}",
        tags={
            M.TAG_ROLE: "suite",
            M.TAG_TASK: root.task_config.name,
            M.TAG_GIT_COMMIT: git_commit(),
            **invocation_tags(),
        },
        params=flatten(resolved),
    ) as parent:
        result.parent_run_id = parent.run_id
        parent.log_dict(resolved, "config.yaml")
        for value, point in points:
            part = run_suite(
                point,
                progress=progress,
                parent_run_id=parent.run_id,
                extra_tags={key.rsplit(".", 1)[-1]: str(value)},
            )
            result.runs += part.runs
            result.warmstart.update({f"{key}={value}/{k}": v for k, v in part.warmstart.items()})
        result.wall_s = time.perf_counter() - t0
        parent.log_metrics({"suite/wall_s": result.wall_s}, step=0)
        _finish(result, root, parent)
    return result


class _NoBar:
    def add_task(self, *a, **k) -> int:
        return 0

    def update(self, *a, **k) -> None:
        pass

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *a) -> None:
        pass


def _progress(enabled: bool):
    if not enabled:
        return _NoBar()
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description:<16}"),
        BarColumn(),
        TextColumn("budget {task.percentage:>3.0f}%"),
        TextColumn("acc {task.fields[acc]}"),
        TimeElapsedColumn(),
    )


def _finish(result: SuiteResult, plan: SuitePlan, parent: MlflowTracker) -> None:
    """The plot and report, logged to the parent run."""
    from analysis import eval_points, load_runs, plot_panels, write_report

    start = {}
    for key, info in result.warmstart.items():
        d = info.get("difficulty")
        if d:  # the start's per-prompt success rates (benchmarks/evaluation/difficulty.py)
            # "<seed>", or "<grid key>=<value>/<seed>" for a grid; "=" is not allowed in names.
            point, _, seed = key.rpartition("/")
            name = "start/" + (f"{point.replace('=', '_')}/" if point else "") + f"s{seed}"
            start.update({f"{name}/{k}": d[k] for k in M.START_DIFFICULTY_KEYS})
            start.update({f"{name}/{g}/mean": v for g, v in d["groups"].items()})
    from benchmarks.suite.headroom import headroom

    checks = headroom(result.runs, result.warmstart)
    start.update({f"suite/headroom/{c.name}": c.value for c in checks if c.value == c.value})
    start["suite/headroom/holds"] = float(sum(c.holds for c in checks))
    parent.log_metrics(start, step=0)
    df = load_runs(parent_run_id=result.parent_run_id, tracking_uri=result.tracking_uri)
    if df.empty:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = eval_points(df)
    axes = plot_panels(
        points,
        x=M.COMPUTE_ROLLOUT_SAMPLES
        if plan.budget.kind == "samples"
        else f"compute/{plan.budget.kind}",
    )
    fig = axes[0].figure if hasattr(axes, "__getitem__") else axes.figure
    plot = result.output_dir / "accuracy_vs_compute.png"
    fig.savefig(plot, dpi=120, bbox_inches="tight")
    plt.close(fig)
    result.plot = plot
    parent.log_artifact(plot, "figures")
    if plan.report:
        result.report = write_report(
            df, result.output_dir / "report", title=f"sppo-bench suite {plan.suite_name}"
        )
        parent.log_artifact(result.report.parent, "report")
    result.results = _write_results(result)


def _write_results(result: SuiteResult) -> Path | None:
    """The suite's results set beside its report (``<output_dir>/results``): the runs as data,
    to commit under ``results/`` or merge with other shards (``sppo-bench report --results``).
    Replaces the set of an earlier invocation with the same output_dir; a failure costs the set,
    not the suite (``sppo-bench export`` writes it again from the store)."""
    import shutil

    from analysis.results import export_results

    out = result.output_dir / "results"
    shutil.rmtree(out, ignore_errors=True)
    try:
        return export_results(
            out, tracking_uri=result.tracking_uri, parent_run_ids=[result.parent_run_id]
        )
    except Exception as err:  # noqa: BLE001 - the runs are safe in the store; say so, go on
        log.warning("results set not written to %s (%s: %s); `sppo-bench export` writes it "
                    "from the store", out, type(err).__name__, err)  # fmt: skip
        return None
