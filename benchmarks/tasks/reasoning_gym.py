"""Reasoning Gym datasets as tasks: procedurally generated problems nobody here wrote, graded by
each dataset's own ``score_answer``.

``task=reasoning_gym task.dataset=chain_sum task.config={min_terms: 2, max_terms: 8}`` builds the
train and held-out problems with ``reasoning_gym.create_dataset`` from two seeds far apart (a
dataset derives item ``i`` from ``seed + i``, so nearby seeds would share items) and drops any
held-out question that also appears in training. The prompt is the dataset's own question text.

Two answer formats:

* ``hash`` (the tiny character model): the response is ``<steps>#<answer>``, as in `arith`; the
  warm start teaches worked steps built from the generator's metadata where it allows (for
  ``chain_sum`` and ``products``, the running results; for ``letter_counting``, each word with
  the running count), else the bare answer.
* ``tag`` (real models): ``<answer>...</answer>``, the Reasoning Gym convention.

The answer is cut from the response and scored by the dataset's scorer in the grader's sandboxed
process pool (``Grader("reasoning_gym")``): scorers parse model text with third-party code.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from benchmarks.tasks.base import TaskProblem
from benchmarks.tasks.grading import Grader, GradeResult

__all__ = ["ANSWER_FORMATS", "ReasoningGymTask", "dataset_names"]

ANSWER_FORMATS = ("hash", "tag")
#: Far from the train seed: items are ``seed + i``, so the two sets are generated apart.
_EVAL_SEED_OFFSET = 1_000_000_007


def dataset_names() -> list[str]:
    """Every dataset Reasoning Gym registers."""
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


_OPS: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}


def _running(expression: str) -> str | None:
    """``"12 + 3 - 4"`` -> ``"12+3=15;15-4=11;#11"``: one step per operation, left to right (the
    order these generators evaluate in); None for anything else."""
    tokens = expression.replace("*", " * ").split()
    try:
        acc = int(tokens[0])
        steps = []
        for sym, term in zip(tokens[1::2], tokens[2::2], strict=True):
            value = int(term)
            new = _OPS[sym](acc, value)
            steps.append(f"{acc}{sym}{value}={new}")
            acc = new
    except (ValueError, KeyError, IndexError):
        return None
    return ";".join(steps) + f";#{acc}"


def _running_count(span: Sequence[str], letter: str) -> str:
    """``["free", "the", "Lily"]``, ``"l"`` -> ``"free=0;the=0;Lily=2;#2"``: each word of the
    text copied with the running count of the letter, case-insensitive as the generator counts.
    One step per word, so a text of n words is an n-step chain whose success compounds."""
    letter = letter.lower()
    total, steps = 0, []
    for word in span:
        total += word.lower().count(letter)
        steps.append(f"{word}={total}")
    return ";".join(steps) + f";#{total}"


#: Datasets whose metadata gives a worked solution (``hash`` format).
_SOLUTIONS: dict[str, Callable[[Mapping[str, Any]], str | None]] = {
    "chain_sum": lambda m: _running(m["expression"]),
    "products": lambda m: _running(m["expression"]),
    "letter_counting": lambda m: _running_count(m["span"], m["target_letter"]),
}


class ReasoningGymTask:
    """A Reasoning Gym dataset with disjoint train and held-out items and its own scorer."""

    name = "reasoning_gym"
    #: Printable ASCII: every character the datasets' questions use, for the character tokenizer.
    alphabet = "".join(c for c in string.printable if c not in "\t\r\x0b\x0c")

    def __init__(
        self,
        *,
        dataset: str,
        config: Mapping[str, Any] | None = None,
        train_size: int = 20_000,
        eval_size: int = 500,
        seed: int = 0,
        answer_format: str = "hash",
        group_by: str | None = None,
        eval_name: str | None = None,
        grader_timeout_s: float = 3.0,
        grader_workers: int = 1,
    ) -> None:
        names = dataset_names()
        if dataset not in names:
            raise ValueError(f"task.dataset={dataset!r} is not a Reasoning Gym dataset: {names}")
        if answer_format not in ANSWER_FORMATS:
            raise ValueError(
                f"task.answer_format={answer_format!r}: allowed {list(ANSWER_FORMATS)}"
            )
        if train_size < 1 or eval_size < 1:
            raise ValueError(
                f"task.train_size={train_size} and task.eval_size={eval_size} must be >= 1"
            )
        self.dataset = dataset
        self.answer_format = answer_format
        self.eval_name = eval_name or dataset
        self.config = dict(config or {})
        train = self._generate(train_size, seed)
        held = self._generate(eval_size, seed + _EVAL_SEED_OFFSET)
        questions = {e["question"] for e in train}
        held = [e for e in held if e["question"] not in questions]  # never evaluate on training
        self._payload: dict[str, str] = {}
        self._train = [self._problem(e, f"train/{i}") for i, e in enumerate(train)]
        self._test = [self._problem(e, f"test/{i}") for i, e in enumerate(held)]
        self._groups: dict[str, list[int]] = {}
        if group_by is not None:
            for i, e in enumerate(held):
                if group_by not in e["metadata"]:
                    raise ValueError(
                        f"task.group_by={group_by!r} is not in {dataset}'s metadata: "
                        f"{sorted(k for k in e['metadata'] if k != 'difficulty')}"
                    )
                key = f"{self.eval_name}_{group_by}{e['metadata'][group_by]}"
                self._groups.setdefault(key, []).append(i)
            self._groups = dict(sorted(self._groups.items(), key=lambda kv: _natural(kv[0])))
        self.grader = Grader("reasoning_gym", timeout_s=grader_timeout_s, workers=grader_workers)

    def _generate(self, size: int, seed: int) -> list[dict[str, Any]]:
        import reasoning_gym

        try:
            return list(
                reasoning_gym.create_dataset(self.dataset, size=size, seed=seed, **self.config)
            )
        except TypeError as e:  # an unknown config field
            raise ValueError(f"task.config for {self.dataset}: {e}") from e
        except AssertionError as e:  # the dataset's own validation
            raise ValueError(f"task.config={self.config} for {self.dataset}: {e}") from e

    def _problem(self, entry: Mapping[str, Any], key: str) -> TaskProblem:
        meta = entry["metadata"]
        solution = None
        if self.answer_format == "hash" and self.dataset in _SOLUTIONS:
            solution = _SOLUTIONS[self.dataset](meta)
        pid = f"{self.dataset}/{key}"
        self._payload[pid] = json.dumps(
            {
                "dataset": self.dataset,
                "answer_format": self.answer_format,
                "entry": {k: entry[k] for k in ("question", "answer", "metadata")},
            },
            default=str,
        )
        return TaskProblem(
            id=pid,
            prompt=entry["question"],
            answer=str(entry["answer"]),
            solution=solution,
            grader="reasoning_gym",
        )

    def train_problems(self) -> Sequence[TaskProblem]:
        return self._train

    def eval_problems(self) -> Sequence[TaskProblem]:
        return self._test

    def eval_groups(self) -> dict[str, list[int]]:
        """Held-out subsets by a metadata field (``task.group_by``, e.g. ``num_terms``)."""
        return {k: list(v) for k, v in self._groups.items()}

    def facts(self) -> list[TaskProblem]:
        """No separate fact table: the warm start's ``facts_fraction`` must stay 0."""
        return []

    def sft_target(self, problem: TaskProblem, rng: random.Random, direct_fraction: float) -> str:
        """The worked steps where the metadata gives them, or the bare answer (as `arith`)."""
        if problem.solution is None or rng.random() < direct_fraction:
            return f"#{problem.answer}"
        return problem.solution

    def grade(self, responses: Sequence[str], problems: Sequence[TaskProblem]) -> GradeResult:
        return self.grader.grade(list(responses), [self._payload[p.id] for p in problems])

    def close(self) -> None:
        self.grader.close()


def _natural(key: str) -> tuple[Any, ...]:
    """``x_t10`` after ``x_t9``."""
    head = key.rstrip(string.digits)
    tail = key[len(head) :]
    return (head, int(tail) if tail else -1)
