"""Shared fixtures: a micro suite run once per session on a temporary MLflow store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
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
]


@pytest.fixture(scope="session")
def micro_suite(tmp_path_factory):
    """Run the four default algorithms once at a micro budget; yields (result, config)."""
    from benchmarks.cli import compose_config
    from benchmarks.suite import run_suite

    root = tmp_path_factory.mktemp("micro_suite")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    cfg = compose_config(
        [*MICRO, f"tracking.uri={uri}", f"cache_dir={root / 'cache'}", f"output_dir={root / 'out'}"]
    )
    result = run_suite(cfg, progress=False)
    return result, cfg
