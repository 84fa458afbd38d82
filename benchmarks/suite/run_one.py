"""One (algorithm, seed) run of a suite: its models from the start model (the cached warm
start, built by ``benchmarks/training/start.py``, or a real checkpoint), its MLflow child run, its
checkpoints, and the trainer, ending in a ``RunSummary``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from algorithms import Algorithm
from analysis import metrics as M
from benchmarks.engines.factory import make_engine_factory
from benchmarks.suite.plan import SuitePlan
from benchmarks.tasks.base import Task
from benchmarks.telemetry.tracking import (
    MlflowTracker,
    flatten,
)
from benchmarks.training import checkpoint as ckpt
from benchmarks.training.start import critic_start, run_copies
from benchmarks.training.trainer import RLTrainer

log = logging.getLogger(__name__)

__all__ = ["RunContext", "load_hf", "package_version", "run_one"]


def load_hf(plan: SuitePlan) -> tuple[torch.nn.Module, Any]:
    """A real checkpoint and its tokenizer (left padding, as every engine expects)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = plan.model.name_or_path
    tok = AutoTokenizer.from_pretrained(name, padding_side="left")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(name, dtype=getattr(torch, plan.model.dtype))
    return model, tok


@dataclass
class RunContext:
    """What every run of one invocation shares."""

    plan: SuitePlan
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


def run_one(
    ctx: RunContext,
    parent_id: str | None,
    name: str,
    alg: Algorithm,
    seed: int,
    start: torch.nn.Module,
) -> RunSummary:
    """Train ``alg`` from a copy of ``start`` in its own MLflow child run (resumed from its
    checkpoint where ``resume=auto`` found one); a run that fails is recorded, not raised, so
    the suite goes on."""
    plan, resolved = ctx.plan, ctx.resolved
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
    done = finished(ctx, name, seed)
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
                tags={
                    **ctx.tags,
                    M.TAG_ROLE: "run",
                    M.TAG_ALGORITHM: name,
                    M.TAG_SEED: str(seed),
                    M.TAG_START: plan.model.name_or_path or f"s{plan.start_seed(seed)}",
                },
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
            policy, reference = run_copies(start, reference=alg.uses_reference)

            def on_progress(frac: float, m: dict[str, float]) -> None:
                fields = {"acc": f"{m['acc']:.3f}"} if "acc" in m else {}
                bar.update(task_id, completed=min(frac, 1.0), **fields)

            def on_eval(frac: float, res) -> None:
                if ctx.on_eval is not None:
                    ctx.on_eval(name, seed, frac, res.accuracy)

            critic_base = None
            if alg.critic != "none":  # shared like the policy's, with warmstart.per_seed=false
                critic_base = critic_start(
                    plan.start_recipe,
                    tcfg.critic_model,
                    plan.start_seed(seed),
                    ctx.task,
                    ctx.tokenizer,
                )
            trainer = RLTrainer(
                algorithm=alg,
                policy=policy,
                tokenizer=ctx.tokenizer,
                task=ctx.task,
                engine_factory=make_engine_factory(
                    ctx.tokenizer,
                    rollout=plan.engine.rollout,
                    batch_size=plan.engine.rollout_batch_size,
                    vllm=plan.engine.vllm,
                    model_path=plan.model.name_or_path,
                    seed=seed,
                    precision=plan.precision,
                ),
                budget=plan.budget,
                config=tcfg,
                seed=seed,
                prompt_seed=seed,
                tracker=tracker,
                reference=reference,
                critic_base=start if critic_base is None else critic_base,
                on_progress=on_progress,
                on_eval=on_eval,
                checkpointer=checkpointer,
                precision=plan.precision,
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


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sppo-bench")
    except PackageNotFoundError:
        return "0+unknown"


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


def finished(ctx: RunContext, name: str, seed: int) -> RunSummary | None:
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
