"""Tasks for ``tests/suite/test_executor.py``: module-level, so a spawned worker or a Ray worker
imports them by name."""

from __future__ import annotations

import os
import time
from pathlib import Path

#: How many times this process was set up (by :func:`set_up`).
SET_UP = {"count": 0}


def set_up(marker: str) -> None:
    """A worker's set-up: counted, and its pid appended to ``marker``."""
    SET_UP["count"] += 1
    with open(marker, "a") as f:
        f.write(f"{os.getpid()}\n")


def whoami(x: int) -> tuple[int, int, int]:
    """``x``, this worker's pid, and how many times it was set up."""
    return x, os.getpid(), SET_UP["count"]


def square(x: int) -> int:
    return x * x


def pair(x: int) -> tuple[int, int]:
    """Two results, for a task with ``returns=2``."""
    return x, x + 1


def add(a: int, b: int) -> int:
    return a + b


def fail(message: str) -> None:
    raise ValueError(message)


def die() -> None:
    """The worker dies as a killed process does, reporting nothing."""
    os._exit(3)


def span(path: str, seconds: float) -> None:
    """Append this task's start and end times to ``path``."""
    t0 = time.time()
    time.sleep(seconds)
    with Path(path).open("a") as f:
        f.write(f"{t0} {time.time()}\n")
