"""Reading an MLflow store two ways: SQL on a SQLite file, else the client API.

One ``get_metric_history`` call per run x metric costs minutes at 1,000 runs, and
``search_runs`` loads every param of every run (a flattened config: hundreds each) through the
ORM, so on a SQLite store the runs, tags, params and metric histories are read straight from
MLflow's tables, read-only and in chunks of run ids. That schema is MLflow's, not a public API:
every caller catches ``sqlite3.Error`` and falls back to the client, which reads any store
(a server, PostgreSQL), and the tests check both paths give the same frames. Everything that
knows a table or column name of MLflow's lives here.
"""

from __future__ import annotations

import fnmatch
import logging
import sqlite3
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pandas as pd

from ._common import MLFLOW_PARENT_TAG

__all__ = [
    "Record",
    "client_history",
    "empty_history",
    "match_metrics",
    "run_histories",
    "run_values",
    "sqlite_history",
    "sqlite_path",
    "sqlite_runs",
]

logger = logging.getLogger(__name__)

#: One run as the analysis needs it: (run id, run name, experiment id, status, tags).
Record = tuple[str, str | None, str, str, dict[str, str]]
_SQL_CHUNK = 500  # run ids per IN (...) clause: well under SQLite's variable limit


def sqlite_runs(
    path: Path,
    experiment_ids: Sequence[str],
    parent_run_id: str | None,
    tag_keys: Sequence[str],
) -> list[Record]:
    """Active runs of the experiments (children of parent_run_id if given), straight from SQL.

    Reads only the tags the analysis uses; ``search_runs`` would also load every param (a
    flattened config: hundreds per run) through the ORM, which dominates load time.
    """
    if not experiment_ids:
        return []
    con = _connect(path)
    try:
        ids = [int(e) for e in experiment_ids]
        rows = con.execute(
            "SELECT run_uuid, name, experiment_id, status FROM runs "
            f"WHERE lifecycle_stage = 'active' AND experiment_id IN ({','.join('?' * len(ids))})",
            ids,
        ).fetchall()
        tags: dict[str, dict[str, str]] = {r[0]: {} for r in rows}
        run_ids = list(tags)
        for run_id, key, value in _key_values(con, "tags", run_ids, tag_keys):
            tags[run_id][key] = value
    finally:
        con.close()
    records = [(r[0], r[1], str(r[2]), r[3], tags[r[0]]) for r in rows]
    if parent_run_id is not None:
        records = [r for r in records if r[4].get(MLFLOW_PARENT_TAG) == parent_run_id]
    return records


def sqlite_path(uri: str) -> Path | None:
    """File path of a ``sqlite:///...`` tracking URI; None for other stores or in-memory DBs."""
    if not uri.startswith("sqlite://"):
        return None
    rest = uri[len("sqlite://") :].split("?", 1)[0]
    if not rest.startswith("/") or rest in ("/", "/:memory:"):
        return None
    path = Path(rest[1:])
    return path if path.is_file() else None


def _connect(path: Path) -> sqlite3.Connection:
    """Read-only connection: the analysis never writes to a store a training run may be using."""
    return sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)


def _wants(metrics: Sequence[str] | None) -> tuple[list[str] | None, list[str]]:
    """Split a metrics selection into exact names (SQL-filterable) and shell patterns."""
    if metrics is None:
        return None, []
    patterns = [m for m in metrics if any(ch in m for ch in "*?[")]
    exact = [m for m in metrics if m not in patterns]
    return (None if patterns else exact), patterns


def match_metrics(names: pd.Series, metrics: Sequence[str] | None) -> pd.Series:
    if metrics is None:
        return pd.Series(True, index=names.index)
    keep = {n for n in names.unique() if any(fnmatch.fnmatchcase(n, m) for m in metrics)}
    return names.isin(keep)


def _key_values(
    con: sqlite3.Connection, table: str, run_ids: Sequence[str], keys: Sequence[str]
) -> Iterator[tuple[str, str, str]]:
    """``(run_id, key, value)`` rows of MLflow's ``tags`` or ``params`` table for these runs and
    keys, queried in chunks of run ids (SQLite caps the variables of one statement)."""
    run_ids = list(run_ids)
    for start in range(0, len(run_ids), _SQL_CHUNK):
        chunk = run_ids[start : start + _SQL_CHUNK]
        yield from con.execute(
            f"SELECT run_uuid, key, value FROM {table} "
            f"WHERE run_uuid IN ({','.join('?' * len(chunk))}) "
            f"AND key IN ({','.join('?' * len(keys))})",
            [*chunk, *keys],
        )


