"""What the notebooks under ``notebooks/`` share: where their data comes from, saving a figure.

A fresh clone has no MLflow store, and training a suite takes minutes to hours; the results sets
committed under ``results/`` (:mod:`analysis.results`) hold the same frames, so every notebook reads
them by default and draws its figure in seconds (`notebook_data`). A user who ran their own suite
points the notebooks at it instead: at another results set (``SPPO_BENCH_RESULTS``) or at the
store (``SPPO_BENCH_TRACKING_URI``, ``SPPO_BENCH_EXPERIMENT``).

A notebook's kernel starts in ``notebooks/``, while ``sppo-bench run`` writes ``mlflow.db`` in the
directory it was started from (normally the repository root): `resolve_tracking_uri` finds a
relative SQLite store in the working directory or the nearest parent that has it, and refuses to
go on without one (MLflow would silently create an empty database instead). Relative results
folders and the repository's ``results/`` are found the same way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .calibration import load_calibration
from .load import load_items, load_runs
from .results import read_results

__all__ = ["NotebookData", "notebook_data", "resolve_tracking_uri", "save_figure"]

#: Environment variables `notebook_data` reads, in order of precedence.
RESULTS_ENV = "SPPO_BENCH_RESULTS"
TRACKING_URI_ENV = "SPPO_BENCH_TRACKING_URI"
EXPERIMENT_ENV = "SPPO_BENCH_EXPERIMENT"
#: The store `sppo-bench run` writes, read when only an experiment is named.
DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
_SQLITE = "sqlite:///"


def resolve_tracking_uri(uri: str, start: str | Path | None = None) -> str:
    """The tracking URI with a relative SQLite path made absolute.

    ``sqlite:///mlflow.db`` is looked up in ``start`` (default: the working directory) and then in
    its parents; other URIs (absolute SQLite paths, ``http://``, ``file:``) are returned as given.

    Raises:
        FileNotFoundError: a relative SQLite store that exists in none of those directories.
    """
    if not uri.startswith(_SQLITE) or uri[len(_SQLITE) :].startswith("/"):
        return uri
    rel = uri[len(_SQLITE) :].split("?", 1)[0]
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / rel).is_file():
            return f"{_SQLITE}{(folder / rel).as_posix()}"
    raise FileNotFoundError(
        f"no MLflow store {rel!r} in {here} or its parents: run a suite first (`sppo-bench run`, "
        "see notebooks/README.md) or set SPPO_BENCH_TRACKING_URI"
    )


def save_figure(
    fig: Figure | Axes,
    directory: str | Path,
    name: str,
    formats: Sequence[str] = ("png", "pdf"),
    *,
    dpi: int = 150,
) -> Path:
    """Save a figure (or the figure of an axes) as ``<directory>/<name>.<fmt>``; returns the PNG's
    path (the first format's). The directory is created if missing."""
    figure = fig.figure if isinstance(fig, Axes) else fig
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = out / f"{name}.{fmt}"
        figure.savefig(path, dpi=dpi if fmt == "png" else None, bbox_inches="tight")
        paths.append(path)
    return paths[0]


@dataclass(frozen=True)
class NotebookData:
    """A notebook's frames, whichever source they came from.

    ``df`` is the tidy frame of :func:`analysis.load_runs`, ``items`` the item table of
    :func:`analysis.load_items`, ``calibration`` the frame of :func:`analysis.load_calibration`;
    ``source`` says what was read, for the notebook to print next to its figure.
    """

    df: pd.DataFrame
    items: pd.DataFrame
    calibration: pd.DataFrame
    source: str


def notebook_data(
    default_suite: str,
    *,
    environ: Mapping[str, str] | None = None,
    start: str | Path | None = None,
) -> NotebookData:
    """The frames a notebook draws from, so that it runs on a fresh clone with no training.

    Precedence, so that naming one's own runs always wins over the committed ones:
    ``SPPO_BENCH_RESULTS`` (results folders, separated by ``os.pathsep``: one set, or a suite's
    folder of shards, merged); else an MLflow store when ``SPPO_BENCH_TRACKING_URI`` or
    ``SPPO_BENCH_EXPERIMENT`` is set (the experiment defaults to ``sppo-bench-<default_suite>``,
    the store to ``sqlite:///mlflow.db``: naming an experiment only makes sense for a store);
    else the repository's ``results/<default_suite>``. Relative paths are looked up in ``start``
    (default: the working directory, ``notebooks/`` under Jupyter) and then its parents.

    Args:
        default_suite: the suite whose committed results (and experiment) are read by default.
        environ: the variables to read; default ``os.environ``.
        start: where relative paths are looked up first.

    Raises:
        FileNotFoundError: a results folder or store that does not exist, naming what to set.
        analysis.results.ResultsError: a results set that cannot be read.
    """
    env = os.environ if environ is None else environ
    here = Path(start or Path.cwd()).resolve()
    given = [p for p in env.get(RESULTS_ENV, "").split(os.pathsep) if p.strip()]
    if given:
        folders = [_find(Path(p), here, f"{RESULTS_ENV}={env[RESULTS_ENV]!r}") for p in given]
        return _from_results(folders)
    if env.get(TRACKING_URI_ENV) or env.get(EXPERIMENT_ENV):
        uri = resolve_tracking_uri(env.get(TRACKING_URI_ENV) or DEFAULT_TRACKING_URI, here)
        experiment = env.get(EXPERIMENT_ENV) or f"sppo-bench-{default_suite}"
        df = load_runs(experiment, tracking_uri=uri)
        return NotebookData(
            df=df,
            items=load_items(df, uri),
            calibration=load_calibration(df, uri),
            source=f"MLflow store {uri}, experiment {experiment!r}",
        )
    return _from_results([_committed(default_suite, here)])


def _from_results(folders: list[Path]) -> NotebookData:
    rs = read_results(folders)
    shards = ", ".join(str(p) for p in rs.sources)
    return NotebookData(
        df=rs.tidy(),
        items=rs.items,
        calibration=rs.calibration,
        source=f"results of suite {rs.suite!r} ({shards})",
    )


def _find(path: Path, here: Path, what: str) -> Path:
    """``path`` if absolute, else the first of ``here/path`` and its parents' that exists."""
    candidates = [path] if path.is_absolute() else [f / path for f in (here, *here.parents)]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"{what}: no folder {str(path)!r}"
        + ("" if path.is_absolute() else f" in {here} or its parents")
        + f" (set {RESULTS_ENV} to existing results folders, separated by {os.pathsep!r})"
    )


def _committed(suite: str, here: Path) -> Path:
    """The repository's ``results/<suite>``: in the nearest of ``here`` and its parents."""
    holders = [f / "results" for f in (here, *here.parents) if (f / "results").is_dir()]
    for results in holders:
        if (results / suite).is_dir():
            return results / suite
    there = (
        f"{holders[0]} holds {sorted(p.name for p in holders[0].iterdir() if p.is_dir())}"
        if holders
        else f"no results/ folder in {here} or its parents"
    )
    raise FileNotFoundError(
        f"no committed results of suite {suite!r} ({there}): set SPPO_BENCH_SUITE to one of "
        f"those, {RESULTS_ENV} to your own results folders, or {TRACKING_URI_ENV} (and "
        f"{EXPERIMENT_ENV}) to an MLflow store"
    )
