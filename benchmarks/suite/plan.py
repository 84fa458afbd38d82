"""Validation of a composed config into one typed ``SuitePlan``, before any compute: every
algorithm, trainer config, the budget, the seeds, the task and the model's shape. A bad field
raises ``ConfigError`` naming it and what is allowed. ``validate`` is a sequence of named
checks, one per part of the config.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from algorithms import Algorithm, ConfigError, get_algorithm, list_algorithms
from algorithms.configkit import check_keys, config_value
from analysis.claims.spec import Claim, parse_claims
from benchmarks.suite.components import (
    EngineConfig,
    ModelConfig,
    RayConfig,
    TaskConfig,
    TrackingConfig,
    WarmStartConfig,
    engine_from_node,
)
from benchmarks.suite.jobs import is_ray, resolve_jobs
from benchmarks.tasks.base import Task
from benchmarks.tasks.build import build_task
from benchmarks.telemetry.meter import Budget
from benchmarks.training import checkpoint as ckpt
from benchmarks.training.config import TrainerConfig
from benchmarks.training.precision import resolve_precision
from benchmarks.training.start import StartRecipe

log = logging.getLogger(__name__)

__all__ = ["SuitePlan", "as_dict", "validate"]


_TRAINER_KEYS = {f for f in TrainerConfig.__dataclass_fields__}


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
    model: ModelConfig
    #: ``task``: its name and response length, and the node its builder reads (a real model's
    #: task is built again with its tokenizer: chat templates).
    task_config: TaskConfig
    warmstart: WarmStartConfig
    #: ``engine``: the native trainer's (torch) or verl's settings.
    engine: EngineConfig
    #: ``tracking``: the MLflow store, where its URI came from, and the experiment.
    tracking: TrackingConfig
    suite_name: str
    #: Write the analysis report at the end (``suite.report``).
    report: bool
    #: The claims the report tests (``claims``, :mod:`analysis.claims`).
    claims: list[Claim]
    output_dir: Path
    cache_dir: str | None
    min_free_disk_gb: float
    resume: str
    #: ``jobs`` as given (``auto``, an integer or ``ray``); resolved against the runs at start.
    jobs: Any
    threads: int
    #: ``precision`` resolved for this machine: ``fp32`` or ``bf16``, never ``auto``.
    precision: str
    #: Modules imported before validation (``plugins``): they may register algorithms or tasks,
    #: and workers (and verl's Ray workers) import them again.
    plugins: list[str]
    #: The whole resolved config: run params, the config hash, what a worker validates again.
    resolved: dict[str, Any]
    #: ``ray``: the cluster ``jobs=ray`` runs on.
    ray: RayConfig = RayConfig()

    @property
    def device(self) -> str:
        return self.engine.device

    def start_seed(self, seed: int) -> int:
        """The seed whose warm start the runs of ``seed`` begin from: their own, or with
        ``warmstart.per_seed=false`` the first seed's, one start shared by every seed."""
        return seed if self.warmstart.per_seed else self.seeds[0]

    @property
    def start_seeds(self) -> list[int]:
        """The start seeds this plan's runs begin from, each once."""
        return sorted({self.start_seed(s) for s in self.seeds})

    @property
    def start_recipe(self) -> StartRecipe:
        """What the runs' start models are built from (``benchmarks/training/start.py``)."""
        trainer = next(iter(self.trainer.values()))  # sampling is no algorithm's own setting
        return StartRecipe(
            spec=self.model.spec,
            warmstart=self.warmstart.node,
            task_node=self.task_config.node,
            model_node=self.model.node,
            cache_dir=self.cache_dir,
            run_threads=self.threads,
            precision=self.precision,
            dtype=self.model.dtype,
            temperature=trainer.temperature,
            top_p=trainer.top_p,
        )


def as_dict(node: Any) -> dict[str, Any]:
    from omegaconf import OmegaConf

    if isinstance(node, Mapping) and not hasattr(node, "_get_node"):
        return dict(node)
    # A mandatory value left unset (``???``) fails here, naming its key, not as the text "???".
    return OmegaConf.to_container(node, resolve=True, throw_on_missing=True)  # type: ignore[return-value]


