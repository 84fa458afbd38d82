"""One evaluation is described once: :class:`EvalRequest` holds what ``sppo-bench eval``, the
trainer's sampled evaluation and the lm-eval route all need (sampling, budgets, data, grading), so
a new knob is one field with one help line and one check. :class:`EvalSettings`, the command
line's Hydra schema, takes every request field under the same key and adds what only the CLI needs
(model, tasks, engine, device, MLflow); both reject bad values before any data or model is read.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

log = logging.getLogger(__name__)

__all__ = [
    "ARITH",
    "DEFAULT_MAX_NEW_TOKENS",
    "EvalRequest",
    "EvalSettings",
    "TrackingSettings",
    "available_tasks",
    "parse_settings",
    "settings_help",
]


#: The synthetic task's name (every other task name is a key of ``benchmarks.tasks.datasets.DATASETS``).
ARITH = "arith"
#: Default response budget of the real datasets (the ``math`` task config uses the same).
DEFAULT_MAX_NEW_TOKENS = 1024
_ENGINES = ("torch", "vllm", "lm_eval")


def available_tasks() -> list[str]:
    """Every task name ``tasks=[...]`` accepts: ``arith`` and the real datasets."""
    from benchmarks.tasks.datasets import DATASETS

    return [ARITH, *sorted(DATASETS)]


def _f(default: Any, help: str, *, setting: bool = True) -> Any:
    """A field with its help line; ``setting=False``: an :class:`EvalRequest` field that is no
    command-line key (the CLI fills it from other settings)."""
    meta = {"help": help, "setting": setting}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    if isinstance(default, type):
        return field(default_factory=default, metadata=meta)
    return field(default=default, metadata=meta)


# --- the request -------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalRequest:
    """How to evaluate: what :func:`benchmarks.evaluation.evaluate.evaluate_model` and
    :func:`benchmarks.evaluation.lm_eval.evaluate_lm_eval` take besides the model and the tasks.

    Every field but the lm-eval route's three is also a ``sppo-bench eval`` key of the same name.
    Raises ``ValueError`` naming the first bad field (``k=-1 must be >= 0``).
    """

    k: int = _f(16, "samples per problem for avg@k and pass@k (0: greedy only)")
    temperature: float = _f(0.6, "sampling temperature of the k samples")
    top_p: float = _f(0.95, "nucleus sampling threshold of the k samples")
    max_new_tokens: int | None = _f(
        None, f"response budget; null: 6*arith_horizon+6 for arith, {DEFAULT_MAX_NEW_TOKENS} else"
    )
    limit: int | None = _f(None, "evaluate only the first N problems of each task")
    data_dir: str | None = _f(
        None, "JSONL directory (layout of shared/data); null: $SPPO_BENCH_DATA"
    )
    template: str = _f("plain", "prompt template: plain, chat, qwen_math_chat (arith ignores it)")
    greedy: bool = _f(True, "also decode greedily and report eval/<task>/accuracy")
    seed: int = _f(0, "sampling seed")
    batch_size: int = _f(64, "sequences generated together")
    arith_horizon: int = _f(2, "operations per arith problem")
    grader_timeout_s: float = _f(3.0, "per-item grading budget (math-verify pool)")
    grader_workers: int = _f(2, "math-verify worker processes")
    backend: str = _f(
        "hf", "lm-eval route: hf (the in-memory model) or vllm (lm-eval's vLLM)", setting=False
    )
    model_path: str | None = _f(
        None, "lm-eval's vLLM backend: the checkpoint it loads (required there)", setting=False
    )
    vllm_settings: Any = _f(
        None,
        "lm-eval's vLLM backend: a benchmarks.engines.vllm_engine.VllmSettings; None: defaults",
        setting=False,
    )

    def __post_init__(self) -> None:
        if self.data_dir is not None:  # a Path is welcome; keep one type
            object.__setattr__(self, "data_dir", os.fspath(self.data_dir))
        if self.k < 0:
            raise ValueError(f"k={self.k} must be >= 0")
        if self.k == 0 and not self.greedy:
            raise ValueError("k=0 with greedy=false evaluates nothing: set k >= 1 or greedy=true")
        if not 0.0 <= self.temperature <= 10.0:
            raise ValueError(f"temperature={self.temperature} must be in [0, 10]")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p={self.top_p} must be in (0, 1]")
        for name in ("max_new_tokens", "limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name}={value} must be >= 1 or null")
        for name in ("batch_size", "grader_workers", "arith_horizon"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if not self.grader_timeout_s > 0:
            raise ValueError(f"grader_timeout_s={self.grader_timeout_s} must be > 0")
        from benchmarks.tasks.datasets import PROMPT_TEMPLATES

        if self.template not in PROMPT_TEMPLATES:
            raise ValueError(f"template={self.template!r}: allowed: {sorted(PROMPT_TEMPLATES)}")
        if self.backend not in ("hf", "vllm"):
            raise ValueError(f"backend={self.backend!r}: allowed: hf, vllm")


#: The :class:`EvalRequest` fields that are command-line keys.
_REQUEST_SETTINGS = tuple(f.name for f in fields(EvalRequest) if f.metadata["setting"])


def _with_request_settings(cls: type) -> type:
    """Add every command-line field of :class:`EvalRequest` to the schema ``cls`` (same name,
    type, default and help), after ``cls``'s own ``model`` and ``tasks``; applied before
    ``@dataclass``, so the request's declaration is the only one."""
    own = dict(cls.__dict__.get("__annotations__", {}))
    head = {name: own.pop(name) for name in ("model", "tasks")}
    request: dict[str, Any] = {}
    for f in fields(EvalRequest):
        if f.name not in _REQUEST_SETTINGS:
            continue
        if f.name in own:
            raise TypeError(f"{cls.__name__}.{f.name}: EvalRequest declares it already")
        request[f.name] = f.type
        setattr(cls, f.name, field(default=f.default, metadata=dict(f.metadata)))
    cls.__annotations__ = head | request | own
    return cls


