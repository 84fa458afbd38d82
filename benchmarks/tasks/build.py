"""``build_task``: a task from its config node (``task=arith``, ``task=reasoning_gym`` or a real
dataset)."""

from __future__ import annotations

from benchmarks.tasks.arith import ArithTask
from benchmarks.tasks.base import Task
from benchmarks.tasks.dataset_task import DatasetTask

__all__ = ["build_task"]


def build_task(cfg, tokenizer=None) -> Task:  # an omegaconf node or mapping
    """Build the task named by ``cfg.name`` from its config group entry."""
    kwargs = {k: v for k, v in dict(cfg).items() if k not in ("name", "max_new_tokens")}
    if cfg["name"] == "arith":
        return ArithTask(**kwargs)
    if cfg["name"] == "reasoning_gym":
        from benchmarks.tasks.reasoning_gym import ReasoningGymTask  # imports reasoning_gym

        return ReasoningGymTask(**kwargs)
    return DatasetTask(name=cfg["name"], tokenizer=tokenizer, **kwargs)
