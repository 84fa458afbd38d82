"""Which sppo-bench tasks have an lm-eval task YAML here: read from the directory, so settings can
be validated without importing the harness runner (or lm-eval itself)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["TASKS_DIR", "lm_eval_task_name", "supported_tasks"]

#: The directory to pass to lm-eval as ``include_path``.
TASKS_DIR = Path(__file__).resolve().parent


def lm_eval_task_name(task: str) -> str:
    """The lm-eval task of an sppo-bench task name: ``math500`` -> ``sppo_math500``."""
    return f"sppo_{task}"


def supported_tasks() -> list[str]:
    """sppo-bench task names that have a task YAML here."""
    return sorted(p.stem[len("sppo_") :] for p in TASKS_DIR.glob("sppo_*.yaml"))
