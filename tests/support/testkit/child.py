"""Functions a test runs in a spawned process (they must be importable there by name)."""

from __future__ import annotations

from typing import Any


def grade_and_close(task: Any, responses: list[str], problems: list[Any]) -> list[float]:
    """Grade with a task received by pickling, as a suite's worker process does."""
    try:
        return task.grade(responses, problems).scores
    finally:
        task.close()
