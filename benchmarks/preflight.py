"""Checks at start, before any compute: disk space and writable output and tracking stores.

A run that dies after an hour because its disk is full or its MLflow store is read-only wastes
the hour; these checks take milliseconds. Each failure names the config key, the path and what
would pass. ``min_free_disk_gb`` (root config key) is the free space each output location must
have at start (a checkpoint of a real model is several GB).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from algorithms import ConfigError

__all__ = ["PreflightError", "preflight"]


class PreflightError(ConfigError):
    """The machine cannot run this config (disk full, store not writable)."""


def _writable_dir(key: str, value: str, path: Path, min_free_gb: float) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".sppo-bench-probe-"):
            pass
    except OSError as e:
        raise PreflightError(f"{key}={value}: directory {path} is not writable ({e})") from e
    free_gb = shutil.disk_usage(path).free / 2**30
    if free_gb < min_free_gb:
        raise PreflightError(
            f"{key}={value}: only {free_gb:.2f} GB free on the disk of {path}; "
            f"min_free_disk_gb={min_free_gb:g} is required at start (free space, or lower "
            "min_free_disk_gb)"
        )


def preflight(cfg: Any) -> None:
    """Raise :class:`PreflightError` if an output location is unwritable or short of space."""
    from benchmarks.tracking import default_tracking_uri

    min_free = float(cfg.get("min_free_disk_gb", 0.0))
    if not min_free >= 0:
        raise ConfigError(f"min_free_disk_gb={min_free} must be >= 0")
    _writable_dir("output_dir", str(cfg.output_dir), Path(cfg.output_dir), min_free)
    if cfg.get("cache_dir"):
        _writable_dir("cache_dir", str(cfg.cache_dir), Path(cfg.cache_dir), min_free)
    uri = cfg.tracking.uri or default_tracking_uri()
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///") :])
        _writable_dir("tracking.uri", uri, db.parent, min_free)
        if db.exists() and not db.is_file():
            raise PreflightError(f"tracking.uri={uri}: {db} is not a file")
        if db.exists():
            try:
                with open(db, "r+b"):
                    pass
            except OSError as e:
                raise PreflightError(
                    f"tracking.uri={uri}: database {db} is not writable ({e})"
                ) from e
