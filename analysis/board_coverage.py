"""Simulated leaderboards with a known truth: how often each of the leaderboard's intervals
holds what it estimates.

A board has A algorithms over S independent starts, one score per algorithm and start (the
leaderboard's unit: the mean over the start's RL seeds). On the logit scale

    logit y_a,s = mu_a + u_s + v_a,s

* mu_a: the algorithm's level, ``centre`` plus its offset (``offsets``; equal offsets are true
  ties, which is where rank intervals are hardest);
* u_s: the start's offset, shared by every algorithm, sd ``start_sd``: normal, or skewed as in
  :mod:`analysis.simulate` (``"gamma"``, skewness 1.4; ``"lognormal"``, skewness 6.2);
* v_a,s: the algorithm's own deviation at the start (its interaction with the start and its RL
  seeds' noise), normal with sd ``own_sd``.

The designs are sized from the 5-start pilots of both claims tasks (results/claims,
results/claims_chain_sum, one seed per start): on the logit scale chain_sum's starts spread
with sd 0.62 around a level of -0.55 and the algorithms' own deviations with sd 0.26; arith's
with sd 1.56 around 2.6 (near the ceiling) and 0.49.

The truth of each statistic is its value under the design's distribution, from one large
sample of (u, v) shared by every algorithm, so equal offsets give exactly equal truths:
the mean of y_a, its interquartile mean (the mean of y_a between its quartiles), the rank
1 + #{k: mean_k > mean_a}, and P(y_a > y_ref) + P(y_a = y_ref) / 2 from the normal difference
of two algorithms' deviations.

``python -m analysis.board_coverage`` runs every design and writes
results/simulation/leaderboard_coverage.json, which the leaderboard page reads to print the
coverage each interval reached.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from rich.progress import Progress
from scipy import special, stats

from .leaderboard import (
    bootstrap_intervals,
    improvement_interval,
    rank_sets,
    studentized_interval,
    t_interval,
)
from .simulate import draw_start

__all__ = [
    "BoardDesign",
    "DESIGNS",
    "board_truth",
    "coverage",
    "coverage_lines",
    "coverage_table",
    "main",
]

logger = logging.getLogger(__name__)

#: Where the page reads the coverage from.
COVERAGE_FILE = Path("results") / "simulation" / "leaderboard_coverage.json"
#: Fifteen algorithms, some truly tied: the registry's size.
OFFSETS = (-0.3, -0.2, -0.2, -0.1, -0.1, -0.05, 0.0, 0.0, 0.0, 0.05, 0.1, 0.1, 0.2, 0.2, 0.3)


@dataclass(frozen=True)
class BoardDesign:
    """One simulated leaderboard (module docstring)."""

    name: str
    centre: float
    start_sd: float
    own_sd: float
    start_dist: str = "normal"
    offsets: tuple[float, ...] = field(default=OFFSETS)
    reference: int = 6  # an algorithm in the middle, tied with two others


DESIGNS: tuple[BoardDesign, ...] = (
    BoardDesign("chain_sum-like", centre=-0.55, start_sd=0.62, own_sd=0.26),
    BoardDesign("chain_sum-like, skewed starts", -0.55, 0.62, 0.26, start_dist="lognormal"),
    BoardDesign("arith-like (near the ceiling)", centre=2.6, start_sd=1.56, own_sd=0.49),
    BoardDesign("all tied", centre=-0.55, start_sd=0.62, own_sd=0.26, offsets=(0.0,) * 15),
)


def _draw(design: BoardDesign, rng: np.random.Generator, n: int, starts: int) -> np.ndarray:
    """n boards of (A, S) scores."""
    mu = design.centre + np.asarray(design.offsets)
    u = design.start_sd * draw_start(design.start_dist, rng, (n, 1, starts))
    v = design.own_sd * rng.standard_normal((n, len(mu), starts))
    return special.expit(mu[None, :, None] + u + v)


def board_truth(design: BoardDesign, draws: int = 400_000, seed: int = 12345) -> dict:
    """Each algorithm's true mean, IQM, rank and P(> reference)."""
    rng = np.random.default_rng(seed)
    mu = design.centre + np.asarray(design.offsets)
    x = design.start_sd * draw_start(design.start_dist, rng, draws) + design.own_sd * (
        rng.standard_normal(draws)
    )
    y = special.expit(mu[:, None] + x[None, :])  # the same draws for every algorithm
    mean = y.mean(axis=1)
    q1, q3 = np.quantile(y, [0.25, 0.75], axis=1)
    inside = (y >= q1[:, None]) & (y <= q3[:, None])
    iqm = (y * inside).sum(axis=1) / inside.sum(axis=1)
    rank = 1.0 + (mean[None, :] > mean[:, None]).sum(axis=1)
    # y_a > y_ref iff mu_a - mu_ref + v_a - v_ref > 0, the v's independent normals
    diff = mu - mu[design.reference]
    p = stats.norm.cdf(diff / (np.sqrt(2.0) * design.own_sd)) if design.own_sd > 0 else None
    p = np.where(diff == 0, 0.5, p)
    return {"mean": mean, "iqm": iqm, "rank": rank, "p_improve": p}


