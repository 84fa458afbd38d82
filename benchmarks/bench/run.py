"""``sppo-bench bench``: how close the suite's engine and trainer get to the CPU's limit, and how
they compare with HF ``generate()`` and TRL's ``GRPOTrainer``, measured side by side in one process.

Sections (each figure is the median of several repeats after warm-up, with min and max):

1. ceiling: fp32 and bf16 GEMM GFLOP/s at the model's matmul shapes (``F.linear`` at the training
   batch's token count and at the decode batch); the best fp32 figure is *the* ceiling, and
   that shape is re-measured in every round below (utilisations divide by the round's own
   figure, so a change of load during the run does not bias them);
2. rollout: tokens/s of :class:`~benchmarks.engines.torch_engine.TorchEngine` versus HF ``generate()`` on the
   same model, prompts and sampling settings, at two batch sizes, with achieved GFLOP/s (analytic,
   :class:`~benchmarks.telemetry.meter.FlopModel`) as a fraction of the ceiling;
3. step: one full GRPO step (rollout + grading + update) of :class:`~benchmarks.training.trainer.RLTrainer`,
   in fp32 and in bf16 (``precision``), versus TRL ``GRPOTrainer`` (as shipped: gradient
   checkpointing on; and with it off) on the same model, task, batch, group size, KL coefficient
   and reward; per-phase times and the step's analytic FLOPs over its time as a fraction of the
   ceiling;
4. warmstart: one supervised warm-start step in fp32 and in bf16;
5. tracking: MLflow logging per step (temporary SQLite store) as a percentage of step time;
6. memory: peak resident-set growth of each contender, each measured in a forked child.

bf16 figures sit beside fp32's as ratios taken in the same round (rollout, step, warm-start step):
``precision=auto`` picks bf16 only on a CPU that multiplies it natively, where the targets
``step_bf16_vs_fp32`` and ``warmstart_bf16_vs_fp32`` ask for 1.5x; elsewhere the ratios say
what emulated bf16 would cost.

FLOPs are the analytic ones of :class:`~benchmarks.telemetry.meter.FlopModel` (the standard computation on
real tokens, the same formula for every contender), so work an engine avoids (a prompt shared by
its group, padding) counts as done: utilisation is *effective* throughput over the ceiling.

Contenders are interleaved (A, B, C, A, B, C, ...) and ratios are taken per round, so a machine
whose load changes during the run still gives stable ratios; the output states how loaded the
machine was (load average, and the CPU share this process got). Everything runs with the suite's
thread count (``threads`` in the config, 1 by default) unless ``--threads`` says otherwise.

TRL runs with ``bf16=False`` (TRL defaults to bf16 autocast, which has no hardware support on most
CPUs and would only slow it down) and otherwise its defaults, except where the comparison needs
the suite's settings: group size, batch, completion length, temperature, KL coefficient,
``loss_type="grpo"`` (per-sequence token mean, as the suite's GRPO), a constant learning rate.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import os
import random
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from benchmarks.bench.ceiling import bench_ceiling
from benchmarks.bench.common import TARGETS, BenchContext, BenchSettings, Results
from benchmarks.bench.generation import bench_rollout
from benchmarks.bench.memory import bench_memory
from benchmarks.bench.step import bench_step, mlflow_tracker, record_tracking
from benchmarks.bench.warmstart_step import bench_warmstart

log = logging.getLogger(__name__)

__all__ = ["main", "print_results", "run_bench", "write_results"]


# ----------------------------------------------------------------------------- driver


def _ratio_value(res: Results, key: str, s: BenchSettings) -> float:
    """The median figure a target (a key of ``TARGETS``) is judged on; NaN if not measured."""
    big = max(s.rollout_batches)
    f = {
        "step_vs_trl_shipped": ("ratio", "step sppo-bench / TRL (as shipped)", "ratio"),
        "step_vs_trl_no_ckpt": ("ratio", "step sppo-bench / TRL (no ckpt)", "ratio"),
        "step_flop_utilisation": ("step", "sppo-bench", "utilisation"),
        "rollout_vs_hf_large": ("ratio", f"rollout engine / HF generate, b={big}", "ratio"),
        "step_bf16_vs_fp32": ("ratio", "step bf16 / fp32", "ratio"),
        "warmstart_bf16_vs_fp32": ("ratio", "warm-start step bf16 / fp32", "ratio"),
        "tracking_overhead": ("tracking", "mlflow sqlite", "overhead"),
    }[key]
    fig = res.figures.get(f)
    return fig.median if fig else float("nan")


def run_bench(s: BenchSettings) -> dict[str, Any]:
    """Measure everything; returns the JSON-able result (``meta``, ``rows``, ``targets``)."""
    from benchmarks.config import compose_config
    from benchmarks.tasks.arith import ArithTask
    from benchmarks.tasks.build import build_task
    from benchmarks.training.modeling import ModelSpec, build_char_tokenizer, build_tiny_llama
    from benchmarks.training.precision import native_bf16

    t_start = time.perf_counter()
    cpu_start = time.process_time()
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    threads_before = torch.get_num_threads()
    torch.set_num_threads(s.threads)
    torch.manual_seed(s.seed)
    cfg = compose_config([])
    tok = build_char_tokenizer(ArithTask.alphabet)
    task = build_task(cfg.task)
    m = cfg.model
    spec = ModelSpec(
        m.hidden_size, m.num_layers, m.num_heads, m.intermediate_size, m.max_position_embeddings
    )
    model = build_tiny_llama(spec, len(tok), seed=s.seed)
    problems = list(task.train_problems())
    random.Random(s.seed).shuffle(problems)
    res = Results()
    with tempfile.TemporaryDirectory() as tmp:
        ctx = BenchContext(cfg, model, tok, task, problems, int(cfg.task.max_new_tokens), Path(tmp))
        prompt_len = len(problems[0].prompt)
        probe = bench_ceiling(res, model.config, s, s.samples_per_step * (prompt_len + ctx.max_new))
        log.info("fp32 GEMM ceiling %.1f GFLOP/s", res.meta["ceiling_gflops_fp32"])
        bench_rollout(res, ctx, s, probe)
        log.info("rollout done")
        with mlflow_tracker(ctx.tmp) as tracker:
            out = bench_step(res, ctx, s, probe, tracker)
            t0 = time.perf_counter()
            flush = getattr(tracker, "flush", None)
            if flush is not None:
                flush()
            flush_s = time.perf_counter() - t0
        record_tracking(res, out["log_times"], flush_s)
        log.info("step done")
        bench_warmstart(res, ctx, s)
        log.info("warm-start step done")
        if s.memory:
            bench_memory(res, ctx, s)
    wall = time.perf_counter() - t_start
    load_end = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    res.meta.update(
        {
            "settings": asdict(s),
            "torch": torch.__version__,
            "native_bf16": native_bf16(),
            "threads": s.threads,
            "cpus": os.cpu_count(),
            "model": {
                "hidden": m.hidden_size,
                "layers": m.num_layers,
                "intermediate": m.intermediate_size,
                "vocab": len(tok),
                "params": sum(p.numel() for p in model.parameters()),
            },
            "max_new_tokens": ctx.max_new,
            "loadavg_start": list(load_start),
            "loadavg_end": list(load_end),
            "cpu_share": (time.process_time() - cpu_start) / wall / max(1, s.threads),
            "wall_s": wall,
        }
    )
    torch.set_num_threads(threads_before)
    targets = []
    for key, op, thr in TARGETS:
        v = _ratio_value(res, key, s)
        met = (v >= thr) if op == ">=" else (v <= thr)
        targets.append({"target": key, "value": v, "op": op, "threshold": thr, "met": bool(met)})
    return {"meta": res.meta, "rows": res.rows(), "targets": targets}


def write_results(result: dict[str, Any], out: Path) -> tuple[Path, Path]:
    """``<out>.json`` (everything) and ``<out>.csv`` (one row per figure)."""
    out = out.with_suffix("")
    out.parent.mkdir(parents=True, exist_ok=True)
    js, cs = out.with_suffix(".json"), out.with_suffix(".csv")
    js.write_text(json.dumps(result, indent=2, default=float))
    with cs.open("w", newline="") as f:
        w = csv.DictWriter(
            f, fieldnames=["section", "name", "metric", "unit", "median", "min", "max", "n"]
        )
        w.writeheader()
        w.writerows(result["rows"])
    return js, cs


def _fmt(v: float) -> str:
    if not math.isfinite(v):
        return "nan"
    a = abs(v)
    return f"{v:.3g}" if a < 1000 else f"{v:,.0f}"


def print_results(result: dict[str, Any]) -> None:
    """One table per section (shares of the ceiling or the step in %), the targets, the load."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 140)
    meta = result["meta"]
    sections = dict.fromkeys(r["section"] for r in result["rows"])
    for sec in sections:
        t = Table(title=f"bench: {sec}", title_justify="left")
        for col in ("name", "metric", "median", "min", "max", "unit", "n"):
            t.add_column(col, justify="left" if col in ("name", "metric", "unit") else "right")
        for r in result["rows"]:
            if r["section"] != sec:
                continue
            mult = 100.0 if r["unit"] in ("of ceiling", "of step") else 1.0
            unit = (
                "%" + (" of ceiling" if r["unit"] == "of ceiling" else " of step")
                if mult != 1
                else r["unit"]
            )
            t.add_row(
                r["name"],
                r["metric"],
                _fmt(r["median"] * mult),
                _fmt(r["min"] * mult),
                _fmt(r["max"] * mult),
                unit,
                str(r["n"]),
            )
        console.print(t)
    t = Table(title="targets", title_justify="left")
    for col in ("target", "value", "needed", "met"):
        t.add_column(col)
    for tg in result["targets"]:
        t.add_row(
            tg["target"],
            _fmt(tg["value"]),
            f"{tg['op']} {tg['threshold']:g}",
            "yes" if tg["met"] else "NO",
        )
    console.print(t)
    native = "native" if meta.get("native_bf16") else "emulated"
    console.print(
        f"fp32 ceiling {meta['ceiling_gflops_fp32']:.1f} GFLOP/s, bf16 ({native}) "
        f"{meta['ceiling_gflops_bf16']:.1f};"
        f" threads {meta['threads']} of {meta['cpus']} CPUs; load average "
        f"{meta['loadavg_start'][0]:.2f} -> {meta['loadavg_end'][0]:.2f}; this process got "
        f"{100 * meta['cpu_share']:.0f}% of a core per thread; {meta['wall_s']:.0f} s"
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``sppo-bench bench``."""
    p = argparse.ArgumentParser(
        prog="sppo-bench bench",
        description="Engine and trainer speed versus the CPU's GEMM ceiling, HF generate() and "
        "TRL's GRPOTrainer, measured side by side (see benchmarks/bench/run.py).",
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes and repeats (a smoke test)")
    p.add_argument(
        "--out", type=Path, default=Path("outputs/bench/bench"), help="writes OUT.json and OUT.csv"
    )
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: the suite's, 1)"
    )
    p.add_argument("--no-trl", action="store_true", help="skip the TRL contenders")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory children")
    a = p.parse_args(argv)
    s = BenchSettings.quick() if a.quick else BenchSettings()
    if a.repeats is not None:
        s.repeats = a.repeats
    if a.warmup is not None:
        s.warmup = a.warmup
    if a.threads is not None:
        s.threads = a.threads
    s.trl = not a.no_trl
    s.memory = not a.no_memory
    for name in ("repeats", "threads"):
        if getattr(s, name) < 1:
            sys.stderr.write(f"sppo-bench bench: --{name}={getattr(s, name)} must be >= 1\n")
            return 2
    if s.warmup < 0:
        sys.stderr.write(f"sppo-bench bench: --warmup={s.warmup} must be >= 0\n")
        return 2
    result = run_bench(s)
    print_results(result)
    js, cs = write_results(result, a.out)
    sys.stdout.write(f"results: {js} {cs}\n")
    return 0
