"""Rollout throughput of the torch and vLLM engines on the same model, prompts and settings.

    .venv-vllm/bin/python -m examples.rollout_throughput                 # the suite's tiny Llama
    .venv-vllm/bin/python -m examples.rollout_throughput --batches 64 256 --repeats 5 --threads 1

Generated tokens per second (response tokens, EOS included, over wall time of ``generate``),
median of ``--repeats`` timed calls after one warm-up call per engine and batch size, in one
process. Needs vLLM (``make install-vllm`` on a CPU).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch


def _measure(engine, prompts: list[str], max_new_tokens: int, repeats: int) -> float:
    kw = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": max_new_tokens}
    engine.generate(prompts, seed=0, **kw)  # warm-up
    rates = []
    for r in range(repeats):
        t0 = time.perf_counter()
        ro = engine.generate(prompts, seed=r + 1, **kw)
        rates.append(float(ro.lengths.sum()) / (time.perf_counter() - t0))
    return statistics.median(rates)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, nargs="+", default=[64, 256])
    p.add_argument("--max-new-tokens", type=int, nargs="+", default=[18, 96])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)

    from benchmarks.engines.torch_engine import TorchEngine
    from benchmarks.engines.vllm_engine import VllmEngine
    from benchmarks.tasks.arith import ArithTask
    from benchmarks.training.modeling import ModelSpec, build_char_tokenizer, build_tiny_llama

    torch.set_num_threads(a.threads)
    tok = build_char_tokenizer(ArithTask.alphabet)
    model = build_tiny_llama(ModelSpec(), len(tok), seed=0).eval()  # the suite's tiny model
    task = ArithTask(horizon=2, eval_size=max(a.batches))
    engines = {"torch": TorchEngine(model, tok), "vllm": VllmEngine(model, tok)}
    out = sys.stdout
    out.write(f"torch threads {a.threads}; tokens/s, median of {a.repeats}\n")
    out.write("batch  max_new_tokens  torch  vllm  vllm/torch\n")
    for n in a.max_new_tokens:
        for b in a.batches:
            prompts = [q.prompt for q in task.eval_problems()[:b]]
            rate = {k: _measure(e, prompts, n, a.repeats) for k, e in engines.items()}
            out.write(
                f"{b:5d}  {n:14d}  {rate['torch']:5.0f}  {rate['vllm']:4.0f}  "
                f"{rate['vllm'] / rate['torch']:.2f}\n"
            )
    task.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