def sqlite_history(
    path: Path, run_ids: Sequence[str], metrics: Sequence[str] | None
) -> pd.DataFrame:
    """Metric rows of the given runs, read in chunks from MLflow's ``metrics`` table."""
    exact, patterns = _wants(metrics)
    con = _connect(path)
    frames = []
    try:
        for start in range(0, len(run_ids), _SQL_CHUNK):
            chunk = list(run_ids[start : start + _SQL_CHUNK])
            sql = (
                "SELECT run_uuid, key, step, value, is_nan, timestamp FROM metrics "
                f"WHERE run_uuid IN ({','.join('?' * len(chunk))})"
            )
            args: list[Any] = chunk
            if exact is not None:
                if not exact:
                    break
                sql += f" AND key IN ({','.join('?' * len(exact))})"
                args = chunk + list(exact)
            rows = con.execute(sql, args).fetchall()
            frames.append(
                pd.DataFrame(
                    rows, columns=["run_id", "metric", "step", "value", "is_nan", "timestamp"]
                )
            )
    finally:
        con.close()
    if not frames:
        return empty_history()
    out = pd.concat(frames, ignore_index=True)
    out["value"] = out["value"].astype("float64").where(out["is_nan"] == 0, np.nan)
    out = out.drop(columns="is_nan")
    out["step"] = out["step"].astype("int64")
    out["timestamp"] = out["timestamp"].astype("int64")
    if patterns:
        out = out[match_metrics(out["metric"], metrics)]
    return out


def run_histories(client: Any, runs: Sequence[Any]) -> pd.DataFrame:
    """Every metric point of the runs (MLflow ``Run`` objects), raw: run_id, metric, step, value,
    timestamp. With SQL from a SQLite store, else through the client."""
    db_path = sqlite_path(client.tracking_uri)
    if db_path is not None:
        try:
            return sqlite_history(db_path, [r.info.run_id for r in runs], None)
        except sqlite3.Error as err:
            logger.warning("reading %s directly failed (%s); using the client API", db_path, err)
    return client_history(client, runs, None)


def client_history(client: Any, runs: Sequence[Any], metrics: Sequence[str] | None) -> pd.DataFrame:
    """Metric rows via ``get_metric_history``: any store, one call per run x metric (threaded)."""
    jobs = []
    for run in runs:
        keys = pd.Series(sorted(run.data.metrics), dtype="object")
        keys = keys[match_metrics(keys, metrics)] if len(keys) else keys
        jobs.extend((run.info.run_id, key) for key in keys)

    def fetch(job: tuple[str, str]) -> list[tuple[str, str, int, float, int]]:
        run_id, key = job
        return [
            (run_id, key, int(m.step), float(m.value), int(m.timestamp))
            for m in client.get_metric_history(run_id, key)
        ]

    with ThreadPoolExecutor(max_workers=8) as pool:
        rows = [row for chunk in pool.map(fetch, jobs) for row in chunk]
    if not rows:
        return empty_history()
    return pd.DataFrame(rows, columns=["run_id", "metric", "step", "value", "timestamp"])


def empty_history() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run_id": pd.Series(dtype="object"),
            "metric": pd.Series(dtype="object"),
            "step": pd.Series(dtype="int64"),
            "value": pd.Series(dtype="float64"),
            "timestamp": pd.Series(dtype="int64"),
        }
    )


def run_values(
    table: str, run_ids: Sequence[str], keys: Sequence[str], uri: str
) -> dict[str, dict[str, str]]:
    """Per run, the values of ``keys`` it logged in its ``params`` or ``tags`` (absent keys
    left out): with SQL from a SQLite store, else through the client."""
    out: dict[str, dict[str, str]] = {r: {} for r in run_ids}
    if not run_ids or not keys:
        return out
    db_path = sqlite_path(uri)
    if db_path is not None:
        con = _connect(db_path)
        try:
            for run_id, key, value in _key_values(con, table, run_ids, keys):
                out[run_id][key] = value
        finally:
            con.close()
        return out
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    for run_id in run_ids:
        logged = getattr(client.get_run(run_id).data, table)
        out[run_id] = {k: logged[k] for k in keys if k in logged}
    return out
