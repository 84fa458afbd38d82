"""Every notebook under notebooks/ runs top to bottom on each source it can read.

With no parameter set, a notebook reads the results committed under ``results/`` (what a fresh
clone has); ``SPPO_BENCH_RESULTS`` points it at other results sets; ``SPPO_BENCH_TRACKING_URI``
at an MLflow store. The store is the session's micro suite (the four algorithms, tests/conftest.py)
plus a micro horizon grid (horizons 1 and 2) written into the same SQLite file, so each notebook
finds its experiment: ``sppo-bench-default`` or ``sppo-bench-horizon``. Kernels are the ``python3``
kernel of this interpreter (checked), parameters go in through the environment, as a user would
set them, and the kernel starts in ``notebooks/``, as under Jupyter.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

import nbformat
import pytest
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from analysis import notebook_data
from testkit.paths import REPO
from testkit.suites import MICRO

NOTEBOOKS = REPO / "notebooks"
RESULTS = REPO / "results"
#: Notebook -> (experiment it reads, the figure it writes).
FIGURES = {
    "01_table1": ("sppo-bench-default", "table1_final_accuracy"),
    "02_accuracy_vs_wallclock": ("sppo-bench-default", "fig5_accuracy_vs_wallclock"),
    "03_peak_memory": ("sppo-bench-default", "fig6_peak_memory"),
    "04_training_dynamics": ("sppo-bench-default", "fig4_training_dynamics"),
    "05_critic_calibration": ("sppo-bench-default", "fig7_critic_calibration"),
    "06_accuracy_vs_horizon": ("sppo-bench-horizon", "accuracy_vs_horizon"),
}
#: The suite whose committed results a notebook reads when nothing is set (its SUITE default).
SUITES = {name: "claims" if name == "06_accuracy_vs_horizon" else "default" for name in FIGURES}
#: The parameters a notebook reads: unset for a run, except those the test names.
PARAMETERS = (
    "SPPO_BENCH_RESULTS",
    "SPPO_BENCH_TRACKING_URI",
    "SPPO_BENCH_EXPERIMENT",
    "SPPO_BENCH_SUITE",
    "SPPO_BENCH_FIGURE_DIR",
)


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
        for variable in PARAMETERS:
            assert variable in first.source, (path.name, variable)
        assert f'"SPPO_BENCH_SUITE", "{SUITES[path.stem]}"' in first.source, path.name


def test_kernel_is_this_interpreter() -> None:
    # The kernelspec says `python`; jupyter_client must run it as this venv's interpreter, or
    # the notebooks would import another environment's packages (or none).
    cmd = KernelManager(kernel_name="python3").format_kernel_cmd()
    assert Path(cmd[0]).resolve() == Path(sys.executable).resolve(), cmd


def _run(name: str, params: Mapping[str, str], figures: Path) -> str:
    """Execute a notebook with only ``params`` set (and the figure folder), as a user would;
    check it saved and displayed its figure; return what it printed."""
    env = {k: v for k, v in os.environ.items() if k not in PARAMETERS}
    env.update(
        params,
        SPPO_BENCH_FIGURE_DIR=str(figures),
        PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    )
    env.pop("MPLBACKEND", None)  # the kernel's inline backend, as in Jupyter
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=120,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute(env=env)  # raises CellExecutionError naming the failing cell

    figure = FIGURES[name][1]
    png = figures / f"{figure}.png"
    assert png.is_file() and png.stat().st_size > 10_000, png
    assert (figures / f"{figure}.pdf").is_file()
    outputs = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]
    assert any("image/png" in out.get("data", {}) for out in outputs), f"{name} displayed no figure"
    return "".join(out.get("text", "") for out in outputs if out.get("name") == "stdout")


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_notebook_runs_and_writes_its_figure(name: str, horizon_store: str, tmp_path: Path):
    experiment, _ = FIGURES[name]
    params = {"SPPO_BENCH_TRACKING_URI": horizon_store, "SPPO_BENCH_EXPERIMENT": experiment}
    printed = _run(name, params, tmp_path / "figures")
    assert f"MLflow store {horizon_store}, experiment {experiment!r}" in printed


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_notebook_runs_on_the_committed_results(name: str, tmp_path: Path):
    # What a fresh clone does: nothing set, no store, the kernel in notebooks/.
    suite = SUITES[name]
    params = {}
    if not (RESULTS / suite).is_dir():
        # results/claims is not committed yet; the default suite's arith logs per-horizon groups
        # too (arith_h1 to arith_h4), so the horizon figure is drawn from it meanwhile.
        suite = params["SPPO_BENCH_SUITE"] = "default"
    printed = _run(name, params, tmp_path / "figures")
    assert f"results of suite {suite!r} ({RESULTS / suite}" in printed, printed


def test_notebook_reads_the_results_named_in_the_environment(tmp_path: Path):
    mine = tmp_path / "my_results" / "default"
    shutil.copytree(RESULTS / "default" / "s0", mine / "s0")
    printed = _run("05_critic_calibration", {"SPPO_BENCH_RESULTS": str(mine)}, tmp_path / "fig")
    assert f"results of suite 'default' ({mine / 's0'})" in printed, printed
    assert str(RESULTS) not in printed


def test_results_in_the_environment_win_and_relative_ones_are_found_upwards(tmp_path: Path):
    shutil.copytree(RESULTS / "default" / "s0", tmp_path / "mine" / "s0")
    below = tmp_path / "a" / "b"
    below.mkdir(parents=True)
    environ = {
        "SPPO_BENCH_RESULTS": f"mine{os.pathsep}",  # a trailing separator names nothing more
        "SPPO_BENCH_TRACKING_URI": f"sqlite:///{tmp_path / 'no_such.db'}",
        "SPPO_BENCH_EXPERIMENT": "no-such-experiment",
    }
    data = notebook_data("claims", environ=environ, start=below)
    assert data.source == f"results of suite 'default' ({tmp_path / 'mine' / 's0'})"
    assert sorted(data.df["algorithm"].unique()) == ["dapo", "grpo", "ppo", "sppo"]
    for frame in (data.items, data.calibration):
        assert len(frame) and set(frame["run_id"]) <= set(data.df["run_id"])


def test_missing_data_names_what_to_set(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match=r"suite 'no_such_suite'.*'default'.*SPPO_BENCH_"):
        notebook_data("no_such_suite", environ={}, start=NOTEBOOKS)
    with pytest.raises(FileNotFoundError, match="SPPO_BENCH_RESULTS="):
        notebook_data("default", environ={"SPPO_BENCH_RESULTS": "nowhere"}, start=tmp_path)
    # An experiment alone means a store (the default ./mlflow.db), never the committed results.
    with pytest.raises(FileNotFoundError, match="no MLflow store 'mlflow.db'"):
        notebook_data("default", environ={"SPPO_BENCH_EXPERIMENT": "x"}, start=tmp_path)
