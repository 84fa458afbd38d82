"""The leaderboard: every algorithm of a suite at equal compute, over independent starts.

One row per algorithm, read from the eval points of one task: final accuracy, its interquartile
mean, the normalised area under the accuracy-versus-compute curve (the mean accuracy over the
budget: it rewards reaching an accuracy early, and is never censored), a rank with its interval,
the probability of improving on a reference, and what each costs (FLOPs, of which the critic's,
wall time per run and peak memory), so an algorithm that buys accuracy with critic compute shows
it. The unit of replication is the warm start (DESIGN §8): each algorithm's value at a start is
the mean over its RL seeds there, and every interval resamples starts, the same draw for every
algorithm, so comparisons stay paired by start. The intervals are percentile bootstraps over
starts; their coverage has not been checked by simulation, and the table says so.

Two registered algorithms are controls, labelled as such: ``ppo_inert_critic`` (PPO whose critic
does not learn: REINFORCE with whitened returns) and ``spo`` (no learnt critic: a per-prompt Beta
tracker of success).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from benchmarks.telemetry.metrics import (
    COMPUTE_FLOPS,
    COMPUTE_WALL_S,
    MEMORY_PEAK_BYTES,
    flops_phase,
)

from ._common import ACCURACY, BUDGET_FRACTION, algorithm_colors, order_algorithms

__all__ = [
    "CONTROLS",
    "LEADERBOARD_INTERVAL",
    "format_leaderboard",
    "leaderboard_datasets",
    "leaderboard_table",
    "per_start_scores",
    "plot_performance_profile",
    "run_scores",
]

#: What the control algorithms are, printed beside their rows.
CONTROLS: dict[str, str] = {
    "ppo_inert_critic": "control: PPO whose critic does not learn (REINFORCE, whitened returns)",
    "spo": "control: no learnt critic (a per-prompt Beta tracker of success)",
}
#: How the leaderboard's intervals are made, printed with the table.
LEADERBOARD_INTERVAL = (
    "95% percentile bootstrap over starts (the same draw for every algorithm; coverage not "
    "checked by simulation)"
)
_COST = {
    "flops": COMPUTE_FLOPS,
    "critic_flops": flops_phase("critic"),
    "wall_s": COMPUTE_WALL_S,
    "peak_mib": MEMORY_PEAK_BYTES,
}


def run_scores(points: pd.DataFrame, dataset: str, metric: str = ACCURACY) -> pd.DataFrame:
    """Per run on one dataset: ``final`` (the metric at the last eval), ``area`` (the trapezoid
    area under the metric versus the budget fraction, divided by the fraction covered: the mean
    metric over the budget) and the run's cost at its last eval.

    Args:
        points: :func:`analysis.eval_points` rows (one per run x dataset x eval).
        dataset: the eval set ranked (a task, or one of its groups).
        metric: the eval metric leaf.
    """
    sub = points[points["dataset"] == dataset].sort_values(["run_id", BUDGET_FRACTION])
    rows = []
    for run_id, g in sub.groupby("run_id", sort=True):
        x = g[BUDGET_FRACTION].to_numpy(float)
        y = g[metric].to_numpy(float)
        width = x[-1] - x[0]
        area = float(np.trapezoid(y, x) / width) if width > 0 else float("nan")
        last = g.iloc[-1]
        row = {
            "run_id": run_id,
            "algorithm": last["algorithm"],
            "final": float(y[-1]),
            "area": area,
        }
        for name, column in _COST.items():
            row[name] = float(last[column]) if column in g.columns else float("nan")
        rows.append(row)
    out = pd.DataFrame(rows, columns=["run_id", "algorithm", "final", "area", *_COST])
    out["peak_mib"] = out["peak_mib"] / 2**20
    return out


def per_start_scores(runs: pd.DataFrame, starts: Mapping[str, str]) -> pd.DataFrame:
    """Per algorithm x start: the mean over the start's runs (its RL seeds) of every score."""
    scored = runs.assign(start=runs["run_id"].map(starts))
    if scored["start"].isna().any():
        missing = scored.loc[scored["start"].isna(), "run_id"].tolist()
        raise ValueError(f"no start known for runs {missing}: the item table names each run's")
    numeric = ["final", "area", *_COST]
    return scored.groupby(["algorithm", "start"], sort=True)[numeric].mean().reset_index()


def _iqm(values: np.ndarray) -> float:
    """Interquartile mean (rliable): the mean of the middle 50%, ends trimmed by rank."""
    v = np.sort(values[~np.isnan(values)])
    if v.size == 0:
        return float("nan")
    cut = int(np.floor(0.25 * v.size))
    return float(v[cut : v.size - cut].mean())


def _ranks(means: np.ndarray) -> np.ndarray:
    """Rank 1 = highest mean; ties share their average rank; NaN (no start drawn) ranks last."""
    filled = np.where(np.isnan(means), -np.inf, means)
    return pd.Series(-filled).rank(method="average").to_numpy()


