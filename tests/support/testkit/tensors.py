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


def f64(x) -> torch.Tensor:
    """``x`` as a float64 tensor."""
    return torch.tensor(x, dtype=F64)


def meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Zeros of ``shape`` on the ``meta`` device."""
    return torch.zeros(shape, dtype=dtype, device=META)


def meta_mask(*shape: int) -> torch.Tensor:
    """A boolean response mask of ``shape`` on the ``meta`` device."""
    return meta(*shape, dtype=torch.bool)
