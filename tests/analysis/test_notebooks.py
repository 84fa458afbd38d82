"""Every notebook under notebooks/ runs top to bottom against a store made by real tiny runs.

The store is the session's micro suite (the four algorithms, tests/conftest.py) plus a micro
horizon grid (horizons 1 and 2) written into the same SQLite file, so each notebook finds its
experiment: ``sppo-bench-default`` or ``sppo-bench-horizon``. Kernels are the ``python3`` kernel
of this interpreter (checked), parameters go in through the environment, as a user would set them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from testkit.paths import REPO
from testkit.suites import MICRO

NOTEBOOKS = REPO / "notebooks"
#: Notebook -> (experiment it reads, the figure it writes).
FIGURES = {
    "01_table1": ("sppo-bench-default", "table1_final_accuracy"),
    "02_accuracy_vs_wallclock": ("sppo-bench-default", "fig5_accuracy_vs_wallclock"),
    "03_peak_memory": ("sppo-bench-default", "fig6_peak_memory"),
    "04_training_dynamics": ("sppo-bench-default", "fig4_training_dynamics"),
    "05_critic_calibration": ("sppo-bench-default", "fig7_critic_calibration"),
    "06_accuracy_vs_horizon": ("sppo-bench-horizon", "accuracy_vs_horizon"),
}


@pytest.fixture(scope="session")
def horizon_store(micro_suite):
    """The micro suite's store with a micro horizon grid (task.horizon 1 and 2) added to it."""
    from benchmarks.config import compose_config
    from benchmarks.suite.run import grid_configs, run_grid

    result, _ = micro_suite
    root = Path(result.tracking_uri.removeprefix("sqlite:///")).parent
    overrides = [
        *MICRO,
        "suite=horizon",
        "suite.grid={task.horizon:[1,2]}",
        f"tracking.uri={result.tracking_uri}",
        f"cache_dir={root / 'cache'}",
        f"output_dir={root / 'horizon_out'}",
    ]
    cfg = compose_config(overrides)
    grid = run_grid(cfg, grid_configs(cfg, overrides), progress=False)
    assert all(r.status == "FINISHED" for r in grid.runs), [r.error for r in grid.runs]
    return result.tracking_uri


def test_notebooks_are_stored_without_outputs() -> None:
    paths = sorted(NOTEBOOKS.glob("*.ipynb"))
    assert [p.stem for p in paths] == sorted(FIGURES)
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, path.name
        first = next(c for c in nb.cells if c.cell_type == "code")
        assert "SPPO_BENCH_TRACKING_URI" in first.source and "SPPO_BENCH_EXPERIMENT" in first.source


def test_kernel_is_this_interpreter() -> None:
    # The kernelspec says `python`; jupyter_client must run it as this venv's interpreter, or
    # the notebooks would import another environment's packages (or none).
    cmd = KernelManager(kernel_name="python3").format_kernel_cmd()
    assert Path(cmd[0]).resolve() == Path(sys.executable).resolve(), cmd


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_notebook_runs_and_writes_its_figure(name: str, horizon_store: str, tmp_path: Path):
    experiment, figure = FIGURES[name]
    env = {
        **os.environ,
        "SPPO_BENCH_TRACKING_URI": horizon_store,
        "SPPO_BENCH_EXPERIMENT": experiment,
        "SPPO_BENCH_FIGURE_DIR": str(tmp_path / "figures"),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("MPLBACKEND", None)  # the kernel's inline backend, as in Jupyter
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=120,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute(env=env)  # raises CellExecutionError naming the failing cell

    png = tmp_path / "figures" / f"{figure}.png"
    assert png.is_file() and png.stat().st_size > 10_000, png
    assert (tmp_path / "figures" / f"{figure}.pdf").is_file()
    shown = [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
        if "image/png" in out.get("data", {})
    ]
    assert shown, f"{name} displayed no figure"
