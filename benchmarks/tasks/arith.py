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

import itertools
import random
from collections.abc import Sequence

from benchmarks.tasks.base import TaskProblem, split_of
from benchmarks.tasks.grading import GradeResult

__all__ = ["ArithTask"]


_OPS = {
    "+": lambda a, b: (a + b) % 10,
    "-": lambda a, b: (a - b) % 10,
    "*": lambda a, b: (a * b) % 10,
}


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
            (test if split_of(p.prompt, test_fraction) == "test" else train).append(p)
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
