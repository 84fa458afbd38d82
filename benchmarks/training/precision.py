"""``precision: auto | fp32 | bf16``: the dtype the model's matrix products run in.

bf16 runs the forward and backward matmuls under ``torch.autocast("cpu", dtype=torch.bfloat16)``
while the weights, the optimizer state and every reduction that decides a gradient stay in fp32.
The callers keep the rest fp32: the LM head and the critic's value head run outside the autocast
(``fastdecode.prefix_logprobs``, ``ValueModel.value_head``: a vocabulary-sized or scalar product,
cheap, and a bf16 logit would be off by up to |logit| / 256 in every log-prob and ratio);
attention runs in fp32 (``fastdecode.fp32_attention``: torch's bf16 CPU attention backward is
several times slower than fp32's at head_dim 32); and log-probs, ratios, advantages, losses (the
critic's BCE and MSE too) and every masked mean's count are computed after the autocast has
closed, from fp32 tensors (a bf16 count of 257 would round to 256). The rollout engine samples
with the same rounding: its GEMMs take bf16 copies of the weights, made at every call
(``fastdecode.LlamaDecoder``).

Autocast, not bf16 weights with fp32 masters: on the suite's GRPO update (256 rows, 2 layers,
d = 128) on a Xeon with AMX, autocast ran the forward + backward 1.86x as fast as fp32 and bf16
weights 1.94x (docs/performance.md), a 4% difference before paying for the master copy (a
gradient cast and a weight copy per step) and for a second set of weights in every checkpoint.
With autocast the fp32 weights are the only weights: the optimizer, checkpoints, resume and the
warm-start cache are the fp32 path's, unchanged.

It pays only where the CPU multiplies bf16 natively (AVX512-BF16 or AMX); elsewhere bf16 is
emulated and slower than fp32. ``auto`` is fp32 everywhere for now (:data:`AUTO_BF16`): the
default suite with 5 seeds in bf16 ended with lower final accuracy than in fp32 (PPO by 0.13,
DAPO by 0.15, paired intervals excluding 0) and with another verdict, so bf16 changes what the
suite concludes (docs/performance.md, "bf16"). ``precision=bf16`` asks for it explicitly.

The resolved value (never ``auto``) is what keys a warm start and what a run logs: two machines
that resolve ``auto`` differently build different starts and say so.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable
from pathlib import Path

import torch

__all__ = [
    "AUTO_BF16",
    "PRECISIONS",
    "autocast",
    "check_precision",
    "native_bf16",
    "resolve_precision",
]

#: Whether ``auto`` picks bf16 on a CPU with native bf16. False: bf16 changed the default
#: suite's conclusions (module docstring), so ``auto`` means fp32 on every CPU.
AUTO_BF16 = False

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
    """``fp32`` or ``bf16``: ``auto`` becomes bf16 on a CPU with native bf16 when
    :data:`AUTO_BF16` allows it, else (today: always) fp32."""
    value = check_precision(value)
    if value == "auto":
        return "bf16" if AUTO_BF16 and native_bf16(flags) else "fp32"
    return value


def autocast(precision: str) -> contextlib.AbstractContextManager:
    """The context the model's forward (and so its backward) runs in for a resolved
    ``precision``: CPU autocast to bf16, or nothing for fp32."""
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    if precision == "fp32":
        return contextlib.nullcontext()
    raise ValueError(f"precision={precision!r}: resolve it first; allowed here: fp32, bf16")
