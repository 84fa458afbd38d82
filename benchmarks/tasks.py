"""Tasks: a dataset of problems, a prompt format and a grader, behind one small interface.

`arith` is the embedded default: verifiable modular arithmetic chains generated in code, so the
suite runs on a laptop with no download. Its ``horizon`` knob (the number of operations, hence of
reasoning steps) lets the long-horizon claim of SPPO be probed on CPU.

Simplifications versus the paper's setting, on purpose:
- arithmetic is modulo 10 and left to right, so every intermediate result is one character and a
  2-layer model can learn the per-step table;
- demonstrations come in two styles, the worked chain and the bare answer (``sft_target``). The
  warm start (:mod:`benchmarks.warmstart`) first teaches the chain, then a mix dominated by bare
  answers, as pre-training then terse instruction tuning would: the model can reason step by step
  but mostly does not. Outcome-reward RL then has the job it has at scale (eliciting and sharpening
  a behaviour the model already has, rather than teaching new facts from a sparse reward), at CPU
  cost.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from benchmarks.grading import Grader, GradeResult

__all__ = ["ArithTask", "DatasetTask", "GraderSet", "Task", "TaskProblem", "build_task"]

_OPS = {
    "+": lambda a, b: (a + b) % 10,
    "-": lambda a, b: (a - b) % 10,
    "*": lambda a, b: (a * b) % 10,
}


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


def _split_of(key: str, test_fraction: float) -> str:
    """Stable hash split: a problem's split never depends on seed, order or horizon list."""
    h = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
    return "test" if h < test_fraction else "train"


class ArithTask:
    """Left-to-right arithmetic modulo 10 with a chain of thought, e.g. ``7+5*3=`` -> ``7+5=2;2*3=6;#6``.

    Problems with ``horizon`` operations are split into disjoint train / held-out sets by a hash of
    their text, so no held-out problem is ever trained on, whatever the seed or horizon.
    """

    name = "arith"
    #: Every character the task can produce; the character tokenizer is built from it.
    alphabet = "0123456789+-*=;#"

    def __init__(
        self,
        *,
        horizon: int = 2,
        test_fraction: float = 0.2,
        eval_size: int = 1000,
        max_problems: int = 100_000,
        eval_name: str | None = None,
    ) -> None:
        if horizon < 1 or horizon > 12:
            raise ValueError(f"task.horizon={horizon} is not allowed: use an integer in [1, 12]")
        if not 0.0 < test_fraction < 1.0:
            raise ValueError(f"task.test_fraction={test_fraction} must be in (0, 1)")
        if eval_size < 1:
            raise ValueError(f"task.eval_size={eval_size} must be >= 1")
        self.horizon = horizon
        #: The dataset name in metric keys (``eval/<eval_name>/accuracy``).
        self.eval_name = eval_name or self.name
        train, test = [], []
        for p in self._problems(horizon, max_problems):
            (test if _split_of(p.prompt, test_fraction) == "test" else train).append(p)
        # The held-out subset is fixed (not seeded per run): every seed and algorithm is
        # evaluated on the same problems.
        random.Random(0).shuffle(test)
        self._train = train
        self._test = test[:eval_size]

    @classmethod
    def _problems(cls, horizon: int, max_problems: int) -> list[TaskProblem]:
        """All problems when there are at most ``max_problems`` (10^(h+1)·3^h), else that many
        distinct ones drawn with a fixed seed, so the set never depends on the run's seed."""
        if 10 ** (horizon + 1) * 3**horizon <= max_problems:
            return [
                cls._make(digits, ops)
                for digits in itertools.product(range(10), repeat=horizon + 1)
                for ops in itertools.product(_OPS, repeat=horizon)
            ]
        rng = random.Random(horizon)
        seen: dict[str, TaskProblem] = {}
        ops_list = list(_OPS)
        while len(seen) < max_problems:
            digits = [rng.randrange(10) for _ in range(horizon + 1)]
            ops = [rng.choice(ops_list) for _ in range(horizon)]
            p = cls._make(digits, ops)
            seen.setdefault(p.prompt, p)
        return list(seen.values())

    @staticmethod
    def _make(digits: Sequence[int], ops: Sequence[str]) -> TaskProblem:
        expr = str(digits[0]) + "".join(o + str(d) for o, d in zip(ops, digits[1:], strict=True))
        steps, acc = [], digits[0]
        for o, d in zip(ops, digits[1:], strict=True):
            new = _OPS[o](acc, d)
            steps.append(f"{acc}{o}{d}={new}")
            acc = new
        return TaskProblem(
            id=expr, prompt=expr + "=", answer=str(acc), solution=";".join(steps) + f";#{acc}"
        )

    def train_problems(self) -> Sequence[TaskProblem]:
        return self._train

    def eval_problems(self) -> Sequence[TaskProblem]:
        return self._test

    def facts(self) -> list[TaskProblem]:
        """The single-step table (``a op b`` for every digit pair and operation): 300 facts."""
        return self._problems(1, 10**6)

    def sft_target(self, problem: TaskProblem, rng: random.Random, direct_fraction: float) -> str:
        """Warm-start demonstration: the worked chain, or with probability ``direct_fraction``
        only the final answer (see the module docstring for why)."""
        if rng.random() < direct_fraction:
            return f"#{problem.answer}"
        assert problem.solution is not None
        return problem.solution

    @staticmethod
    def extract(response: str) -> str | None:
        """The answer is what follows the last ``#``; anything else scores 0."""
        if "#" not in response:
            return None
        tail = response.rsplit("#", 1)[1].strip()
        return tail if tail.isdigit() else None

    def grade(self, responses: Sequence[str], problems: Sequence[TaskProblem]) -> GradeResult:
        scores = [
            1.0 if self.extract(r) == p.answer else 0.0
            for r, p in zip(responses, problems, strict=True)
        ]
        return GradeResult(scores=scores, timeouts=0, errors=0)

    def close(self) -> None:
        pass


