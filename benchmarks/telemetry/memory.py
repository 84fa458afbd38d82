"""Memory per component: the CPU analogue of the paper's peak-VRAM figure.

The resident set of a CPU process is mostly the interpreter and its libraries, so it cannot tell
a scalar prompt critic from a token critic. What differs between algorithms is the tensors they
keep: the weights, gradients and optimizer states of the policy, the critic and the frozen
reference, and the activations a phase holds at its peak. The first are counted exactly from the
live tensors (numel x element size, each storage once; gradients as the buffers a backward
allocates for the trainable parameters); the second is read from torch's own
allocator records on one sampled step (``torch.profiler`` with ``profile_memory=True``), because
activations exist only inside a phase.

Metric names: ``memory/<component>/<kind>_bytes`` (component policy, critic, reference; kind
params, grads, optimizer) and ``memory/peak_tensor_bytes`` (the largest of the phases'
``memory/peak_tensor_bytes/<phase>``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

log = logging.getLogger(__name__)

__all__ = [
    "COMPONENTS",
    "KINDS",
    "component_metric",
    "component_metrics",
    "module_memory",
    "optimizer_state_tensors",
    "peak_tensor_bytes",
    "tensor_bytes",
    "trace_peak",
]

#: The components a run may hold, and what each keeps.
COMPONENTS = ("policy", "critic", "reference")
KINDS = ("params", "grads", "optimizer")


def component_metric(component: str, kind: str) -> str:
    """``memory/<component>/<kind>_bytes``, e.g. ``memory/critic/optimizer_bytes``."""
    return f"memory/{component}/{kind}_bytes"


def tensor_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes of the distinct storages among ``tensors`` (a tied or viewed tensor counts once:
    the question is what the process holds, not how many names point at it)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for t in tensors:
        if t is None:
            continue
        key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        if key in seen and key[0] != 0:
            continue
        seen.add(key)
        total += t.numel() * t.element_size()
    return total


def optimizer_state_tensors(optimizer: torch.optim.Optimizer | None) -> Iterator[torch.Tensor]:
    """Every tensor of an optimizer's per-parameter state (Adam: exp_avg, exp_avg_sq, step)."""
    if optimizer is None:
        return
    for state in optimizer.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor):
                yield v


def module_memory(
    module: torch.nn.Module | None, optimizer: torch.optim.Optimizer | None = None
) -> dict[str, int]:
    """Bytes of a module's parameters, of the gradients a backward allocates for them, and of the
    optimizer's state (created by the first step, so 0 before it; restored with a checkpoint).

    Gradients are counted for every trainable parameter at its own dtype, whether or not they
    are allocated at this moment: whether ``.grad`` still holds the last step's tensors depends
    on the process's history (a resumed run, a step whose batch was filtered out), and a run's
    numbers must not."""
    if module is None:
        return {}
    params = list(module.parameters())
    return {
        "params": tensor_bytes(params),
        "grads": tensor_bytes(p for p in params if p.requires_grad),
        "optimizer": tensor_bytes(optimizer_state_tensors(optimizer)),
    }


def component_metrics(components: dict[str, dict[str, int]]) -> dict[str, float]:
    """``{component: {kind: bytes}}`` as ``memory/<component>/<kind>_bytes`` metrics."""
    return {
        component_metric(c, k): float(v)
        for c, kinds in components.items()
        for k, v in kinds.items()
    }


def peak_tensor_bytes(events: Iterable[Any]) -> int:
    """Peak of live tensor bytes over a profile's events, relative to its start.

    Each event's *self* memory (allocations minus frees made by the op itself, not its children)
    is added in start order, so the peak is exact at operator granularity: a transient freed
    inside one kernel's own call is not seen."""
    live = peak = 0
    for e in sorted(events, key=lambda e: (e.time_range.start, -e.time_range.end)):
        live += int(e.self_cpu_memory_usage) + int(getattr(e, "self_device_memory_usage", 0) or 0)
        peak = max(peak, live)
    return peak


@contextmanager
def trace_peak(out: list[int]) -> Iterator[None]:
    """Profile the body's allocations and append its peak live tensor bytes to ``out``.

    The profiler slows every operator it records, so the caller keeps its set-up and tear-down
    outside any clock it reads (see :meth:`ComputeMeter.phase`)."""
    from torch.profiler import ProfilerActivity, profile

    # Kineto prints two lines to stderr per profiled phase at its default level; 6 is above its
    # highest (read when a profile starts, so setting it here is enough). A user's value stays.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities, profile_memory=True) as prof:
        yield
    out.append(peak_tensor_bytes(prof.events()))
