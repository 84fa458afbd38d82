"""Figures: accuracy versus compute (one panel per benchmark), the Table 1 bars, peak memory,
training dynamics.

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
from matplotlib.ticker import FixedLocator, FuncFormatter
from scipy.stats import norm

from analysis.metrics import (
    COMPUTE_FLOPS,
    COMPUTE_ROLLOUT_SAMPLES,
    CRITIC_EXPLAINED_VAR,
    TRAIN_ENTROPY,
    TRAIN_SCORE_MEAN,
)

from ._common import (
    ACCURACY,
    algorithm_colors,
    axis_label,
    dataset_label,
    metric_label,
    order_algorithms,
    order_datasets,
)
from .curves import aligned_curves
from .fit import fit_curves, saturating_curve
from .stats import bootstrap_ci
from .tables import MEMORY_SEGMENTS, memory_components_table, memory_table

__all__ = [
    "plot_accuracy_table",
    "plot_accuracy_vs_compute",
    "plot_memory",
    "plot_panels",
    "plot_training_curves",
]


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
        decades = 10.0 ** np.arange(first, last + 1)
        ax.xaxis.set_major_locator(FixedLocator([0.0, *decades]))
        minor = (10.0 ** np.arange(first - 1, last + 1))[:, None] * np.arange(2, 10)[None, :]
        minor = minor.ravel()
        ax.xaxis.set_minor_locator(
            FixedLocator(minor[(minor > linthresh) & (minor < xs.max() * 1.5)])
        )
        if last - first < 2:  # under two labelled decades: label the 2x and 5x ticks too
            ax.xaxis.set_minor_formatter(FuncFormatter(_minor_label))
    else:
        ax.set_xscale("log")
    return True


def _minor_label(value: float, _pos: int) -> str:
    """``2×10^10`` at the 2x and 5x minor ticks of a log axis, nothing at the others."""
    exponent = int(np.floor(np.log10(value)))
    mantissa = round(value / 10.0**exponent)
    return f"${mantissa}{{\\times}}10^{{{exponent}}}$" if mantissa in (2, 5) else ""


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
        logx: force the x scale; default log for FLOPs, and for other axes when compute spans
            20x or more (symlog when the zero-compute start point is drawn).
        legend: draw the legend.
    """
    ax = ax if ax is not None else _new_axes()
    curves = aligned_curves(points, x=x, dataset=dataset, metric=metric)
    ds = dataset if dataset is not None else order_datasets(points["dataset"].unique())[0]
    colors = algorithm_colors(points["algorithm"].dropna().unique())
    names = [a for a in (algorithms or list(curves)) if a in curves]
    z = float(norm.ppf(0.5 + confidence / 2))
    all_x = np.concatenate([curves[a].x for a in names]) if names else np.array([])
    if logx is None and x == COMPUTE_FLOPS:
        logx = True  # FLOPs of different algorithms differ by orders of magnitude at scale
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
            ax.fill_between(curve.x, lo, hi, color=color, alpha=0.15, lw=0)

    fitted = False
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
            fitted = True

    ax.set_xlabel(axis_label(x))
    ax.set_ylabel(metric)
    ax.set_title(dataset_label(ds))
    ax.grid(True, alpha=0.3, which="major")
    if legend and names:
        handles, labels = ax.get_legend_handles_labels()
        if fitted:
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
    """Memory per algorithm (paper Fig. 6).

    With the per-component accounting (``memory/<component>/<kind>_bytes``), a stacked bar per
    algorithm: the weights, gradients and Adam states of the policy, the critic and the reference,
    and the peak activations of the sampled step, MiB on each bar; a small-critic variant is its
    own bar. Runs without it (older runs, verl's) get the old figure: the peak resident set
    normalised to the largest.
    """
    ax = ax if ax is not None else _new_axes()
    table = memory_components_table(df)
    if table.empty:
        return _plot_peak_memory(df, ax)
    labels = [label for label, _ in MEMORY_SEGMENTS]
    shades = dict(
        zip(
            labels,
            ("#1f77b4", "#aec7e8", "#c6dbef", "#d62728", "#ff9896", "#7f7f7f", "#2ca02c"),
            strict=True,
        )
    )
    bottom = np.zeros(len(table))
    x = np.arange(len(table))
    for label in labels:
        v = table[label].to_numpy(float)
        if not np.any(v > 0):
            continue
        ax.bar(x, v, bottom=bottom, color=shades[label], label=label, width=0.65)
        bottom += v
    for xi, total in zip(x, table["total_mib"], strict=True):
        ax.annotate(f"{total:,.2f} MiB", (xi, total), ha="center", va="bottom", fontsize="small")
    ax.set_xticks(x, table["algorithm"], rotation=20, ha="right")
    ax.set_ylim(0, float(table["total_mib"].max()) * 1.18 or 1.0)
    ax.set_ylabel("MiB (mean over seeds)")
    ax.set_title("Memory per component (weights, grads, Adam, activations)")
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, axis="y", alpha=0.3)
    return ax


