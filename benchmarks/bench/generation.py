"""Section 2 of ``sppo-bench bench``: rollout tokens/s of the suite's engine (in fp32 and in bf16)
versus HF ``generate()`` on the same model, prompts and sampling settings, with achieved GFLOP/s,
and the bound a rollout of the engine's lengths would reach if only its matmuls cost time.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from benchmarks.bench.ceiling import Probe
from benchmarks.bench.common import BenchContext, BenchSettings, Results, cpu_share

__all__ = ["bench_rollout", "engine_generate", "hf_generate", "rollout_work"]


def rollout_work(model_config, plens: list[int], lens: list[int]) -> tuple[int, float]:
    """(real tokens, analytic FLOPs) of a rollout whose prompts and responses have these lengths:
    the same count for every contender."""
    from benchmarks.telemetry.meter import FlopModel

    fm = FlopModel.from_config(model_config)
    return int(sum(lens)), float(sum(fm.generate(p, r) for p, r in zip(plens, lens, strict=True)))


def hf_generate(model, tok, prompts: list[str], max_new: int, seed: int) -> tuple[int, float]:
    """HF ``generate()`` with the suite's sampling settings; returns (real tokens, FLOPs)."""
    from benchmarks.engines.rollout import encode_prompts, past_first_eos

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
    return rollout_work(model.config, mask.sum(-1).long().tolist(), real.tolist())


def engine_generate(
    engine, prompts: list[str], max_new: int, seed: int, shapes: dict | None = None
) -> tuple[int, float]:
    """The suite's engine with the same sampling settings; returns (real tokens, FLOPs). With
    ``shapes``, stores the rollout's prompt lengths and response lengths there (``plens``,
    ``lens``) for the matmul-only bound."""
    ro = engine.generate(prompts, temperature=1.0, top_p=1.0, max_new_tokens=max_new, seed=seed)
    plens = ro.prompt_mask.sum(-1).long().tolist()
    lens = ro.lengths.tolist()
    if shapes is not None:
        shapes["plens"], shapes["lens"] = plens, lens
    return rollout_work(engine.model.config, plens, lens)


def _gemm_replay(model, plens: list[int], lens: list[int]) -> tuple[int, float]:
    """Only the matmuls of a sampled rollout, at its shapes: the prefill over every prompt token,
    then one decode step per token with exactly the rows still generating (the linear layers,
    fused as the engine fuses them, and the head). What a rollout of these lengths would take if
    attention, sampling and every other op were free: the bound for any fp32 engine here."""
    from benchmarks.telemetry.meter import FlopModel

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
    return rollout_work(cfg, plens, lens)


def bench_rollout(res: Results, ctx: BenchContext, s: BenchSettings, probe: Probe) -> None:
    """Section 2: at each rollout batch size, the engine in fp32 and in bf16, HF ``generate()``
    and the engine's matmul-only bound, interleaved round by round, each round's ratios against
    HF and bf16's against fp32 (the same seed: rollouts of about the same lengths)."""
    from benchmarks.engines.torch_engine import TorchEngine

    engine = TorchEngine(ctx.model, ctx.tok, batch_size=max(s.rollout_batches))
    engine16 = TorchEngine(ctx.model, ctx.tok, batch_size=max(s.rollout_batches), precision="bf16")
    shapes: dict[str, list[int]] = {}

    for b in s.rollout_batches:
        prompts = [p.prompt for p in ctx.problems[:b]]
        contenders = {
            "engine": lambda seed, p=prompts: engine_generate(engine, p, ctx.max_new, seed, shapes),
            "engine bf16": lambda seed, p=prompts: engine_generate(engine16, p, ctx.max_new, seed),
            "hf_generate": lambda seed, p=prompts: hf_generate(
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
                (tokens, flops), wall, cpu = cpu_share(lambda fn=fn, r=r: fn(1000 + r))
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
                    f"rollout engine bf16 / fp32, b={b}",
                    "ratio",
                    "x",
                    per_round["engine bf16"] / per_round["engine"],
                )
                res.add(
                    "ratio",
                    f"rollout gemm-only bound / HF generate, b={b}",
                    "ratio",
                    "x",
                    per_round["gemm-only bound"] / per_round["hf_generate"],
                )
