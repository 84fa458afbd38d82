"""Critic calibration (the paper's Fig. 7): does the prompt critic's sigmoid(v(x)) predict the
policy's success rate on prompt x?

At the end of a run with a prompt critic (SPPO) the trainer logs the table artifact
``critic_calibration.json``: per held-out prompt, ``predicted`` = sigmoid(v(x)) and ``empirical`` =
the fraction of k sampled responses that were correct. `load_calibration` reads those tables;
`calibration_bins` and `expected_calibration_error` summarise them as a reliability diagram
(equal-width bins of the prediction); `plot_calibration` draws it.

At every evaluation point the trainer also logs the held-out calibration as metrics
(``critic/calibration_pearson``, ``_ece``, ``_brier`` for a prompt critic,
``critic/first_value_pearson`` and ``critic/heldout_explained_variance`` for a token critic):
`calibration_trajectory` collects them against compute and `plot_calibration_trajectory` draws the
Pearson correlation over compute beside the paper's 0.642.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from analysis.metrics import (
    COMPUTE_FLOPS,
    CRITIC_CALIBRATION,
    CRITIC_CALIBRATION_BRIER,
    CRITIC_CALIBRATION_ECE,
    CRITIC_CALIBRATION_PEARSON,
    CRITIC_FIRST_VALUE_PEARSON,
    CRITIC_HELDOUT_EXPLAINED_VAR,
    PAPER_CALIBRATION_PEARSON,
)

from ._common import algorithm_colors, local_artifact_dir, order_algorithms

__all__ = [
    "CALIBRATION_ARTIFACT",
    "TRAJECTORY_METRICS",
    "calibration_bins",
    "calibration_trajectory",
    "expected_calibration_error",
    "load_calibration",
    "plot_calibration",
    "plot_calibration_trajectory",
]

logger = logging.getLogger(__name__)

#: Artifact the trainer logs at the end of a prompt-critic run (see benchmarks/training/trainer.py).
CALIBRATION_ARTIFACT = "critic_calibration.json"
_IDENTITY = ("algorithm", "seed", "task", "horizon")
_COLUMNS = ("run_id", *_IDENTITY, "prompt", "predicted", "empirical", "k")


def _candidates(runs: pd.DataFrame | Iterable[str]) -> tuple[list[str], pd.DataFrame | None]:
    """Run ids that may hold a calibration table, and their identity columns when known."""
    if not isinstance(runs, pd.DataFrame):
        return [str(r) for r in dict.fromkeys(runs)], None
    frame = runs
    if "metric" in frame.columns:
        # Only prompt critics log critic/calibration_error, and only they log the table: skip
        # listing the artifacts of every other run.
        with_critic = frame.loc[frame["metric"] == CRITIC_CALIBRATION, "run_id"].unique()
        frame = frame[frame["run_id"].isin(with_critic)]
    cols = ["run_id", *[c for c in _IDENTITY if c in frame.columns]]
    meta = frame[cols].drop_duplicates("run_id").reset_index(drop=True)
    return meta["run_id"].astype(str).tolist(), meta


def _read_table(path: Path) -> pd.DataFrame:
    """An MLflow ``log_table`` JSON file: ``{"columns": [...], "data": [[...], ...]}``."""
    blob = json.loads(path.read_text())
    return pd.DataFrame(blob["data"], columns=blob["columns"])


def _fetch(client: Any, run: Any, artifact_file: str, dst: Path) -> Path | None:
    """A local path of the run's artifact, or None when the run has none: read in place from a
    local store, downloaded from any other."""
    local = local_artifact_dir(run.info.artifact_uri)
    if local is not None:
        path = local / artifact_file
        return path if path.is_file() else None
    parent = str(Path(artifact_file).parent)
    listed = client.list_artifacts(run.info.run_id, None if parent == "." else parent)
    if artifact_file not in {a.path for a in listed if not a.is_dir}:
        return None
    return Path(client.download_artifacts(run.info.run_id, artifact_file, dst_path=str(dst)))


def load_calibration(
    runs: pd.DataFrame | Iterable[str],
    tracking_uri: str | None = None,
    *,
    artifact_file: str = CALIBRATION_ARTIFACT,
) -> pd.DataFrame:
    """Per-prompt calibration tables of the runs that logged one, as one frame.

    Args:
        runs: a tidy frame from :func:`analysis.load_runs` (its runs with a prompt critic are
            read; algorithm, seed, task and horizon come from it), or run ids (identity from
            their MLflow tags).
        tracking_uri: the store; default ``runs.attrs["tracking_uri"]`` (set by ``load_runs``),
            else MLflow's current URI.
        artifact_file: the table's artifact path.

    Returns:
        Columns run_id, algorithm, seed, task, horizon, prompt, predicted (sigmoid(v)),
        empirical (success rate over k samples), k; empty when no run logged a table.
    """
    from mlflow.tracking import MlflowClient

    if tracking_uri is None and isinstance(runs, pd.DataFrame):
        tracking_uri = runs.attrs.get("tracking_uri")
    client = MlflowClient(tracking_uri=tracking_uri)
    run_ids, meta = _candidates(runs)
    frames = []
    with tempfile.TemporaryDirectory() as tmp:
        for run_id in run_ids:
            run = client.get_run(run_id)
            path = _fetch(client, run, artifact_file, Path(tmp) / run_id)
            if path is None:
                continue
            table = _read_table(path).assign(run_id=run_id)
            if meta is None:
                table = table.assign(**{c: run.data.tags.get(c) for c in _IDENTITY})
            frames.append(table)
    if not frames:
        logger.info("no %s among %d runs", artifact_file, len(run_ids))
        return pd.DataFrame(columns=list(_COLUMNS))
    out = pd.concat(frames, ignore_index=True)
    if meta is not None:
        out = out.merge(meta, on="run_id", how="left")
    for c in _IDENTITY:
        if c not in out.columns:
            out[c] = np.nan
    for c in ("seed", "horizon"):
        numeric = pd.to_numeric(out[c], errors="coerce")
        out[c] = numeric if numeric.notna().any() else out[c]
    return out[list(_COLUMNS)]


def _bin_edges(bins: int) -> np.ndarray:
    return np.linspace(0.0, 1.0, bins + 1)


def calibration_bins(cal: pd.DataFrame, bins: int = 10) -> pd.DataFrame:
    """Reliability-diagram bins of one calibration table: equal-width bins of ``predicted``.

    Returns:
        One row per non-empty bin: lo, hi, n, predicted (mean), empirical (mean), empirical_se
        (s.e. of the mean over the bin's prompts; NaN with one prompt).
    """
    edges = _bin_edges(bins)
    pred = cal["predicted"].to_numpy(float)
    emp = cal["empirical"].to_numpy(float)
    idx = np.clip(np.digitize(pred, edges[1:-1]), 0, bins - 1)
    rows = []
    for b in range(bins):
        sel = idx == b
        n = int(sel.sum())
        if n == 0:
            continue
        se = float(emp[sel].std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")
        rows.append(
            {
                "lo": edges[b],
                "hi": edges[b + 1],
                "n": n,
                "predicted": float(pred[sel].mean()),
                "empirical": float(emp[sel].mean()),
                "empirical_se": se,
            }
        )
    return pd.DataFrame(rows, columns=["lo", "hi", "n", "predicted", "empirical", "empirical_se"])


def expected_calibration_error(
    predicted: np.ndarray | pd.Series, empirical: np.ndarray | pd.Series, bins: int = 10
) -> float:
    """ECE: the prompt-weighted mean over equal-width bins of |mean predicted - mean empirical|.

    >>> round(expected_calibration_error([0.1, 0.1, 0.9], [0.0, 0.2, 1.0]), 4)
    0.0333
    """
    table = calibration_bins(
        pd.DataFrame({"predicted": np.asarray(predicted, float), "empirical": empirical}), bins
    )
    if table.empty:
        return float("nan")
    gap = (table["predicted"] - table["empirical"]).abs()
    return float((gap * table["n"]).sum() / table["n"].sum())


def _groups(cal: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(label, algorithm, rows) per algorithm, and per horizon when the table has several."""
    horizons = sorted(cal["horizon"].dropna().unique()) if "horizon" in cal.columns else []
    out = []
    for algo in order_algorithms(cal["algorithm"].dropna().astype(str).unique()):
        sub = cal[cal["algorithm"].astype(str) == algo]
        if len(horizons) > 1:
            for h in horizons:
                rows = sub[sub["horizon"] == h]
                if len(rows):
                    out.append((f"{algo}, horizon {int(h)}", algo, rows))
        else:
            out.append((algo, algo, sub))
    if cal["algorithm"].isna().all():
        out.append(("critic", "critic", cal))
    return out


def plot_calibration(
    cal: pd.DataFrame,
    ax: Axes | None = None,
    *,
    bins: int = 10,
    points: bool = True,
    legend: bool = True,
) -> Axes:
    """Reliability diagram: predicted sigmoid(v(x)) versus empirical success rate per prompt.

    Faint dots are single prompts (the empirical rate takes the values 0, 1/k, ..., 1); the line
    joins the bin means (equal-width bins of the prediction) with 95% error bars on the
    empirical mean; the diagonal is perfect calibration. The legend gives each critic's ECE.

    Args:
        cal: output of :func:`load_calibration`.
        ax: axes to draw on; default a new figure.
        bins: number of equal-width bins on [0, 1].
        points: draw the per-prompt dots.
        legend: draw the legend.
    """
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(4.8, 4.6), layout="constrained")
    if cal.empty:
        raise ValueError(
            f"empty calibration table: only runs with a prompt critic (sppo) log {CALIBRATION_ARTIFACT}"
        )
    groups = _groups(cal)
    by_algo = len({algo for _, algo, _ in groups}) == len(groups)
    colors = algorithm_colors([algo for _, algo, _ in groups])
    cycle = [f"C{i}" for i in range(10)]
    ax.plot([0, 1], [0, 1], ls="--", lw=1.0, color="0.45", label="perfect calibration")
    ks = sorted({int(k) for k in cal["k"].dropna().unique()}) if "k" in cal.columns else []
    for i, (label, algo, rows) in enumerate(groups):
        color = colors[algo] if by_algo else cycle[i % len(cycle)]
        if points:
            ax.scatter(
                rows["predicted"], rows["empirical"], s=9, alpha=0.18, color=color, linewidths=0
            )
        table = calibration_bins(rows, bins)
        err = 1.96 * table["empirical_se"].fillna(0.0).to_numpy(float)
        ece = expected_calibration_error(rows["predicted"], rows["empirical"], bins)
        ax.errorbar(
            table["predicted"],
            table["empirical"],
            yerr=err,
            marker="o",
            ms=4.5,
            lw=1.6,
            capsize=2.5,
            color=color,
            label=f"{label}: ECE {ece:.3f} ({len(rows)} prompts)",
        )
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_aspect("equal")
    ax.set_xlabel("predicted success sigmoid(v(x))")
    k_text = f"{ks[0]} samples" if len(ks) == 1 else "k samples"
    ax.set_ylabel(f"empirical success rate ({k_text} / prompt)")
    ax.set_title("Prompt-critic calibration (held-out prompts)")
    ax.grid(True, alpha=0.3)
    if legend:
        handles, labels = ax.get_legend_handles_labels()
        if points:
            handles.append(Line2D([], [], ls="", marker="o", ms=3, color="0.4", alpha=0.4))
            labels.append("one prompt")
        ax.legend(
            handles,
            labels,
            fontsize="small",
            loc="upper left",
            title=f"bin means ({bins} bins), 95% bars",
            title_fontsize="small",
        )
    return ax


