"""The typed configs of a suite's components, each read from its own node of the composed config
by its ``from_node``, which names a bad field and what it allows. A :class:`SuitePlan` holds
them; after validation, code reads their fields, never the node.

Three keep their node beside their fields, because something downstream is keyed on the node as
given: the task's (the task's own builder reads its settings, ``benchmarks/tasks/build.py``), the
warm start's and the model's (they key the warm-start cache, ``benchmarks/training/start.py``, so
a start built before this module existed is found again).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from algorithms.configkit import (
    ConfigError,
    check_keys,
    config_field,
    config_from_node,
    config_value,
)

if TYPE_CHECKING:
    from benchmarks.engines.vllm_engine import VllmSettings
    from benchmarks.training.modeling import ModelSpec

__all__ = [
    "EngineConfig",
    "ModelConfig",
    "RayConfig",
    "TaskConfig",
    "TorchEngineConfig",
    "TrackingConfig",
    "VerlEngineConfig",
    "WarmStartConfig",
    "engine_from_node",
]


@dataclass(frozen=True)
class RayConfig:
    """``ray``: the cluster ``jobs=ray`` runs a suite's tasks on. Checked whatever ``jobs`` is:
    a typo must not wait for the day ``jobs=ray`` is set."""

    #: ``auto`` (the cluster ``ray start --head`` made on this machine, or ``$RAY_ADDRESS``) or
    #: ``<host>:<port>`` of a Ray head node.
    address: str = "auto"
    #: Times Ray runs a task again after its worker or node died.
    max_retries: int = 3

    @classmethod
    def from_node(cls, node: Mapping[str, Any] | None) -> RayConfig:
        node = dict(node or {})
        check_keys("ray", node, ("address", "max_retries"))
        address = str(node.get("address", "auto")).strip()
        host, sep, port = address.rpartition(":")
        if address != "auto" and not (sep and host and port.isdigit() and 0 < int(port) < 65536):
            raise ConfigError(
                f"ray.address={address!r}: allowed 'auto' (the cluster `ray start --head` made on "
                "this machine, or $RAY_ADDRESS) or <host>:<port> of a Ray head node, e.g. "
                "10.0.0.5:6379"
            )
        retries = config_value("ray.max_retries", node.get("max_retries", 3), int, ge=0)
        return cls(address, retries)


@dataclass(frozen=True)
class TrackingConfig:
    """``tracking``: the MLflow store the runs log to, and their experiment."""

    #: The store's URI: ``tracking.uri``, else ``$MLFLOW_TRACKING_URI``, else the default SQLite
    #: file; a ``postgresql://`` URI names the driver installed here.
    uri: str
    #: Where :attr:`uri` came from, for messages: ``tracking.uri`` or ``MLFLOW_TRACKING_URI``.
    key: str
    experiment: str

    @classmethod
    def from_node(cls, node: Mapping[str, Any] | None) -> TrackingConfig:
        from benchmarks.telemetry.store import database_uri
        from benchmarks.telemetry.tracking import default_tracking_uri

        node = dict(node or {})
        check_keys("tracking", node, ("uri", "experiment"))
        experiment = node.get("experiment")
        if experiment is None or not str(experiment).strip():
            raise ConfigError(
                f"tracking.experiment={experiment!r}: must be a non-empty string, the MLflow "
                "experiment the runs log to"
            )
        from_env = not node.get("uri") and os.environ.get("MLFLOW_TRACKING_URI")
        uri = database_uri(str(node.get("uri") or default_tracking_uri()))
        key = "MLFLOW_TRACKING_URI" if from_env else "tracking.uri"
        return cls(uri, key, str(experiment))


@dataclass(frozen=True)
class TaskConfig:
    """``task``: what the runs learn. Its name and response length are read here; the rest of
    the node is the task's own (each task declares its settings as its builder's arguments)."""

    name: str
    #: Tokens a response may take, at training and at evaluation.
    max_new_tokens: int
    #: ``task.horizon`` for ``arith`` as given (a chain length or a list of them; the task
    #: checks it), else None: runs are tagged with it.
    horizon: Any
    #: The node as given: the task's builder reads it, and it keys the warm-start cache.
    node: dict[str, Any] = field(compare=True, repr=False)

    @classmethod
    def from_node(cls, node: Mapping[str, Any]) -> TaskConfig:
        node = dict(node)
        name = node.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"task.name={name!r}: must name a task, e.g. task=arith")
        tokens = config_value("task.max_new_tokens", node.get("max_new_tokens"), int, ge=1)
        return cls(name, tokens, node.get("horizon") if name == "arith" else None, node)


#: ``warmstart``'s plain settings: (annotation, bounds) each, checked with the config kit (the
#: values reach the warm start as given; a wrong one would fail or mislead mid-build).
_WARMSTART_SETTINGS: dict[str, tuple[Any, dict[str, float]]] = {
    "enabled": (bool, {}),
    "batch_size": (int, {"ge": 1}),
    "facts_fraction": (float, {"ge": 0, "le": 1}),
    "lr": (float, {"gt": 0}),
    "stop_accuracy": (float | None, {"gt": 0, "le": 1}),
    "eval_every": (int, {"ge": 1}),
    "val_size": (int, {"ge": 1}),
    "difficulty_prompts": (int | None, {"ge": 0}),
    "difficulty_samples": (int | None, {"ge": 0}),
}


@dataclass(frozen=True)
class WarmStartConfig:
    """``warmstart``: whether the tiny model is warm-started, which seeds share a start, and
    with how many threads it is built. Its training settings (phases, target, learning rate...)
    are checked here and read by the warm start itself from :attr:`node`, which is its cache
    key."""

    enabled: bool
    #: A warm start per seed (true) or the first seed's, shared by every seed (false).
    per_seed: bool
    #: Torch threads it is built with (None: the runs' ``threads``).
    threads: int | None
    #: The node as given (phases checked): what the warm start trains with, and its cache key.
    node: dict[str, Any] = field(repr=False)

    @classmethod
    def from_node(cls, node: Mapping[str, Any]) -> WarmStartConfig:
        from benchmarks.training.warmstart import parse_phases, parse_target

        node = dict(node)
        for key, (tp, bounds) in _WARMSTART_SETTINGS.items():
            if key in node:
                config_value(f"warmstart.{key}", node[key], tp, **bounds)
        try:
            parse_phases(node["phases"])
            parse_target(node)
        except (KeyError, ValueError) as e:
            raise ConfigError(str(e)) from e
        per_seed = node.get("per_seed", True)
        if not isinstance(per_seed, bool):
            raise ConfigError(
                f"warmstart.per_seed={per_seed!r}: allowed values are true (a warm start per "
                "seed) and false (the first seed's, shared by every seed)"
            )
        threads = node.get("threads")
        if threads is not None and (
            isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
        ):
            raise ConfigError(
                f"warmstart.threads={threads!r}: allowed values are null (the runs' own "
                "`threads`) and an integer >= 1"
            )
        return cls(bool(node.get("enabled", True)), per_seed, threads, node)


@dataclass(frozen=True)
class ModelConfig:
    """``model``: the policy to start from, a real checkpoint (``name_or_path``) or the tiny
    Llama of :attr:`spec`'s shape."""

    name_or_path: str | None
    dtype: str
    #: The tiny model's shape (None for a real checkpoint, whose shape is its own).
    spec: ModelSpec | None
    #: The node as given: part of the warm start's cache identity.
    node: dict[str, Any] = field(repr=False)

    @property
    def real(self) -> bool:
        return self.name_or_path is not None

    @classmethod
    def from_node(cls, node: Mapping[str, Any]) -> ModelConfig:
        """The shape is checked on its own here; against the task's longest prompt and response
        by the plan, which knows them."""
        from benchmarks.training.modeling import ModelSpec

        node = dict(node)
        dtype = str(node.get("dtype"))
        if node.get("name_or_path") is not None:
            return cls(str(node["name_or_path"]), dtype, None, node)
        shape = ("hidden_size", "num_layers", "num_heads", "intermediate_size")
        spec = ModelSpec(
            **{k: node[k] for k in (*shape, "max_position_embeddings")},
            num_key_value_heads=node.get("num_key_value_heads"),
        )
        try:
            spec.check()
        except ValueError as e:
            raise ConfigError(str(e)) from e
        return cls(None, dtype, spec, node)


