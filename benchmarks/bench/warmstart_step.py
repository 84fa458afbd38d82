"""Section 4 of ``sppo-bench bench``: one supervised warm-start step (the start's phase 1: worked
chains, the suite's ``warmstart.batch_size``) in fp32 and in bf16, interleaved round by round,
with each round's bf16 / fp32 ratio.

The step is the warm start's own (``benchmarks/training/warmstart.py``): the teacher-forced
log-probs of the demonstrations grouped by length, their token-mean negative log-likelihood,
backward and an AdamW step, on a copy of the shared model per precision.
"""

from __future__ import annotations

import copy
import random
import time

import torch

from benchmarks.bench.common import BenchContext, BenchSettings, Results

__all__ = ["bench_warmstart"]


def _batch(ctx: BenchContext, rows: int, rng: random.Random) -> tuple[torch.Tensor, ...]:
    """``rows`` worked demonstrations (prompt ids and mask, target ids and mask), as the warm
    start's phase 1 draws them."""
    from benchmarks.engines.rollout import encode_prompts

    problems = rng.sample(ctx.problems, rows)
    targets = [ctx.task.sft_target(p, rng, 0.0) + ctx.tok.eos_token for p in problems]
    pid, pm = encode_prompts(ctx.tok, [p.prompt for p in problems])
    enc = ctx.tok(
        targets, return_tensors="pt", padding=True, padding_side="right", add_special_tokens=False
    )
    return pid, pm, enc["input_ids"], enc["attention_mask"].float()


class _SftStepper:
    """One warm-start step per call on its own copy of the model, in ``precision``."""

    def __init__(self, ctx: BenchContext, precision: str, lr: float) -> None:
        self.model = copy.deepcopy(ctx.model).train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr)
        self.precision = precision

    def step(self, batch: tuple[torch.Tensor, ...]) -> float:
        from benchmarks.engines.teacher_forced import bucketed_logprobs
        from benchmarks.training.precision import autocast

        pid, pm, rid, rm = batch
        t0 = time.perf_counter()
        with autocast(self.precision):
            lp, _ = bucketed_logprobs(self.model, pid, pm, rid, rm, buckets=4, min_rows=16)
        loss = -(lp * rm).sum() / rm.sum()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return time.perf_counter() - t0


def bench_warmstart(res: Results, ctx: BenchContext, s: BenchSettings) -> None:
    """Section 4: the warm-start step in fp32 and bf16 on the same batches, interleaved."""
    rows = min(int(ctx.cfg.warmstart.batch_size), s.samples_per_step)
    lr = float(ctx.cfg.warmstart.lr)
    steppers = {p: _SftStepper(ctx, p, lr) for p in ("fp32", "bf16")}
    rng = random.Random(s.seed)
    for r in range(s.warmup + s.repeats):
        batch = _batch(ctx, rows, rng)
        times = {p: st.step(batch) for p, st in steppers.items()}
        if r < s.warmup:
            continue
        for p, t in times.items():
            res.add("warmstart", f"warm-start step {p}", "step s", "s", t)
            res.add("warmstart", f"warm-start step {p}", "rows/s", "rows/s", rows / t)
        res.add("ratio", "warm-start step bf16 / fp32", "ratio", "x", times["fp32"] / times["bf16"])
