"""Accuracy versus horizon: the suite's probe of SPPO's long-horizon credit-assignment claim.

``sppo-bench run suite=horizon`` trains the four algorithms on ``arith`` at several horizons
(reasoning steps per problem) under one parent run, logging each horizon's evaluation as
``eval/arith_h<h>/accuracy``. A run's horizon is read from that dataset name, else from the
``horizon`` tag the harness sets on every arith run, so separate ``task.horizon=...`` invocations
in one experiment plot the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter
from scipy.stats import norm

from ._common import ACCURACY, algorithm_colors, dataset_horizon, order_algorithms
from .curves import final_scores
from .load import eval_points
from .stats import bootstrap_ci

__all__ = ["horizon_points", "horizon_table", "plot_accuracy_vs_horizon"]


def _as_points(df_or_points: pd.DataFrame) -> pd.DataFrame:
    """Eval points from a tidy frame (``metric``/``value`` columns), or the points unchanged."""
    if {"metric", "value"} <= set(df_or_points.columns):
        return eval_points(df_or_points)
    return df_or_points


def horizon_points(df_or_points: pd.DataFrame, metric: str = ACCURACY) -> pd.DataFrame:
    """Start and final eval point of every run that has a horizon, one row per run and dataset.

    Columns: run_id, algorithm, seed, dataset, horizon, start, final, final_se (NaN when no
    ``<metric>_se`` was logged). Runs without a horizon (real benchmarks) are left out.
    """
    pts = _as_points(df_or_points)
    cols = ["run_id", "algorithm", "seed", "dataset", "horizon", "start", "final", "final_se"]
    if pts.empty or metric not in pts.columns:
        return pd.DataFrame(columns=cols)
    from_name = pts["dataset"].map(dataset_horizon).astype(float)
    from_tag = (
        pd.to_numeric(pts["horizon"], errors="coerce")
        if "horizon" in pts.columns
        else pd.Series(np.nan, index=pts.index)
    )
    pts = pts.assign(horizon=from_name.fillna(from_tag)).dropna(subset=["horizon", metric])
    if pts.empty:
        return pd.DataFrame(columns=cols)
    key = ["run_id", "dataset"]
    by_run = pts.sort_values("step", kind="stable").groupby(key)
    out = (
        final_scores(pts, metric)
        .rename(columns={"value": "final", "se": "final_se"})
        .join(by_run[metric].first().astype(float).rename("start"), on=key)
        .join(by_run["horizon"].first().astype(int), on=key)
    )
    return out.sort_values(["horizon", "algorithm", "run_id"]).reset_index(drop=True)[cols]


def horizon_table(
    df_or_points: pd.DataFrame,
    metric: str = ACCURACY,
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Final accuracy per algorithm and horizon: mean over seeds with a 95% interval.

    The interval is the stratified bootstrap over seeds, or mean -/+ 1.96 s.e. of the eval with a
    single seed (one seed has no spread to resample). ``start`` is the mean accuracy before RL
    (every algorithm of a seed starts from the same warm start).

    Returns:
        Columns algorithm, horizon, mean, lo, hi, start, n_runs.
    """
    finals = horizon_points(df_or_points, metric)
    z = float(norm.ppf(0.5 + confidence / 2))
    rows = []
    for i, algo in enumerate(order_algorithms(finals["algorithm"].dropna().unique())):
        sub = finals[finals["algorithm"] == algo]
        for h, cell in sub.groupby("horizon", sort=True):
            values = cell["final"].to_numpy(float)
            mean = float(values.mean())
            if values.size > 1:
                _, lo, hi = bootstrap_ci(
                    values, "mean", reps=reps, confidence=confidence, seed=seed + i
                )
                lo, hi = float(lo), float(hi)
            else:
                se = float(cell["final_se"].iloc[0])
                lo, hi = mean - z * se, mean + z * se
            rows.append(
                {
                    "algorithm": algo,
                    "horizon": int(h),
                    "mean": mean,
                    "lo": lo,
                    "hi": hi,
                    "start": float(cell["start"].mean()),
                    "n_runs": int(values.size),
                }
            )
    return pd.DataFrame(
        rows, columns=["algorithm", "horizon", "mean", "lo", "hi", "start", "n_runs"]
    )


def plot_accuracy_vs_horizon(
    df_or_points: pd.DataFrame,
    ax: Axes | None = None,
    *,
    metric: str = ACCURACY,
    algorithms: Sequence[str] | None = None,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    legend: bool = True,
) -> Axes:
    """Final accuracy per algorithm versus horizon (reasoning steps per problem).

    One line per algorithm: mean over seeds with 95% error bars (bootstrap over seeds, or ±1.96
    s.e. of the eval with one seed); a grey dashed line shows the accuracy before RL. Horizons are
    drawn on a log2 axis, algorithms nudged sideways so their error bars do not overlap.

    Args:
        df_or_points: tidy frame from :func:`analysis.load_runs` or its
            :func:`analysis.eval_points`.
        ax: axes to draw on; default a new figure.
        metric: eval metric leaf.
        algorithms: subset and order; default all present.
        reps, confidence, seed: of the bootstrap.
        legend: draw the legend.
    """
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(5.4, 3.8), layout="constrained")
    table = horizon_table(df_or_points, metric, reps=reps, confidence=confidence, seed=seed)
    if table.empty:
        raise ValueError(
            "no runs with a horizon: run `sppo-bench run suite=horizon` (eval datasets "
            "arith_h<h>) or arith runs tagged `horizon`"
        )
    names = [a for a in (algorithms or order_algorithms(table["algorithm"].unique()))]
    names = [a for a in names if a in set(table["algorithm"])]
    colors = algorithm_colors(table["algorithm"].unique())
    horizons = sorted(table["horizon"].unique())
    spread = 0.04 * (len(names) - 1)
    for i, algo in enumerate(names):
        sub = table[table["algorithm"] == algo].sort_values("horizon")
        nudge = 2.0 ** (-spread / 2 + 0.04 * i)  # multiplicative: even on the log2 axis
        x = sub["horizon"].to_numpy(float) * nudge
        y = sub["mean"].to_numpy(float)
        err = np.vstack([y - sub["lo"].to_numpy(float), sub["hi"].to_numpy(float) - y])
        n = int(sub["n_runs"].min())
        ax.errorbar(
            x,
            y,
            yerr=np.clip(err, 0, None),
            marker="o",
            ms=4,
            lw=1.6,
            capsize=3,
            color=colors[algo],
            label=f"{algo} (n={n})",
        )
    start = table.groupby("horizon")["start"].mean().reindex(horizons)
    ax.plot(horizons, start.to_numpy(float), ls="--", lw=1.2, color="0.45", label="before RL")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(horizons))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(NullLocator())
    if len(horizons) == 1:
        ax.set_xlim(horizons[0] / 2, horizons[0] * 2)
    ax.set_xlabel("horizon (reasoning steps per problem)")
    ax.set_ylabel(f"final {metric}")
    ax.set_title(f"Final {metric} versus horizon")
    ax.grid(True, alpha=0.3)
    if legend:
        single = bool((table["n_runs"] == 1).all())
        band = "±1.96 s.e." if single else "95% bootstrap CI over seeds"
        handles, labels = ax.get_legend_handles_labels()
        order = sorted(range(len(labels)), key=lambda j: labels[j] == "before RL")
        ax.legend(
            [handles[j] for j in order],
            [labels[j] for j in order],
            fontsize="small",
            title=f"mean, bars: {band}",
            title_fontsize="small",
        )
    return ax
