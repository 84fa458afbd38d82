"""Checks at start, before any compute: disk space, writable output and tracking stores and,
with ``jobs=ray``, a Ray head node answering at ``ray.address``.

``min_free_disk_gb`` (root config key) is the free space each output location must have at
start (a checkpoint of a real model is several GB). The checks themselves live in
``benchmarks/telemetry/store.py``, which ``sppo-bench eval`` and ``sppo-bench sweep`` use too.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.telemetry.store import PreflightError, check_tracking_uri, check_writable_dir

if TYPE_CHECKING:
    from benchmarks.suite.plan import SuitePlan

__all__ = ["PreflightError", "preflight"]


def preflight(plan: SuitePlan) -> None:
    """Raise :class:`PreflightError` if an output location is unwritable or short of space, the
    tracking store cannot be written now, or (``jobs=ray``) no Ray cluster answers."""
    from benchmarks.suite.jobs import is_ray

    min_free = plan.min_free_disk_gb
    check_writable_dir("output_dir", str(plan.output_dir), plan.output_dir, min_free)
    if plan.cache_dir:
        check_writable_dir("cache_dir", plan.cache_dir, Path(plan.cache_dir), min_free)
    check_tracking_uri(plan.tracking.uri, min_free, key=plan.tracking.key)
    if is_ray(plan.jobs):
        from benchmarks.suite.cluster import check_ray_address

        check_ray_address(plan.ray.address)
