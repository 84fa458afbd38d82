"""Shared fixtures: a micro suite run once per session on a temporary MLflow store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Suites in tests run in one process unless a test sets ``jobs`` (tests/test_workers.py): a
#: spawned worker costs seconds of imports, more than a micro suite's runs.
os.environ.setdefault("SPPO_BENCH_JOBS", "1")
#: Real benchmark data (read-only) beside the repository, as CI lays it out.
DATA_DIR = Path(os.environ.get("SPPO_BENCH_DATA", REPO.parent / "shared" / "data"))

#: A suite small enough for a test (< 60 s on 2 cores) that still exercises every phase.
MICRO = [
    "warmstart.phases=[{steps:40,direct_fraction:0.0},{steps:10,direct_fraction:0.6}]",
    "warmstart.eval_every=50",
    "seeds=1",
    "warmstart.val_size=64",
    "task.eval_size=200",
    "trainer.samples_per_step=32",
    "budget.limit=256",
    "budget.eval_fractions=[0.0,0.5,1.0]",
    "suite.report=false",
    "algorithm.dapo.params.group_size=4",
    # At most 3 x 32 samples per DAPO step (dynamic sampling refills): no step can cross 0.5 and
    # 1.0 at once, so every algorithm is evaluated at every fraction whatever the draws.
    "algorithm.dapo.params.max_gen_batches=3",
]


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a test module: tiny matmuls gain nothing from intra-op threads, and
    on a loaded 2-core machine OpenMP's spin-waiting makes them many times slower. Restored after
    (``threads=1`` in a composed config also sets the global count)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tok():
    """The character tokenizer of the `arith` task."""
    from benchmarks.tasks.arith import ArithTask
    from benchmarks.training.modeling import build_char_tokenizer

    return build_char_tokenizer(ArithTask.alphabet)


@pytest.fixture(scope="session")
def micro_suite(tmp_path_factory):
    """Run the four default algorithms once at a micro budget; yields (result, config)."""
    from benchmarks.config import compose_config
    from benchmarks.suite.run import run_suite

    root = tmp_path_factory.mktemp("micro_suite")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    cfg = compose_config(
        [*MICRO, f"tracking.uri={uri}", f"cache_dir={root / 'cache'}", f"output_dir={root / 'out'}"]
    )
    result = run_suite(cfg, progress=False)
    return result, cfg
