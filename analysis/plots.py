"""Figures: accuracy versus compute (one panel per benchmark), peak memory.

Functions take ``ax=None`` (or ``fig=None``), draw, and return it, as rliable's plot helpers do, so
a notebook can compose them and the report can draw on an off-screen ``Figure`` (Agg) without
touching pyplot's global state. Colours are fixed per algorithm so all figures agree.

Bands: with several seeds, the 95% stratified bootstrap interval of the mean over seeds at each
eval point; with one seed, mean -/+ 1.96 s.e. from the logged ``accuracy_se`` (the binomial
standard error of the eval), since one seed has no spread to resample.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator
from scipy.stats import norm

from benchmarks.metrics import COMPUTE_FLOPS

from ._common import ACCURACY, algorithm_colors, axis_label, dataset_label, order_datasets
from .curves import aligned_curves
from .fit import fit_curves, saturating_curve
from .stats import bootstrap_ci
from .tables import memory_table

__all__ = ["plot_accuracy_vs_compute", "plot_memory", "plot_panels"]


def _new_axes() -> Axes:
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=(5.0, 3.6), layout="constrained")
    return ax


def _set_xscale(ax: Axes, xs: np.ndarray, logx: bool | None) -> bool:
    """Log x-axis when compute spans a decade or more (symlog when a zero-compute start point
    must stay visible); returns whether the axis is logarithmic."""
    xs = xs[np.isfinite(xs)]
    pos = xs[xs > 0]
    if logx is None:
        logx = pos.size > 1 and pos.max() / pos.min() >= 20
    if not logx or pos.size == 0:
        return False
    if (xs <= 0).any():
        # Linear up to the first positive point, logarithmic beyond; ticks at 0 and at decades
        # past that point only (decades inside the linear stretch would crowd the 0 tick).
        linthresh = float(pos.min())
        ax.set_xscale("symlog", linthresh=linthresh, linscale=0.5)
        first, last = np.ceil(np.log10(linthresh)), np.floor(np.log10(pos.max()))
        ax.xaxis.set_major_locator(FixedLocator([0.0, *(10.0 ** np.arange(first, last + 1))]))
    else:
        ax.set_xscale("log")
    return True


def plot_accuracy_vs_compute(
    points: pd.DataFrame,
    x: str = COMPUTE_FLOPS,
    dataset: str | None = None,
    metric: str = ACCURACY,
    *,
    ax: Axes | None = None,
    fit: bool | pd.DataFrame = False,
    algorithms: Sequence[str] | None = None,
    reps: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    logx: bool | None = None,
    legend: bool = True,
) -> Axes:
    """Mean accuracy over seeds versus a compute axis, one line and band per algorithm.

    Args:
        points: output of :func:`analysis.eval_points`.
        x: compute column (``compute/flops``, ``compute/rollout_tokens``, ``compute/wall_s``...).
        dataset: benchmark; may be omitted when only one is present.
        metric: eval metric leaf.
        ax: axes to draw on; default a new figure.
        fit: overlay the saturating fit (dashed): True to fit here, or a frame from
            :func:`analysis.fit_curves` to draw those parameters.
        algorithms: subset and order; default all present.
        reps, confidence, seed: of the bootstrap band.
        logx: force the x scale; default log when compute spans 20x or more.
        legend: draw the legend.
    """
    ax = ax if ax is not None else _new_axes()
    curves = aligned_curves(points, x=x, dataset=dataset, metric=metric)
    ds = dataset if dataset is not None else order_datasets(points["dataset"].unique())[0]
    colors = algorithm_colors(points["algorithm"].dropna().unique())
    names = [a for a in (algorithms or list(curves)) if a in curves]
    z = float(norm.ppf(0.5 + confidence / 2))
    all_x = np.concatenate([curves[a].x for a in names]) if names else np.array([])
    is_log = _set_xscale(ax, all_x, logx)

    for i, algo in enumerate(names):
        curve = curves[algo]
        n = curve.y.shape[0]
        mean = curve.mean
        if n > 1:
            _, lo, hi = bootstrap_ci(
                curve.y[:, None, :], "mean", reps=reps, confidence=confidence, seed=seed + i
            )
        elif curve.se is not None:
            lo, hi = mean - z * curve.se[0], mean + z * curve.se[0]
        else:
            lo = hi = None
        color = colors[algo]
        ax.plot(curve.x, mean, marker="o", ms=3, lw=1.6, color=color, label=f"{algo} (n={n})")
        if lo is not None:
            ax.fill_between(curve.x, lo, hi, color=color, alpha=0.2, lw=0)

    if fit is not False and names:
        table = fit if isinstance(fit, pd.DataFrame) else fit_curves(points, x, ds, metric, reps=0)
        x_max = np.nanmax(all_x)
        rows = table[(table["dataset"] == ds) & table["algorithm"].isin(names)]
        for _, row in rows.iterrows():
            # From the algorithm's own first positive point to the right edge: the dashed
            # extension past its last point is the fit's extrapolation towards A.
            own = curves[row["algorithm"]].x
            own = own[np.isfinite(own) & (own > 0)]
            if own.size == 0 or not np.isfinite(x_max):
                continue
            start = own.min() if is_log else 0.0
            grid = np.geomspace(start, x_max, 200) if is_log else np.linspace(start, x_max, 200)
            y = saturating_curve(grid, row["R0"], row["A"], row["B"], row["C_mid"])
            ax.plot(grid, y, ls="--", lw=1.1, color=colors[row["algorithm"]], alpha=0.9)

    ax.set_xlabel(axis_label(x))
    ax.set_ylabel(f"{metric} ({dataset_label(ds)})")
    ax.set_title(dataset_label(ds))
    ax.grid(True, alpha=0.3, which="major")
    if legend and names:
        handles, labels = ax.get_legend_handles_labels()
        if fit is not False:
            handles.append(Line2D([], [], color="0.3", ls="--", lw=1.1))
            labels.append("saturating fit")
        band = "95% bootstrap CI" if any(curves[a].y.shape[0] > 1 for a in names) else "±1.96 s.e."
        ax.legend(
            handles, labels, fontsize="small", title=f"mean, band: {band}", title_fontsize="small"
        )
    return ax


def plot_panels(
    points: pd.DataFrame,
    x: str = COMPUTE_FLOPS,
    datasets: Sequence[str] | None = None,
    metric: str = ACCURACY,
    *,
    fit: bool | pd.DataFrame = False,
    ncols: int = 3,
    fig: Figure | None = None,
    **kwargs: object,
) -> Figure:
    """One accuracy-versus-compute panel per benchmark (paper Table 1 order), legend in the first.

    Extra keyword arguments go to :func:`plot_accuracy_vs_compute`.
    """
    names = list(datasets) if datasets is not None else order_datasets(points["dataset"].unique())
    if not names:
        raise ValueError("no eval points to plot")
    ncols = max(1, min(ncols, len(names)))
    nrows = math.ceil(len(names) / ncols)
    if fig is None:
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=(4.6 * ncols, 3.5 * nrows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    if isinstance(fit, bool) and fit:
        fit = fit_curves(points, x, None, metric, reps=0)
    for i, ds in enumerate(names):
        plot_accuracy_vs_compute(
            points, x, ds, metric, ax=axes[i], fit=fit, legend=(i == 0), **kwargs
        )
    for ax in axes[len(names) :]:
        ax.set_axis_off()
    return fig


def plot_memory(df: pd.DataFrame, *, ax: Axes | None = None) -> Axes:
    """Peak memory per algorithm normalised to the largest (paper Fig. 6), MiB on each bar."""
    ax = ax if ax is not None else _new_axes()
    table = memory_table(df).dropna(subset=["normalised"])
    colors = algorithm_colors(table["algorithm"])
    bars = ax.bar(
        table["algorithm"],
        table["normalised"],
        color=[colors[a] for a in table["algorithm"]],
    )
    for bar, mib in zip(bars, table["peak_memory_mib"], strict=True):
        ax.annotate(
            f"{mib:,.0f} MiB",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize="small",
        )
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("peak memory / largest")
    ax.set_title("Peak memory (normalised)")
    ax.grid(True, axis="y", alpha=0.3)
    return ax
