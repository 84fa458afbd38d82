"""``benchmarks/telemetry/store.py``: the start-up checks of an output directory and a tracking
store, called directly (``tests/suite/test_config_errors.py`` reaches them through the CLI)."""

from __future__ import annotations

import pytest

from algorithms import ConfigError
from benchmarks.telemetry.store import PreflightError, check_tracking_uri, check_writable_dir


def test_a_writable_sqlite_store_passes_and_its_directory_is_made(tmp_path):
    check_tracking_uri(f"sqlite:///{tmp_path / 'new' / 'mlflow.db'}")
    assert (tmp_path / "new").is_dir()


def test_a_failure_names_where_the_uri_was_set(tmp_path):
    with pytest.raises(PreflightError, match=r"^MLFLOW_TRACKING_URI=.*a path.*file store"):
        check_tracking_uri(str(tmp_path / "mlruns"), key="MLFLOW_TRACKING_URI")
    assert issubclass(PreflightError, ConfigError)  # the CLI reports both without a traceback


def test_a_directory_short_of_space_names_the_key_and_the_setting(tmp_path):
    with pytest.raises(PreflightError, match=r"^output_dir=out: only .* min_free_disk_gb=1e\+09"):
        check_writable_dir("output_dir", "out", tmp_path, 1e9)
    check_writable_dir("output_dir", "out", tmp_path / "made", 0.0)
    assert (tmp_path / "made").is_dir()
