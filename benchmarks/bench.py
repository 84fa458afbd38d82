"""``sppo-bench bench``: how close the suite's engine and trainer get to the CPU's limit, and how
they compare with HF ``generate()`` and TRL's ``GRPOTrainer``, measured side by side in one process.

Sections (each figure is the median of several repeats after warm-up, with min and max):

1. ceiling: fp32 and bf16 GEMM GFLOP/s at the model's matmul shapes (``F.linear`` at the training
   batch's token count and at the decode batch); the best fp32 figure is *the* ceiling, and
   that shape is re-measured in every round below (utilisations divide by the round's own
   figure, so a change of load during the run does not bias them);
2. rollout: tokens/s of :class:`~benchmarks.rollout.TorchEngine` versus HF ``generate()`` on the
   same model, prompts and sampling settings, at two batch sizes, with achieved GFLOP/s (analytic,
   :class:`~benchmarks.meter.FlopModel`) as a fraction of the ceiling;
3. step: one full GRPO step (rollout + grading + update) of :class:`~benchmarks.trainer.RLTrainer`
   versus TRL ``GRPOTrainer`` (as shipped: gradient checkpointing on; and with it off) on the same
   model, task, batch, group size, KL coefficient and reward; per-phase times and the step's
   analytic FLOPs over its time as a fraction of the ceiling;
4. tracking: MLflow logging per step (temporary SQLite store) as a percentage of step time;
5. memory: peak resident-set growth of each contender, each measured in a forked child.

FLOPs are the analytic ones of :class:`~benchmarks.meter.FlopModel` (the standard computation on
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
import contextlib
import copy
import csv
import gc
import json
import logging
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["BenchSettings", "main", "run_bench"]

log = logging.getLogger(__name__)

#: The issue's targets: (ratio key, comparison, threshold).
TARGETS: tuple[tuple[str, str, float], ...] = (
    ("step_vs_trl_shipped", ">=", 1.5),
    ("step_vs_trl_no_ckpt", ">=", 1.2),
    ("step_flop_utilisation", ">=", 0.75),
    ("rollout_vs_hf_large", ">=", 2.0),
    ("tracking_overhead", "<=", 0.02),
)


@dataclass
class BenchSettings:
    """What to measure; ``quick`` is a CI smoke test, not a measurement."""

    repeats: int = 7
    warmup: int = 2
    rollout_batches: tuple[int, int] = (64, 256)
    samples_per_step: int = 256  # 32 prompts x 8 completions, the setting
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


class _Results:
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


def _cpu_share(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """Run ``fn``; returns (result, wall seconds, CPU seconds of this thread)."""
    c0, t0 = time.thread_time(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, time.thread_time() - c0


# ----------------------------------------------------------------------------- (1) ceiling


def gemm_shapes(cfg, tokens: int, decode_batch: int) -> list[tuple[str, int, int, int]]:  # noqa: ANN001
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


def _time_gemm(m: int, k: int, n: int, dtype: torch.dtype, min_s: float) -> float:
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


class _Probe:
    """The ceiling's best shape, re-measured in every round of sections 2 and 3, so a
    utilisation compares work and ceiling under the same load (the machine may be shared)."""

    def __init__(self, res: _Results, shape: tuple[str, int, int, int], min_s: float) -> None:
        self.res, self.shape, self.min_s = res, shape, min_s

    def __call__(self) -> float:
        _, m, k, n = self.shape
        gf = _time_gemm(m, k, n, torch.float32, self.min_s)
        self.res.add("ceiling", f"{self.shape[0]} (in-round probe)", "fp32 GFLOP/s", "GFLOP/s", gf)
        return gf


def bench_ceiling(res: _Results, cfg, s: BenchSettings, tokens: int) -> _Probe:  # noqa: ANN001
    shapes = gemm_shapes(cfg, tokens, max(s.rollout_batches))
    for _ in range(max(3, s.repeats // 2)):
        for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
            for label, m, k, n in shapes:
                gf = _time_gemm(m, k, n, dtype, s.gemm_min_s / (4 if name == "bf16" else 1))
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
    return _Probe(res, top, max(0.002, s.gemm_min_s / 2))


# ----------------------------------------------------------------------------- (2) rollout


def _hf_generate(model, tok, prompts: list[str], max_new: int, seed: int) -> tuple[int, float]:  # noqa: ANN001
    """HF ``generate()`` with the suite's sampling settings; returns (real tokens, FLOPs)."""
    from benchmarks.meter import FlopModel
    from benchmarks.rollout import encode_prompts, past_first_eos

    ids, mask = encode_prompts(tok, prompts)
    torch.manual_seed(seed)
    model.eval()
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask.long(),
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=max_new,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )
    resp = out[:, ids.shape[1] :]
    real = (~past_first_eos(resp, tok.eos_token_id)).sum(-1)
    fm = FlopModel.from_config(model.config)
    plens = mask.sum(-1).long().tolist()
    flops = sum(fm.generate(p, r) for p, r in zip(plens, real.tolist(), strict=True))
    return int(real.sum()), float(flops)