@dataclass(frozen=True)
class TorchEngineConfig:
    """``engine=torch``: the native trainer, its rollouts from the batched torch sampler or one
    colocated vLLM engine."""

    name: ClassVar[str] = "torch"
    #: ``cpu`` or ``cuda`` (``cuda:<i>``: one device).
    device: str = "cpu"
    #: ``torch`` or ``vllm`` (benchmarks/engines/factory.py).
    rollout: str = "torch"
    #: Sequences the torch sampler decodes together.
    rollout_batch_size: int = 512
    #: vLLM's settings, with ``rollout=vllm`` (None otherwise).
    vllm: VllmSettings | None = None

    @classmethod
    def from_node(cls, node: Mapping[str, Any]) -> TorchEngineConfig:
        from benchmarks.engines.factory import check_rollout_config
        from benchmarks.engines.vllm_engine import settings_from_config

        node = dict(node)
        check_keys("engine", node, ("name", "device", "rollout", "rollout_batch_size", "vllm"))
        device = str(node.get("device", "cpu"))
        if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
            raise ConfigError(f"engine.device={device!r}: allowed: cpu, cuda, cuda:<index>")
        check_rollout_config(node)  # the rollout, and vLLM's settings and presence for vllm
        batch = config_value(
            "engine.rollout_batch_size", node.get("rollout_batch_size", 512), int, ge=1
        )
        rollout = str(node.get("rollout", "torch"))
        vllm = settings_from_config(node) if rollout == "vllm" else None
        return cls(device, rollout, batch, vllm)


