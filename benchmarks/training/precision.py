"""``precision: auto | fp32 | bf16``: the dtype the model's matrix products run in.

bf16 runs the forward and backward matmuls under ``torch.autocast("cpu", dtype=torch.bfloat16)``
while the weights, the optimizer state and every reduction that decides a gradient stay in fp32
(log-probs, ratios, advantages, losses and masked-mean counts are computed from fp32 tensors by
the callers). It pays only where the CPU multiplies bf16 natively (AVX512-BF16 or AMX); elsewhere
bf16 is emulated and slower than fp32, so ``auto`` resolves to bf16 only on such a CPU.

The resolved value (never ``auto``) is what keys a warm start and what a run logs: two machines
that resolve ``auto`` differently build different starts and say so.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable
from pathlib import Path

import torch

__all__ = ["PRECISIONS", "autocast", "check_precision", "native_bf16", "resolve_precision"]

#: The values ``precision`` takes.
PRECISIONS = ("auto", "fp32", "bf16")

#: /proc/cpuinfo flags of the CPUs that multiply bf16 in hardware.
_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def check_precision(value: object, field: str = "precision") -> str:
    """``value`` if it is one of :data:`PRECISIONS`, else a ValueError naming ``field``."""
    if value not in PRECISIONS:
        raise ValueError(f"{field}={value!r}: allowed: {', '.join(PRECISIONS)}")
    return str(value)


def _cpu_flags() -> Iterable[str]:
    """The CPU's feature flags (Linux's /proc/cpuinfo); empty elsewhere, which reads as no
    native bf16 and keeps ``auto`` at fp32."""
    if not sys.platform.startswith("linux"):
        return ()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ()
    for line in text.splitlines():
        if line.startswith("flags"):
            return line.split(":", 1)[1].split()
    return ()


def native_bf16(flags: Iterable[str] | None = None) -> bool:
    """Whether the CPU with these flags (default: this one) multiplies bf16 natively."""
    return bool(_BF16_FLAGS & set(_cpu_flags() if flags is None else flags))


def resolve_precision(value: str, flags: Iterable[str] | None = None) -> str:
    """``fp32`` or ``bf16``: ``auto`` becomes bf16 on a CPU with native bf16, else fp32."""
    value = check_precision(value)
    if value == "auto":
        return "bf16" if native_bf16(flags) else "fp32"
    return value


def autocast(precision: str) -> contextlib.AbstractContextManager:
    """The context the model's forward (and so its backward) runs in for a resolved
    ``precision``: CPU autocast to bf16, or nothing for fp32."""
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    if precision == "fp32":
        return contextlib.nullcontext()
    raise ValueError(f"precision={precision!r}: resolve it first; allowed here: fp32, bf16")