def _engine_generate(engine, prompts: list[str], max_new: int, seed: int) -> tuple[int, float]:  # noqa: ANN001
    from benchmarks.meter import FlopModel

    ro = engine.generate(prompts, temperature=1.0, top_p=1.0, max_new_tokens=max_new, seed=seed)
    fm = FlopModel.from_config(engine.model.config)
    plens = ro.prompt_mask.sum(-1).long().tolist()
    lens = ro.lengths.tolist()
    return int(sum(lens)), float(sum(fm.generate(p, r) for p, r in zip(plens, lens, strict=True)))


def _gemm_replay(model, plens: list[int], lens: list[int]) -> tuple[int, float]:  # noqa: ANN001
    """Only the matmuls of a sampled rollout, at its shapes: the prefill over every prompt token,
    then one decode step per token with exactly the rows still generating (the linear layers,
    fused as the engine fuses them, and the head). What a rollout of these lengths would take if
    attention, sampling and every other op were free: the bound for any fp32 engine here."""
    from benchmarks.meter import FlopModel

    cfg = model.config
    d, inter, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    kv = FlopModel.from_config(cfg).kv_dim
    g = torch.Generator().manual_seed(0)
    w = {
        "qkv": torch.randn(d + 2 * kv, d, generator=g),
        "o": torch.randn(d, d, generator=g),
        "gu": torch.randn(2 * inter, d, generator=g),
        "down": torch.randn(d, inter, generator=g),
        "head": torch.randn(v, d, generator=g),
    }
    B, P = len(lens), max(plens)
    x = torch.randn(B * P, max(d, inter), generator=g)
    active = [sum(1 for n in lens if n > t) for t in range(1, max(lens, default=0))]

    def layers(m: int) -> None:
        for _ in range(cfg.num_hidden_layers):
            F.linear(x[:m, :d], w["qkv"])
            F.linear(x[:m, :d], w["o"])
            F.linear(x[:m, :d], w["gu"])
            F.linear(x[:m, :inter], w["down"])

    with torch.inference_mode():
        layers(B * P)
        F.linear(x[:B, :d], w["head"])
        for m in active:
            layers(m)
            F.linear(x[:m, :d], w["head"])
    fm = FlopModel.from_config(cfg)
    return int(sum(lens)), float(sum(fm.generate(p, r) for p, r in zip(plens, lens, strict=True)))


