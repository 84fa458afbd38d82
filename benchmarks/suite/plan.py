"""Validation of a composed config into one typed ``SuitePlan``, before any compute: every
algorithm, trainer config, the budget, the seeds, the task and the model's shape. A bad field
raises ``ConfigError`` naming it and what is allowed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from algorithms import Algorithm, ConfigError, get_algorithm
from benchmarks.engines.factory import check_rollout_config
from benchmarks.tasks.base import Task
from benchmarks.tasks.build import build_task
from benchmarks.telemetry.meter import Budget
from benchmarks.training import checkpoint as ckpt
from benchmarks.training.config import TrainerConfig
from benchmarks.training.modeling import ModelSpec

log = logging.getLogger(__name__)

__all__ = ["ModelPlan", "SuitePlan", "as_dict", "model_spec", "validate"]


_TRAINER_KEYS = {f for f in TrainerConfig.__dataclass_fields__}


@dataclass(frozen=True)
class ModelPlan:
    """The policy to start from: a real checkpoint (``name_or_path``) or the tiny Llama."""

    name_or_path: str | None
    dtype: str
    #: The tiny model's shape (None for a real checkpoint, whose shape is its own).
    spec: ModelSpec | None
    #: The ``model`` node as given: part of the warm start's cache identity.
    node: dict[str, Any]

    @property
    def real(self) -> bool:
        return self.name_or_path is not None


@dataclass
class SuitePlan:
    """A suite, validated once: everything a run needs, typed, so that nothing downstream (the
    suite, a run, a worker, preflight, the verl translation) reads the raw config again. A bad
    field fails while building it, before any compute."""

    algorithms: dict[str, Algorithm]
    trainer: dict[str, TrainerConfig]
    budget: Budget
    seeds: list[int]
    task: Task
    model: ModelPlan
    #: The ``task`` node (a real model's task is rebuilt with its tokenizer: chat templates).
    task_node: dict[str, Any]
    #: The ``warmstart`` node (its phases checked).
    warmstart: dict[str, Any]
    #: The ``engine`` node: ``name``, ``device``, ``rollout`` and the engine's own settings.
    engine: dict[str, Any]
    tracking_uri: str
    #: Where ``tracking_uri`` came from, for messages: ``tracking.uri`` or the environment.
    tracking_key: str
    experiment: str
    suite_name: str
    #: Write the analysis report at the end (``suite.report``).
    report: bool
    output_dir: Path
    cache_dir: str | None
    min_free_disk_gb: float
    resume: str
    #: ``jobs`` as given (``auto`` or an integer); resolved against the runs at start.
    jobs: Any
    threads: int
    #: Modules imported before validation (``plugins``): they may register algorithms or tasks,
    #: and workers (and verl's Ray workers) import them again.
    plugins: list[str]
    #: The whole resolved config: run params, the config hash, what a worker validates again.
    resolved: dict[str, Any]

    @property
    def device(self) -> str:
        return str(self.engine["device"])

    def start_seed(self, seed: int) -> int:
        """The seed whose warm start the runs of ``seed`` begin from: their own, or with
        ``warmstart.per_seed=false`` the first seed's, one start shared by every seed."""
        return seed if self.warmstart.get("per_seed", True) else self.seeds[0]

    @property
    def warmstart_threads(self) -> int:
        """Torch threads the warm start is built with: ``warmstart.threads``, else ``threads``."""
        return int(self.warmstart.get("threads") or self.threads)

    def warmstart_identity(self, threads: int | None = None) -> dict[str, Any]:
        """The warm-start settings that decide what it trains (its cache key); ``enabled``, the
        difficulty measurement taken after it and ``per_seed`` do not. The thread count it is
        built with does (``warmstart_threads`` unless given, as for a critic model built inside
        a run): more threads split some reductions differently, and training amplifies that (the
        default's start validates at 0.353 built with 2 threads, 0.373 with 1). It is named only
        when it is not 1, which keeps every one-thread start's key."""
        skip = ("enabled", "per_seed", "difficulty_prompts", "difficulty_samples", "threads")
        identity = {k: v for k, v in self.warmstart.items() if k not in skip}
        threads = self.warmstart_threads if threads is None else threads
        if threads != 1:
            identity["threads"] = threads
        return identity


