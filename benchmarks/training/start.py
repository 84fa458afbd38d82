"""The models a run starts from: the policy, its reference and the critic, each built on one path.

A tiny model is built from its warm start (``benchmarks/training/warmstart.py``): trained once
per (task, model, warm-start settings, start seed) and read back from the cache after. The
policy's start is that model; the reference is a frozen copy of it; the critic is a copy of it
too, unless ``trainer.critic_model`` names its own model, a smaller tiny Llama warm-started the
same way (its own cache entry) or a real checkpoint. What these builds read from the suite's
config arrives as a :class:`StartRecipe`, so this module never sees the suite.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from benchmarks.tasks.base import CharTask
from benchmarks.training.critic_model import check_same_tokenizer, critic_spec
from benchmarks.training.modeling import (
    ModelSpec,
    build_char_tokenizer,
    build_tiny_llama,
    torch_threads,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from benchmarks.tasks.base import Task

log = logging.getLogger(__name__)

__all__ = ["StartRecipe", "build_starts", "critic_start", "policy_start", "run_copies"]

#: ``warmstart`` keys that do not change the weights it trains, so not part of its cache key:
#: whether it runs, the difficulty measurement taken after it, which seeds share it, and the
#: thread count (named in the key apart, see :meth:`StartRecipe.identity`).
_NOT_IDENTITY = ("enabled", "per_seed", "difficulty_prompts", "difficulty_samples", "threads")


@dataclass(frozen=True)
class StartRecipe:
    """What the start models of a suite are built from: the policy's tiny shape, the
    ``warmstart`` node, the task and model nodes that key the cache, and the thread counts."""

    #: The tiny policy's shape (None for a real checkpoint, which has no warm start).
    spec: ModelSpec | None
    #: The ``warmstart`` node.
    warmstart: Mapping[str, Any]
    #: The ``task`` node: part of the cache key, and its ``max_new_tokens``.
    task_node: Mapping[str, Any]
    #: The ``model`` node: part of the cache key.
    model_node: Mapping[str, Any]
    cache_dir: str | None
    #: The runs' torch threads (``threads``): a critic model is built inside a run, with them.
    run_threads: int
    #: ``model.dtype``: a real critic checkpoint is loaded in it.
    dtype: str
    #: The sampling the start's difficulty is measured with (the trainer's).
    temperature: float
    top_p: float
    #: ``precision`` resolved (``fp32`` or ``bf16``): the warm start's matmuls, and its cache key.
    precision: str = "fp32"

    def warm_starts(self, task: Task) -> bool:
        """Whether a tiny model on ``task`` is warm-started: ``warmstart.enabled``, and a task
        with demonstrations to learn from (a ``CharTask``)."""
        return bool(self.warmstart.get("enabled", True)) and isinstance(task, CharTask)

    @property
    def threads(self) -> int:
        """Torch threads the policy's start is built with: ``warmstart.threads``, else the runs'."""
        return int(self.warmstart.get("threads") or self.run_threads)

    @property
    def max_new_tokens(self) -> int:
        return int(self.task_node["max_new_tokens"])

    def identity(self, threads: int | None = None) -> dict[str, Any]:
        """The warm-start settings that decide what it trains (its cache key's ``warmstart``).
        The thread count it is built with (``threads`` unless given) is among them: more
        threads split some reductions differently, and training amplifies that into a different
        start (docs/performance.md). It is named only when it is not 1, so every one-thread
        start keeps its key."""
        identity = {k: v for k, v in self.warmstart.items() if k not in _NOT_IDENTITY}
        threads = self.threads if threads is None else threads
        if threads != 1:
            identity["threads"] = threads
        return identity

    def policy_key(self, seed: int) -> str:
        """The cache key of the policy's warm start for start seed ``seed``: the folder
        ``<cache_dir>/warmstart/<key>`` that :func:`policy_start` reads or writes."""
        from benchmarks.training.warmstart import cache_key

        return cache_key(
            identity=self._policy_identity(),
            cfg=self.identity(),
            seed=seed,
            precision=self.precision,
        )

    def _policy_identity(self) -> dict[str, Any]:
        """What the policy's start is trained on and as: the task and model nodes."""
        return {"task": self.task_node, "model": self.model_node}


def _fresh(spec: ModelSpec, seed: int, tokenizer: PreTrainedTokenizerBase) -> torch.nn.Module:
    """A randomly initialised tiny Llama of ``spec``, seeded with ``seed``."""
    return build_tiny_llama(spec, len(tokenizer), seed=seed)


def _warm_started(
    recipe: StartRecipe,
    spec: ModelSpec,
    seed: int,
    task: CharTask,
    tokenizer: PreTrainedTokenizerBase,
    *,
    identity: Mapping[str, Any],
    threads: int,
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The warm start of a tiny Llama of ``spec`` under ``identity`` (task, model, role),
    built with ``threads`` torch threads (the caller sets them), or its cached copy."""
    from benchmarks.training.warmstart import warm_start

    return warm_start(
        task=task,
        build_model=lambda: _fresh(spec, seed, tokenizer),
        tokenizer=tokenizer,
        cfg=recipe.identity(threads),
        identity=identity,
        seed=seed,
        cache_dir=recipe.cache_dir,  # type: ignore[arg-type]
        max_new_tokens=recipe.max_new_tokens,
        precision=recipe.precision,
    )


def policy_start(
    recipe: StartRecipe, seed: int, task: Task, tokenizer: PreTrainedTokenizerBase
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The tiny model every algorithm of start seed ``seed`` starts from, and its info (steps,
    validation accuracy, cache path, whether it was cached, the threads it was built with and,
    with ``warmstart.difficulty_*``, the start's per-prompt success rates). It and its
    difficulty measurement run with ``recipe.threads`` (a shared start is the only job while it
    builds); the caller's thread count is restored after."""
    spec = recipe.spec
    assert spec is not None, "a real checkpoint has no warm start"
    if not recipe.warm_starts(task):
        return _fresh(spec, seed, tokenizer), {
            "steps": 0,
            "val_accuracy": float("nan"),
            "cached": False,
            "path": None,
        }
    assert isinstance(task, CharTask)
    prompts = int(recipe.warmstart.get("difficulty_prompts", 0) or 0)
    samples = int(recipe.warmstart.get("difficulty_samples", 0) or 0)
    identity = recipe._policy_identity()
    with torch_threads(recipe.threads):
        model, info = _warm_started(
            recipe, spec, seed, task, tokenizer, identity=identity, threads=recipe.threads
        )
        info["threads"] = torch.get_num_threads()
        if prompts > 0 and samples > 0:
            from benchmarks.evaluation.difficulty import measure_difficulty

            measured = measure_difficulty(
                model,
                tokenizer,
                task,
                prompts=prompts,
                samples=samples,
                temperature=recipe.temperature,
                top_p=recipe.top_p,
                max_new_tokens=recipe.max_new_tokens,
                cache=Path(info["path"]) / "difficulty.json",
            )
            info["difficulty"] = measured["summary"]
    return model, info


def build_starts(
    recipe: StartRecipe, seeds: Iterable[int], task: Task
) -> dict[int, dict[str, Any]]:
    """Build (or read from the cache) the warm start of each start seed in ``seeds``, one after
    another in this process; each one's info. Run before workers start that share these starts
    (a sweep's trials), so that they read the cache rather than all train the same start and
    write the same cache directory at once."""
    if recipe.spec is None or not recipe.warm_starts(task):
        return {}  # a real checkpoint or a fresh model: nothing to build ahead
    assert isinstance(task, CharTask)
    tokenizer = build_char_tokenizer(task.alphabet)
    return {seed: policy_start(recipe, seed, task, tokenizer)[1] for seed in sorted(set(seeds))}


def critic_start(
    recipe: StartRecipe,
    value: Any,
    seed: int,
    task: Task,
    tokenizer: PreTrainedTokenizerBase,
) -> torch.nn.Module | None:
    """The critic's own starting model for start seed ``seed`` (``trainer.critic_model`` is
    ``value``), or None for a copy of the policy's start. A tiny spec is warm-started like the
    policy, with the runs' threads (it is built inside a run), and cached apart from it
    (``role: critic`` in its key); a string is an HF id or directory whose tokenizer must be
    the policy's."""
    if value is None:
        return None
    if isinstance(value, str):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        check_same_tokenizer(AutoTokenizer.from_pretrained(value), tokenizer, value)
        return AutoModelForCausalLM.from_pretrained(value, dtype=getattr(torch, recipe.dtype))
    spec = critic_spec(value, recipe.spec)
    if not recipe.warm_starts(task):
        return _fresh(spec, seed, tokenizer)
    assert isinstance(task, CharTask)
    model_node = {**recipe.model_node, **dataclasses.asdict(spec)}
    identity = {"task": recipe.task_node, "model": model_node, "role": "critic"}
    with torch_threads(recipe.run_threads):
        model, info = _warm_started(
            recipe, spec, seed, task, tokenizer, identity=identity, threads=recipe.run_threads
        )
    log.info(
        "critic model %s, seed %d: warm start %s (validation accuracy %.3f)",
        dataclasses.asdict(spec),
        seed,
        "cached" if info.get("cached") else "trained",
        info["val_accuracy"],
    )
    return model


def run_copies(
    start: torch.nn.Module, *, reference: bool
) -> tuple[torch.nn.Module, torch.nn.Module | None]:
    """A run's own models from its start: the policy it trains (a copy) and, for an algorithm
    with a KL term, the frozen reference (another copy, in eval mode, without gradients)."""
    policy = copy.deepcopy(start)
    ref = copy.deepcopy(start).eval().requires_grad_(False) if reference else None
    return policy, ref
