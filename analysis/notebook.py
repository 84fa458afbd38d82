"""Two helpers the notebooks under ``notebooks/`` share: find the store, save a figure.

A notebook's kernel starts in ``notebooks/``, while ``sppo-bench run`` writes ``mlflow.db`` in the
directory it was started from (normally the repository root): `resolve_tracking_uri` finds a
relative SQLite store in the working directory or the nearest parent that has it, and refuses to
go on without one (MLflow would silently create an empty database instead).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure

__all__ = ["resolve_tracking_uri", "save_figure"]

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
