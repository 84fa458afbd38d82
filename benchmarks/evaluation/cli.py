"""``sppo-bench eval``: everything a user can get wrong (a key, a value, a missing data file or
model directory, an unreachable MLflow store) is reported, naming it, before the model loads, as
loading a 1.5B model and then failing costs minutes.

A run is one MLflow run (tag ``sppo_bench.role=eval``) holding the resolved settings
(``eval_config.json``), every ``eval/<task>/...`` metric and a per-sample table per task
(``eval_samples/<task>.json``: prompt, response, extracted answer, verdict), then a summary table
on stdout. ``engine=lm_eval`` (or ``--lm-eval``) puts the same request through lm-eval-harness
(:func:`benchmarks.evaluation.lm_eval.evaluate_lm_eval`), for comparability with numbers
published through lm-eval.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from analysis import metrics as M
from benchmarks.evaluation.evaluate import (
    TaskEval,
    build_tasks,
    evaluate_model,
    load_model,
    load_tokenizer,
    log_results,
    resolve_device,
    resolve_dtype,
)
from benchmarks.evaluation.lm_eval import evaluate_lm_eval
from benchmarks.evaluation.settings import ARITH, EvalSettings, parse_settings, settings_help
from benchmarks.tasks.dataset_task import GraderSet

log = logging.getLogger(__name__)

__all__ = ["config_error_message", "looks_local", "main"]


def _vllm_settings(s: EvalSettings) -> Any:
    """vLLM start settings of an evaluation: the same device and dtype rules as the torch route."""
    from benchmarks.engines.vllm_engine import VllmSettings

    dev = resolve_device(s.device)
    return VllmSettings(
        device="cuda" if dev.type == "cuda" else "cpu",
        dtype=resolve_dtype(dev, s.dtype),
        gpu_memory_utilization=s.gpu_memory_utilization,
    )


def looks_local(name: str) -> bool:
    """A path rather than a hub id: starts like one, or names an existing file or directory."""
    return name.startswith(("/", ".", "~")) or Path(name).exists()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sppo-bench")
    except PackageNotFoundError:
        return "unknown"


def config_error_message(e: BaseException) -> str:
    msg = str(e).strip()
    cause = e.__cause__ or e.__context__
    if cause is not None and str(cause) and str(cause) not in msg:
        msg += f"\n{cause}"
    # Hydra's hint to append with `+key=...` does not apply: the schema has every key there is.
    return "\n".join(ln for ln in msg.splitlines() if not ln.startswith("To append to your config"))


def _print_table(results: Mapping[str, TaskEval], settings: EvalSettings, footer: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 120)
    k = settings.k
    table = Table(title=f"sppo-bench eval: {settings.model} ({settings.engine})")
    cols = ["task", "problems", "greedy acc ± s.e."]
    if k:
        cols += [f"avg@{k} ± s.e.", "pass@1", f"pass@{k}", "resp. tokens", "truncated"]
    cols += ["timeouts", "errors", "wall s"]
    for c in cols:
        table.add_column(c, justify="left" if c == "task" else "right")
    for r in results.values():
        row = [
            r.task,
            str(r.n),
            "-" if math.isnan(r.accuracy) else f"{r.accuracy:.3f} ± {r.accuracy_se:.3f}",
        ]
        if k:
            row += [
                f"{r.avg_at_k:.3f} ± {r.avg_at_k_se:.3f}",
                f"{r.pass_at.get(1, math.nan):.3f}",
                f"{r.pass_at.get(k, math.nan):.3f}",
                f"{r.response_tokens:.0f}",
                f"{r.truncated:.2f}",
            ]
        row += [str(r.timeouts), str(r.errors), f"{r.wall_s:.1f}"]
        table.add_row(*row)
    console.print(table)
    console.print(footer)


def main(argv: list[str]) -> int:
    """``sppo-bench eval [key=value ...] [--lm-eval]``: exit 0 on success, 2 on a config error.

    Every setting is checked, and every task's data read, before the model is loaded.
    """
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from algorithms import ConfigError

    argv = list(argv)
    if any(a in ("-h", "--help", "help") for a in argv):
        sys.stdout.write(settings_help())
        return 0
    overrides = [a for a in argv if a != "--lm-eval"]
    if len(overrides) != len(argv):
        overrides.append("engine=lm_eval")

    def fail(msg: str) -> int:
        sys.stderr.write(f"sppo-bench eval: configuration error: {msg}\n")
        return 2

    try:
        s = parse_settings(overrides)
    except (HydraException, OmegaConfBaseException, ConfigError, ValueError) as e:
        return fail(config_error_message(e))
    if s.uses_vllm:
        from benchmarks.engines.vllm_engine import vllm_available

        if not vllm_available():
            return fail(
                f"engine={s.engine}: vllm is not installed; `pip install 'sppo-bench[gpu]'` on a "
                "GPU, `make install-vllm` on a CPU (a second venv: see the README)"
            )
    if s.engine == "lm_eval":
        import importlib.util

        from benchmarks.tasks.datasets import DATASETS, resolve_data_dir

        root = resolve_data_dir(s.data_dir)
        for t in s.tasks:
            if t != ARITH and (root is None or not (root / DATASETS[t].path).is_file()):
                return fail(
                    f"data_dir={s.data_dir}: engine=lm_eval reads local JSONL files only and "
                    f"found no {DATASETS[t].path} (set data_dir=DIR or $SPPO_BENCH_DATA)"
                )
        if importlib.util.find_spec("lm_eval") is None:
            return fail(
                "engine=lm_eval: lm-eval is not installed; `pip install 'sppo-bench[eval]'` "
                "(lm-eval==0.4.13 and accelerate; not lm-eval[math], whose antlr4 pin breaks hydra)"
            )
    try:  # read every task's data now: a missing file fails before the model loads
        build_tasks(
            s.tasks,
            s.request(),
            tokenizer=None,
            graders=GraderSet(s.grader_timeout_s, s.grader_workers),
        )
    except FileNotFoundError as e:
        return fail(f"data_dir={s.data_dir}: {e} (here: data_dir=DIR)")
    except ValueError as e:
        return fail(str(e))
    if looks_local(s.model) and not Path(s.model).expanduser().exists():
        return fail(f"model={s.model}: no such directory")
    from benchmarks.telemetry.store import PreflightError, check_tracking_uri
    from benchmarks.telemetry.tracking import default_tracking_uri

    try:
        check_tracking_uri(s.tracking.uri or default_tracking_uri())
    except PreflightError as e:
        sys.stderr.write(f"sppo-bench eval: cannot start: {e}\n")
        return 2
    if s.threads:
        torch.set_num_threads(s.threads)
    name = str(Path(s.model).expanduser()) if looks_local(s.model) else s.model
    try:
        if s.uses_vllm:  # vLLM loads the weights itself
            model, tok = None, load_tokenizer(name)
        else:
            model, tok = load_model(name, device=s.device, dtype=s.dtype)
    except (OSError, ValueError) as e:
        return fail(f"model={s.model}: cannot load it: {e}")
    return _run(s, model, tok, name)


def _run(s: EvalSettings, model: Any, tok: Any, name: str | None = None) -> int:
    from dataclasses import asdict

    from mlflow.tracking import MlflowClient

    from benchmarks.telemetry.tracking import (
        MlflowTracker,
        default_tracking_uri,
        flatten,
        git_commit,
        prepare_store,
    )

    uri = s.tracking.uri or default_tracking_uri()
    exp_id = prepare_store(uri, s.tracking.experiment)
    client = MlflowClient(uri)
    resolved = asdict(s)
    tags = {
        M.TAG_ROLE: "eval",
        M.TAG_MODEL: s.model,
        M.TAG_TASK: ",".join(s.tasks),
        M.TAG_ENGINE: s.engine,
        M.TAG_GIT_COMMIT: git_commit(),
        M.TAG_VERSION: _version(),
    }
    run_name = f"eval-{Path(s.model.rstrip('/')).name or s.model}"
    request = s.request()
    engine = None
    if s.uses_vllm:
        path = name or s.model
        if s.engine == "vllm":
            from benchmarks.engines.vllm_engine import VllmEngine

            engine = VllmEngine(None, tok, settings=_vllm_settings(s), model_path=path, seed=s.seed)
        else:
            request = s.request(model_path=path, vllm_settings=_vllm_settings(s))
    with MlflowTracker.start(
        client, exp_id, run_name=run_name, tags=tags, params=flatten(resolved)
    ) as tracker:
        tracker.log_dict(resolved, "eval_config.json")
        if s.engine == "lm_eval":
            results = evaluate_lm_eval(model, tok, list(s.tasks), request)
        else:
            results = evaluate_model(model, tok, list(s.tasks), request, engine=engine)
        log_results(tracker, results, samples_logged=s.samples_logged)
        run_id = tracker.run_id
    _print_table(
        results,
        s,
        f"MLflow:  {uri}  (experiment '{s.tracking.experiment}', run {run_id})\n"
        f"open it: mlflow ui --backend-store-uri {uri}",
    )
    return 0
