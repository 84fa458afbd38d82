"""The suite's graders as verl's custom reward function.

verl calls ``compute_score(data_source, solution_str, ground_truth, extra_info)`` once per
response (``reward.custom_reward_function.path=pkg://benchmarks.verl_engine.reward``), from a
thread pool of its reward-loop workers. Grading is the native engine's: ``arith`` by the task's
own extraction, integers exactly, LaTeX answers by math-verify in a sandboxed process pool with a
per-item timeout (a hung or crashing item scores 0 and is counted, never stalls training). One
grader set per process, started on first use and shared by every call.

The result is ``{"score": R, "acc": R, "grader_timeout": 0|1, "grader_error": 0|1}``: verl takes
``score`` as the reward, reports ``acc`` per data source in validation
(``val-core/<dataset>/acc/mean@k``) and DAPO's group filter reads ``acc`` (the unshaped score).
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

__all__ = ["compute_score"]

#: Per-item grading budget in seconds (math-verify); the suite's task.grader_timeout_s default.
TIMEOUT_ENV = "SPPO_BENCH_GRADER_TIMEOUT_S"

_lock = threading.Lock()
_graders: Any = None


def _grader_set() -> Any:
    global _graders
    with _lock:
        if _graders is None:
            from benchmarks.tasks.dataset_task import GraderSet

            _graders = GraderSet(timeout_s=float(os.environ.get(TIMEOUT_ENV, "3.0")), workers=1)
            atexit.register(_graders.close)
        return _graders


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """Score one response against its gold answer (see the module docstring).

    >>> compute_score("arith", "7+5=2;2*3=6;#6", "6", {"grader": "arith"})["score"]
    1.0
    >>> compute_score("gsm8k", "so the answer is 41", "42", {"grader": "integer"})["score"]
    0.0
    """
    from benchmarks.tasks.arith import ArithTask
    from benchmarks.tasks.base import TaskProblem

    kind = str((extra_info or {}).get("grader") or "math_verify")
    if kind == "arith":
        score = 1.0 if ArithTask.extract(solution_str) == str(ground_truth) else 0.0
        return {"score": score, "acc": score, "grader_timeout": 0.0, "grader_error": 0.0}
    if kind not in ("integer", "math_verify"):
        raise ValueError(f"extra_info.grader={kind!r}; valid: arith, integer, math_verify")
    problem = TaskProblem(id="", prompt="", answer=str(ground_truth), grader=kind)
    result = _grader_set().grade([solution_str], [problem])
    score = float(result.scores[0])
    return {
        "score": score,
        "acc": score,
        "grader_timeout": float(result.timeouts),
        "grader_error": float(result.errors),
    }
