"""``sppo-bench sweep``: run or resume an Optuna sweep described by a YAML spec.

    sppo-bench sweep SPEC [OVERRIDE ...] [--trials N] [--workers W] [--storage URL] [--resume]
                          [--study-name NAME] [--tracking-uri URI] [--ray-address ADDRESS]

SPEC is a path or the name of a shipped spec (``lr_per_algorithm``, ``critic_settings``,
``equal_effort``); OVERRIDEs are Hydra overrides appended to the spec's ``base_overrides``. A bad
spec exits with status 2 before any trial runs, naming the field. The end prints the best trial
per algorithm, parameter importances, and the commands that open the results.
"""

from __future__ import annotations

import argparse
import logging
import sys

from mlflow.tracking import MlflowClient
from rich.console import Console
from rich.table import Table

from benchmarks.telemetry.tracking import default_tracking_uri, machine, ui_runs_url
from sweeps.export import export_tuning
from sweeps.runner import run_sweep
from sweeps.spec import SpecError
from sweeps.spec_fields import load_spec
from sweeps.summary import SweepResult

__all__ = ["export_main", "main"]

log = logging.getLogger("sppo_bench.sweep")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sppo-bench sweep",
        description="Run or resume an Optuna sweep over the sppo-bench suite.",
    )
    p.add_argument("spec", help="sweep spec YAML (a path, or a shipped spec's name)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides added to base_overrides")
    p.add_argument("--trials", type=int, default=None, help="total trials (default: the spec's)")
    p.add_argument("--workers", type=int, default=1, help="parallel worker processes (default 1)")
    p.add_argument(
        "--storage",
        default=None,
        help="Optuna storage: sqlite:///optuna.db (default, in the working directory), another "
        "SQLAlchemy URL, or a file path for JournalStorage",
    )
    p.add_argument("--resume", action="store_true", help="continue the study up to --trials in all")
    p.add_argument("--study-name", default=None, help="study name (default: the spec's name)")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI")
    p.add_argument(
        "--ray-address",
        default=None,
        help="run the trials as tasks of this Ray cluster (auto, or <host>:<port> of its head), "
        "--workers at a time; the storage and tracking URI must be reachable from every node "
        "(PostgreSQL, an MLflow server): docs/cluster.md",
    )
    return p


def main(argv: list[str]) -> int:
    """Entry point of ``sppo-bench sweep``; returns the exit status."""
    # Intermixed: Hydra overrides may stand before or after the options.
    args = _parser().parse_intermixed_args(argv)
    try:
        spec = load_spec(args.spec)
        result = run_sweep(
            spec,
            trials=args.trials,
            workers=args.workers,
            storage=args.storage,
            resume=args.resume,
            study_name=args.study_name,
            tracking_uri=args.tracking_uri,
            extra_overrides=args.overrides,
            ray_address=args.ray_address,
        )
    except SpecError as e:
        sys.stderr.write(f"sppo-bench sweep: spec error: {e}\n")
        return 2
    _print(result)
    return 0 if any(b.value is not None for b in result.best) else 1


def _print(result: SweepResult) -> None:
    """The best-trial and importance tables, and where the results are."""
    console = Console(width=None if sys.stdout.isatty() else 120)
    table = Table(
        title=f"sweep {result.name}: best trial per algorithm "
        f"({result.metric}, {result.direction}), {result.wall_s:.0f} s"
    )
    for col in ("algorithm", "best", "trial", "complete", "pruned", "failed", "parameters"):
        table.add_column(col, justify="left" if col in ("algorithm", "parameters") else "right")
    for b in result.best:
        params = ", ".join(
            f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in b.params.items()
        )
        table.add_row(
            b.algorithm,
            "-" if b.value is None else f"{b.value:.4f}",
            "-" if b.number is None else str(b.number),
            str(b.complete),
            str(b.pruned),
            str(b.failed),
            params or "-",
        )
    console.print(table)
    imp = Table(title="parameter importances (fANOVA)")
    for col in ("study", "parameter", "importance"):
        imp.add_column(col, justify="right" if col == "importance" else "left")
    for study, values in result.importances.items():
        if isinstance(values, str):
            imp.add_row(study, values, "")
            continue
        for k, v in values.items():
            imp.add_row(study, k, f"{v:.3f}")
    console.print(imp)
    console.print(f"summary:   {result.summary_md}")
    console.print(f"Optuna:    {result.storage} (studies {', '.join(result.studies)})")
    console.print(
        f"dashboard: {result.dashboard_command}   (pip install 'sppo-bench\\[dashboard]')"
    )
    console.print(
        f"MLflow:    {result.tracking_uri} (experiment '{result.experiment}', "
        f"sweep run {result.parent_run_id})"
    )
    console.print(f"open it:   mlflow ui --backend-store-uri {result.tracking_uri}", soft_wrap=True)
    exp_id = None
    try:  # SweepResult names the experiment; its id is one cheap look-up away
        exp = MlflowClient(result.tracking_uri).get_experiment_by_name(result.experiment)
        exp_id = None if exp is None else exp.experiment_id
    except Exception as e:  # printing must not fail a finished sweep
        log.debug("experiment %r: no id (%s)", result.experiment, e)
    if exp_id is not None:
        console.print(f"runs:      {ui_runs_url(result.tracking_uri, exp_id)}", soft_wrap=True)


def export_main(argv: list[str]) -> int:
    """``sppo-bench export --sweep SPEC --storage URL --out DIR``: a sweep's trials into
    ``<out>/<spec>.json`` (:mod:`sweeps.export`), the tuning table the results pages print."""
    p = argparse.ArgumentParser(
        prog="sppo-bench export", description="Write a tuning sweep's trials as JSON."
    )
    p.add_argument("--sweep", required=True, help="the sweep's spec (name or path)")
    p.add_argument("--storage", help="the sweep's Optuna storage URL")
    p.add_argument("--out", required=True, help="the folder of the JSON (results/tuning)")
    p.add_argument("--tracking-uri", default=None, help="the sweep's MLflow store")
    p.add_argument("--here", action="store_true", help="record this machine in the export")
    a = p.parse_args(argv)
    if not a.storage:
        sys.stderr.write("sppo-bench export: --sweep needs --storage (the sweep's Optuna URL)\n")
        return 2
    uri = a.tracking_uri or default_tracking_uri()
    here = machine() if a.here else None
    try:
        path = export_tuning(a.sweep, a.storage, a.out, tracking_uri=uri, machine=here)
    except (SpecError, ValueError) as e:
        sys.stderr.write(f"sppo-bench export: {e}\n")
        return 2
    sys.stdout.write(f"{path}\n")
    return 0