def bench_rollout(res: _Results, ctx: _Ctx, s: BenchSettings, probe: _Probe) -> None:
    from benchmarks.rollout import TorchEngine

    engine = TorchEngine(ctx.model, ctx.tok, batch_size=max(s.rollout_batches))
    shapes: dict[str, list[int]] = {}

    def run_engine(prompts: list[str], seed: int) -> tuple[int, float]:
        ro = engine.generate(
            prompts, temperature=1.0, top_p=1.0, max_new_tokens=ctx.max_new, seed=seed
        )
        shapes["plens"] = ro.prompt_mask.sum(-1).long().tolist()
        shapes["lens"] = ro.lengths.tolist()
        from benchmarks.meter import FlopModel

        fm = FlopModel.from_config(ctx.model.config)
        zipped = zip(shapes["plens"], shapes["lens"], strict=True)
        return int(sum(shapes["lens"])), float(sum(fm.generate(p, r) for p, r in zipped))

    for b in s.rollout_batches:
        prompts = [p.prompt for p in ctx.problems[:b]]
        contenders = {
            "engine": lambda seed, p=prompts: run_engine(p, seed),
            "hf_generate": lambda seed, p=prompts: _hf_generate(
                ctx.model, ctx.tok, p, ctx.max_new, seed
            ),
            # the engine's own lengths of this round, matmuls only
            "gemm-only bound": lambda seed: _gemm_replay(
                ctx.model, shapes["plens"], shapes["lens"]
            ),
        }
        for r in range(s.warmup + s.repeats):
            per_round = {}
            ceiling = probe() if r >= s.warmup else 0.0
            for name, fn in contenders.items():
                (tokens, flops), wall, cpu = _cpu_share(lambda fn=fn, r=r: fn(1000 + r))
                if r < s.warmup:
                    continue
                label = f"{name} b={b}"
                res.add("rollout", label, "tokens/s", "tok/s", tokens / wall)
                res.add("rollout", label, "GFLOP/s", "GFLOP/s", flops / wall / 1e9)
                res.add("rollout", label, "utilisation", "of ceiling", flops / wall / 1e9 / ceiling)
                res.add("rollout", label, "cpu share", "cpu/wall", cpu / wall)
                per_round[name] = tokens / wall
            if per_round:
                res.add(
                    "ratio",
                    f"rollout engine / HF generate, b={b}",
                    "ratio",
                    "x",
                    per_round["engine"] / per_round["hf_generate"],
                )
                res.add(
                    "ratio",
                    f"rollout gemm-only bound / HF generate, b={b}",
                    "ratio",
                    "x",
                    per_round["gemm-only bound"] / per_round["hf_generate"],
                )


# ----------------------------------------------------------------------------- (3) step


@dataclass
class _Ctx:
    cfg: Any
    model: torch.nn.Module
    tok: Any
    task: Any
    problems: list
    max_new: int
    tmp: Path


def _our_trainer(ctx: _Ctx, s: BenchSettings, tracker=None):  # noqa: ANN001, ANN202
    from algorithms import get_algorithm
    from benchmarks.meter import Budget
    from benchmarks.rollout import TorchEngine
    from benchmarks.trainer import RLTrainer, TrainerConfig

    alg = get_algorithm("grpo", group_size=s.group_size)
    tcfg = TrainerConfig(
        samples_per_step=s.samples_per_step,
        actor_lr=1e-4,
        max_new_tokens=ctx.max_new,
        temperature=1.0,
        top_p=1.0,
    )
    policy = copy.deepcopy(ctx.model)
    ref = copy.deepcopy(ctx.model).eval().requires_grad_(False)
    return RLTrainer(
        algorithm=alg,
        policy=policy,
        tokenizer=ctx.tok,
        task=ctx.task,
        engine_factory=lambda m: TorchEngine(
            m, ctx.tok, batch_size=int(ctx.cfg.engine.rollout_batch_size)
        ),
        budget=Budget("samples", 1e12, eval_fractions=(1.0,)),
        config=tcfg,
        seed=s.seed,
        prompt_seed=s.seed,
        tracker=tracker,
        reference=ref,
    )


class _OurStepper:
    """One GRPO step of the suite's trainer per call; phase times from its meter."""

    name = "sppo-bench"

    def __init__(self, ctx: _Ctx, s: BenchSettings, tracker=None) -> None:  # noqa: ANN001
        self.trainer = _our_trainer(ctx, s, tracker)
        self.log_s = 0.0

    def step(self) -> dict[str, float]:
        tr = self.trainer
        wall0, flops0 = dict(tr.meter.wall), tr.meter.total_flops
        t0 = time.perf_counter()
        stats = tr._train_step()
        dt = time.perf_counter() - t0
        tr.step += 1
        t1 = time.perf_counter()
        tr._log(stats)  # what the suite does after every step (tracking measured apart)
        self.log_s = time.perf_counter() - t1
        out = {f"phase {k}": tr.meter.wall[k] - wall0[k] for k in wall0 if k != "eval"}
        out = {k: v for k, v in out.items() if v > 0}
        out["time"] = dt
        out["flops"] = tr.meter.total_flops - flops0
        out["samples"] = float(tr.cfg.samples_per_step)
        return out

    def close(self) -> None:
        pass


