"""Section 5 of ``sppo-bench bench``: the peak resident-set growth of each contender, each
measured in a forked child so one contender's allocations never count in another's peak.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Callable
from typing import Any

from benchmarks.bench.common import BenchContext, BenchSettings, Results
from benchmarks.bench.generation import engine_generate, hf_generate
from benchmarks.bench.step import OurStepper
from benchmarks.bench.trl_contender import TrlStepper

__all__ = ["bench_memory"]


def _rss() -> int:
    """This process's resident set now (bytes), as the suite's ``PeakMemory`` samples it; off
    Linux, the lifetime peak."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


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
        except BaseException:  # any failure in the child: report NaN
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    data = b""
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return float(data) if data else float("nan")


def bench_memory(res: Results, ctx: BenchContext, s: BenchSettings) -> None:
    """Section 5: peak RSS growth of a rollout (engine, HF) at the largest batch and of two
    steps of each trainer, each in its own child."""
    from benchmarks.engines.torch_engine import TorchEngine

    b = max(s.rollout_batches)
    prompts = [p.prompt for p in ctx.problems[:b]]

    def ours_step() -> None:
        st = OurStepper(ctx, s)
        st.step()
        st.step()

    def trl_step(ckpt: bool) -> Callable[[], None]:
        def run() -> None:
            st = TrlStepper(ctx, s, checkpointing=ckpt)
            st.step()
            st.step()
            st.close()

        return run

    jobs = {
        f"engine rollout b={b}": lambda: engine_generate(
            TorchEngine(ctx.model, ctx.tok, batch_size=b), prompts, ctx.max_new, 0
        ),
        f"hf_generate b={b}": lambda: hf_generate(ctx.model, ctx.tok, prompts, ctx.max_new, 0),
        "sppo-bench step": ours_step,
    }
    if s.trl:
        jobs["trl step"] = trl_step(True)
        jobs["trl (no ckpt) step"] = trl_step(False)
    for name, fn in jobs.items():
        res.add("memory", name, "peak MiB", "MiB", _peak_in_child(fn) / 2**20)
