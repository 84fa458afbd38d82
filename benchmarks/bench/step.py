"""Sections 3 and 4 of ``sppo-bench bench``: one full GRPO step of the suite's trainer versus TRL
(per-phase times, FLOP utilisation, the step's matmuls replayed alone), and MLflow tracking per
step as a share of the step's time.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from benchmarks.bench.ceiling import Probe
from benchmarks.bench.common import BenchContext, BenchSettings, Results
from benchmarks.bench.trl_contender import TrlStepper

__all__ = ["OurStepper", "bench_step", "mlflow_tracker", "record_tracking"]


# ----------------------------------------------------------------------------- (3) step


def _our_trainer(ctx: BenchContext, s: BenchSettings, tracker=None, precision: str = "fp32"):
    """The suite's trainer with GRPO at the bench's batch and group size, on copies of the
    shared model (policy and frozen reference), so each stepper starts from the same weights."""
    from algorithms import get_algorithm
    from benchmarks.engines.torch_engine import TorchEngine
    from benchmarks.telemetry.meter import Budget
    from benchmarks.training.config import TrainerConfig
    from benchmarks.training.trainer import RLTrainer

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
            m, ctx.tok, batch_size=int(ctx.cfg.engine.rollout_batch_size), precision=precision
        ),
        budget=Budget("samples", 1e12, eval_fractions=(1.0,)),
        config=tcfg,
        seed=s.seed,
        prompt_seed=s.seed,
        tracker=tracker,
        reference=ref,
        precision=precision,
    )


class OurStepper:
    """One GRPO step of the suite's trainer per call (in ``precision``); phase times from its
    meter."""

    def __init__(
        self, ctx: BenchContext, s: BenchSettings, tracker=None, precision: str = "fp32"
    ) -> None:
        self.name = "sppo-bench" if precision == "fp32" else f"sppo-bench {precision}"
        self.trainer = _our_trainer(ctx, s, tracker, precision)
        self.log_s = 0.0

    def step(self) -> dict[str, float]:
        tr = self.trainer
        wall0, flops0 = dict(tr.meter.wall), tr.meter.total_flops
        t0 = time.perf_counter()
        stats = tr.train_step()
        dt = time.perf_counter() - t0
        tr.step += 1
        t1 = time.perf_counter()
        tr.log_step(stats)  # what the suite does after every step (tracking measured apart)
        self.log_s = time.perf_counter() - t1
        out = {f"phase {k}": tr.meter.wall[k] - wall0[k] for k in wall0 if k != "eval"}
        out = {k: v for k, v in out.items() if v > 0}
        out["time"] = dt
        out["flops"] = tr.meter.total_flops - flops0
        out["samples"] = float(tr.cfg.samples_per_step)
        return out

    def close(self) -> None:
        pass


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


def bench_step(res: Results, ctx: BenchContext, s: BenchSettings, probe: Probe, tracker) -> dict:
    """Section 3: the suite's GRPO step (logging to ``tracker``), the same step in bf16 and, with
    ``s.trl``, TRL's as shipped and without gradient checkpointing, interleaved round by round;
    the suite's step's matmuls replayed alone each round. Returns the per-step logging times
    (for section 4) and the suite's trainer."""
    steppers: list = [OurStepper(ctx, s, tracker), OurStepper(ctx, s, precision="bf16")]
    if s.trl:
        steppers += [
            TrlStepper(ctx, s, checkpointing=True),
            TrlStepper(ctx, s, checkpointing=False),
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
            if per_round:
                res.add(
                    "ratio",
                    "step bf16 / fp32",
                    "ratio",
                    "x",
                    per_round["sppo-bench bf16"] / per_round["sppo-bench"],
                )
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
def mlflow_tracker(tmp: Path) -> Iterator[Any]:
    """The suite's MLflow tracker on a fresh SQLite store in ``tmp``: what section 4 measures."""
    from mlflow.tracking import MlflowClient

    from benchmarks.telemetry.tracking import MlflowTracker, prepare_store

    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    exp = prepare_store(uri, "bench")
    client = MlflowClient(uri)
    with MlflowTracker.start(client, exp, run_name="bench", tags={}) as tracker:
        yield tracker


def record_tracking(res: Results, log_times: list[tuple[float, float]], flush_s: float) -> None:
    """Blocking time of the per-step ``log_metrics`` (plus the end-of-run wait for pending
    asynchronous writes, spread over the steps) as a fraction of the step's time."""
    n = max(1, len(log_times))
    for log_s, step_s in log_times:
        res.add("tracking", "mlflow sqlite", "log s/step", "s", log_s + flush_s / n)
        res.add("tracking", "mlflow sqlite", "overhead", "of step", (log_s + flush_s / n) / step_s)
