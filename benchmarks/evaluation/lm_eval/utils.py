"""lm-eval hooks of the sppo-bench task YAMLs: our prompts in, our graders' verdicts out.

The task YAMLs beside this module name these functions (``!function
benchmarks.evaluation.lm_eval.utils.process_results_math_verify``), so lm-eval scores responses with
exactly the graders of ``sppo-bench eval`` (:mod:`benchmarks.tasks.grading`): integer match in process,
math-verify in a process pool with per-item timeouts. Numbers from the two routes then differ
only where the responses differ.

lm-eval calls ``process_results(doc, results)`` once per problem. ``results`` is
``[response]`` for greedy tasks (lm-eval's default ``take_first`` filter), giving
``{"accuracy": verdict}``; with ``repeats: k`` and a ``take_first_k`` filter it is
``[[response_1, ..., response_k]]``, giving avg@k and pass@j per problem as ``avg_at_<k>`` and
``pass_at_<j>`` (lm-eval's ``mean`` aggregation over problems then equals sppo-bench's numbers).

State lives at module level because lm-eval gives hooks no context: the prompt template
(``$SPPO_BENCH_TEMPLATE``, default ``plain``, or :func:`configure`), the grader pools (started on
first use, closed by :func:`close_graders` or at exit), the timeout and error counts
(:func:`grader_counts`), and each response's verdict (:func:`verdict`) so a caller can build a
per-sample table without grading twice.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from benchmarks.evaluation.estimators import pass_at_k
from benchmarks.tasks.datasets import PROMPT_TEMPLATES, Problem, prompt_messages, render_prompt
from benchmarks.tasks.grading import Grader, GraderKind

__all__ = [
    "TEMPLATE_ENV",
    "close_graders",
    "configure",
    "doc_to_text",
    "doc_to_text_arith",
    "grader_counts",
    "process_results_arith",
    "process_results_integer",
    "process_results_math_verify",
    "reset",
    "verdict",
]

#: Environment variable naming the prompt template when lm-eval is run from its own CLI.
TEMPLATE_ENV = "SPPO_BENCH_TEMPLATE"


class _State:
    def __init__(self) -> None:
        self.template = os.environ.get(TEMPLATE_ENV, "plain")
        self.timeout_s = 3.0
        self.workers = 2
        self.graders: dict[str, Grader] = {}
        self.issues: dict[tuple[str, str], list[int]] = {}  # (id, answer) -> [timeouts, errors]
        self.verdicts: dict[tuple[str, str, str], float] = {}
        self.lock = threading.Lock()


_STATE = _State()


def configure(
    *, template: str | None = None, timeout_s: float | None = None, workers: int | None = None
) -> None:
    """Set the prompt template and the math-verify pool's timeout and size (before grading)."""
    if template is not None:
        if template not in PROMPT_TEMPLATES:
            raise ValueError(f"unknown template {template!r}; valid: {sorted(PROMPT_TEMPLATES)}")
        _STATE.template = template
    if timeout_s is not None or workers is not None:
        close_graders()  # a running pool keeps its old settings
        _STATE.timeout_s = _STATE.timeout_s if timeout_s is None else float(timeout_s)
        _STATE.workers = _STATE.workers if workers is None else int(workers)


def reset() -> None:
    """Forget counts and verdicts (between evaluations)."""
    with _STATE.lock:
        _STATE.issues.clear()
        _STATE.verdicts.clear()


def close_graders() -> None:
    """Stop the grader pools (they also stop when the interpreter exits)."""
    with _STATE.lock:
        for g in _STATE.graders.values():
            g.close()
        _STATE.graders.clear()


def grader_counts(doc_id: str | None = None, answer: str | None = None) -> tuple[int, int]:
    """``(timeouts, errors)`` since the last :func:`reset`: of one problem, or of all."""
    with _STATE.lock:
        if doc_id is not None:
            t, e = _STATE.issues.get((str(doc_id), str(answer)), (0, 0))
            return t, e
        return (
            sum(t for t, _ in _STATE.issues.values()),
            sum(e for _, e in _STATE.issues.values()),
        )