def _plot_peak_memory(df: pd.DataFrame, ax: Axes) -> Axes:
    """Peak memory per algorithm normalised to the largest, MiB on each bar."""
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
    ax.set_ylabel("peak memory / largest peak")
    ax.set_title("Peak memory, normalised to the largest")
    ax.grid(True, axis="y", alpha=0.3)
    return ax


def _training_curve(
    df: pd.DataFrame, run_ids: Sequence[str], metric: str, x: str, smooth: int
) -> tuple[np.ndarray, np.ndarray]:
    """array(points) of x (mean over runs) and array(runs, points) of the metric, by step."""
    sub = df[df["run_id"].isin(list(run_ids))]
    y = sub[sub["metric"] == metric].pivot_table(
        index="step", columns="run_id", values="value", aggfunc="last"
    )
    if y.empty:
        return np.array([]), np.empty((0, 0))
    if smooth > 1:
        y = y.rolling(smooth, min_periods=1).mean()
    if x == "step":
        xs = y.index.to_numpy(float)
    else:
        counter = sub[sub["metric"] == x].pivot_table(
            index="step", columns="run_id", values="value", aggfunc="last"
        )
        # The counter at each step the metric was logged (as-of: the last value at or before).
        counter = counter.reindex(counter.index.union(y.index)).sort_index().ffill()
        counter = counter.reindex(index=y.index, columns=y.columns)
        with np.errstate(invalid="ignore"):
            xs = np.nanmean(counter.to_numpy(float), axis=1)
    return xs, y.to_numpy(float).T


