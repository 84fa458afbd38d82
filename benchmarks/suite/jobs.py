"""How many worker processes a suite gets (``jobs``), and what keeps it in one process."""

from __future__ import annotations

import logging
import logging.handlers
import os
import pickle
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.suite.plan import SuitePlan

log = logging.getLogger(__name__)

__all__ = ["WORKER_BYTES", "available_memory", "parallel_blocker", "resolve_jobs", "usable_cpus"]


def usable_cpus() -> int:
    """Cores this process may run on (its affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


#: Memory a worker needs, for ``jobs=auto``: its resident set on the default suite is ~0.8 GB,
#: mostly torch's and transformers' pages.
WORKER_BYTES = 1 << 30


def available_memory() -> int | None:
    """Bytes the kernel could give new processes without swapping (Linux ``MemAvailable``)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def resolve_jobs(value: Any, tasks: int, available: int | None = None) -> int:
    """``jobs`` as a number of processes: ``auto`` is one per usable core while memory allows
    (``WORKER_BYTES`` each of ``available``, read from the kernel when not given), never more
    than there are runs. Raises ValueError naming the field for anything else than ``auto`` or
    an int >= 1."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        n = usable_cpus()
        available = available_memory() if available is None else available
        if available is not None:
            n = min(n, available // WORKER_BYTES)
        return max(1, min(n, tasks))
    if isinstance(value, bool):
        n = None
    else:
        try:
            n = int(value)
        except (TypeError, ValueError):
            n = None
    if n is None or n < 1 or str(value).strip() != str(n):
        raise ValueError(f"jobs={value!r}: allowed 'auto' or an integer >= 1")
    return max(1, min(n, tasks))


def parallel_blocker(plan: SuitePlan, *, on_eval: bool) -> str | None:
    """Why this suite must run in one process, or None when workers can run it."""
    if on_eval:
        return "an on_eval callback (a sweep trial) is called in this process"
    if plan.model.real:
        return "a real checkpoint is loaded once and shared"
    if plan.device != "cpu":
        return f"engine.device={plan.device} (one accelerator)"
    rollout = str(plan.engine.get("rollout", "torch"))
    if rollout != "torch":
        return f"engine.rollout={rollout}"
    for name, alg in plan.algorithms.items():
        module = type(alg).__module__
        if module == "__main__":
            return f"algorithm {name!r} is defined in __main__, which a worker cannot import"
        try:
            pickle.dumps(alg)
        except Exception as e:  # a local class, a lambda in its config, ...
            return f"algorithm {name!r} cannot be sent to a worker ({type(e).__name__}: {e})"
    return None
