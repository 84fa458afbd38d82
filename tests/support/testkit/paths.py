"""Where the repository and the real benchmark data are, found one way for every test.

The data is ``$SPPO_BENCH_DATA`` when set, else ``../shared/data`` beside the repository (as CI
lays it out). A test that needs it asks through :func:`require` (or the ``data_dir`` fixture):
without the data it is skipped on a laptop, and fails when ``CI`` is set, so a missing copy can
never hide the tests that read it.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

import pytest

from benchmarks.tasks.datasets import DATA_DIR_ENV

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"
_DATA_DIR = Path(os.environ.get(DATA_DIR_ENV) or REPO.parent / "shared" / "data").resolve()


def skip_or_fail(why: str) -> None:
    """Skip on a laptop; fail under ``CI``, where nothing may be missing."""
    if os.environ.get("CI"):
        pytest.fail(f"{why}; with CI set this is a failure, not a skip")
    pytest.skip(f"{why} (with CI set this fails)")


def require_data() -> Path:
    """The data folder, or skip (fail under ``CI``) when it is not there."""
    if not _DATA_DIR.is_dir():
        skip_or_fail(
            f"no benchmark data at {_DATA_DIR} (set ${DATA_DIR_ENV} or lay out ../shared/data)"
        )
    return _DATA_DIR


def require_module(name: str) -> ModuleType:
    """Import an optional dependency (verl, lm_eval), or skip (fail under ``CI``) without it."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        skip_or_fail(f"{name} is not importable ({e}); install the project's extras")
        raise  # unreachable: _missing raises


#: Marks a test that reads the benchmark data: the ``data_dir`` fixture (tests/conftest.py)
#: skips it without the data, or fails it under ``CI``.
needs_data = pytest.mark.usefixtures("data_dir")