# --- the command line --------------------------------------------------------------------------


@dataclass
class TrackingSettings:
    """Where the evaluation run is logged."""

    uri: str | None = _f(None, "MLflow store; null: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db")
    experiment: str = _f("sppo-bench-eval", "MLflow experiment of the evaluation run")


@dataclass
@_with_request_settings
class EvalSettings:
    """Every setting of ``sppo-bench eval``; each is a ``key=value`` override on the command line.

    Besides the fields below it has every command-line field of :class:`EvalRequest` (``k``,
    ``temperature``, ``limit``, ...), after ``tasks``; :meth:`request` hands them on. This
    dataclass is the Hydra schema (registered in Hydra's ConfigStore), so types are checked and
    unknown keys are refused by Hydra, naming the key; :meth:`check` rejects bad values and bad
    combinations, naming the field.
    """

    model: str = _f("???", "HF hub id or local directory holding the model and its tokenizer")
    tasks: list[str] = _f(["math500"], "tasks to evaluate: arith or any dataset name")
    engine: str = _f(
        "torch", "torch (own batched KV-cache sampler), vllm (vLLM) or lm_eval (lm-eval-harness)"
    )
    lm_eval_backend: str = _f(
        "hf", "engine=lm_eval: hf (in-memory HF model) or vllm (lm-eval's vLLM)"
    )
    gpu_memory_utilization: float = _f(0.85, "vLLM on a GPU: share of GPU memory it may take")
    device: str = _f("auto", "auto (cuda if available, else cpu), cpu, cuda, cuda:1, ...")
    dtype: str = _f("auto", "auto (bfloat16 on GPU, float32 on CPU), float32, bfloat16, float16")
    samples_logged: int | None = _f(None, "problems per task in the sample table; null: all")
    threads: int | None = _f(None, "torch intra-op threads; null: torch's default")
    tracking: TrackingSettings = _f(TrackingSettings, "MLflow store and experiment")

    def request(self, *, model_path: str | None = None, vllm_settings: Any = None) -> EvalRequest:
        """The evaluation these settings ask for. ``model_path`` and ``vllm_settings`` are for
        lm-eval's vLLM backend, known once the model's path is resolved."""
        return EvalRequest(
            **{name: getattr(self, name) for name in _REQUEST_SETTINGS},
            backend=self.lm_eval_backend,
            model_path=model_path,
            vllm_settings=vllm_settings,
        )

    def check(self) -> EvalSettings:
        """Raise :class:`algorithms.ConfigError` naming the first bad field; return ``self``."""
        from algorithms import ConfigError

        if self.model in ("", "???"):
            raise ConfigError("model: required, e.g. model=Qwen/Qwen2.5-Math-1.5B or model=<dir>")
        if not self.tasks:
            raise ConfigError(f"tasks: select at least one of {available_tasks()}")
        unknown = [t for t in self.tasks if t not in available_tasks()]
        if unknown:
            raise ConfigError(f"tasks: unknown task {unknown[0]!r}; valid: {available_tasks()}")
        if len(set(self.tasks)) != len(self.tasks):
            raise ConfigError(f"tasks={self.tasks}: a task is listed twice")
        # Stricter than the request (the trainer may sample at 0): here greedy is its own switch.
        if not 0.0 < self.temperature <= 10.0:
            raise ConfigError(
                f"temperature={self.temperature} must be in (0, 10] (greedy decoding is "
                "greedy=true; the k samples need a positive temperature)"
            )
        for name in ("samples_logged", "threads"):
            value = getattr(self, name)
            if value is not None and value < (0 if name == "samples_logged" else 1):
                raise ConfigError(f"{name}={value} must be >= 1 or null")
        if self.engine not in _ENGINES:
            raise ConfigError(f"engine={self.engine!r}: allowed: {list(_ENGINES)}")
        if self.lm_eval_backend not in ("hf", "vllm"):
            raise ConfigError(f"lm_eval_backend={self.lm_eval_backend!r}: allowed: hf, vllm")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError(
                f"gpu_memory_utilization={self.gpu_memory_utilization} must be in (0, 1]"
            )
        try:
            self.request()
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if self.engine == "lm_eval":
            from benchmarks.evaluation.lm_eval.registry import supported_tasks

            missing = [t for t in self.tasks if t not in supported_tasks()]
            if missing:
                raise ConfigError(
                    f"tasks: {missing[0]!r} has no lm-eval task YAML; with engine=lm_eval use "
                    f"{supported_tasks()}"
                )
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ConfigError(f"dtype={self.dtype!r}: allowed: auto, float32, bfloat16, float16")
        return self

    @property
    def uses_vllm(self) -> bool:
        """Generation runs in vLLM (``engine=vllm``, or lm-eval with its vLLM backend)."""
        return self.engine == "vllm" or (
            self.engine == "lm_eval" and self.lm_eval_backend == "vllm"
        )