#: The held-out calibration metrics logged at every evaluation point.
TRAJECTORY_METRICS = (
    CRITIC_CALIBRATION_PEARSON,
    CRITIC_CALIBRATION_ECE,
    CRITIC_CALIBRATION_BRIER,
    CRITIC_FIRST_VALUE_PEARSON,
    CRITIC_HELDOUT_EXPLAINED_VAR,
)


def calibration_trajectory(df: pd.DataFrame, x: str = COMPUTE_FLOPS) -> pd.DataFrame:
    """The held-out calibration of every run with a critic, at each evaluation point.

    Args:
        df: a tidy frame from :func:`analysis.load_runs`.
        x: the compute axis, read at the evaluation's step (or the last step before it).

    Returns:
        Columns run_id, algorithm, seed, step, ``x``, ``pearson`` (the prompt critic's
        calibration Pearson, or the token critic's first-value Pearson: both correlate the
        critic's reading of a prompt with its empirical success) and one column per metric of
        :data:`TRAJECTORY_METRICS` the run logged; empty when none did.
    """
    cols = ["run_id", "algorithm", "seed", "step", x, "pearson"]
    sub = df[df["metric"].isin(TRAJECTORY_METRICS)]
    if sub.empty:
        return pd.DataFrame(columns=cols)
    wide = sub.pivot_table(
        index=["run_id", "step"], columns="metric", values="value", aggfunc="last"
    )
    wide.columns.name = None
    wide = wide.reset_index()
    axis = df.loc[df["metric"] == x, ["run_id", "step", "value"]].rename(columns={"value": x})
    wide = pd.merge_asof(
        wide.sort_values("step", kind="stable"),
        axis.sort_values("step", kind="stable"),
        on="step",
        by="run_id",
        direction="backward",
    )
    meta_cols = ["run_id", *[c for c in ("algorithm", "seed") if c in df.columns]]
    wide = wide.merge(df[meta_cols].drop_duplicates("run_id"), on="run_id", how="left")
    prompt = wide.get(CRITIC_CALIBRATION_PEARSON, pd.Series(np.nan, index=wide.index))
    token = wide.get(CRITIC_FIRST_VALUE_PEARSON, pd.Series(np.nan, index=wide.index))
    wide["pearson"] = prompt.fillna(token)
    for c in cols:
        if c not in wide.columns:
            wide[c] = np.nan
    rest = [m for m in TRAJECTORY_METRICS if m in wide.columns]
    return wide[cols + rest].sort_values(["run_id", "step"], kind="stable").reset_index(drop=True)