def verdict(doc_id: str, answer: str, response: str) -> float | None:
    """The score given to ``response`` for problem ``doc_id`` (gold ``answer``), if graded."""
    return _STATE.verdicts.get((str(doc_id), str(answer), response))


# --- prompts ---------------------------------------------------------------------------------


def _problem(doc: dict[str, Any]) -> Problem:
    return Problem(
        id=str(doc.get("id", "")), question=str(doc["problem"]), answer=str(doc["answer"])
    )


def doc_to_text(doc: dict[str, Any]) -> str:
    """The prompt of a real-dataset problem in the configured template.

    A text template gives the whole prompt. A chat template gives the user message only: lm-eval
    wraps it with the tokenizer's chat template when run with ``apply_chat_template=True``, and
    the template's system message goes in as ``system_instruction``.
    """
    template = _STATE.template
    problem = _problem(doc)
    if PROMPT_TEMPLATES[template].kind == "text":
        return render_prompt(problem, template)
    return prompt_messages(problem, template)[-1]["content"]


def doc_to_text_arith(doc: dict[str, Any]) -> str:
    """``arith`` prompts are the expression itself (``7+5*3=``), never templated."""
    return str(doc["problem"])


# --- scoring ---------------------------------------------------------------------------------


def _responses(results: Sequence[Any]) -> tuple[list[str], bool]:
    """(responses, sampled): ``[[r1..rk]]`` from a take_first_k filter, ``[r]`` from take_first."""
    if results and isinstance(results[0], list | tuple):
        return [str(r) for r in results[0]], True
    return [str(r) for r in results], False


def _grader(kind: GraderKind) -> Grader:
    with _STATE.lock:
        if kind not in _STATE.graders:
            _STATE.graders[kind] = Grader(kind, timeout_s=_STATE.timeout_s, workers=_STATE.workers)
        return _STATE.graders[kind]


def _metrics(doc: dict[str, Any], responses: list[str], scores: list[float], sampled: bool) -> dict:
    pid, answer = str(doc.get("id", "")), str(doc["answer"])
    with _STATE.lock:
        for r, s in zip(responses, scores, strict=True):
            _STATE.verdicts[(pid, answer, r)] = s
    if not sampled:
        return {"accuracy": scores[0]}
    from analysis.metrics import avg_at_name, pass_at_name, pass_ks

    n, c = len(scores), round(sum(scores))
    return {avg_at_name(n): c / n, **{pass_at_name(j): pass_at_k(n, c, j) for j in pass_ks(n)}}


def _process(doc: dict[str, Any], results: Sequence[Any], kind: GraderKind) -> dict:
    responses, sampled = _responses(results)
    g = _grader(kind).grade(responses, [str(doc["answer"])] * len(responses))
    if g.timeouts or g.errors:
        with _STATE.lock:
            issue = _STATE.issues.setdefault((str(doc.get("id", "")), str(doc["answer"])), [0, 0])
            issue[0] += g.timeouts
            issue[1] += g.errors
    return _metrics(doc, responses, g.scores, sampled)


def process_results_integer(doc: dict[str, Any], results: Sequence[Any]) -> dict:
    """Exact integer match (AIME, AMC, GSM8K), as ``Grader("integer")``."""
    return _process(doc, results, "integer")


def process_results_math_verify(doc: dict[str, Any], results: Sequence[Any]) -> dict:
    """math-verify equivalence in the sandboxed pool (MATH, Minerva, OlympiadBench)."""
    return _process(doc, results, "math_verify")


def process_results_arith(doc: dict[str, Any], results: Sequence[Any]) -> dict:
    """The ``arith`` rule: the digits after the last ``#`` must equal the answer."""
    from benchmarks.tasks.arith import ArithTask

    responses, sampled = _responses(results)
    answer = str(doc["answer"])
    scores = [1.0 if ArithTask.extract(r) == answer else 0.0 for r in responses]
    return _metrics(doc, responses, scores, sampled)