def _holds(lo: np.ndarray, hi: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Whether each interval holds its truth, with 1e-12 of float slack at the bounds (a rank
    or a share hit exactly)."""
    return (lo - 1e-12 <= truth) & (truth <= hi + 1e-12)


def coverage(
    design: BoardDesign, starts: int, suites: int, reps: int = 1000, seed: int = 0
) -> dict[str, dict[str, float]]:
    """Coverage of each statistic's interval, by method, over ``suites`` simulated boards:
    the mean over algorithms and the lowest algorithm's (``_min``); for the methods the
    leaderboard prints and the percentile bootstrap beside them."""
    truth = board_truth(design)
    rng = np.random.default_rng(seed)
    boards = _draw(design, rng, suites, starts)
    ref = design.reference
    hits: dict[str, list[np.ndarray]] = {}

    others = np.arange(len(design.offsets)) != ref  # P(> ref) has no value for ref itself

    def add(key: str, interval: tuple, name: str) -> None:
        held = _holds(interval[1], interval[2], truth[name])
        hits.setdefault(key, []).append(held[others] if name == "p_improve" else held)

    for board in boards:
        boot = bootstrap_intervals(board, ref, reps, rng)
        add("mean printed", studentized_interval(board, reps, rng), "mean")
        add("mean bootstrap-t", studentized_interval(board, reps, rng, min_starts=2), "mean")
        add("mean t", t_interval(board), "mean")
        add("mean bootstrap", boot["mean"], "mean")
        add("iqm bootstrap", boot["iqm"], "iqm")
        add("rank sets", rank_sets(board), "rank")
        add("rank bootstrap", boot["rank"], "rank")
        add("p_improve clopper-pearson", improvement_interval(board, ref), "p_improve")
        add("p_improve bootstrap", boot["p_improve"], "p_improve")
    out = {}
    for key, rows in hits.items():
        per_algorithm = np.mean(rows, axis=0)
        out[key] = {"mean": float(per_algorithm.mean()), "min": float(per_algorithm.min())}
    return out


def coverage_table(
    starts: Sequence[int] = (5, 10), suites: int = 2000, reps: int = 1000, seed: int = 0
) -> dict:
    """Every design at every number of starts, with what made it (the page prints it)."""
    cells = []
    with Progress(transient=True) as progress:
        task = progress.add_task("leaderboard coverage", total=len(DESIGNS) * len(starts))
        for design in DESIGNS:
            for s in starts:
                cells.append(
                    {
                        "design": asdict(design),
                        "starts": s,
                        "coverage": coverage(design, s, suites, reps, seed),
                    }
                )
                progress.advance(task)
    return {
        "schema": 1,
        "what": "coverage of the leaderboard's 95% intervals on simulated boards "
        "(analysis/board_coverage.py)",
        "suites": suites,
        "bootstrap_reps": reps,
        "seed": seed,
        "monte_carlo_se": float(np.sqrt(0.95 * 0.05 / suites)),
        "cells": cells,
    }


#: The page's columns: (heading, the method that is printed, the method it replaced).
_COLUMNS = (
    ("final, area (printed)", "mean printed", "mean bootstrap"),
    ("(bootstrap-t)", "mean bootstrap-t", None),
    ("(Student's t)", "mean t", None),
    ("IQM: percentile bootstrap", "iqm bootstrap", None),
    ("rank: paired-t sets", "rank sets", "rank bootstrap"),
    ("P(> ref): Clopper–Pearson", "p_improve clopper-pearson", "p_improve bootstrap"),
)


def coverage_lines(results: Path | str = "results") -> list[str]:
    """The leaderboard page's section on its intervals' coverage, from the coverage file under
    ``results`` (nothing if it is absent): per design and number of starts, each printed
    method's coverage averaged over the algorithms and the lowest algorithm's, and in brackets
    the percentile bootstrap's that it replaced."""
    path = Path(results) / COVERAGE_FILE.relative_to("results")
    if not path.is_file():
        return []
    data = json.loads(path.read_text())

    def cell(cov: dict, method: str, before: str | None) -> str:
        c = cov[method]
        text = f"{c['mean']:.3f} ({c['min']:.3f})"
        return text + (f" [{cov[before]['mean']:.3f}]" if before else "")

    lines = [
        "## How far the intervals hold",
        "",
        f"Coverage of the leaderboard's 95% intervals on simulated boards with a known truth "
        f"(`python -m analysis.board_coverage`: {data['suites']:,} boards a cell, 15 "
        f"algorithms, bootstrap {data['bootstrap_reps']:,} replicates; Monte Carlo error "
        f"about {100 * data['monte_carlo_se']:.1f} points). Each cell: the mean over the "
        "algorithms, the lowest algorithm's in parentheses, and in brackets the percentile "
        "bootstrap's that the leaderboard printed before. The designs are sized from the "
        'claims pilots (`analysis/board_coverage.py` says how); "all tied" has no '
        "difference at all, where ranks are hardest. final and area print the "
        "studentized bootstrap from 8 starts on and Student's t below (both cut to [0, 1], "
        "which never costs coverage); both are shown beside.",
        "",
        "| design | starts | " + " | ".join(c[0] for c in _COLUMNS) + " |",
        "|---|---|" + "---|" * len(_COLUMNS),
    ]
    for c in data["cells"]:
        cov = c["coverage"]
        cells = [cell(cov, method, before) for _, method, before in _COLUMNS]
        lines.append(f"| {c['design']['name']} | {c['starts']} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def main(argv: Sequence[str] | None = None) -> int:
    """Writes the coverage file the leaderboard page reads."""
    parser = argparse.ArgumentParser(prog="python -m analysis.board_coverage")
    parser.add_argument("--suites", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=COVERAGE_FILE)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    table = coverage_table(suites=args.suites, reps=args.reps)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(table, indent=1) + "\n")
    logger.info("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