@dataclass(frozen=True)
class VerlEngineConfig:
    """``engine=verl``: the same registered algorithms on verl (Ray, vLLM or SGLang, FSDP), one
    launch per run (benchmarks/verl_engine/). Its fields are verl's settings the translation
    sets; ``extra_overrides`` passes any other verl setting through."""

    name: ClassVar[str] = "verl"
    #: verl trains on GPUs only.
    device: ClassVar[str] = "cuda"
    dry_run: bool = config_field(False, "print the verl command and its config; launch nothing")
    python: str | None = config_field(None, "interpreter that runs verl (null: this one)")
    n_gpus_per_node: int = config_field(1, "GPUs per node", ge=1)
    nnodes: int = config_field(1, "nodes", ge=1)
    rollout: Literal["vllm", "sglang"] = config_field("vllm", "verl's rollout backend")
    tensor_parallel: int = config_field(1, "tensor-parallel size per rollout replica", ge=1)
    gpu_memory_utilization: float = config_field(0.6, "rollout's share of GPU memory", gt=0, le=1)
    max_prompt_length: int = config_field(1024, "longer prompts are dropped at export", ge=1)
    train_batch_size: int | None = config_field(None, "prompts per step", ge=1)
    ppo_mini_batch_size: int | None = config_field(None, "prompts per mini-batch", ge=1)
    total_training_steps: int | None = config_field(None, "null: from a samples budget", ge=1)
    use_dynamic_bsz: bool = config_field(True, "pack micro-batches by tokens")
    max_token_len_per_gpu: int | None = config_field(None, "tokens per micro-batch", ge=1)
    micro_batch_size_per_gpu: int = config_field(4, "without dynamic bsz", ge=1)
    gradient_checkpointing: bool = config_field(True, "recompute activations")
    param_offload: bool = config_field(False, "FSDP CPU offload of parameters")
    optimizer_offload: bool = config_field(False, "FSDP CPU offload of optimizer states")
    critic_model: str | None = config_field(None, "critic checkpoint; null: the policy's")
    val_n: int = config_field(1, "samples per validation prompt", ge=1)
    val_temperature: float = config_field(0.0, "validation sampling temperature", ge=0)
    data_dir: str | None = config_field(None, "parquet files; null: <output_dir>/verl_data")
    extra_overrides: tuple[str, ...] = config_field((), "raw verl overrides, appended last")

    @classmethod
    def from_node(cls, node: Mapping[str, Any]) -> VerlEngineConfig:
        node = {k: v for k, v in dict(node).items() if k != "name"}
        extra = node.get("extra_overrides") or []
        if not isinstance(extra, list | tuple) or not all(isinstance(o, str) for o in extra):
            raise ConfigError(
                f"engine.extra_overrides={extra!r}: must be a list of verl overrides "
                "(key=value), e.g. [trainer.save_freq=50]"
            )
        return config_from_node(cls, {**node, "extra_overrides": tuple(extra)}, "engine")


#: The engine a suite runs on.
EngineConfig = TorchEngineConfig | VerlEngineConfig
_ENGINES: dict[str, type[TorchEngineConfig] | type[VerlEngineConfig]] = {
    "torch": TorchEngineConfig,
    "verl": VerlEngineConfig,
}


def engine_from_node(node: Mapping[str, Any]) -> EngineConfig:
    """``engine``: the config of the engine ``engine.name`` names."""
    name = node.get("name")
    if name not in _ENGINES:
        raise ConfigError(f"engine.name={name!r}: allowed {list(_ENGINES)}")
    return _ENGINES[name].from_node(node)
