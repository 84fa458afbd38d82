"""Shared fixtures: a micro suite run once per session on a temporary MLflow store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testkit.paths import require_data
from testkit.suites import MICRO

#: Suites in tests run in one process unless a test sets ``jobs`` (tests/suite/test_workers.py):
#: a spawned worker costs seconds of imports, more than a micro suite's runs.
os.environ.setdefault("SPPO_BENCH_JOBS", "1")


@pytest.fixture(scope="session", autouse=True)
def _no_store_left_in_the_checkout():
    """Fail the session when a test leaves an MLflow store or artifact folder in the working
    directory (an experiment created without an ``artifact_location`` under a temp dir does):
    another test that looks for its own ``./mlruns`` would then read this one's."""
    stray = [Path.cwd() / name for name in ("mlruns", "mlartifacts")]
    before = {p for p in stray if p.exists()}
    yield
    left = [str(p) for p in stray if p.exists() and p not in before]
    if left:
        pytest.fail(f"tests left {left} in the working directory; write under tmp_path")


@pytest.fixture
def data_dir() -> Path:
    """The real benchmark data; skipped without it, a failure under ``CI``."""
    return require_data()


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


def pytest_collection_modifyitems(items):
    """A test that asks for :func:`micro_suite` is ``slow``: the first one to ask trains the four
    algorithms (about 1.5 minutes on 2 loaded cores), so ``make test-fast`` leaves them all out
    and ``make test`` runs them. Marked here, beside the fixture, rather than in each file."""
    for item in items:
        if "micro_suite" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


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