def as_dict(node: Any) -> dict[str, Any]:
    from omegaconf import OmegaConf

    if isinstance(node, Mapping) and not hasattr(node, "_get_node"):
        return dict(node)
    return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]


#: Tasks the tiny character model can be warm-started on (``CharTask``s).
CHAR_TASKS = ("arith", "reasoning_gym")
#: ``algorithm.<name>.critic`` keys: that algorithm's values of ``trainer.critic_<key>``.
CRITIC_KEYS = ("warmup_steps", "mini_batches", "epochs", "head_init")


def validate(cfg: Any) -> SuitePlan:
    """Build every algorithm, trainer config and the budget; raise ConfigError naming the field."""
    import importlib
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
    algos = as_dict(cfg.algorithm) if "algorithm" in cfg else {}
    if not algos:
        from algorithms import list_algorithms

        raise ConfigError(
            "algorithm: select at least one, e.g. algorithm=[sppo,grpo]; "
            f"registered: {list_algorithms()}"
        )
    trainer_base = {k: v for k, v in as_dict(cfg.trainer).items()}
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
        critic = dict(node.pop("critic", {}) or {})
        if node:
            raise ConfigError(
                f"algorithm.{name}.{sorted(node)[0]}: unknown key; "
                "allowed: actor_lr, critic_lr, critic, params"
            )
        bad = set(critic) - set(CRITIC_KEYS)
        if bad:
            raise ConfigError(
                f"algorithm.{name}.critic.{sorted(bad)[0]}: unknown key; allowed: {list(CRITIC_KEYS)}"
            )
        try:
            alg = get_algorithm(name, **params)
        except ConfigError as e:
            raise ConfigError(f"algorithm.{name}.params: {e}") from e
        if alg.critic == "none" and critic_lr is not None:
            raise ConfigError(
                f"algorithm.{name}.critic_lr={critic_lr}: {name} trains no critic; set it to null"
            )
        if alg.critic == "none" and any(v is not None for v in critic.values()):
            raise ConfigError(f"algorithm.{name}.critic={critic}: {name} trains no critic")
        # An algorithm's own critic settings (its tuned defaults) take the place of trainer's.
        own = {f"critic_{k}": v for k, v in critic.items() if v is not None}
        if own and str(cfg.engine.name) != "torch":
            # Tuned for the native trainer on the CPU testbed; a verl recipe carries its own.
            log.info(
                "engine=%s: algorithm.%s.critic=%s not applied (the native trainer's tuned "
                "settings); trainer.critic_* reach verl",
                cfg.engine.name,
                name,
                critic,
            )
            own = {}
        try:
            t = TrainerConfig(
                **{**trainer_base, **own},
                **({"actor_lr": float(actor_lr)} if actor_lr is not None else {}),
                critic_lr=None if critic_lr is None else float(critic_lr),
            )
        except ConfigError as e:
            if not own:
                raise
            raise ConfigError(str(e).replace("trainer.critic_", f"algorithm.{name}.critic.")) from e
        if t.samples_per_step % alg.samples_per_prompt:
            raise ConfigError(
                f"trainer.samples_per_step={t.samples_per_step} must be a multiple of "
                f"{name}'s samples per prompt ({alg.samples_per_prompt})"
            )
        built[name] = alg
        trainers[name] = t
    b = as_dict(cfg.budget)
    budget = Budget(
        kind=b["kind"], limit=float(b["limit"]), eval_fractions=tuple(b["eval_fractions"])
    )
    if cfg.engine.name not in ("torch", "verl"):
        raise ConfigError(f"engine.name={cfg.engine.name!r}: allowed ['torch', 'verl']")
    if int(cfg.threads) < 1:
        raise ConfigError(f"threads={cfg.threads} must be >= 1")
    from benchmarks.suite.jobs import resolve_jobs

    try:
        resolve_jobs(cfg.get("jobs", 1), 1)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    if int(cfg.seeds) < 1:
        raise ConfigError(f"seeds={cfg.seeds} must be >= 1")
    seeds = [int(cfg.seed) + i for i in range(int(cfg.seeds))]
    real_model = cfg.model.name_or_path is not None
    if not real_model and cfg.task.name not in CHAR_TASKS:
        raise ConfigError(
            f"task={cfg.task.name}: the tiny character model only speaks {list(CHAR_TASKS)}; "
            "set model=hf model.name_or_path=<HF id or directory> for real datasets"
        )
    try:
        task = build_task(cfg.task)  # reads the data now: a missing file fails here
    except TypeError as e:
        raise ConfigError(f"task: {e}") from e
    except ValueError as e:
        raise ConfigError(str(e)) from e
    from benchmarks.training.warmstart import parse_phases

    try:
        parse_phases(as_dict(cfg.warmstart)["phases"])
    except ValueError as e:
        raise ConfigError(str(e)) from e
    per_seed = cfg.warmstart.get("per_seed", True)
    if not isinstance(per_seed, bool):
        raise ConfigError(
            f"warmstart.per_seed={per_seed!r}: allowed values are true (a warm start per seed) "
            "and false (the first seed's, shared by every seed)"
        )
    ws_threads = cfg.warmstart.get("threads")
    if ws_threads is not None and (
        isinstance(ws_threads, bool) or not isinstance(ws_threads, int) or ws_threads < 1
    ):
        raise ConfigError(
            f"warmstart.threads={ws_threads!r}: allowed values are null (the runs' own `threads`) "
            "and an integer >= 1"
        )
    if not real_model:  # transformers' own errors would come from a worker, mid-start
        longest = max(len(p.prompt) for p in task.eval_problems())  # one token per character
        try:
            response = max(int(cfg.task.max_new_tokens), int(cfg.trainer.max_new_tokens))
            model_spec(as_dict(cfg.model)).check(longest + response)
        except ValueError as e:
            raise ConfigError(str(e)) from e
    from benchmarks.training.critic_model import critic_spec

    for name, t in trainers.items():  # a smaller tiny critic: checked like model.*
        if isinstance(t.critic_model, Mapping) and built[name].critic != "none":
            positions = 0
            if not real_model:
                positions = max(len(p.prompt) for p in task.eval_problems()) + int(
                    cfg.trainer.max_new_tokens
                )
            critic_spec(
                t.critic_model,
                None if real_model else model_spec(as_dict(cfg.model)),
                positions,
            )
    if cfg.engine.name == "torch":  # verl's own `engine.rollout` names verl's backend
        check_rollout_config(cfg.engine)
    from omegaconf import OmegaConf

    from benchmarks.telemetry.tracking import default_tracking_uri

    model_node = as_dict(cfg.model)
    min_free = float(cfg.get("min_free_disk_gb", 0.0))
    if not min_free >= 0:
        raise ConfigError(f"min_free_disk_gb={min_free} must be >= 0")
    from_env = not cfg.tracking.uri and os.environ.get("MLFLOW_TRACKING_URI")
    return SuitePlan(
        algorithms=built,
        trainer=trainers,
        budget=budget,
        seeds=seeds,
        task=task,
        model=ModelPlan(
            name_or_path=None if not real_model else str(cfg.model.name_or_path),
            dtype=str(cfg.model.dtype),
            spec=None if real_model else model_spec(model_node),
            node=model_node,
        ),
        task_node=as_dict(cfg.task),
        warmstart=as_dict(cfg.warmstart),
        engine=as_dict(cfg.engine),
        tracking_uri=str(cfg.tracking.uri or default_tracking_uri()),
        tracking_key="MLFLOW_TRACKING_URI" if from_env else "tracking.uri",
        experiment=str(cfg.tracking.experiment),
        suite_name=str(cfg.suite.name),
        report=bool(cfg.suite.get("report", True)),
        output_dir=Path(str(cfg.output_dir)),
        cache_dir=None if not cfg.get("cache_dir") else str(cfg.cache_dir),
        min_free_disk_gb=min_free,
        resume=str(cfg.get("resume", "never")),
        jobs=cfg.get("jobs", 1),
        threads=int(cfg.threads),
        plugins=[str(m) for m in cfg.get("plugins") or []],
        resolved=OmegaConf.to_container(cfg, resolve=True),  # type: ignore[arg-type]
    )


def model_spec(model_cfg: Mapping[str, Any]) -> ModelSpec:
    return ModelSpec(
        hidden_size=model_cfg["hidden_size"],
        num_layers=model_cfg["num_layers"],
        num_heads=model_cfg["num_heads"],
        intermediate_size=model_cfg["intermediate_size"],
        max_position_embeddings=model_cfg["max_position_embeddings"],
        num_key_value_heads=model_cfg.get("num_key_value_heads"),
    )
