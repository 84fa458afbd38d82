"""Real benchmark datasets (MATH, GSM8K, AIME, ...) as tasks: problems read from JSONL (or the hub)
by :mod:`benchmarks.tasks.datasets`, graded by the graders of :mod:`benchmarks.tasks.grading` in
a sandboxed process pool (``GraderSet``): model output is untrusted input.
"""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks.tasks.base import TaskProblem
from benchmarks.tasks.grading import Grader, GradeResult

__all__ = ["DatasetTask", "GraderSet"]


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
        tokenizer=None,  # any HF tokenizer, for chat templates
    ) -> None:
        from benchmarks.tasks.datasets import DATASETS, load_dataset, render_prompt

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