def leaderboard_table(
    points: pd.DataFrame,
    starts: Mapping[str, str],
    dataset: str,
    *,
    metric: str = ACCURACY,
    reference: str = "grpo",
    reps: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """The leaderboard of one dataset, best final accuracy first.

    Args:
        points: :func:`analysis.eval_points` rows.
        starts: run id -> its warm start (the item table's ``start``).
        dataset: the eval set ranked.
        metric: the eval metric leaf.
        reference: the algorithm improvement probabilities are against (GRPO by default: the
            baseline every method of this family compares with).
        reps: bootstrap replicates (resampled starts).
        seed: seeds the bootstrap.

    Returns:
        One row per algorithm: starts, runs, final / iqm / area with ``_lo`` and ``_hi``, rank with
        its interval, ``p_improve`` (P(algorithm > reference) at a start: paired by start, ties
        counted half) with its interval, the mean cost per run (FLOPs, critic FLOPs, wall
        seconds, peak MiB) and a note for the controls.
    """
    runs = run_scores(points, dataset, metric)
    per = per_start_scores(runs, starts)
    algos = order_algorithms(per["algorithm"].unique())
    start_ids = sorted(per["start"].unique())
    grid = {
        k: per.pivot(index="algorithm", columns="start", values=k).reindex(algos)[start_ids]
        for k in ("final", "area")
    }
    final, area = grid["final"].to_numpy(float), grid["area"].to_numpy(float)  # (A, S)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(start_ids), size=(reps, len(start_ids)))  # (R, S)
    ref = algos.index(reference) if reference in algos else None

    def stats(idx: np.ndarray) -> tuple[np.ndarray, ...]:
        f, a = final[:, idx], area[:, idx]  # (A, S')
        with np.errstate(invalid="ignore"):
            mean_f = np.nanmean(f, axis=1)
            mean_a = np.nanmean(a, axis=1)
        iqm = np.array([_iqm(row) for row in f])
        p = np.full(len(algos), np.nan)
        if ref is not None:
            both = ~np.isnan(f) & ~np.isnan(f[ref])
            wins = (f > f[ref]) + 0.5 * (f == f[ref])
            with np.errstate(invalid="ignore"):
                p = np.where(both, wins, np.nan).sum(1) / both.sum(1)
        return mean_f, iqm, mean_a, _ranks(mean_f), p

    with np.errstate(all="ignore"):
        point = stats(np.arange(len(start_ids)))
        boots = [stats(d) for d in draws]
    names = ("final", "iqm", "area", "rank", "p_improve")
    table = pd.DataFrame({"algorithm": algos})
    counts = runs.groupby("algorithm").size()
    table["starts"] = [int(grid["final"].loc[a].notna().sum()) for a in algos]
    table["runs"] = [int(counts.get(a, 0)) for a in algos]
    for i, name in enumerate(names):
        values = np.stack([b[i] for b in boots])  # (R, A)
        table[name] = point[i]
        table[f"{name}_lo"] = np.nanpercentile(values, 2.5, axis=0)
        table[f"{name}_hi"] = np.nanpercentile(values, 97.5, axis=0)
    if ref is not None:
        table.loc[
            table["algorithm"] == reference, ["p_improve", "p_improve_lo", "p_improve_hi"]
        ] = np.nan
    cost = runs.groupby("algorithm")[list(_COST)].mean()
    for name in _COST:
        table[name] = table["algorithm"].map(cost[name])
    table["note"] = table["algorithm"].map(CONTROLS).fillna("")
    return table.sort_values(
        ["final", "algorithm"], ascending=[False, True], kind="stable"
    ).reset_index(drop=True)


def plot_performance_profile(
    per_start: pd.DataFrame, score: str = "final", ax: Axes | None = None
) -> Axes:
    """The share of starts at which each algorithm's score is at least tau, for tau in [0, 1]
    (rliable's performance profile, over starts): a curve to the right of another is better at
    every threshold, and the spread across starts shows beside the means."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5.0, 3.6))
    taus = np.linspace(0.0, 1.0, 201)
    algos = order_algorithms(per_start["algorithm"].unique())
    colors = algorithm_colors(algos)
    for algo in algos:
        v = per_start.loc[per_start["algorithm"] == algo, score].to_numpy(float)
        share = (v[None, :] >= taus[:, None]).mean(axis=1)
        style = ":" if algo in CONTROLS else "-"
        ax.step(taus, share, where="post", label=algo, color=colors[algo], linestyle=style)
    ax.set_xlabel(f"{score} accuracy threshold τ")
    ax.set_ylabel("share of starts ≥ τ")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=7, ncol=2)
    return ax


def format_leaderboard(table: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """The leaderboard as text cells: each estimate with its interval."""

    def cell(row: pd.Series, name: str, fmt: str) -> str:
        v = row[name]
        if pd.isna(v):
            return "–"
        return f"{v:{fmt}} [{row[f'{name}_lo']:{fmt}}, {row[f'{name}_hi']:{fmt}}]"

    f = f".{digits}f"
    out = pd.DataFrame(
        {
            "algorithm": table["algorithm"],
            "starts / runs": [
                f"{s} / {r}" for s, r in zip(table["starts"], table["runs"], strict=True)
            ],
            "final": [cell(r, "final", f) for _, r in table.iterrows()],
            "IQM": [cell(r, "iqm", f) for _, r in table.iterrows()],
            "area": [cell(r, "area", f) for _, r in table.iterrows()],
            "rank": [cell(r, "rank", ".1f") for _, r in table.iterrows()],
            "P(> ref)": [cell(r, "p_improve", ".2f") for _, r in table.iterrows()],
            "FLOPs": table["flops"].map(lambda v: f"{v:.3g}"),
            "critic FLOPs": table["critic_flops"].map(lambda v: f"{v:.3g}"),
            "wall s": table["wall_s"].map(lambda v: f"{v:.0f}"),
            "peak MiB": table["peak_mib"].map(lambda v: f"{v:.0f}"),
            "note": table["note"],
        }
    )
    return out


def leaderboard_datasets(points: pd.DataFrame) -> Sequence[str]:
    """The whole tasks among the eval sets (not their groups, ``arith_h4``): what is ranked,
    fitted and drawn on one panel each."""
    names = set(points["dataset"].unique())
    return sorted(d for d in names if not any(d.startswith(f"{e}_") for e in names))
