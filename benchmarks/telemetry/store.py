"""Checks that an output location and a tracking store can be written now, before any compute.

A run that dies after an hour because its disk is full or its MLflow store is read-only wastes
the hour; these checks take milliseconds. Each failure names the config key, the path or URI and
what would pass. A tracking server is probed once with a short timeout: MLflow's own client
retries a dead server with exponential backoff for minutes, printing nothing, which to a user
looks like a hang. ``sppo-bench run`` (``benchmarks/suite/preflight.py``), ``sppo-bench eval``
and ``sppo-bench sweep`` call them.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from algorithms import ConfigError

__all__ = [
    "CLUSTER_EXTRA",
    "PROBE_TIMEOUT_S",
    "PreflightError",
    "check_database",
    "check_tracking_uri",
    "check_writable_dir",
    "database_uri",
]


#: Seconds a tracking server or database gets to answer the start-up probe.
PROBE_TIMEOUT_S = 5.0
#: Store schemes MLflow 3.17 can track to (its file store is refused since 3.13).
_SQL_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
_ALLOWED = (
    "sqlite:///<path>",
    "http(s)://<host>:<port>",
    "postgresql://",
    "mysql://",
    "mssql://",
    "databricks",
)


#: The pyproject extra with PostgreSQL's driver (psycopg) and Ray: ``pip install
#: 'sppo-bench[cluster]'``.
CLUSTER_EXTRA = "cluster"


def database_uri(uri: str) -> str:
    """``uri`` with the PostgreSQL driver SQLAlchemy can load here: a bare ``postgresql://`` (or
    ``postgres://``) means psycopg2 to SQLAlchemy, so it becomes ``postgresql+psycopg://`` when
    only psycopg 3 (extra ``cluster``) is installed. Any other URI is returned as it is."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme not in ("postgresql", "postgres"):
        return uri
    if importlib.util.find_spec("psycopg2") is None and importlib.util.find_spec("psycopg"):
        return f"postgresql+psycopg://{rest}"
    return uri


class PreflightError(ConfigError):
    """The machine cannot run this config (disk full, store not writable)."""


def check_writable_dir(key: str, value: str, path: Path, min_free_gb: float) -> None:
    """Raise :class:`PreflightError` naming ``key=value`` unless a file can be created in
    ``path`` (made if missing) and its disk has ``min_free_gb`` free."""
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


def _probe_http(key: str, uri: str, timeout: float) -> None:
    """One GET of the server's ``/health``; any HTTP answer means a server is there."""
    url = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):  # a server behind authentication: MLflow sends the credentials
            return
        raise PreflightError(
            f"{key}={uri}: {url} answered HTTP {e.code}: not an MLflow tracking server (an MLflow "
            "server answers /health with 200); check the host and port"
        ) from e
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise PreflightError(
            f"{key}={uri}: no tracking server answers at {url} within {timeout:g} s "
            f"({reason}); start one (`mlflow server --backend-store-uri sqlite:///mlflow.db "
            "--port 5000`), or track to a local file with tracking.uri=sqlite:///mlflow.db"
        ) from e


def check_database(key: str, uri: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Raise :class:`PreflightError` naming ``key`` unless one connection to the database store
    ``uri`` opens and closes, in a thread so a server that never answers cannot hold the start
    for longer than ``timeout``. A missing PostgreSQL driver names the extra that has it."""
    uri = database_uri(uri)
    scheme = uri.partition("://")[0]
    if scheme.startswith("postgres"):
        driver = scheme.partition("+")[2] or "psycopg2"
        if importlib.util.find_spec(driver) is None:
            raise PreflightError(
                f"{key}={uri}: PostgreSQL's driver {driver!r} is not installed; "
                f"pip install 'sppo-bench[{CLUSTER_EXTRA}]' (psycopg 3)"
            )
    outcome: list[BaseException | None] = []

    def connect() -> None:
        try:
            import sqlalchemy

            kwargs = (
                {"connect_timeout": max(1, int(timeout))} if scheme.startswith("postgres") else {}
            )
            engine = sqlalchemy.create_engine(uri, connect_args=kwargs)
            with engine.connect():
                pass
            engine.dispose()
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001 - reported to the caller below
            outcome.append(e)

    t = threading.Thread(target=connect, daemon=True)
    t.start()
    t.join(timeout)
    if not outcome:
        raise PreflightError(f"{key}={uri}: the database did not answer within {timeout:g} s")
    if outcome[0] is not None:
        e = outcome[0]
        raise PreflightError(
            f"{key}={uri}: cannot connect ({type(e).__name__}: {str(e).splitlines()[0]})"
        ) from e


def check_tracking_uri(
    uri: str,
    min_free_gb: float = 0.0,
    *,
    key: str = "tracking.uri",
    timeout: float = PROBE_TIMEOUT_S,
) -> None:
    """Raise :class:`PreflightError` unless ``uri`` names a store this run can write to now;
    ``key`` is where the user set it (the config key, or ``MLFLOW_TRACKING_URI``)."""
    parsed = urllib.parse.urlparse(uri)
    scheme = parsed.scheme.split("+", 1)[0]  # postgresql+psycopg2 -> postgresql
    if scheme in ("http", "https"):
        if not parsed.hostname:
            raise PreflightError(f"{key}={uri}: no host; e.g. http://127.0.0.1:5000")
        _probe_http(key, uri, timeout)
    elif scheme == "sqlite":
        if not uri.startswith("sqlite:///") or uri == "sqlite:///":
            raise PreflightError(
                f"{key}={uri}: a SQLite store is sqlite:///<path to a .db file> "
                "(sqlite:////abs/path.db or sqlite:///relative.db)"
            )
        db = Path(uri[len("sqlite:///") :])
        check_writable_dir(key, uri, db.parent, min_free_gb)
        if db.exists() and not db.is_file():
            raise PreflightError(f"{key}={uri}: {db} is not a file")
        if db.exists():
            try:
                with open(db, "r+b") as f:
                    head = f.read(16)
            except OSError as e:
                raise PreflightError(f"{key}={uri}: database {db} is not writable ({e})") from e
            if head and head != b"SQLite format 3\x00":
                raise PreflightError(f"{key}={uri}: {db} is not a SQLite database")
    elif scheme in _SQL_SCHEMES:
        check_database(key, uri, timeout)
    elif scheme == "databricks":
        return  # credentials live in the Databricks profile; MLflow checks them itself
    else:
        what = (
            "a path (MLflow's file store is refused since 3.13)"
            if not scheme or scheme == "file"
            else f"scheme {scheme!r}"
        )
        raise PreflightError(
            f"{key}={uri}: {what} is not a tracking store; allowed: {list(_ALLOWED)}"
        )
