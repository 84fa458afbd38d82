"""How many worker processes a suite gets (``jobs``): the machine's cores and memory; or
``jobs=ray``, the tasks of a Ray cluster (``benchmarks/suite/cluster.py``)."""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["RAY", "WORKER_BYTES", "available_memory", "is_ray", "resolve_jobs", "usable_cpus"]

#: ``jobs=ray``: the runs are tasks of the Ray cluster at ``ray.address``.
RAY = "ray"


def is_ray(value: Any) -> bool:
    """Whether ``jobs`` asks for the Ray cluster."""
    return isinstance(value, str) and value.strip().lower() == RAY


def usable_cpus() -> int:
    """Cores this process may run on (its affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


#: Memory a worker needs, for ``jobs=auto``: its resident set on the default suite is ~0.8 GB,
#: mostly torch's and transformers' pages (docs/memory.md).
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
    an int >= 1 (``ray`` is checked with :func:`is_ray` first: it is not a process count)."""
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
        raise ValueError(
            f"jobs={value!r}: allowed 'auto' or an integer >= 1, or 'ray' (the tasks of the Ray "
            "cluster at ray.address)"
        )
    return max(1, min(n, tasks))