class GraderSet:
    """One grader per kind, started on first use and shared by every problem of that kind.

    Problems of one batch may need different graders (MATH's LaTeX answers versus AIME's
    integers): each problem carries its kind, and a batch is graded kind by kind, so a math-verify
    process pool starts once however many tasks or batches use it.
    """

    def __init__(self, timeout_s: float = 3.0, workers: int = 1) -> None:
        self.timeout_s, self.workers = timeout_s, workers
        self._graders: dict[str, Grader] = {}

    def grade(self, responses: Sequence[str], problems: Sequence[TaskProblem]) -> GradeResult:
        scores = [0.0] * len(problems)
        timeouts = errors = 0
        for kind in dict.fromkeys(p.grader for p in problems):
            idx = [i for i, p in enumerate(problems) if p.grader == kind]
            if kind not in self._graders:
                self._graders[kind] = Grader(kind, timeout_s=self.timeout_s, workers=self.workers)  # type: ignore[arg-type]
            g = self._graders[kind].grade(
                [responses[i] for i in idx], [problems[i].answer for i in idx]
            )
            for i, sc in zip(idx, g.scores, strict=True):
                scores[i] = sc
            timeouts += g.timeouts
            errors += g.errors
        return GradeResult(scores=scores, timeouts=timeouts, errors=errors)

    def close(self) -> None:
        for g in self._graders.values():
            g.close()
        self._graders.clear()


class DatasetTask:
    """A real benchmark (MATH-500, AIME, GSM8K, ...) loaded from JSONL or the hub and graded safely.

    Training and evaluation sets may need different graders (MATH's LaTeX answers versus AIME's
    integers), so each problem carries its grader kind (see :class:`GraderSet`).
    """

    def __init__(
        self,
        *,
        name: str,
        train_dataset: str | None = None,
        eval_datasets: Sequence[str] = (),
        data_dir: str | None = None,
        template: str = "plain",
        eval_size: int | None = None,
        train_size: int | None = None,
        grader_timeout_s: float = 3.0,
        grader_workers: int = 1,
        eval_name: str | None = None,
        tokenizer=None,  # noqa: ANN001 - any HF tokenizer, for chat templates
    ) -> None:
        from benchmarks.datasets import DATASETS, load_dataset, render_prompt

        self.name = name
        train_name = train_dataset or name
        test_name = (list(eval_datasets) or [name])[0]
        self.eval_name = eval_name or test_name

        def load(ds: str, limit: int | None) -> list[TaskProblem]:
            kind = DATASETS[ds].grader
            return [
                TaskProblem(
                    id=p.id,
                    prompt=render_prompt(p, template, tokenizer),
                    answer=p.answer,
                    grader=kind,
                )
                for p in load_dataset(ds, data_dir=data_dir, limit=limit)
            ]

        self._train = load(train_name, train_size)
        self._test = load(test_name, eval_size)
        self._graders = GraderSet(grader_timeout_s, grader_workers)

    def train_problems(self) -> Sequence[TaskProblem]:
        return self._train

    def eval_problems(self) -> Sequence[TaskProblem]:
        return self._test

    def grade(self, responses: Sequence[str], problems: Sequence[TaskProblem]) -> GradeResult:
        return self._graders.grade(responses, problems)

    def close(self) -> None:
        self._graders.close()


def build_task(cfg, tokenizer=None) -> Task:  # noqa: ANN001 - an omegaconf node or mapping
    """Build the task named by ``cfg.name`` from its config group entry."""
    kwargs = {k: v for k, v in dict(cfg).items() if k not in ("name", "max_new_tokens")}
    if cfg["name"] == "arith":
        return ArithTask(**kwargs)
    return DatasetTask(name=cfg["name"], tokenizer=tokenizer, **kwargs)
