"""Tuning sweeps as data: a sweep's trials exported into ``results/tuning/<spec>.json`` and the
tables the results page shows from them (the export itself is :mod:`sweeps.export`, which
knows the sweeps' storage).

A leaderboard is only as fair as the tuning behind it, so the tuning is published like the
results: every trial of every algorithm (its point, its state, its value on each start), with the
commit and machine it ran on, exported from the Optuna storage and the MLflow store only the
sweep's machine holds. The page then prints, per algorithm, the value of each grid point and the
point shipped, so a reader checks that every algorithm had the same trials and that the chosen
point is the best admissible one. An export of a sweep still running (or cut by a session's end)
is a valid file too: it says how many trials each algorithm has so far.

    sppo-bench export-tuning SPEC --storage URL --tracking-uri URI --out results/tuning
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["SCHEMA_VERSION", "TUNING_DIR", "read_tuning", "tuning_section", "tuning_table"]

logger = logging.getLogger(__name__)

#: Where, under a results folder, the tuning sweeps' exports live (one JSON file per sweep).
TUNING_DIR = "tuning"
SCHEMA_VERSION = 2  # 2: each row says whether it was interrupted; "selected" per algorithm


def read_tuning(path: str | Path) -> dict[str, Any]:
    """A tuning export, checked for its schema version (a clear error on another)."""
    data = json.loads(Path(path).read_text())
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(
            f"{path}: schema_version={data.get('schema_version')!r}; this reader knows "
            f"{SCHEMA_VERSION}"
        )
    return data


def tuning_table(data: dict[str, Any]) -> list[str]:
    """Markdown rows: per algorithm, each point's value (mean over the starts, and per start),
    the trials by state, and the point the sweep selects (its export's ``selected``: the sweep's
    own rule); a trial a killed sweep left behind and a resume reran counts once."""
    by_alg: dict[str, list[dict[str, Any]]] = {}
    for row in data["trials"]:
        by_alg.setdefault(row["algorithm"], []).append(row)
    lines = [
        "| algorithm | trials (complete / all) | points: value (per start) | selected |",
        "|---|---|---|---|",
    ]
    for alg in data["spec"]["algorithms"]:
        rows = [r for r in by_alg.get(alg, []) if r["state"] != "WAITING" and not r["interrupted"]]
        done = [r for r in rows if r["state"] == "COMPLETE" and r["value"] is not None]
        points = []
        for r in sorted(done, key=lambda r: sorted(r["params"].items())):
            per = r.get("values_per_start") or []
            per = list(per.values()) if isinstance(per, dict) else list(per)
            per_text = " / ".join(f"{v:.3f}" for v in per) if len(per) > 1 else ""
            mark = "" if r.get("admissible") is not False else " (inadmissible)"
            points.append(
                f"{_point(r)}: {r['value']:.3f}" + (f" ({per_text})" if per_text else "") + mark
            )
        chosen = next((_point(r) for r in done if r["number"] == data["selected"].get(alg)), None)
        lines.append(
            f"| {alg} | {len(done)} / {len(rows)} | {'; '.join(points)} | {chosen or 'none yet'} |"
        )
    return lines


def _point(row: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(row["params"].items()))


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def tuning_section(results: str | Path, heading: str = "##") -> list[str]:
    """The results page's tuning section: one table per export under ``results/tuning``."""
    folder = Path(results) / TUNING_DIR
    paths: Sequence[Path] = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not paths:
        return []
    lines = [
        f"{heading} Tuning sweeps",
        "",
        "Every trial of the campaign's tuning sweeps, exported from their Optuna storage "
        f"(`{Path(results).name}/{TUNING_DIR}/<sweep>.json`). A trial's value is the objective "
        "at the end of the budget, averaged over the trial's starts (each start's value in "
        "brackets); the selected point is the best complete one whose critic still learns "
        "(the sweep's admissibility rule).",
        "",
    ]
    for path in paths:
        data = read_tuning(path)
        spec = data["spec"]
        commits = ", ".join(c[:7] for c in data["commits"]) or "not recorded"
        lines += [
            f"{heading}# Sweep `{data['sweep']}`",
            "",
            f"Objective `{data['objective']['metric']}` ({data['objective']['direction']}); "
            f"base `{' '.join(spec['base_overrides'])}`; {spec['starts']} starts per trial; "
            f"{spec['trials'] // max(1, len(spec['algorithms']))} trials per algorithm declared; "
            f"commit {commits}; exported {data['exported']}. Rerun: "
            f"`sppo-bench sweep {data['sweep']} --workers 2`.",
            "",
            *tuning_table(data),
            "",
        ]
    return lines
