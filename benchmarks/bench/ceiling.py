"""Section 1 of ``sppo-bench bench``: the CPU's fp32 and bf16 GEMM GFLOP/s at the model's matmul
shapes; the best fp32 figure is the ceiling every utilisation divides by (re-measured each round
by the ``Probe``, so a change of load does not bias the ratios).
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from benchmarks.bench.common import BenchSettings, Results

__all__ = ["Probe", "bench_ceiling", "gemm_shapes", "time_gemm"]


def gemm_shapes(cfg, tokens: int, decode_batch: int) -> list[tuple[str, int, int, int]]:
    """(label, M, K, N) of the model's linear layers at ``tokens`` rows (a training batch) and at
    ``decode_batch`` rows (one decode step)."""
    d, inter = cfg.hidden_size, cfg.intermediate_size
    kv = cfg.num_key_value_heads * (getattr(cfg, "head_dim", None) or d // cfg.num_attention_heads)
    out = []
    for m, tag in ((tokens, "train"), (decode_batch, "decode")):
        out += [
            (f"{tag} q/o {m}x{d}x{d}", m, d, d),
            (f"{tag} k/v {m}x{d}x{kv}", m, d, kv),
            (f"{tag} gate/up {m}x{d}x{inter}", m, d, inter),
            (f"{tag} down {m}x{inter}x{d}", m, inter, d),
        ]
    return out


def time_gemm(m: int, k: int, n: int, dtype: torch.dtype, min_s: float) -> float:
    """GFLOP/s of ``F.linear`` (x @ W.T, as nn.Linear runs it) at (m, k) x (k, n)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(m, k, generator=g).to(dtype)
    w = torch.randn(n, k, generator=g).to(dtype)
    F.linear(x, w)
    reps = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(reps):
            F.linear(x, w)
        dt = time.perf_counter() - t0
        if dt >= min_s:
            return 2.0 * m * k * n * reps / dt / 1e9
        reps *= 2


class Probe:
    """The ceiling's best shape, re-measured in every round of sections 2 and 3, so a
    utilisation compares work and ceiling under the same load (the machine may be shared)."""

    def __init__(self, res: Results, shape: tuple[str, int, int, int], min_s: float) -> None:
        self.res, self.shape, self.min_s = res, shape, min_s

    def __call__(self) -> float:
        _, m, k, n = self.shape
        gf = time_gemm(m, k, n, torch.float32, self.min_s)
        self.res.add("ceiling", f"{self.shape[0]} (in-round probe)", "fp32 GFLOP/s", "GFLOP/s", gf)
        return gf


def bench_ceiling(res: Results, cfg, s: BenchSettings, tokens: int) -> Probe:
    """Section 1: fp32 and bf16 GFLOP/s at each of the model's shapes (``cfg``, its HF config)
    for a training batch of ``tokens`` rows and the largest decode batch; records the ceilings
    in ``res.meta`` and returns the probe of the best fp32 shape."""
    shapes = gemm_shapes(cfg, tokens, max(s.rollout_batches))
    for _ in range(max(3, s.repeats // 2)):
        for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
            for label, m, k, n in shapes:
                gf = time_gemm(m, k, n, dtype, s.gemm_min_s / (4 if name == "bf16" else 1))
                res.add("ceiling", label, f"{name} GFLOP/s", "GFLOP/s", gf)
    best = max(
        res.get("ceiling", label, "fp32 GFLOP/s").median for label, *_ in shapes
    )  # the ceiling: the best the cores reach at any of the model's shapes
    res.meta["ceiling_gflops_fp32"] = best
    res.meta["ceiling_gflops_bf16"] = max(
        res.get("ceiling", label, "bf16 GFLOP/s").median for label, *_ in shapes
    )
    top = max(shapes, key=lambda sh: res.get("ceiling", sh[0], "fp32 GFLOP/s").median)
    res.meta["ceiling_shape"] = top[0]
    return Probe(res, top, max(0.002, s.gemm_min_s / 2))