_SCHEMA_NAME = "sppo_bench_eval"


def parse_settings(overrides: Sequence[str]) -> EvalSettings:
    """Compose :class:`EvalSettings` from Hydra ``key=value`` overrides and check it.

    ``tasks=math500`` (no brackets) is accepted as ``tasks=[math500]``.

    Raises:
        hydra.errors.HydraException: an unknown key or a malformed override (names the key).
        omegaconf.errors.OmegaConfBaseException: a value of the wrong type (names the key).
        algorithms.ConfigError: a value out of range or a bad combination (names the field).
    """
    from hydra import compose, initialize
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    ConfigStore.instance().store(name=_SCHEMA_NAME, node=EvalSettings)
    fixed = []
    for o in overrides:
        key, sep, value = o.partition("=")
        if sep and key.lstrip("+~") == "tasks" and value and not value.startswith("["):
            o = f"{key}=[{value}]"
        fixed.append(o)
    with initialize(version_base=None, config_path=None):
        cfg = compose(_SCHEMA_NAME, overrides=fixed)
    settings = OmegaConf.to_object(cfg)
    assert isinstance(settings, EvalSettings)
    return settings.check()


def settings_help() -> str:
    lines = [
        "usage: sppo-bench eval model=<path|HF id> [key=value ...] [--lm-eval]",
        "",
        "  sppo-bench eval model=Qwen/Qwen2.5-Math-1.5B tasks=[math500,aime24] k=16 temperature=0.6",
        "",
        f"tasks: {', '.join(available_tasks())}",
        "",
    ]
    for f in fields(EvalSettings):
        if f.name == "tracking":
            for t in fields(TrackingSettings):
                default = getattr(TrackingSettings(), t.name)
                lines.append(f"  tracking.{t.name}={default}  {t.metadata['help']}")
            continue
        default = getattr(EvalSettings(), f.name)
        lines.append(f"  {f.name}={default}  {f.metadata['help']}")
    lines.append("  --lm-eval  same as engine=lm_eval")
    return "\n".join(lines) + "\n"
