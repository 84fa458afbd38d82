"""``sppo-bench``: the command line.

    sppo-bench run [hydra overrides...]       the default CPU suite, or any suite/config
    sppo-bench run engine=verl model=hf model.name_or_path=<id> task=math ... [--dry-run]
                                              the same algorithms on verl (Ray + vLLM)
    sppo-bench eval model=<path|id> tasks=[math500,aime24] k=16 [key=value ...] [--lm-eval]
    sppo-bench algorithms                     registered algorithms and their hyper-parameters
    sppo-bench report [--experiment NAME | --run-id ID] [--out DIR] [--tracking-uri URI]
    sppo-bench report --results DIR [DIR ...] [--out DIR]
                                              the same report from results sets (shards merged
                                              by start), no store needed
    sppo-bench export (--experiment NAME | --run-id ID ...) --out DIR [--tracking-uri URI]
                                              a suite's runs as a results set (Parquet + manifest)
    sppo-bench export --sweep SPEC --storage URL --out results/tuning [--tracking-uri URI]
                                              a tuning sweep's trials (results/tuning/<spec>.json)
    sppo-bench import DIR [DIR ...] --tracking-uri URI
                                              a results set's runs back into an MLflow store
    sppo-bench power --results DIR [DIR ...] [--suite NAME]
                                              the starts each declared claim needs (simulated)
    sppo-bench sweep SPEC [--trials N] [--workers W] [--storage URL] [--resume]
    sppo-bench bench [--quick] [--out PATH]   engine/trainer speed vs the CPU's GEMM ceiling and TRL
    sppo-bench memory [--config FILE] [--set key=value ...]
                                              per-GPU memory projected for the paper's 1.5B and 7B
                                              settings (no download), beside its reported peaks

Overrides are Hydra's (``algorithm=[sppo,grpo] budget.limit=32768 seeds=3 task.horizon=3``); the
config tree is ``benchmarks/conf``. Errors in the config exit with status 2 before any compute,
naming the key and what is allowed.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.config import compose_config

__all__ = ["compose_config", "main"]

log = logging.getLogger("sppo_bench")


#: Lines of Hydra's and OmegaConf's messages that say where, not what: the key is kept (first
#: line, or ``full_key``), these are dropped, so a configuration error is one line.
_NOISE = re.compile(r"^(full_key:|object_type=|reference_type=|See https://hydra\.cc|\^)")


def _config_error(e: Exception) -> str:
    """The one line ``sppo-bench run`` prints for a refused config: the message (a hint raised
    `from None` replaces Hydra's, its config search path included), its cause's where it adds
    something, OmegaConf's ``full_key``/``object_type`` lines folded away."""
    from omegaconf.errors import MissingMandatoryValue

    if isinstance(e, MissingMandatoryValue) and getattr(e, "full_key", None):
        return f"{e.full_key}: this config needs a value there; set {e.full_key}=<value>"
    msg = str(e).strip()
    cause = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
    if cause is not None and str(cause) and str(cause) not in msg:
        msg += f"\n{cause}"
    lines = [ln.strip() for ln in msg.splitlines()]
    return "; ".join(ln for ln in lines if ln and not _NOISE.match(ln))


def _cmd_run(overrides: list[str]) -> int:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from algorithms import ConfigError
    from benchmarks.suite.plan import validate
    from benchmarks.suite.preflight import PreflightError, preflight
    from benchmarks.suite.run import grid_configs, run_grid, run_suite

    if "--dry-run" in overrides:  # engine=verl: print the verl commands, launch nothing
        overrides = [o for o in overrides if o != "--dry-run"] + ["++engine.dry_run=true"]
    option = next((o for o in overrides if o.startswith("-")), None)
    if option is not None:  # Hydra would answer with its override grammar's parse error
        sys.stderr.write(
            f"sppo-bench: configuration error: {option}: unknown option; `sppo-bench run` takes "
            "--dry-run, --help and Hydra overrides key=value (e.g. seeds=3)\n"
        )
        return 2
    bare = next((o for o in overrides if "=" not in o and not o.startswith("~")), None)
    if bare is not None:
        sys.stderr.write(
            f"sppo-bench: configuration error: {bare}: an override needs a value, {bare}=<value> "
            f"(or ~{bare} to delete the key)\n"
        )
        return 2
    try:
        cfg = compose_config(overrides)
        if cfg.engine.get("dry_run") and cfg.engine.name != "verl":  # before the engine's keys
            raise ConfigError(f"--dry-run: only engine=verl has one, not {cfg.engine.name}")
        grid = grid_configs(cfg, overrides)
        plans = [validate(point) for _, point in grid or [(None, cfg)]]
        if cfg.engine.name == "verl":
            if grid:
                raise ConfigError("engine=verl: suite.grid is not supported; run one point each")
            from benchmarks.verl_engine.launch import plans as verl_plans

            verl_plans(plans[0])  # translation errors are configuration errors too
        for plan in plans:  # validated once above; the run gets these plans, not the config
            preflight(plan)
    except PreflightError as e:
        sys.stderr.write(f"sppo-bench: cannot start: {e}\n")
        return 2
    except (
        HydraException,
        OmegaConfBaseException,
        ConfigError,
        ValueError,
        KeyError,
        FileNotFoundError,
    ) as e:
        sys.stderr.write(f"sppo-bench: configuration error: {_config_error(e)}\n")
        return 2
    try:
        if cfg.engine.name == "verl":
            from benchmarks.verl_engine.launch import run_verl_suite

            return run_verl_suite(plans[0])
        if grid:
            result = run_grid(cfg, [(v, plan) for (v, _), plan in zip(grid, plans, strict=True)])
        else:
            result = run_suite(plans[0])
    except KeyboardInterrupt:
        sys.stderr.write("sppo-bench: interrupted (resume=auto continues where it stopped)\n")
        return 130
    except Exception as e:  # noqa: BLE001 - a message for the user; the traceback at DEBUG
        log.debug("run failed", exc_info=True)
        from benchmarks.suite.workers import WorkerError

        what = str(e) if isinstance(e, WorkerError) else f"{type(e).__name__}: {e}"
        sys.stderr.write(
            f"sppo-bench: run failed: {what}\n(the traceback: SPPO_BENCH_LOG=DEBUG sppo-bench run ...)\n"
        )
        return 1
    _print_result(result)
    return 0 if all(r.status == "FINISHED" for r in result.runs) else 1


def _print_result(result) -> None:
    from rich.console import Console
    from rich.table import Table

    from analysis import metrics as M

    console = Console(width=None if sys.stdout.isatty() else 120)
    table = Table(title=f"sppo-bench suite ({result.experiment}), {result.wall_s:.0f} s")
    for col in (
        "algorithm",
        "seed",
        "steps",
        "start acc",
        "final acc ± s.e.",
        "samples",
        "rollout tokens",
        "FLOPs",
        "train wall s",
        "peak MiB",
    ):
        table.add_column(col, justify="right")
    for r in result.runs:
        m = r.metrics
        if r.status != "FINISHED":
            table.add_row(
                r.algorithm, str(r.seed), "-", "-", f"FAILED: {r.error}", "", "", "", "", ""
            )
            continue
        table.add_row(
            r.algorithm,
            str(r.seed),
            str(r.steps),
            f"{r.start_accuracy:.3f}",
            f"{r.final_accuracy:.3f} ± {r.final_se:.3f}",
            f"{m[M.COMPUTE_ROLLOUT_SAMPLES]:.0f}",
            f"{m[M.COMPUTE_ROLLOUT_TOKENS]:.0f}",
            f"{m[M.COMPUTE_FLOPS]:.3g}",
            f"{m[M.COMPUTE_WALL_S]:.1f}",
            f"{m[M.MEMORY_PEAK_BYTES] / 2**20:.0f}",
        )
    console.print(table)
    phases = Table(title="wall seconds per phase")
    phases.add_column("algorithm")
    for p in M.PHASES:
        phases.add_column(p, justify="right")
    for r in result.runs:
        if r.status == "FINISHED":
            phases.add_row(r.algorithm, *(f"{r.metrics[M.wall_phase(p)]:.2f}" for p in M.PHASES))
    console.print(phases)
    for seed, info in sorted(result.warmstart.items()):
        d = info.get("difficulty")
        if d:  # how much the start leaves to learn (benchmarks/evaluation/difficulty.py)
            groups = ", ".join(f"{g} {v:.2f}" for g, v in d["groups"].items())
            console.print(
                f"start, seed {seed}: {d['mid_fraction']:.0%} of {d['prompts']} held-out prompts "
                f"solved by 10-90% of samples; mean success {d['mean']:.2f} (never "
                f"{d['never_fraction']:.0%}, always {d['always_fraction']:.0%})"
                + (f"; by group: {groups}" if groups else ""),
                soft_wrap=True,
            )
    from benchmarks.suite.headroom import headroom

    checks = headroom(result.runs, result.warmstart)
    console.print(
        f"headroom ({sum(c.holds for c in checks)}/{len(checks)} hold; a testbed that fails one "
        "cannot separate the algorithms it compares):"
    )
    for c in checks:
        console.print(f"  {c.line()}", soft_wrap=True, markup=False)
    if result.plot:
        console.print(f"plot:    {result.plot}")
    if result.report:
        console.print(f"report:  {result.report}")
    if result.results:
        console.print(f"results: {result.results} (a results set: commit it under results/)")
    console.print(
        f"MLflow:  {result.tracking_uri}  (experiment '{result.experiment}', parent run {result.parent_run_id})"
    )
    console.print(f"open it: mlflow ui --backend-store-uri {result.tracking_uri}", soft_wrap=True)
    exp_id = getattr(result, "experiment_id", None)
    if exp_id is not None:
        from benchmarks.telemetry.tracking import ui_runs_url

        console.print(f"runs:    {ui_runs_url(result.tracking_uri, exp_id)}", soft_wrap=True)


def _cmd_algorithms() -> int:
    """Every registered algorithm's hyper-parameters, then the settings every algorithm shares
    (``trainer.*``), each field with its default and help: the one place a user reads them."""
    import dataclasses

    from rich.console import Console
    from rich.table import Table

    from algorithms import algorithm_class, list_algorithms
    from benchmarks.training.config import PER_ALGORITHM, TrainerConfig

    def fields_table(title: str, config: type, skip: tuple[str, ...] = ()) -> Table:
        table = Table(title=title, title_justify="left")
        for col in ("field", "default", "help"):
            table.add_column(col)
        for f in dataclasses.fields(config):
            if f.name not in skip:
                default = f.default if f.default is not dataclasses.MISSING else "-"
                table.add_row(f.name, repr(default), f.metadata.get("help", ""))
        return table

    console = Console()
    for name in list_algorithms():
        cls = algorithm_class(name)
        console.print(fields_table(f"{name} (critic: {cls.critic})", cls.Config))
    title = "trainer (shared by every algorithm: trainer.<field>=value)"
    console.print(fields_table(title, TrainerConfig, skip=PER_ALGORITHM))
    return 0


def _cmd_report(argv: list[str]) -> int:
    from mlflow.tracking import MlflowClient

    from analysis import load_runs, log_report_to_mlflow, write_report
    from analysis.metrics import TAG_ROLE
    from benchmarks.telemetry.tracking import default_tracking_uri

    p = argparse.ArgumentParser(prog="sppo-bench report")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--experiment", help="experiment name (default: sppo-bench-default)")
    g.add_argument("--run-id", help="a suite's parent run id")
    g.add_argument(
        "--results",
        nargs="+",
        metavar="DIR",
        help="results sets (or folders of them): shards of one suite, merged by start; no store",
    )
    p.add_argument("--out", default=None, help="output directory (default: reports/<name>)")
    p.add_argument("--tracking-uri", default=None)
    a = p.parse_args(argv)
    if a.results:
        return _report_from_results(a.results, a.out)
    uri = a.tracking_uri or default_tracking_uri()
    try:
        if a.run_id:
            df = load_runs(parent_run_id=a.run_id, tracking_uri=uri)
            name = a.run_id[:8]
        else:
            name = a.experiment or "sppo-bench-default"
            df = load_runs(name, tracking_uri=uri)
    except ValueError as e:  # no such experiment
        sys.stderr.write(f"sppo-bench report: {e} in {uri}\n")
        return 2
    if df.empty:
        sys.stderr.write(f"sppo-bench report: no runs found in {uri} for {name}\n")
        return 2
    out = Path(a.out or f"reports/{name}")
    path = write_report(df, out, title=f"sppo-bench: {name}", tracking_uri=uri)
    log.info("report written to %s", path)
    # Attach the report to the suite's parent run: the one named, else the experiment's newest.
    parent = a.run_id
    if parent is None:
        client = MlflowClient(tracking_uri=uri)
        newest = client.search_runs(
            sorted(df["experiment_id"].dropna().unique()),
            filter_string=f"tags.`{TAG_ROLE}` = 'suite'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        parent = newest[0].info.run_id if newest else None
    if parent is not None:
        log_report_to_mlflow(out, parent, tracking_uri=uri)
        log.info("report logged to run %s (artifacts: report/)", parent)
    else:
        log.info("no suite parent run in %s: report not logged to MLflow", name)
    sys.stdout.write(f"{path}\n")
    return 0


def _report_from_results(dirs: list[str], out: str | None) -> int:
    """The whole report from results sets: no store is read."""
    from analysis import write_report
    from analysis.pages import declared_count
    from analysis.results import ResultsError, read_results

    try:
        rs = read_results(dirs)
    except ResultsError as e:
        sys.stderr.write(f"sppo-bench report: {e}\n")
        return 2
    target = Path(out or f"reports/{rs.suite}")
    path = write_report(
        rs.tidy(),
        target,
        title=f"sppo-bench: {rs.manifests[0].get('experiment') or rs.suite}",
        items=rs.items,
        calibration=rs.calibration,
        claims=rs.claims(),
        declared_starts=declared_count(rs.suite),
    )
    log.info("report of %d starts from %d results sets written to %s", len(rs.starts),
             len(rs.manifests), path)  # fmt: skip
    sys.stdout.write(f"{path}\n")
    return 0


def _cmd_export(argv: list[str]) -> int:
    from analysis.results import ResultsError, export_results
    from benchmarks.telemetry.tracking import default_tracking_uri, machine

    p = argparse.ArgumentParser(
        prog="sppo-bench export",
        description="Write a suite's runs from an MLflow store as a results set (Parquet tables "
        "and a manifest): one suite invocation (--run-id) or every run of an experiment.",
    )
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--experiment", help="every run of this experiment (name or id)")
    g.add_argument("--run-id", nargs="+", help="suite parent run ids: each with its runs")
    g.add_argument("--sweep", help="a tuning sweep's spec (name or path): its trials as JSON")
    p.add_argument("--storage", help="the sweep's Optuna storage (with --sweep)")
    p.add_argument("--out", required=True, help="the set's folder (new or empty)")
    p.add_argument("--tracking-uri", default=None, help="any MLflow store (default: as `run`)")
    p.add_argument("--command", default=None, help="the command that made the runs (manifest)")
    p.add_argument(
        "--here",
        action="store_true",
        help="the runs ran on this machine: record it in the manifest when the suite did not",
    )
    a = p.parse_args(argv)
    if a.sweep is not None:  # a tuning sweep's trials: sweeps/ registers that command
        return _registered("export-sweep", argv)
    uri = a.tracking_uri or default_tracking_uri()
    try:
        path = export_results(
            a.out,
            tracking_uri=uri,
            experiment=a.experiment,
            parent_run_ids=a.run_id or (),
            command=a.command,
            machine=machine() if a.here else None,
        )
    except ResultsError as e:
        sys.stderr.write(f"sppo-bench export: {e}\n")
        return 2
    sys.stdout.write(f"{path}\n")
    return 0


def _cmd_power(argv: list[str]) -> int:
    from omegaconf import OmegaConf

    from analysis import to_markdown
    from analysis.claims.spec import parse_claims
    from analysis.power import TARGET_POWER, power_table
    from analysis.results import ResultsError, read_results

    p = argparse.ArgumentParser(
        prog="sppo-bench power",
        description="The independent starts each declared claim needs to resolve at its margin "
        "and Holm level with power 0.8, simulated from a pilot's variance components.",
    )
    p.add_argument("--results", nargs="+", required=True, metavar="DIR", help="the pilot")
    p.add_argument(
        "--suite",
        default=None,
        help="read the claims from this suite's config as it is now (default: those the pilot's "
        "runs declared); for a campaign whose claims changed since its pilot",
    )
    p.add_argument("--max-starts", type=_starts, default=40, help="the most starts searched")
    p.add_argument(
        "--cap", type=_starts, default=10, help="starts a campaign can afford (margin_at_cap)"
    )
    p.add_argument("--out", default=None, help="also write the table as CSV here")
    a = p.parse_args(argv)
    from hydra.errors import HydraException

    try:
        rs = read_results(a.results)
        if a.suite:
            node = compose_config([f"suite={a.suite}"]).claims
            claims = parse_claims(OmegaConf.to_container(node, resolve=True))
        else:
            claims = rs.claims()
    except HydraException as e:  # --suite names no suite: the message lists the ones there are
        sys.stderr.write(f"sppo-bench power: --suite: {_config_error(e)}\n")
        return 2
    except (ResultsError, ValueError) as e:
        sys.stderr.write(f"sppo-bench power: {e}\n")
        return 2
    if not claims:
        sys.stderr.write("sppo-bench power: the pilot declared no claims; name --suite\n")
        return 2
    table = power_table(claims, rs.items, max_starts=a.max_starts, cap=a.cap)
    source = f"suite={a.suite}'s config" if a.suite else "the pilot's runs"
    sys.stdout.write(
        f"Pilot: {rs.suite}, {len(rs.starts)} starts ({', '.join(rs.starts)}); claims from "
        f"{source}. needed: the fewest starts with power >= {TARGET_POWER} at the pilot's effect "
        "(_if_level: at no difference), empty when none up to --max-starts reaches it; "
        f"margin_at_cap: the smallest margin {a.cap} starts resolve for level algorithms.\n\n"
    )
    shown = table.copy()
    for column in shown.select_dtypes("float").columns:
        shown[column] = shown[column].map(lambda v: "–" if v != v else f"{v:.3g}")
    sys.stdout.write(to_markdown(shown) + "\n")
    if a.out:
        table.to_csv(a.out, index=False)
    return 0


def _starts(text: str) -> int:
    """A count of starts for `sppo-bench power`: an interval over starts needs two."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 2:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of starts >= 2")
    return n


def _cmd_import(argv: list[str]) -> int:
    from analysis.results import ResultsError, import_results, read_results

    p = argparse.ArgumentParser(
        prog="sppo-bench import",
        description="Recreate a results set's runs in an MLflow store, to browse them in the UI.",
    )
    p.add_argument("dirs", nargs="+", metavar="DIR", help="results sets (shards of one suite)")
    p.add_argument("--tracking-uri", required=True, help="the MLflow store to write into")
    p.add_argument("--experiment", default=None, help="default: the set's own experiment name")
    a = p.parse_args(argv)
    try:
        rs = read_results(a.dirs)
    except ResultsError as e:
        sys.stderr.write(f"sppo-bench import: {e}\n")
        return 2
    from benchmarks.telemetry.tracking import prepare_store

    name = a.experiment or rs.manifests[0].get("experiment") or f"sppo-bench-{rs.suite}"
    ids = import_results(rs, a.tracking_uri, prepare_store(a.tracking_uri, name))
    sys.stdout.write(f"imported {len(ids)} runs into {a.tracking_uri}\n")
    return 0


#: The entry-point group through which the layer above the harness adds its commands
#: (pyproject.toml: ``sweep`` and ``export --sweep`` from ``sweeps/``). The harness names a
#: command, never imports its package: ``sweeps/`` imports ``benchmarks/``, so the folders stay
#: one chain (docs/design.md, "Folders and layers").
COMMANDS_GROUP = "sppo_bench.commands"


def _registered(name: str, argv: list[str]) -> int:
    """Run the command ``name`` that a package registered under :data:`COMMANDS_GROUP`."""
    from importlib.metadata import entry_points

    found = entry_points(group=COMMANDS_GROUP, name=name)
    if not found:
        sys.stderr.write(
            f"sppo-bench: the {name!r} command is not registered; install the project "
            "(pip install -e .) so its entry points exist\n"
        )
        return 2
    return next(iter(found)).load()(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sppo-bench`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    level = os.environ.get("SPPO_BENCH_LOG", "INFO").upper()
    logging.basicConfig(
        level=level if level in logging.getLevelNamesMapping() else "INFO",
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("alembic", "mlflow", "httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    cmd = argv[0] if argv else "run"
    rest = argv[1:] if argv else []
    if cmd == "run":
        if {"-h", "--help"} & set(rest):  # not a Hydra override: the usage, not a parse error
            sys.stdout.write(__doc__ or "")
            return 0
        return _cmd_run(rest)
    if cmd == "algorithms":
        return _cmd_algorithms()
    if cmd == "report":
        return _cmd_report(rest)
    if cmd == "export":
        return _cmd_export(rest)
    if cmd == "import":
        return _cmd_import(rest)
    if cmd == "power":
        return _cmd_power(rest)
    if cmd == "sweep":
        return _registered("sweep", rest)
    if cmd == "eval":
        from benchmarks.evaluation.cli import main as eval_main

        return eval_main(rest)
    if cmd == "bench":
        from benchmarks.bench.run import main as bench_main

        return bench_main(rest)
    if cmd == "memory":
        from benchmarks.telemetry.memory_projection import main as memory_main

        return memory_main(rest)
    if cmd in ("-h", "--help", "help"):
        sys.stdout.write(__doc__ or "")
        return 0
    sys.stderr.write(
        f"sppo-bench: unknown command {cmd!r}; allowed: run, eval, algorithms, report, export, "
        "import, power, sweep, bench, memory\n"
    )
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
