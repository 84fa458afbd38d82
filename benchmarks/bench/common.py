"""What every section of ``sppo-bench bench`` shares: its settings, the measured figures, the
round-robin results, the shared model and task, and the CPU share a measurement got.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

__all__ = ["TARGETS", "BenchContext", "BenchSettings", "Figure", "Results", "cpu_share"]


#: The speed targets the run reports as met or not: (ratio key, comparison, threshold).
TARGETS: tuple[tuple[str, str, float], ...] = (
    ("step_vs_trl_shipped", ">=", 1.5),
    ("step_vs_trl_no_ckpt", ">=", 1.2),
    ("step_flop_utilisation", ">=", 0.75),
    ("rollout_vs_hf_large", ">=", 2.0),
    # on a CPU with native bf16 (AVX512-BF16 or AMX); emulated bf16 is slower than fp32
    ("step_bf16_vs_fp32", ">=", 1.5),
    ("warmstart_bf16_vs_fp32", ">=", 1.5),
    ("tracking_overhead", "<=", 0.02),
)


@dataclass
class BenchSettings:
    """What to measure; ``quick`` is a CI smoke test, not a measurement."""

    repeats: int = 7
    warmup: int = 2
    rollout_batches: tuple[int, int] = (64, 256)
    samples_per_step: int = 256  # 32 prompts x 8 completions
    group_size: int = 8
    threads: int = 1
    seed: int = 0
    trl: bool = True
    memory: bool = True
    gemm_min_s: float = 0.05  # each GEMM figure times at least this long

    @classmethod
    def quick(cls) -> BenchSettings:
        return cls(
            repeats=2,
            warmup=1,
            rollout_batches=(16, 64),
            samples_per_step=32,
            group_size=8,
            gemm_min_s=0.005,
        )


# ----------------------------------------------------------------------------- statistics


@dataclass
class Figure:
    """Repeated measurements of one quantity."""

    section: str
    name: str
    metric: str
    unit: str
    values: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return float(statistics.median(self.values)) if self.values else float("nan")

    def row(self) -> dict[str, Any]:
        v = self.values
        return {
            "section": self.section,
            "name": self.name,
            "metric": self.metric,
            "unit": self.unit,
            "median": self.median,
            "min": float(min(v)) if v else float("nan"),
            "max": float(max(v)) if v else float("nan"),
            "n": len(v),
        }


class Results:
    """Every figure of a run, by (section, name, metric), and run-wide facts in ``meta``."""

    def __init__(self) -> None:
        self.figures: dict[tuple[str, str, str], Figure] = {}
        self.meta: dict[str, Any] = {}

    def add(self, section: str, name: str, metric: str, unit: str, value: float) -> None:
        key = (section, name, metric)
        if key not in self.figures:
            self.figures[key] = Figure(section, name, metric, unit)
        self.figures[key].values.append(float(value))

    def get(self, section: str, name: str, metric: str) -> Figure:
        return self.figures[(section, name, metric)]

    def rows(self) -> list[dict[str, Any]]:
        return [f.row() for f in self.figures.values()]


def cpu_share(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """Run ``fn``; returns (result, wall seconds, CPU seconds of this thread)."""
    c0, t0 = time.thread_time(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, time.thread_time() - c0


# ----------------------------------------------------------------------------- shared context


@dataclass
class BenchContext:
    """The model, tokenizer, task and shuffled problems every section measures on, the
    completion length, and a temporary directory (MLflow store, TRL's model copy)."""

    cfg: Any
    model: torch.nn.Module
    tok: Any
    task: Any
    problems: list
    max_new: int
    tmp: Path
