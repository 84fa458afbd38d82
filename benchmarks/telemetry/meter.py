"""Compute meter and budgets: the basis of "identical budgets".

FLOPs are analytic, from the model config, counting the matmuls that run on real (non-padding)
tokens: 2 FLOPs per multiply-add for every linear layer, the attention scores and the weighted
sum over the keys each position attends to (causal), and the LM head wherever logits are needed.
A backward pass costs twice its forward (the usual 3x for forward + backward). Padding, softmax,
norms and activations are not counted: they are waste or negligible, and counting them would make
the budget depend on batch composition rather than on the work an algorithm asked for.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from analysis import metrics as M
from benchmarks.telemetry.memory import trace_peak

if TYPE_CHECKING:
    from transformers import PretrainedConfig

__all__ = ["BUDGET_KINDS", "Budget", "ComputeMeter", "FlopModel", "PeakMemory"]


BUDGET_KINDS = ("rollout_tokens", "samples", "flops", "wall_s")


@dataclass(frozen=True)
class FlopModel:
    """Analytic FLOP counts of a decoder-only transformer (Llama/Qwen layout)."""

    hidden: int
    layers: int
    intermediate: int
    vocab: int
    kv_dim: int

    @classmethod
    def from_config(cls, cfg: PretrainedConfig) -> FlopModel:
        heads = cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
        return cls(
            cfg.hidden_size,
            cfg.num_hidden_layers,
            cfg.intermediate_size,
            cfg.vocab_size,
            kv_heads * head_dim,
        )

    @property
    def linear_params(self) -> int:
        """Weights touched per token by the blocks' matmuls (q, k, v, o and the gated MLP)."""
        d, kv = self.hidden, self.kv_dim
        return self.layers * (2 * d * d + 2 * d * kv + 3 * d * self.intermediate)

    def forward(
        self, new_tokens: int, past: int = 0, logits: int | None = None, head: bool = True
    ) -> int:
        """FLOPs of one forward over ``new_tokens`` positions that follow ``past`` cached ones.

        ``logits`` positions go through the LM head (default: all new tokens); a critic's scalar
        head (``head=False``) costs 2·d per position instead.
        """
        n = new_tokens
        if n <= 0:
            return 0
        # Position i (0-based among the new ones) attends to past + i + 1 keys.
        keys = n * past + n * (n + 1) // 2
        attn = 4 * self.layers * self.hidden * keys
        lin = 2 * self.linear_params * n
        k = n if logits is None else logits
        out = 2 * self.hidden * self.vocab * k if head else 2 * self.hidden * n
        return lin + attn + out

    def generate(self, prompt_len: int, response_len: int) -> int:
        """Prefill the prompt (logits at its last position) then decode ``response_len`` tokens:
        the first comes from the prefill, each later one needs a one-token step."""
        total = self.forward(prompt_len, 0, logits=1)
        for t in range(1, response_len):
            total += self.forward(1, prompt_len + t - 1, logits=1)
        return total


@dataclass
class Budget:
    """A limit on one compute counter; ``fractions`` are where evaluations happen."""

    kind: str
    limit: float
    eval_fractions: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)

    def __post_init__(self) -> None:
        if self.kind not in BUDGET_KINDS:
            raise ValueError(f"budget.kind={self.kind!r} is not one of {list(BUDGET_KINDS)}")
        if not self.limit > 0:
            raise ValueError(f"budget.limit={self.limit} must be > 0")
        fr = tuple(float(f) for f in self.eval_fractions)
        if any(not 0.0 <= f <= 1.0 for f in fr) or any(b <= a for a, b in itertools.pairwise(fr)):
            raise ValueError(
                f"budget.eval_fractions={list(fr)} must be increasing values in [0, 1]"
            )
        self.eval_fractions = fr

    def spent(self, meter: ComputeMeter) -> float:
        return meter.value(self.kind)

    def fraction(self, meter: ComputeMeter) -> float:
        return self.spent(meter) / self.limit


class PeakMemory:
    """Peak memory of the current run: CUDA allocator peak, or on CPU the process's resident set
    sampled by a thread (the process-lifetime VmHWM would carry one run's peak into the next)."""

    def __init__(self, interval_s: float = 0.02) -> None:
        self.interval = interval_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def _rss() -> int:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:  # not Linux: fall back to the lifetime peak
            import resource

            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self._rss())

    def start(self) -> None:
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        self.peak = self._rss()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def read(self) -> int:
        if torch.cuda.is_available():
            return int(torch.cuda.max_memory_allocated())
        self.peak = max(self.peak, self._rss())
        return self.peak

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