def plot_training_curves(
    df: pd.DataFrame,
    metrics: Sequence[str] = (TRAIN_SCORE_MEAN, TRAIN_ENTROPY, CRITIC_EXPLAINED_VAR),
    x: str = COMPUTE_ROLLOUT_SAMPLES,
    *,
    fig: Figure | None = None,
    algorithms: Sequence[str] | None = None,
    smooth: int = 1,
    reps: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    logx: bool = False,
) -> Figure:
    """Training dynamics per algorithm, one panel per metric (paper Fig. 4: PPO's collapse
    versus SPPO's steady climb).

    Each line is the mean over seeds at each optimizer step; the band is the 95% bootstrap
    interval over seeds (no band with one seed). Metrics an algorithm does not log (a critic's
    explained variance for GRPO) are simply absent from that panel.

    Args:
        df: tidy frame from :func:`analysis.load_runs`.
        metrics: per-step metric names (``train/*``, ``critic/*``).
        x: a cumulative ``compute/*`` counter, or ``"step"``.
        fig: figure to draw on; default a new one.
        algorithms: subset and order; default all present.
        smooth: trailing moving average over this many steps (1: raw).
        reps, confidence, seed: of the bootstrap band.
        logx: logarithmic x-axis.
    """
    present = [m for m in metrics if (df["metric"] == m).any()]
    if not present:
        raise ValueError(f"none of {list(metrics)} was logged")
    runs = df.drop_duplicates("run_id")
    names = order_algorithms(runs["algorithm"].dropna().unique())
    names = [a for a in (algorithms or names) if a in names]
    colors = algorithm_colors(runs["algorithm"].dropna().unique())
    if fig is None:
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=(4.4 * len(present), 3.4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(present), squeeze=False)).ravel()
    for ax, metric in zip(axes, present, strict=True):
        for i, algo in enumerate(names):
            run_ids = runs.loc[runs["algorithm"] == algo, "run_id"].tolist()
            xs, y = _training_curve(df, run_ids, metric, x, smooth)
            if y.size == 0:
                continue
            with np.errstate(invalid="ignore"):
                mean = np.nanmean(y, axis=0)
            ax.plot(xs, mean, lw=1.5, color=colors[algo], label=f"{algo} (n={y.shape[0]})")
            if y.shape[0] > 1:
                full = ~np.isnan(y).any(axis=0)  # the band only where every seed has the step
                lo = np.full(mean.shape, np.nan)
                hi = np.full(mean.shape, np.nan)
                if full.any():
                    _, lo[full], hi[full] = bootstrap_ci(
                        y[:, None, full], "mean", reps=reps, confidence=confidence, seed=seed + i
                    )
                ax.fill_between(xs, lo, hi, color=colors[algo], alpha=0.2, lw=0)
        if logx:
            ax.set_xscale("log")
        ax.set_xlabel(axis_label(x))
        title, label = metric_label(metric)
        ax.set_ylabel(label)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    band = "" if runs.groupby("algorithm")["run_id"].nunique().max() <= 1 else ", 95% band"
    title = f"mean over seeds{band}" + (f", {smooth}-step moving average" if smooth > 1 else "")
    axes[0].legend(fontsize="small", title=title, title_fontsize="small")
    return fig


def plot_accuracy_table(table: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """The paper's Table 1 as grouped bars: final accuracy per benchmark (and the average), one
    bar per algorithm, whiskers at the 95% interval.

    Args:
        table: output of :func:`analysis.accuracy_table` (long: algorithm, label, mean, lo, hi).
        ax: axes to draw on; default a new figure.
    """
    if table.empty:
        raise ValueError("empty accuracy table: no eval points")
    labels = list(dict.fromkeys(table["label"]))
    names = order_algorithms(table["algorithm"].unique())
    if ax is None:
        import matplotlib.pyplot as plt

        width_in = max(5.6, 2.2 + 0.35 * len(names) * len(labels))
        _, ax = plt.subplots(figsize=(width_in, 3.8), layout="constrained")
    colors = algorithm_colors(names)
    width = 0.8 / len(names)
    centres = np.arange(len(labels), dtype=float)
    for i, algo in enumerate(names):
        sub = table[table["algorithm"] == algo].set_index("label").reindex(labels)
        mean = sub["mean"].to_numpy(float)
        err = np.vstack([mean - sub["lo"].to_numpy(float), sub["hi"].to_numpy(float) - mean])
        n = int(sub["n_runs"].max()) if "n_runs" in sub.columns else 0
        ax.bar(
            centres - 0.4 + width * (i + 0.5),
            mean,
            width,
            yerr=np.clip(np.nan_to_num(err), 0, None),
            capsize=2.5,
            color=colors[algo],
            label=f"{algo} (n={n})" if n else algo,
        )
    ax.set_xticks(centres, labels)
    ax.set_ylabel("final accuracy (%)")
    ax.set_title("Final accuracy per benchmark")
    ax.set_ylim(0, None)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(
        fontsize="small",
        title="mean, 95% interval",
        title_fontsize="small",
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
    )
    return ax
