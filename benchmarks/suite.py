"""A suite: every selected algorithm x seed, from one shared warm start, under one budget.

``run_suite`` is what ``sppo-bench run`` calls. It validates the whole config before any compute,
prepares the MLflow store once, runs each (algorithm, seed) as a nested child run of one parent
run, and ends with a table, a plot of accuracy versus compute and an analysis report.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from algorithms import Algorithm, ConfigError, get_algorithm
from benchmarks import checkpoint as ckpt
from benchmarks import metrics as M
from benchmarks.meter import Budget
from benchmarks.modeling import ModelSpec, build_char_tokenizer, build_tiny_llama
from benchmarks.tasks import ArithTask, Task, build_task
from benchmarks.tracking import (
    MlflowTracker,
    default_tracking_uri,
    flatten,
    git_commit,
    prepare_store,
)
from benchmarks.trainer import RLTrainer, TrainerConfig
from benchmarks.vllm_engine import check_rollout_config, make_engine_factory

__all__ = ["RunSummary", "SuiteResult", "grid_configs", "run_grid", "run_suite", "validate"]

log = logging.getLogger(__name__)

_TRAINER_KEYS = {f for f in TrainerConfig.__dataclass_fields__}


@dataclass
class RunSummary:
    algorithm: str
    seed: int
    run_id: str | None
    status: str
    steps: int = 0
    start_accuracy: float = float("nan")
    final_accuracy: float = float("nan")
    final_se: float = float("nan")
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None


@dataclass
class SuiteResult:
    runs: list[RunSummary]
    tracking_uri: str
    experiment: str
    parent_run_id: str | None
    output_dir: Path
    plot: Path | None = None
    report: Path | None = None
    wall_s: float = 0.0
    warmstart: dict[str, Any] = field(default_factory=dict)
    experiment_id: str | None = None


@dataclass
class _Plan:
    """Everything validated up front, so a bad field fails before any compute."""

    algorithms: dict[str, Algorithm]
    trainer: dict[str, TrainerConfig]
    budget: Budget
    seeds: list[int]
    task: Task


def _as_dict(node: Any) -> dict[str, Any]:
    from omegaconf import OmegaConf

    if isinstance(node, Mapping) and not hasattr(node, "_get_node"):
        return dict(node)
    return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]


def validate(cfg: Any) -> _Plan:
    """Build every algorithm, trainer config and the budget; raise ConfigError naming the field."""
    import importlib
    import os
    import sys

    if cfg.get("plugins") and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # plugin modules of the user's own project
    for module in cfg.get("plugins") or []:
        try:
            importlib.import_module(str(module))
        except ImportError as e:
            raise ConfigError(f"plugins: cannot import {module!r}: {e}") from e
    if cfg.get("resume", "never") not in ckpt.RESUME_MODES:
        raise ConfigError(f"resume={cfg.resume!r}: allowed {list(ckpt.RESUME_MODES)}")
    algos = _as_dict(cfg.algorithm) if "algorithm" in cfg else {}
    if not algos:
        from algorithms import list_algorithms

        raise ConfigError(
            "algorithm: select at least one, e.g. algorithm=[sppo,grpo]; "
            f"registered: {list_algorithms()}"
        )
    trainer_base = {k: v for k, v in _as_dict(cfg.trainer).items()}
    unknown = set(trainer_base) - _TRAINER_KEYS
    if unknown:
        raise ConfigError(
            f"trainer.{sorted(unknown)[0]}: unknown key; allowed: {sorted(_TRAINER_KEYS)}"
        )
    built: dict[str, Algorithm] = {}
    trainers: dict[str, TrainerConfig] = {}
    for name, node in algos.items():
        node = dict(node or {})
        params = dict(node.pop("params", {}) or {})
        actor_lr = node.pop("actor_lr", None)
        critic_lr = node.pop("critic_lr", None)
        if node:
            raise ConfigError(
                f"algorithm.{name}.{sorted(node)[0]}: unknown key; allowed: actor_lr, critic_lr, params"
            )
        try:
            alg = get_algorithm(name, **params)
        except ConfigError as e:
            raise ConfigError(f"algorithm.{name}.params: {e}") from e
        if alg.critic == "none" and critic_lr is not None:
            raise ConfigError(
                f"algorithm.{name}.critic_lr={critic_lr}: {name} trains no critic; set it to null"
            )
        t = TrainerConfig(
            **trainer_base,
            **({"actor_lr": float(actor_lr)} if actor_lr is not None else {}),
            critic_lr=None if critic_lr is None else float(critic_lr),
        )
        if t.samples_per_step % alg.samples_per_prompt:
            raise ConfigError(
                f"trainer.samples_per_step={t.samples_per_step} must be a multiple of "
                f"{name}'s samples per prompt ({alg.samples_per_prompt})"
            )
        built[name] = alg
        trainers[name] = t
    b = _as_dict(cfg.budget)
    budget = Budget(
        kind=b["kind"], limit=float(b["limit"]), eval_fractions=tuple(b["eval_fractions"])
    )
    if cfg.engine.name not in ("torch", "verl"):
        raise ConfigError(f"engine.name={cfg.engine.name!r}: allowed ['torch', 'verl']")
    if int(cfg.threads) < 1:
        raise ConfigError(f"threads={cfg.threads} must be >= 1")
    from benchmarks.workers import resolve_jobs

    try:
        resolve_jobs(cfg.get("jobs", 1), 1)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    if int(cfg.seeds) < 1:
        raise ConfigError(f"seeds={cfg.seeds} must be >= 1")
    seeds = [int(cfg.seed) + i for i in range(int(cfg.seeds))]
    real_model = cfg.model.name_or_path is not None
    if not real_model and cfg.task.name != "arith":
        raise ConfigError(
            f"task={cfg.task.name}: the tiny character model only speaks `arith`; "
            "set model=hf model.name_or_path=<HF id or directory> for real datasets"
        )
    try:
        task = build_task(cfg.task)  # reads the data now: a missing file fails here
    except TypeError as e:
        raise ConfigError(f"task: {e}") from e
    except ValueError as e:
        raise ConfigError(str(e)) from e
    from benchmarks.warmstart import parse_phases

    try:
        parse_phases(_as_dict(cfg.warmstart)["phases"])
    except ValueError as e:
        raise ConfigError(str(e)) from e
    if not real_model:  # transformers' own errors would come from a worker, mid-start
        longest = max(len(p.prompt) for p in task.eval_problems())  # one token per character
        try:
            response = max(int(cfg.task.max_new_tokens), int(cfg.trainer.max_new_tokens))
            _model_spec(_as_dict(cfg.model)).check(longest + response)
        except ValueError as e:
            raise ConfigError(str(e)) from e
    if cfg.engine.name == "torch":  # verl's own `engine.rollout` names verl's backend
        check_rollout_config(cfg.engine)
    return _Plan(built, trainers, budget, seeds, task)


def _model_spec(model_cfg: Mapping[str, Any]) -> ModelSpec:
    return ModelSpec(
        hidden_size=model_cfg["hidden_size"],
        num_layers=model_cfg["num_layers"],
        num_heads=model_cfg["num_heads"],
        intermediate_size=model_cfg["intermediate_size"],
        max_position_embeddings=model_cfg["max_position_embeddings"],
        num_key_value_heads=model_cfg.get("num_key_value_heads"),
    )


def _load_start_model(cfg: Any, seed: int, task: Task, tokenizer) -> tuple[torch.nn.Module, dict]:  # noqa: ANN001
    from benchmarks.warmstart import warm_start

    model_cfg = _as_dict(cfg.model)
    spec = _model_spec(model_cfg)

    def build() -> torch.nn.Module:
        return build_tiny_llama(spec, len(tokenizer), seed=seed)

    ws = _as_dict(cfg.warmstart)
    if not ws.pop("enabled", True) or not isinstance(task, ArithTask):
        return build(), {"steps": 0, "val_accuracy": float("nan"), "cached": False, "path": None}
    identity = {"task": _as_dict(cfg.task), "model": model_cfg}
    return warm_start(
        task=task,
        build_model=build,
        tokenizer=tokenizer,
        cfg=ws,
        identity=identity,
        seed=seed,
        cache_dir=cfg.cache_dir,
        max_new_tokens=int(cfg.task.max_new_tokens),
    )


def _load_hf(cfg: Any):  # noqa: ANN202
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = cfg.model.name_or_path
    tok = AutoTokenizer.from_pretrained(name, padding_side="left")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    dtype = getattr(torch, str(cfg.model.dtype))
    model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype)
    return model, tok


@dataclass
class _Ctx:
    """What every run of one invocation shares."""

    cfg: Any
    plan: _Plan
    client: Any
    exp_id: str
    tags: dict[str, str]
    resolved: dict[str, Any]
    task: Task
    tokenizer: Any
    bar: Any
    on_eval: Callable[[str, int, float, float], None] | None
    out_dir: Path = Path(".")
    config_hash: str = ""
    #: resume=auto: the resumed parent's child runs by (algorithm, seed).
    previous: dict[tuple[str, int], Any] = field(default_factory=dict)
    #: Checkpoints only for a suite's own parent run (a sweep trial or grid point is not resumed).
    checkpoints: bool = False


def run_suite(
    cfg: Any,
    *,
    progress: bool = True,
    parent_run_id: str | None = None,
    extra_tags: Mapping[str, str] | None = None,
    on_eval: Callable[[str, int, float, float], None] | None = None,
) -> SuiteResult:
    """Run the suite described by a composed config (see ``benchmarks/conf/config.yaml``).

    By default the runs nest under a new parent run, and the suite ends with a plot and a report.
    With ``parent_run_id`` (a sweep's trial) the runs nest under that run instead, and no plot or
    report is made. ``on_eval(algorithm, seed, budget_fraction, accuracy)`` is called at every
    evaluation; an exception it raises (e.g. ``optuna.TrialPruned``) ends the suite.
    """
    from mlflow.tracking import MlflowClient
    from omegaconf import OmegaConf

    from benchmarks.preflight import preflight

    t0 = time.perf_counter()
    plan = validate(cfg)
    preflight(cfg)  # a full disk or an unwritable store fails here, before any compute
    torch.set_num_threads(int(cfg.threads))
    device = torch.device(cfg.engine.device)
    if cfg.engine.name != "torch":
        raise ConfigError(f"engine.name={cfg.engine.name!r}: the native trainer supports ['torch']")

    real_model = cfg.model.name_or_path is not None
    if real_model:
        base_model, tokenizer = _load_hf(cfg)
        task = build_task(cfg.task, tokenizer=tokenizer)  # chat templates need the tokenizer
    else:
        tokenizer = build_char_tokenizer(ArithTask.alphabet)
        task = plan.task

    uri = cfg.tracking.uri or default_tracking_uri()
    exp_name = str(cfg.tracking.experiment)
    exp_id = prepare_store(uri, exp_name)
    client = MlflowClient(uri)
    out_dir = Path(cfg.output_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    tags = {
        M.TAG_TASK: str(cfg.task.name),
        M.TAG_MODEL: str(cfg.model.name_or_path or "tiny-llama"),
        M.TAG_ENGINE: str(cfg.engine.name),
        M.TAG_BUDGET_KIND: plan.budget.kind,
        M.TAG_BUDGET_LIMIT: str(plan.budget.limit),
        M.TAG_GIT_COMMIT: git_commit(),
        M.TAG_VERSION: _version(),
        **({"horizon": str(cfg.task.horizon)} if cfg.task.name == "arith" else {}),
        **dict(extra_tags or {}),
    }
    result = SuiteResult([], uri, exp_name, parent_run_id, out_dir, experiment_id=exp_id)
    chash = ckpt.config_hash(resolved)
    previous = None
    if parent_run_id is None and cfg.get("resume", "never") == "auto":
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
                    run_name=f"suite-{cfg.suite.name}",
                    tags={**tags, M.TAG_ROLE: "suite", ckpt.TAG_CONFIG_HASH: chash},
                    params=flatten(resolved),
                )
            )
            result.parent_run_id = parent.run_id
            parent.log_dict(resolved, "config.yaml")
        bar = stack.enter_context(_progress(progress))
        ctx = _Ctx(cfg, plan, client, exp_id, tags, resolved, task, tokenizer, bar, on_eval)
        ctx.out_dir, ctx.config_hash, ctx.checkpoints = out_dir, chash, parent is not None
        if previous is not None:
            ctx.previous = ckpt.child_runs(client, exp_id, previous.info.run_id)
        try:
            jobs = _jobs(cfg, plan, on_eval)
            if jobs > 1:
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
                    done = [_finished(ctx, n, seed) for n in plan.algorithms]
                    if all(done):  # resume=auto: nothing left for this seed, no warm start needed
                        result.runs += done  # type: ignore[arg-type]
                        continue
                    if real_model:
                        start, ws_info = base_model, {"steps": 0, "val_accuracy": float("nan")}
                    else:
                        start, ws_info = _load_start_model(cfg, seed, task, tokenizer)
                    result.warmstart[str(seed)] = ws_info
                    start.to(device)
                    for name, alg in plan.algorithms.items():
                        result.runs.append(
                            _run_one(ctx, result.parent_run_id, name, alg, seed, start)
                        )
        finally:
            task.close()
        result.wall_s = time.perf_counter() - t0
        if parent is not None:
            failed = sum(r.status != "FINISHED" for r in result.runs)
            parent.log_metrics({"suite/wall_s": result.wall_s, "suite/failed_runs": failed}, step=0)
            _finish(result, cfg, parent)
    return result


def _jobs(cfg: Any, plan: _Plan, on_eval: Callable | None) -> int:
    """Worker processes for this suite (``jobs``); 1 where the runs must share this process."""
    from benchmarks.workers import parallel_blocker, resolve_jobs

    jobs = resolve_jobs(cfg.get("jobs", 1), len(plan.seeds) * len(plan.algorithms))
    if jobs > 1:
        why = parallel_blocker(cfg, plan.algorithms, on_eval=on_eval is not None)
        if why is not None:
            log.info("jobs=%s: running in one process: %s", cfg.get("jobs"), why)
            return 1
    return jobs


def _run_in_workers(ctx: _Ctx, result: SuiteResult, jobs: int, shared: dict) -> list[RunSummary]:
    """Every run not yet FINISHED, in ``jobs`` worker processes (``benchmarks/workers.py``);
    the summaries in the one-process order (seed, then algorithm)."""
    from benchmarks.workers import run_parallel

    plan = ctx.plan
    summaries: dict[tuple[str, int], RunSummary] = {}
    work = []
    for seed in plan.seeds:
        todo = []
        for name in plan.algorithms:
            done = _finished(ctx, name, seed)
            if done is not None:
                summaries[(name, seed)] = done
            else:
                todo.append(name)
        if todo:
            work.append((seed, todo))

    def on_warm_start(seed: int, info: dict) -> None:
        result.warmstart[str(seed)] = info

    if work:
        summaries.update(
            run_parallel(
                jobs=min(jobs, sum(len(t) for _, t in work)),
                resolved=ctx.resolved,
                algorithms=plan.algorithms,
                work=work,
                shared=shared,
                bar=ctx.bar,
                on_warm_start=on_warm_start,
            )
        )
    return [summaries[(n, s)] for s in plan.seeds for n in plan.algorithms]


def _finished(ctx: _Ctx, name: str, seed: int) -> RunSummary | None:
    """resume=auto: the summary of a child run that already FINISHED, read back from MLflow."""
    run = ctx.previous.get((name, seed))
    if run is None or run.info.status != "FINISHED":
        return None
    rid = run.info.run_id
    acc = ctx.client.get_metric_history(rid, M.eval_metric(ctx.task.eval_name, "accuracy"))
    se = ctx.client.get_metric_history(rid, M.eval_metric(ctx.task.eval_name, "accuracy_se"))
    acc.sort(key=lambda m: (m.step, m.timestamp))
    se.sort(key=lambda m: (m.step, m.timestamp))
    metrics = {k: v for k, v in run.data.metrics.items() if k.startswith(("compute/", "memory/"))}
    return RunSummary(
        name,
        seed,
        rid,
        "FINISHED",
        steps=max((m.step for m in acc), default=0),
        start_accuracy=acc[0].value if acc else float("nan"),
        final_accuracy=acc[-1].value if acc else float("nan"),
        final_se=se[-1].value if se else float("nan"),
        metrics=metrics,
    )


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


def run_grid(cfg: Any, points: Sequence[tuple[Any, Any]], *, progress: bool = True) -> SuiteResult:
    """Run one suite per grid point under a single parent run; one report over all of them."""
    from mlflow.tracking import MlflowClient
    from omegaconf import OmegaConf

    t0 = time.perf_counter()
    if cfg.get("resume", "never") != "never":
        raise ConfigError("resume=auto: not supported with suite.grid yet; use resume=never")
    key = next(iter(cfg.suite.grid))
    uri = cfg.tracking.uri or default_tracking_uri()
    exp_id = prepare_store(uri, str(cfg.tracking.experiment))
    client = MlflowClient(uri)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    out_dir = Path(cfg.output_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    result = SuiteResult([], uri, str(cfg.tracking.experiment), None, out_dir, experiment_id=exp_id)
    with MlflowTracker.start(
        client,
        exp_id,
        run_name=f"suite-{cfg.suite.name}",
        tags={M.TAG_ROLE: "suite", M.TAG_TASK: str(cfg.task.name), M.TAG_GIT_COMMIT: git_commit()},
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
        _finish(result, cfg, parent)
    return result


def _run_one(
    ctx: _Ctx, parent_id: str | None, name: str, alg: Algorithm, seed: int, start
) -> RunSummary:  # noqa: ANN001, E501
    cfg, plan, resolved = ctx.cfg, ctx.plan, ctx.resolved
    tcfg = plan.trainer[name]
    run_params = flatten(
        {
            **{k: v for k, v in resolved.items() if k != "algorithm"},
            "algorithm": {"name": name, **resolved["algorithm"][name]},
            "algorithm_resolved": {
                f: getattr(alg.config, f) for f in alg.config.__dataclass_fields__
            },
            "trainer_resolved": tcfg.__dict__,
        }
    )
    done = _finished(ctx, name, seed)
    if done is not None:
        log.info("resume=auto: %s seed %d already FINISHED (run %s)", name, seed, done.run_id)
        return done
    prev = ctx.previous.get((name, seed))
    summary = RunSummary(name, seed, None, "FAILED")
    bar = ctx.bar
    task_id = bar.add_task(f"{name} seed {seed}", total=1.0, acc="-")
    try:
        with (
            MlflowTracker.resume(ctx.client, prev.info.run_id)
            if prev is not None
            else MlflowTracker.start(
                ctx.client,
                ctx.exp_id,
                run_name=f"{name}-s{seed}",
                parent_run_id=parent_id,
                tags={**ctx.tags, M.TAG_ROLE: "run", M.TAG_ALGORITHM: name, M.TAG_SEED: str(seed)},
                params=run_params,
            )
        ) as mlflow_tracker:
            summary.run_id = mlflow_tracker.run_id
            tracker = ckpt.ResumableTracker(mlflow_tracker)
            checkpointer = ckpt.Checkpointer(
                ctx.out_dir / "checkpoints" / str(parent_id) / f"{name}-s{seed}",
                tcfg.checkpoint_every if ctx.checkpoints else 0,
                {
                    "parent_run_id": parent_id,
                    "run_id": summary.run_id,
                    "algorithm": name,
                    "seed": seed,
                    "config_hash": ctx.config_hash,
                },
                tracker,
            )
            if prev is not None:  # skip the points logged before the kill; they are recomputed
                tracker.skip = checkpointer.already_logged(ctx.client)
            policy = copy.deepcopy(start)
            reference = None
            if alg.uses_reference:
                reference = copy.deepcopy(start).eval().requires_grad_(False)

            def on_progress(frac: float, m: dict[str, float]) -> None:
                fields = {"acc": f"{m['acc']:.3f}"} if "acc" in m else {}
                bar.update(task_id, completed=min(frac, 1.0), **fields)

            def on_eval(frac: float, res) -> None:  # noqa: ANN001
                if ctx.on_eval is not None:
                    ctx.on_eval(name, seed, frac, res.accuracy)

            trainer = RLTrainer(
                algorithm=alg,
                policy=policy,
                tokenizer=ctx.tokenizer,
                task=ctx.task,
                engine_factory=make_engine_factory(
                    cfg.engine, ctx.tokenizer, model_path=cfg.model.name_or_path, seed=seed
                ),
                budget=plan.budget,
                config=tcfg,
                seed=seed,
                prompt_seed=seed,
                tracker=tracker,
                reference=reference,
                critic_base=start,
                on_progress=on_progress,
                on_eval=on_eval,
                checkpointer=checkpointer,
            )
            evals = trainer.train()
            bar.update(task_id, completed=1.0)
            summary.status = "FINISHED"
            summary.steps = trainer.step
            summary.start_accuracy = evals[0][1].accuracy
            summary.final_accuracy = evals[-1][1].accuracy
            summary.final_se = evals[-1][1].se
            summary.metrics = trainer.meter.metrics()
        checkpointer.remove()  # the run is FINISHED in MLflow: nothing left to resume
    except (
        FloatingPointError,
        RuntimeError,
        ValueError,
    ) as e:  # one failed run must not end the suite
        log.error("%s seed %d failed: %s", name, seed, e)
        summary.error = f"{type(e).__name__}: {e}"
    return summary


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sppo-bench")
    except PackageNotFoundError:
        return "0+unknown"


class _NoBar:
    def add_task(self, *a, **k) -> int:  # noqa: ANN002, ANN003
        return 0

    def update(self, *a, **k) -> None:  # noqa: ANN002, ANN003
        pass

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *a) -> None:  # noqa: ANN002
        pass


def _progress(enabled: bool):  # noqa: ANN202
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


def _finish(result: SuiteResult, cfg: Any, parent: MlflowTracker) -> None:
    """The plot and report, logged to the parent run."""
    from analysis import eval_points, load_runs, plot_panels, write_report

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
        if cfg.budget.kind == "samples"
        else f"compute/{cfg.budget.kind}",
    )
    fig = axes[0].figure if hasattr(axes, "__getitem__") else axes.figure
    plot = result.output_dir / "accuracy_vs_compute.png"
    fig.savefig(plot, dpi=120, bbox_inches="tight")
    plt.close(fig)
    result.plot = plot
    parent.log_artifact(plot, "figures")
    if cfg.suite.report:
        result.report = write_report(
            df, result.output_dir / "report", title=f"sppo-bench suite {cfg.suite.name}"
        )
        parent.log_artifact(result.report.parent, "report")