@dataclass
class ComputeMeter:
    """Cumulative counters of one run. Every logged step carries all of them (DESIGN section 3)."""

    rollout_tokens: int = 0
    samples: int = 0
    prompts: int = 0
    flops: dict[str, float] = field(default_factory=lambda: dict.fromkeys(M.PHASES, 0.0))
    wall: dict[str, float] = field(default_factory=lambda: dict.fromkeys(M.PHASES, 0.0))
    memory: PeakMemory = field(default_factory=PeakMemory)
    #: While True, each phase also records its peak live tensor bytes (torch's allocator, via
    #: the profiler: slow, so the trainer turns it on for one sampled step).
    trace_memory: bool = False
    #: Peak live tensor bytes per phase, the largest over the phase's traced entries.
    peak_tensor: dict[str, int] = field(default_factory=dict)

    def value(self, kind: str) -> float:
        return {
            "rollout_tokens": float(self.rollout_tokens),
            "samples": float(self.samples),
            "flops": self.total_flops,
            "wall_s": self.total_wall,
        }[kind]

    @property
    def total_flops(self) -> float:
        return float(sum(v for k, v in self.flops.items() if k != "eval"))

    @property
    def total_wall(self) -> float:
        """Training wall time; evaluation is metered apart so it never eats the budget."""
        return float(sum(v for k, v in self.wall.items() if k != "eval"))

    @contextmanager
    def phase(self, name: str, flops: float | Callable[[], float] | None = None) -> Iterator[None]:
        """Time the body as phase ``name`` and, once it has finished, count its ``flops``.

        ``flops`` is a number (work known beforehand: a pass over a given batch) or a function
        called after the clock stops (work known only afterwards: the rollout's lengths), so
        counting never adds to the phase's wall time. The time is counted even if the body
        raises; the FLOPs only if it finishes.
        """
        peaks: list[int] = []
        # The profiler starts before and stops after the clock: its set-up is not the phase's.
        with trace_peak(peaks) if self.trace_memory else nullcontext():
            t0 = time.perf_counter()
            try:
                yield
            finally:
                self.wall[name] += time.perf_counter() - t0
        if peaks:
            self.peak_tensor[name] = max(self.peak_tensor.get(name, 0), peaks[0])
        if flops is not None:
            self.add_flops(name, flops() if callable(flops) else flops)

    def add_flops(self, phase: str, flops: float) -> None:
        self.flops[phase] += float(flops)

    def metrics(self) -> dict[str, float]:
        out = {
            M.COMPUTE_ROLLOUT_TOKENS: float(self.rollout_tokens),
            M.COMPUTE_ROLLOUT_SAMPLES: float(self.samples),
            M.COMPUTE_PROMPTS: float(self.prompts),
            M.COMPUTE_FLOPS: self.total_flops,
            M.COMPUTE_WALL_S: self.total_wall,
            M.MEMORY_RSS_PEAK_BYTES: float(self.memory.read()),
        }
        if self.peak_tensor:
            out[M.MEMORY_PEAK_TENSOR_BYTES] = float(max(self.peak_tensor.values()))
            for p, v in self.peak_tensor.items():
                out[M.peak_tensor_phase(p)] = float(v)
        for p in M.PHASES:
            out[M.flops_phase(p)] = float(self.flops[p])
            out[M.wall_phase(p)] = float(self.wall[p])
        return out

    def state_dict(self) -> dict:
        return {
            "rollout_tokens": self.rollout_tokens,
            "samples": self.samples,
            "prompts": self.prompts,
            "flops": dict(self.flops),
            "wall": dict(self.wall),
            "peak_tensor": dict(self.peak_tensor),
        }

    def load_state_dict(self, state: dict) -> None:
        self.rollout_tokens = state["rollout_tokens"]
        self.samples = state["samples"]
        self.prompts = state["prompts"]
        self.flops = dict(state["flops"])
        self.wall = dict(state["wall"])
        self.peak_tensor = dict(state.get("peak_tensor", {}))  # absent in older checkpoints
