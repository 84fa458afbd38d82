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


#: Longest chain: 6 response characters per step keep a 16-step chain within ~100 tokens.
MAX_HORIZON = 16

_OPS = {
    "+": lambda a, b: (a + b) % 10,
    "-": lambda a, b: (a - b) % 10,
    "*": lambda a, b: (a * b) % 10,
}


def _horizon_list(horizon: int | Sequence[int]) -> tuple[int, ...]:
    values = [horizon] if isinstance(horizon, int) else list(horizon)
    if not values or any(
        isinstance(h, bool) or not isinstance(h, int) or not 1 <= h <= MAX_HORIZON for h in values
    ):
        raise ValueError(
            f"task.horizon={horizon} is not allowed: use an integer in [1, {MAX_HORIZON}] "
            "or a list of them (problems are drawn from every listed horizon)"
        )
    if len(set(values)) != len(values):
        raise ValueError(f"task.horizon={list(values)} lists a horizon twice")
    return tuple(sorted(values))


def _weights(weights: Sequence[float] | None, horizons: Sequence[int]) -> list[float]:
    """Shares of the training problems per horizon (equal by default), normalised."""
    if weights is None:
        return [1.0 / len(horizons)] * len(horizons)
    w = [float(x) for x in weights]
    if len(w) != len(horizons) or any(not x > 0 for x in w):
        raise ValueError(
            f"task.horizon_weights={list(w)} must give one positive weight per horizon "
            f"(task.horizon={list(horizons)}, ascending)"
        )
    return [x / sum(w) for x in w]


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
        horizon: int | Sequence[int] = 2,
        horizon_weights: Sequence[float] | None = None,
        test_fraction: float = 0.2,
        eval_size: int = 1000,
        max_problems: int = 20_000,
        eval_name: str | None = None,
    ) -> None:
        horizons = _horizon_list(horizon)
        if not 0.0 < test_fraction < 1.0:
            raise ValueError(f"task.test_fraction={test_fraction} must be in (0, 1)")
        if eval_size < 1:
            raise ValueError(f"task.eval_size={eval_size} must be >= 1")
        if max_problems < 1:
            raise ValueError(f"task.max_problems={max_problems} must be >= 1")
        weights = _weights(horizon_weights, horizons)
        #: Every horizon the problems are drawn from, ascending.
        self.horizons = horizons
        #: The longest: it sets the response budget (``max_new_tokens``).
        self.horizon = horizons[-1]
        #: The dataset name in metric keys (``eval/<eval_name>/accuracy``).
        self.eval_name = eval_name or self.name
        splits = {h: self._split(h, test_fraction, max_problems) for h in horizons}
        if len(horizons) == 1:
            train, test = splits[horizons[0]]
            self._train = train
            self._test = test[:eval_size]
            self._groups: dict[str, list[int]] = {}
            return
        # Mixed difficulty: the train list holds each horizon in proportion to its weight
        # (cycling a horizon's problems when it has fewer than its share: horizon 1 has 240), in a
        # fixed interleaved order; the held-out set has ``eval_size`` problems per horizon,
        # interleaved too, so any prefix of it (the logged samples, the calibration prompts) spans
        # every horizon.
        total = max_problems
        rng = random.Random(0)
        train_mix: list[TaskProblem] = []
        for h, w in zip(horizons, weights, strict=True):
            pool = splits[h][0]
            n = max(1, round(total * w))
            train_mix += [pool[i % len(pool)] for i in range(n)]
        rng.shuffle(train_mix)
        self._train = train_mix
        held = {h: splits[h][1][:eval_size] for h in horizons}
        self._test, self._groups = [], {f"{self.eval_name}_h{h}": [] for h in horizons}
        for i in range(max(len(v) for v in held.values())):
            for h in horizons:
                if i < len(held[h]):
                    self._groups[f"{self.eval_name}_h{h}"].append(len(self._test))
                    self._test.append(held[h][i])

    @classmethod
    def _split(
        cls, horizon: int, test_fraction: float, max_problems: int
    ) -> tuple[list[TaskProblem], list[TaskProblem]]:
        """(train, held-out) problems of one horizon; held-out in a fixed shuffled order."""
        train, test = [], []
        for p in cls._problems(horizon, max_problems):
            (test if split_of(p.prompt, test_fraction) == "test" else train).append(p)
        # The held-out subset is fixed (not seeded per run): every seed and algorithm is
        # evaluated on the same problems.
        random.Random(0).shuffle(test)
        return train, test

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

    def eval_groups(self) -> dict[str, list[int]]:
        """Held-out subsets reported on their own (``eval/<name>/accuracy``): one per horizon when
        the task mixes horizons (``arith_h<h>``), none otherwise. Values index
        :meth:`eval_problems`."""
        return {k: list(v) for k, v in self._groups.items()}

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