class _TrlStepper:
    """TRL ``GRPOTrainer.train()`` in a thread, released one optimizer step at a time, so its own
    loop (generation, rewards, reference forward, loss, backward, clipping, AdamW, logging) runs
    as shipped while the caller interleaves it with other contenders."""

    def __init__(self, ctx: _Ctx, s: BenchSettings, *, checkpointing: bool) -> None:
        from accelerate import PartialState
        from datasets import Dataset
        from transformers import TrainerCallback
        from trl import GRPOConfig, GRPOTrainer

        from benchmarks.meter import FlopModel

        self.name = "trl" + ("" if checkpointing else " (no ckpt)")
        PartialState(cpu=True)
        model_dir = ctx.tmp / "model"
        if not model_dir.exists():
            ctx.model.save_pretrained(model_dir)
        problems = ctx.problems
        task = ctx.task

        def arith_reward(completions, pid, **_):  # noqa: ANN001, ANN003, ANN202
            return task.grade(list(completions), [problems[i] for i in pid]).scores

        n_prompts = max(64, s.samples_per_step // s.group_size * 8)
        ds = Dataset.from_dict(
            {"prompt": [p.prompt for p in problems[:n_prompts]], "pid": list(range(n_prompts))}
        )
        args = GRPOConfig(
            output_dir=str(ctx.tmp / f"trl-{checkpointing}"),
            per_device_train_batch_size=s.samples_per_step,
            num_generations=s.group_size,
            max_completion_length=ctx.max_new,
            gradient_accumulation_steps=1,
            num_iterations=1,
            beta=0.001,
            learning_rate=1e-4,
            lr_scheduler_type="constant",
            max_grad_norm=1.0,
            temperature=1.0,
            top_p=1.0,
            loss_type="grpo",
            bf16=False,
            use_cpu=True,
            gradient_checkpointing=checkpointing,
            report_to="none",
            logging_steps=10**9,
            save_strategy="no",
            max_steps=10**6,
            seed=s.seed,
            disable_tqdm=True,
            dataloader_num_workers=0,
            # Two trainers live in one process: share one accelerator state instead of letting
            # the second one's arguments reset the first's.
            accelerator_config={"use_configured_state": True},
        )
        self.trainer = GRPOTrainer(
            model=str(model_dir),
            reward_funcs=[arith_reward],
            args=args,
            train_dataset=ds,
            processing_class=ctx.tok,
        )
        self.fm = FlopModel.from_config(ctx.model.config)
        self.phases: dict[str, float] = {}
        self.flops = 0.0
        self._wrap()
        gate = self

        class _Gate(TrainerCallback):
            def on_train_begin(self, args, state, control, **kw):  # noqa: ANN001, ANN003, ANN202
                gate._wait()

            def on_step_end(self, args, state, control, **kw):  # noqa: ANN001, ANN003, ANN202
                gate._done.release()
                if gate._wait():
                    control.should_training_stop = True
                return control

        from transformers.trainer_callback import PrinterCallback

        self.trainer.remove_callback(PrinterCallback)  # its end-of-training dict on stdout
        self.trainer.add_callback(_Gate())
        self._go = threading.Semaphore(0)
        self._done = threading.Semaphore(0)
        self._stop = False
        self._error: BaseException | None = None
        self._threads = torch.get_num_threads()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _wait(self) -> bool:
        self._go.acquire()
        return self._stop

    def _run(self) -> None:
        torch.set_num_threads(self._threads)
        try:
            self.trainer.train()
        except BaseException as e:  # surfaced in step()
            self._error = e
            self._done.release()

    def _timed(self, phase: str, fn: Callable) -> Callable:
        def wrapper(*a, **k):  # noqa: ANN002, ANN003, ANN202
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                key = phase(a) if callable(phase) else phase
                self.phases[key] = self.phases.get(key, 0.0) + time.perf_counter() - t0

        return wrapper

    def _wrap(self) -> None:
        tr = self.trainer
        gen = tr._generate_single_turn

        def generate(prompt_ids, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
            completion_ids, lps = gen(prompt_ids, *a, **k)
            self.flops += sum(
                self.fm.generate(len(p), len(c))
                + 3 * self.fm.forward(len(p) + len(c), logits=len(c))  # policy fwd + bwd
                + self.fm.forward(len(p) + len(c), logits=len(c))  # reference forward
                for p, c in zip(prompt_ids, completion_ids, strict=True)
            )
            return completion_ids, lps

        tr._generate_single_turn = self._timed("phase rollout", generate)
        tr._calculate_rewards = self._timed("phase reward", tr._calculate_rewards)
        tr._get_per_token_logps_and_entropies = self._timed(
            lambda a: "phase forward" if torch.is_grad_enabled() else "phase reference",
            tr._get_per_token_logps_and_entropies,
        )

    def step(self) -> dict[str, float]:
        self.phases, self.flops = {}, 0.0
        t0 = time.perf_counter()
        self._go.release()
        while not self._done.acquire(timeout=1.0):
            if not self._thread.is_alive():
                break
        dt = time.perf_counter() - t0
        if self._error is not None:
            raise RuntimeError(f"{self.name}: training failed") from self._error
        out = dict(self.phases)
        out["phase backward+optimizer+rest"] = dt - sum(self.phases.values())
        out["time"] = dt
        out["flops"] = self.flops
        out["samples"] = float(self.trainer.args.per_device_train_batch_size)
        return out

    def close(self) -> None:
        self._stop = True
        self._go.release()
        self._thread.join(timeout=60)


_MATMULS = ("aten::mm", "aten::addmm", "aten::bmm")


def _matmul_calls(fn: Callable[[], Any]) -> list[tuple[str, list]]:
    """Every matmul ``fn`` runs (forward and backward), with its input shapes, read off torch's
    profiler."""
    from torch.profiler import profile

    with profile(record_shapes=True) as prof:
        fn()
    return [(e.name, e.input_shapes) for e in prof.events() if e.name in _MATMULS]


class _MatmulReplay:
    """The matmuls of one step alone, at their shapes, on fresh contiguous data: what the step
    would take if every other op (attention softmax, norms, SiLU, sampling, the optimizer,
    Python) were free. Its GFLOP/s over the ceiling is the utilisation those shapes reach on this
    CPU's BLAS; its time over the step's is the share of the step spent in matmuls."""

    def __init__(self, calls: list[tuple[str, list]]) -> None:
        g = torch.Generator().manual_seed(0)
        cache: dict[tuple, torch.Tensor] = {}

        def t(shape: list[int]) -> torch.Tensor:
            key = tuple(shape)
            if key not in cache:
                cache[key] = torch.randn(*shape, generator=g)
            return cache[key]

        self.ops: list[tuple[Callable, tuple]] = []
        self.flops = 0.0
        for name, shapes in calls:
            if name == "aten::addmm":
                bias, a, b = shapes[:3]
                self.ops.append((torch.addmm, (t(bias), t(a), t(b))))
                self.flops += 2.0 * a[0] * a[1] * b[1]
            elif name == "aten::mm":
                a, b = shapes[:2]
                self.ops.append((torch.mm, (t(a), t(b))))
                self.flops += 2.0 * a[0] * a[1] * b[1]
            else:
                a, b = shapes[:2]
                self.ops.append((torch.bmm, (t(a), t(b))))
                self.flops += 2.0 * a[0] * a[1] * a[2] * b[2]

    def __call__(self) -> float:
        """Seconds for one pass over the step's matmuls."""
        t0 = time.perf_counter()
        with torch.inference_mode():
            for op, args in self.ops:
                op(*args)
        return time.perf_counter() - t0


def bench_step(res: _Results, ctx: _Ctx, s: BenchSettings, probe: _Probe, tracker) -> dict:  # noqa: ANN001
    steppers: list = [_OurStepper(ctx, s, tracker)]
    if s.trl:
        steppers += [
            _TrlStepper(ctx, s, checkpointing=True),
            _TrlStepper(ctx, s, checkpointing=False),
        ]
    ours = steppers[0]
    log_times = []
    try:
        ours.step()  # warm-up, then one step with the profiler on for its matmul shapes
        replay = _MatmulReplay(_matmul_calls(ours.step))
        replay()
        res.meta["step_matmul_flops"] = replay.flops
        for r in range(s.warmup + s.repeats):
            per_round = {}
            ceiling = probe() if r >= s.warmup else 0.0
            for st in steppers:
                gc.collect()
                out = st.step()
                if r < s.warmup:
                    continue
                t = out["time"]
                res.add("step", st.name, "samples/s", "samples/s", out["samples"] / t)
                res.add("step", st.name, "step s", "s", t)
                res.add("step", st.name, "GFLOP/s", "GFLOP/s", out["flops"] / t / 1e9)
                res.add(
                    "step", st.name, "utilisation", "of ceiling", out["flops"] / t / 1e9 / ceiling
                )
                for k, v in out.items():
                    if k.startswith("phase "):
                        res.add("step", st.name, k, "s", v)
                per_round[st.name] = out["samples"] / t
                if st is ours:
                    log_times.append((ours.log_s, t))
                    res.meta["step_analytic_flops"] = out["flops"]
                    mm_s = replay()
                    name = "sppo-bench matmuls only"
                    res.add("step", name, "GFLOP/s", "GFLOP/s", replay.flops / mm_s / 1e9)
                    res.add(
                        "step",
                        name,
                        "utilisation",
                        "of ceiling",
                        replay.flops / mm_s / 1e9 / ceiling,
                    )
                    res.add("step", name, "step s", "s", mm_s)
                    # what share of the step its matmuls alone take: the rest (norms, SiLU,
                    # softmax, RoPE, attention, sampling, AdamW, Python) is what keeps the
                    # step's utilisation below the matmuls' own
                    res.add("ratio", "step time in its matmuls", "of step", "of step", mm_s / t)
            if per_round and s.trl:
                res.add(
                    "ratio",
                    "step sppo-bench / TRL (as shipped)",
                    "ratio",
                    "x",
                    per_round["sppo-bench"] / per_round["trl"],
                )
                res.add(
                    "ratio",
                    "step sppo-bench / TRL (no ckpt)",
                    "ratio",
                    "x",
                    per_round["sppo-bench"] / per_round["trl (no ckpt)"],
                )
    finally:
        for st in steppers:
            st.close()
    return {"log_times": log_times, "trainer": ours.trainer}


# ----------------------------------------------------------------------------- (4) tracking


@contextlib.contextmanager
def _mlflow_tracker(tmp: Path) -> Iterator[Any]:
    from mlflow.tracking import MlflowClient

    from benchmarks.tracking import MlflowTracker, prepare_store

    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    exp = prepare_store(uri, "bench")
    client = MlflowClient(uri)
    with MlflowTracker.start(client, exp, run_name="bench", tags={}) as tracker:
        yield tracker


def record_tracking(res: _Results, log_times: list[tuple[float, float]], flush_s: float) -> None:
    """Blocking time of the per-step ``log_metrics`` (plus the end-of-run wait for pending
    asynchronous writes, spread over the steps) as a fraction of the step's time."""
    n = max(1, len(log_times))
    for log_s, step_s in log_times:
        res.add("tracking", "mlflow sqlite", "log s/step", "s", log_s + flush_s / n)
        res.add("tracking", "mlflow sqlite", "overhead", "of step", (log_s + flush_s / n) / step_s)


# ----------------------------------------------------------------------------- (5) memory


def _rss() -> int:
    from benchmarks.meter import PeakMemory

    return PeakMemory._rss()


def _peak_in_child(fn: Callable[[], Any]) -> float:
    """Peak RSS growth (bytes) while ``fn`` runs in a forked child, over the child's RSS at the
    start (after freeing what the allocator holds), so contenders do not inherit each other's
    peaks. NaN where fork is unavailable."""
    if not hasattr(os, "fork"):
        return float("nan")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(r)
            gc.collect()
            with contextlib.suppress(OSError, AttributeError):
                import ctypes

                ctypes.CDLL("libc.so.6").malloc_trim(0)
            base = _rss()
            peak = [base]
            stop = threading.Event()

            def sample() -> None:
                while not stop.wait(0.002):
                    peak[0] = max(peak[0], _rss())

            th = threading.Thread(target=sample, daemon=True)
            th.start()
            fn()
            stop.set()
            th.join()
            peak[0] = max(peak[0], _rss())
            os.write(w, str(peak[0] - base).encode())
        except BaseException:  # noqa: BLE001 - report as NaN
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    data = b""
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return float(data) if data else float("nan")


def bench_memory(res: _Results, ctx: _Ctx, s: BenchSettings) -> None:
    from benchmarks.rollout import TorchEngine

    b = max(s.rollout_batches)
    prompts = [p.prompt for p in ctx.problems[:b]]

    def ours_step() -> None:
        st = _OurStepper(ctx, s)
        st.step()
        st.step()

    def trl_step(ckpt: bool) -> Callable[[], None]:
        def run() -> None:
            st = _TrlStepper(ctx, s, checkpointing=ckpt)
            st.step()
            st.step()
            st.close()

        return run

    jobs = {
        f"engine rollout b={b}": lambda: _engine_generate(
            TorchEngine(ctx.model, ctx.tok, batch_size=b), prompts, ctx.max_new, 0
        ),
        f"hf_generate b={b}": lambda: _hf_generate(ctx.model, ctx.tok, prompts, ctx.max_new, 0),
        "sppo-bench step": ours_step,
    }
    if s.trl:
        jobs["trl step"] = trl_step(True)
        jobs["trl (no ckpt) step"] = trl_step(False)
    for name, fn in jobs.items():
        res.add("memory", name, "peak MiB", "MiB", _peak_in_child(fn) / 2**20)


# ----------------------------------------------------------------------------- driver


def _ratio_value(res: _Results, key: str, s: BenchSettings) -> float:
    big = max(s.rollout_batches)
    f = {
        "step_vs_trl_shipped": ("ratio", "step sppo-bench / TRL (as shipped)", "ratio"),
        "step_vs_trl_no_ckpt": ("ratio", "step sppo-bench / TRL (no ckpt)", "ratio"),
        "step_flop_utilisation": ("step", "sppo-bench", "utilisation"),
        "rollout_vs_hf_large": ("ratio", f"rollout engine / HF generate, b={big}", "ratio"),
        "tracking_overhead": ("tracking", "mlflow sqlite", "overhead"),
    }[key]
    fig = res.figures.get(f)
    return fig.median if fig else float("nan")


def run_bench(s: BenchSettings) -> dict[str, Any]:
    """Measure everything; returns the JSON-able result (``meta``, ``rows``, ``targets``)."""
    from benchmarks.config import compose_config
    from benchmarks.modeling import ModelSpec, build_char_tokenizer, build_tiny_llama
    from benchmarks.tasks import ArithTask, build_task

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
    import random

    random.Random(s.seed).shuffle(problems)
    res = _Results()
    with tempfile.TemporaryDirectory() as tmp:
        ctx = _Ctx(cfg, model, tok, task, problems, int(cfg.task.max_new_tokens), Path(tmp))
        prompt_len = len(problems[0].prompt)
        probe = bench_ceiling(res, model.config, s, s.samples_per_step * (prompt_len + ctx.max_new))
        log.info("fp32 GEMM ceiling %.1f GFLOP/s", res.meta["ceiling_gflops_fp32"])
        bench_rollout(res, ctx, s, probe)
        log.info("rollout done")
        with _mlflow_tracker(ctx.tmp) as tracker:
            out = bench_step(res, ctx, s, probe, tracker)
            t0 = time.perf_counter()
            flush = getattr(tracker, "flush", None)
            if flush is not None:
                flush()
            flush_s = time.perf_counter() - t0
        record_tracking(res, out["log_times"], flush_s)
        log.info("step done")
        if s.memory:
            bench_memory(res, ctx, s)
    wall = time.perf_counter() - t_start
    load_end = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    res.meta.update(
        {
            "settings": asdict(s),
            "torch": torch.__version__,
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
    console.print(
        f"fp32 ceiling {meta['ceiling_gflops_fp32']:.1f} GFLOP/s, bf16 {meta['ceiling_gflops_bf16']:.1f};"
        f" threads {meta['threads']} of {meta['cpus']} CPUs; load average "
        f"{meta['loadavg_start'][0]:.2f} -> {meta['loadavg_end'][0]:.2f}; this process got "
        f"{100 * meta['cpu_share']:.0f}% of a core per thread; {meta['wall_s']:.0f} s"
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``sppo-bench bench``."""
    p = argparse.ArgumentParser(
        prog="sppo-bench bench",
        description="Engine and trainer speed versus the CPU's GEMM ceiling, HF generate() and "
        "TRL's GRPOTrainer, measured side by side (see benchmarks/bench.py).",
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
