"""Build the warm starts of several start seeds of a suite and print their table as markdown.

Each start is built exactly as the suite builds it (``benchmarks.suite.plan.validate`` composes
and checks the config, ``benchmarks.training.start.policy_start`` trains or reads the start and
measures its difficulty), then evaluated greedily on the suite's held-out problems (the runs'
start accuracy) and held against the suite's start checks (``benchmarks.suite.headroom``: the
start far from solved, and enough prompts half-solved). One row per seed: the step at which the
chain phase reached ``warmstart.target`` (``-``: not reached), the start's greedy accuracy, the
share of prompts with a success rate in [0.1, 0.9], whether both start checks hold, the build's
wall time and the share of it spent validating.

    python scripts/start_table.py --seeds 0-9 --jobs 2 --precision bf16 \\
        --out /tmp/starts.jsonl -- suite=claims_chain_sum cache_dir=/tmp/cache

Rows are appended to ``--out`` as each start finishes (a killed table keeps its finished rows;
``--table-only`` prints the table from that file). Every worker runs with one torch thread.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.suite.executor import Pool, Task, drive


def _seeds(text: str) -> list[int]:
    """``0-9`` or ``0,3,5``: the start seeds."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def _init(precision: str) -> None:
    import logging

    import torch

    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(processName)s %(message)s")
    _PRECISION[0] = precision


_PRECISION = ["fp32"]


def _one(overrides: list[str], seed: int) -> dict[str, Any]:
    """Build (or read) start seed ``seed`` of the suite ``overrides`` compose; its row."""
    from benchmarks.config import compose_config
    from benchmarks.engines.torch_engine import TorchEngine
    from benchmarks.evaluation.evaluate import evaluate_greedy
    from benchmarks.suite.headroom import THRESHOLDS, HeadroomCheck
    from benchmarks.suite.plan import validate
    from benchmarks.training import warmstart
    from benchmarks.training.modeling import build_char_tokenizer
    from benchmarks.training.start import StartRecipe, policy_start

    plan = validate(compose_config(overrides))
    precision = getattr(plan.start_recipe, "precision", None)
    if "precision" not in StartRecipe.__dataclass_fields__:
        # The suite does not pass a precision to the warm start: set the one it defaults to.
        # Where it does, the suite's own `precision=` override decides, and --precision is unused.
        warmstart.warm_start.__kwdefaults__["precision"] = precision = _PRECISION[0]
    tok = build_char_tokenizer(plan.task.alphabet)
    t0 = time.perf_counter()
    model, info = policy_start(plan.start_recipe, seed, plan.task, tok)
    built = time.perf_counter() - t0
    problems = list(plan.task.eval_problems())
    greedy = evaluate_greedy(
        TorchEngine(model, tok), plan.task, problems, plan.start_recipe.max_new_tokens
    )
    mid = float(info.get("difficulty", {}).get("mid_fraction", float("nan")))
    checks = {
        name: HeadroomCheck(name, value, *THRESHOLDS[name], "").holds
        for name, value in (("start_accuracy", greedy.accuracy), ("start_mid_fraction", mid))
    }
    return {
        "seed": seed,
        "overrides": overrides,
        "precision": precision,
        "target_step": info.get("target_step"),
        "chain_steps": info.get("chain_steps"),
        "steps": info["steps"],
        "val_accuracy": info["val_accuracy"],
        "start_accuracy": greedy.accuracy,
        "mid_fraction": mid,
        "checks": checks,
        "passes": all(checks.values()),
        "cached": info["cached"],
        "build_seconds": built,
        "seconds": info.get("seconds"),
        "validation_seconds": info.get("validation_seconds"),
    }


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None or value != value else format(value, spec)


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table, by seed, with a closing line of totals."""
    head = (
        "| seed | target reached at step | chain steps | steps | start greedy acc | "
        "mid fraction | start checks | build s | validation share |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in sorted(rows, key=lambda r: r["seed"]):
        share = (
            r["validation_seconds"] / r["seconds"]
            if r.get("seconds") and r.get("validation_seconds") is not None
            else None
        )
        lines.append(
            f"| {r['seed']} | {_fmt(r['target_step'], 'd')} | {_fmt(r['chain_steps'], 'd')} | "
            f"{r['steps']} | {r['start_accuracy']:.3f} | {_fmt(r['mid_fraction'], '.3f')} | "
            f"{'pass' if r['passes'] else 'FAIL'} | {_fmt(r['seconds'] or r['build_seconds'], '.0f')} | "
            f"{_fmt(share, '.1%')} |"
        )
    passed = sum(r["passes"] for r in rows)
    lines.append(f"\n{passed} of {len(rows)} starts pass the start checks.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-9", help="start seeds: 0-9 or 0,3,5")
    ap.add_argument("--jobs", type=int, default=2, help="starts built at once (one thread each)")
    ap.add_argument(
        "--precision",
        default="fp32",
        choices=("fp32", "bf16"),
        help="the warm start's precision where the suite has no `precision` key of its own",
    )
    ap.add_argument("--out", required=True, help="JSON lines file the rows are appended to")
    ap.add_argument("--table-only", action="store_true", help="print the table from --out")
    ap.add_argument("overrides", nargs="*", help="the suite's overrides, e.g. suite=claims")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if not args.table_only:

        def on_done(task: Task, row: dict[str, Any], others: tuple[Any, ...]) -> list[Task]:
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            return []

        with Pool(args.jobs, _init, (args.precision,)) as pool:
            drive(pool, [Task(_one, (args.overrides, s), s) for s in _seeds(args.seeds)], on_done)
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    sys.stdout.write(table(rows) + "\n")


if __name__ == "__main__":
    main()