def _plain(node: Any) -> Any:
    """A list node (or any node) as plain containers, resolved."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(node):
        return OmegaConf.to_container(node, resolve=True)
    return node


#: Tasks the tiny character model can be warm-started on (``CharTask``s).
CHAR_TASKS = ("arith", "reasoning_gym")
#: ``algorithm.<name>.critic`` keys: that algorithm's values of ``trainer.critic_<key>``.
CRITIC_KEYS = ("warmup_steps", "mini_batches", "epochs", "head_init")


def validate(cfg: Any) -> SuitePlan:
    """Build every algorithm, trainer config and the budget, and check the rest of the config;
    raise ConfigError naming the field. Plugins are imported first: they may register the
    algorithms and tasks the checks after look up."""
    from omegaconf import OmegaConf

    plugins = _import_plugins(cfg)
    resume = _check_resume(cfg)
    engine = engine_from_node(as_dict(cfg.engine))  # the algorithms' critic settings read it
    algorithms, trainers = _algorithms_and_trainers(cfg)
    budget = _budget(cfg)
    threads, seeds = _counts(cfg)
    ray = RayConfig.from_node(as_dict(cfg.ray) if cfg.get("ray") else None)
    precision = _precision(cfg)
    task_config = TaskConfig.from_node(as_dict(cfg.task))
    model = ModelConfig.from_node(as_dict(cfg.model))
    task = _task(task_config, model)
    warmstart = WarmStartConfig.from_node(as_dict(cfg.warmstart))
    claims = _claims(cfg, algorithms, task)
    _check_model_fits(cfg, model, task, task_config)
    _check_critic_models(cfg, algorithms, trainers, task, model)
    _check_prompt_pool(engine, trainers, task)
    min_free = _min_free_disk(cfg)
    tracking = TrackingConfig.from_node(as_dict(cfg.tracking))
    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved["precision"] = precision  # type: ignore[index]  # logged and hashed resolved
    return SuitePlan(
        algorithms=algorithms,
        trainer=trainers,
        budget=budget,
        seeds=seeds,
        task=task,
        model=model,
        task_config=task_config,
        warmstart=warmstart,
        engine=engine,
        tracking=tracking,
        suite_name=str(cfg.suite.name),
        report=config_value("suite.report", cfg.suite.get("report", True), bool),
        claims=claims,
        output_dir=Path(str(cfg.output_dir)),
        cache_dir=None if not cfg.get("cache_dir") else str(cfg.cache_dir),
        min_free_disk_gb=min_free,
        resume=resume,
        jobs=cfg.get("jobs", 1),
        threads=threads,
        precision=precision,
        plugins=plugins,
        resolved=resolved,  # type: ignore[arg-type]
        ray=ray,
    )


def _import_plugins(cfg: Any) -> list[str]:
    """``plugins``: import each module (from the user's working directory too)."""
    import importlib
    import sys

    plugins = [str(m) for m in cfg.get("plugins") or []]
    if plugins and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # plugin modules of the user's own project
    for module in plugins:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ConfigError(f"plugins: cannot import {module!r}: {e}") from e
    return plugins


def _check_resume(cfg: Any) -> str:
    if cfg.get("resume", "never") not in ckpt.RESUME_MODES:
        raise ConfigError(f"resume={cfg.resume!r}: allowed {list(ckpt.RESUME_MODES)}")
    return str(cfg.get("resume", "never"))


def _algorithms_and_trainers(cfg: Any) -> tuple[dict[str, Algorithm], dict[str, TrainerConfig]]:
    """Every selected algorithm (``algorithm.<name>``), and the trainer config it runs with."""
    algos = as_dict(cfg.algorithm) if "algorithm" in cfg else {}
    if not algos:
        from algorithms import list_algorithms

        raise ConfigError(
            "algorithm: select at least one, e.g. algorithm=[sppo,grpo]; "
            f"registered: {list_algorithms()}"
        )
    trainer_base = dict(as_dict(cfg.trainer))
    check_keys("trainer", trainer_base, sorted(_TRAINER_KEYS))
    built: dict[str, Algorithm] = {}
    trainers: dict[str, TrainerConfig] = {}
    for name, node in algos.items():
        built[name], trainers[name] = _algorithm(cfg, name, dict(node or {}), trainer_base)
    return built, trainers


def _algorithm(
    cfg: Any, name: str, node: dict[str, Any], trainer_base: dict[str, Any]
) -> tuple[Algorithm, TrainerConfig]:
    """``algorithm.<name>``: its keys, its hyper-parameters, its learning rates and critic
    settings against the critic it trains; then its trainer config."""
    check_keys(f"algorithm.{name}", node, ("actor_lr", "critic_lr", "critic", "params"))
    params = dict(node.pop("params", {}) or {})
    actor_lr = node.pop("actor_lr", None)
    critic_lr = node.pop("critic_lr", None)
    critic = dict(node.pop("critic", {}) or {})
    check_keys(f"algorithm.{name}.critic", critic, CRITIC_KEYS)
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
    trainer = _trainer_config(cfg, name, trainer_base, critic, actor_lr, critic_lr)
    trainer.check_algorithm(name, alg.samples_per_prompt)
    return alg, trainer


def _trainer_config(
    cfg: Any,
    name: str,
    trainer_base: dict[str, Any],
    critic: dict[str, Any],
    actor_lr: Any,
    critic_lr: Any,
) -> TrainerConfig:
    """The ``trainer`` node with ``name``'s learning rates and its own critic settings (its
    tuned defaults, in place of ``trainer.critic_*``); their errors name where they were set."""
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
    lrs: dict[str, Any] = {"critic_lr": None}
    if actor_lr is not None:
        lrs["actor_lr"] = config_value(f"algorithm.{name}.actor_lr", actor_lr, float, gt=0)
    if critic_lr is not None:
        lrs["critic_lr"] = config_value(
            f"algorithm.{name}.critic_lr", critic_lr, float | None, gt=0
        )
    try:
        return TrainerConfig(**{**trainer_base, **own}, **lrs)
    except ConfigError as e:
        # A value the algorithm's own critic settings gave is named where it was set.
        key = next((k for k in own if str(e).startswith(f"trainer.{k}=")), None)
        if key is None:
            raise
        where = f"algorithm.{name}.critic.{key.removeprefix('critic_')}"
        raise ConfigError(str(e).replace(f"trainer.{key}", where, 1)) from e


def _budget(cfg: Any) -> Budget:
    """``budget``: its kind, a number for its limit and a list of evaluation fractions."""
    b = as_dict(cfg.budget)
    limit = config_value("budget.limit", b["limit"], float, gt=0)
    fractions = b["eval_fractions"]
    ok = isinstance(fractions, list | tuple) and all(
        not isinstance(f, bool) and isinstance(f, int | float) for f in fractions
    )
    if not ok:
        raise ConfigError(
            f"budget.eval_fractions={fractions!r}: must be a list of increasing numbers in "
            "[0, 1], e.g. [0.0, 0.5, 1.0]"
        )
    return Budget(kind=b["kind"], limit=limit, eval_fractions=tuple(fractions))


def _counts(cfg: Any) -> tuple[int, list[int]]:
    """``threads``, ``jobs``, ``seeds`` and ``seed``: the runs' threads and seeds."""
    threads = config_value("threads", cfg.threads, int, ge=1)
    try:
        if not is_ray(cfg.get("jobs", 1)):
            resolve_jobs(cfg.get("jobs", 1), 1)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    seeds = config_value("seeds", cfg.seeds, int, ge=1)
    # Refused below 0: a seed names a start (s<seed>) and seeds NumPy's SeedSequence, which
    # takes no negative entropy; a negative seed had no meaning, only a surprise.
    first = config_value("seed", cfg.seed, int, ge=0)
    return threads, [first + i for i in range(seeds)]


def _precision(cfg: Any) -> str:
    """``precision`` resolved once for the suite (``auto``: as ``resolve_precision`` decides)."""
    try:
        return resolve_precision(cfg.get("precision", "fp32"))
    except ValueError as e:
        raise ConfigError(str(e)) from e


def _task(config: TaskConfig, model: ModelConfig) -> Task:
    """``task``: one the model can learn (the tiny model speaks only character tasks), built
    now, so a missing data file fails here."""
    if not model.real and config.name not in CHAR_TASKS:
        raise ConfigError(
            f"task={config.name}: the tiny character model only speaks {list(CHAR_TASKS)}; "
            "set model=hf model.name_or_path=<HF id or directory> for real datasets"
        )
    try:
        return build_task(config.node)
    except TypeError as e:
        raise ConfigError(f"task: {e}") from e
    except ValueError as e:
        raise ConfigError(str(e)) from e


def _claims(cfg: Any, algorithms: Mapping[str, Algorithm], task: Task) -> list[Claim]:
    """``claims``: each claim's fields against the registered algorithms and the task's eval
    datasets. A claim whose algorithms are not both selected is kept (its family counts it) and
    reported as not evaluated; that is said now, not after the suite."""
    node = cfg.get("claims")
    datasets = [task.eval_name, *(task.eval_groups() if hasattr(task, "eval_groups") else {})]
    try:
        claims = parse_claims(
            None if node is None else _plain(node),
            algorithms=list_algorithms(),
            datasets=datasets,
        )
    except ValueError as e:
        raise ConfigError(str(e)) from e
    for c in claims:
        absent = [x for x in (c.a, c.b) if x not in algorithms]
        if absent:
            log.warning(
                "claim %r compares %s and %s; %s not selected: the report cannot test it",
                c.name,
                c.a,
                c.b,
                " and ".join(absent),
            )
    return claims


def _check_model_fits(cfg: Any, model: ModelConfig, task: Task, task_config: TaskConfig) -> None:
    """The tiny model's positions against the longest prompt and response (one token per
    character): transformers' own error would come from a worker, mid-start."""
    if model.spec is None:
        return
    longest = max(len(p.prompt) for p in task.eval_problems())
    response = max(task_config.max_new_tokens, int(cfg.trainer.max_new_tokens))
    try:
        model.spec.check(longest + response)
    except ValueError as e:
        raise ConfigError(str(e)) from e


def _check_critic_models(
    cfg: Any,
    algorithms: dict[str, Algorithm],
    trainers: dict[str, TrainerConfig],
    task: Task,
    model: ModelConfig,
) -> None:
    """``trainer.critic_model`` as a smaller tiny critic: checked like ``model.*``."""
    from benchmarks.training.critic_model import critic_spec

    for name, t in trainers.items():
        if isinstance(t.critic_model, Mapping) and algorithms[name].critic != "none":
            positions = 0
            if not model.real:
                positions = max(len(p.prompt) for p in task.eval_problems()) + int(
                    cfg.trainer.max_new_tokens
                )
            critic_spec(t.critic_model, model.spec, positions)


def _check_prompt_pool(
    engine: EngineConfig, trainers: Mapping[str, TrainerConfig], task: Task
) -> None:
    """``trainer.prompt_pool``: no larger than the task's training set, and native only (verl
    reads its own parquet files of prompts)."""
    pools = {t.prompt_pool for t in trainers.values()} - {None}
    if not pools:
        return
    if engine.name != "torch":
        raise ConfigError(
            f"trainer.prompt_pool={max(pools)}: engine={engine.name} draws prompts from its "
            "own files; allowed there: null"
        )
    n = len(task.train_problems())
    if max(pools) > n:
        raise ConfigError(
            f"trainer.prompt_pool={max(pools)}: the task has only {n} training problems; "
            f"allowed: 1..{n} or null"
        )


def _min_free_disk(cfg: Any) -> float:
    return config_value("min_free_disk_gb", cfg.get("min_free_disk_gb", 0.0), float, ge=0)
