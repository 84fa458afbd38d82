"""Tensor shorthands the exact-value algorithm tests share.

Float64 inputs (:func:`f64`) show whether a function keeps its input's dtype end to end: a tensor
made in the default dtype rounds a float64 result to float32. The ``meta`` device
(:data:`META`, :func:`meta`) stands in for an accelerator: like CUDA it refuses a non-scalar CPU
tensor in an operation on its tensors, so an output made on the default device fails there.
"""

from __future__ import annotations

import math

import torch

F64 = torch.float64
INF = math.inf
NAN = math.nan
META = torch.device("meta")
#: Group ids left on the CPU: they may stay there beside an accelerator's rewards.
IDS_CPU = torch.tensor([0, 0, 1])


def f64(x) -> torch.Tensor:
    """``x`` as a float64 tensor."""
    return torch.tensor(x, dtype=F64)


def meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Zeros of ``shape`` on the ``meta`` device."""
    return torch.zeros(shape, dtype=dtype, device=META)


def meta_mask(*shape: int) -> torch.Tensor:
    """A boolean response mask of ``shape`` on the ``meta`` device."""
    return meta(*shape, dtype=torch.bool)


def on_devices(out) -> list[torch.device]:
    """The devices of the tensors in ``out`` (one tensor or a tuple, ``None`` entries skipped)."""
    tensors = out if isinstance(out, tuple) else (out,)
    return [t.device for t in tensors if isinstance(t, torch.Tensor)]


def assert_on_meta(out) -> None:
    """Every tensor in ``out`` is on the ``meta`` device, and there is at least one."""
    devices = on_devices(out)
    assert devices and all(d == META for d in devices)