def plot_calibration_trajectory(
    df: pd.DataFrame,
    ax: Axes | None = None,
    *,
    x: str = COMPUTE_FLOPS,
    reference: float = PAPER_CALIBRATION_PEARSON,
) -> Axes:
    """Pearson correlation of each critic's prediction with held-out empirical success over
    compute, one line per algorithm (mean over seeds at each evaluation point, faint lines per
    seed), the paper's 0.642 (Fig. 7) as a dashed reference.

    Args:
        df: a tidy frame from :func:`analysis.load_runs`.
        ax: axes to draw on; default a new figure.
        x: the compute axis.
        reference: the horizontal reference line (paper: 0.642 on held-out prompts).
    """
    from ._common import axis_label

    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(5.0, 3.6), layout="constrained")
    traj = calibration_trajectory(df, x)
    if traj.empty:
        raise ValueError(
            "no calibration trajectory: runs with a critic log critic/calibration_pearson or "
            "critic/first_value_pearson at each evaluation point (trainer.calibration_every_eval)"
        )
    algos = order_algorithms(traj["algorithm"].dropna().astype(str).unique())
    colors = algorithm_colors(algos)
    for algo in algos:
        rows = traj[traj["algorithm"].astype(str) == algo]
        for _, run in rows.groupby("run_id"):
            ax.plot(run[x], run["pearson"], color=colors[algo], alpha=0.25, lw=0.8)
        rows = rows.assign(_i=rows.groupby("run_id").cumcount())
        mean = rows.groupby("_i")[[x, "pearson"]].mean()
        token = (
            CRITIC_FIRST_VALUE_PEARSON in rows.columns
            and rows[CRITIC_FIRST_VALUE_PEARSON].notna().any()
        )
        label = f"{algo} (value at the first token)" if token else f"{algo} (sigmoid(v(x)))"
        ax.plot(
            mean[x], mean["pearson"], color=colors[algo], marker="o", ms=3.5, lw=1.8, label=label
        )
    ax.axhline(reference, ls="--", lw=1.0, color="0.35", label=f"paper, held-out ({reference:g})")
    ax.axhline(0.0, lw=0.6, color="0.7")
    ax.set_ylim(-1.02, 1.02)
    ax.set_xlabel(axis_label(x))
    ax.set_ylabel("Pearson(prediction, empirical success)")
    ax.set_title("Critic calibration on held-out prompts over training")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")
    return ax
