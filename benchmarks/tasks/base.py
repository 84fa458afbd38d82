"""What every task is made of: ``TaskProblem`` (a prompt and its gold answer) and the ``Task``
protocol the trainer and the evaluation ask of a task (train and held-out problems, grading).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from benchmarks.tasks.grading import GradeResult

__all__ = ["CharTask", "Task", "TaskProblem"]


@dataclass(frozen=True)
class TaskProblem:
    """One problem as the harness sees it: the exact prompt text and the gold answer."""

    id: str
    prompt: str
    answer: str
    #: A worked solution in the model's output format, for the supervised warm start.
    solution: str | None = None
    #: How to grade it: "integer" or "math_verify" (real datasets); `arith` grades in-process.
    grader: str = "integer"


class Task(Protocol):
    """What the trainer needs from a task. Real datasets and `arith` both implement it."""

    name: str
    #: Dataset name in metric keys: ``eval/<eval_name>/accuracy``.
    eval_name: str

    def train_problems(self) -> Sequence[TaskProblem]: ...

    def eval_problems(self) -> Sequence[TaskProblem]: ...

    def grade(self, responses: Sequence[str], problems: Sequence[TaskProblem]) -> GradeResult: ...

    def close(self) -> None: ...


@runtime_checkable
class CharTask(Task, Protocol):
    """A task the tiny character-level model can speak: its characters, and demonstrations for
    the supervised warm start (`arith`, Reasoning Gym datasets)."""

    #: Every character a prompt or demonstration uses; the tokenizer has one token per character.
    alphabet: str

    def facts(self) -> list[TaskProblem]: ...

    def sft_target(
        self, problem: TaskProblem, rng: random.Random, direct_fraction: float
    ) -> str: ...


def split_of(key: str, test_fraction: float) -> str:
    """Stable hash split: a problem's split never depends on seed, order or horizon list."""
    h = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
    return "test" if h < test_fraction else "train"
