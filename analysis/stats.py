"""Uncertainty over seeds, rliable style (Agarwal et al., 2021, "Deep RL at the Edge of the
Statistical Precipice"; github google-research/rliable).

One data shape everywhere: ``dict[algorithm] -> array(runs, tasks[, points])``, where a *task* is
a benchmark dataset and *points* an optional trailing axis (eval checkpoints). With a handful of
seeds a point estimate hides how much an ordering can be trusted, so every number comes with a
stratified bootstrap interval: runs are resampled with replacement *within each task* (the strata),
the statistic is recomputed, and the percentile interval of the replicates is reported.

Statistics: ``"mean"``, ``"median"``, ``"iqm"`` (interquartile mean: the mean of the middle 50% of
all run x task scores, robust to one diverged seed yet less noisy than the median), or any
callable ``f(array(runs, tasks[, points])) -> scalar | array(points)``. The named ones run
vectorised over all bootstrap replicates at once. Probability of improvement P(X > Y) is the
Mann-Whitney U statistic normalised to [0, 1] (ties count one half), averaged over tasks.

Hierarchical option (``starts=``): when runs share warm starts, a run is not the unit of
replication; the start is. Given each run's start, a replicate resamples starts with replacement
and then, within each drawn start, that start's runs with replacement (whole runs: the same draw
for every task, since a run's scores on all tasks come from one training). Each drawn start
contributes as many runs as the largest start has, so starts weigh equally. The probability of
improvement pairs the two algorithms by start: one draw of starts serves both, their runs within
a start are drawn apart. With ``starts=None`` the intervals are the stratified ones above.

Simplifications versus rliable: percentile intervals only (no BCa); NaN scores are ignored by
``"mean"`` only, the other statistics expect complete arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from ._common import REFERENCE, order_algorithms

__all__ = [
    "Statistic",
    "bootstrap_ci",
    "interval_estimates",
    "iqm",
    "improvement_estimates",
    "probability_of_improvement",
    "probability_of_improvement_ci",
    "stratified_bootstrap",
]

#: A statistic: a name of a vectorised one, or a callable on one (runs, tasks[, points]) array.
Statistic = str | Callable[[np.ndarray], float | np.ndarray]
_MAX_CHUNK_ELEMENTS = 20_000_000  # bootstrap replicates are drawn in chunks of at most this


def _as_3d(scores: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    """(runs,) | (runs, tasks) | (runs, tasks, *points) -> (runs, tasks, P) and the points shape."""
    arr = np.asarray(scores, dtype=float)
    if arr.ndim == 0:
        raise ValueError("scores must have a runs axis: shape (runs, tasks[, points])")
    if arr.ndim == 1:
        arr = arr[:, None]
    points = arr.shape[2:]
    return arr.reshape(arr.shape[0], arr.shape[1], -1), points


def _batched(statistic: str, x: np.ndarray) -> np.ndarray:
    """A named statistic over axes (runs, tasks) of x: (B, runs, tasks, P) -> (B, P)."""
    b, r, t, p = x.shape
    if statistic == "mean":
        with np.errstate(invalid="ignore"):
            return np.nanmean(x.reshape(b, r * t, p), axis=1)
    if statistic == "median":
        return np.median(x.reshape(b, r * t, p), axis=1)
    if statistic == "iqm":
        n = r * t
        cut = int(0.25 * n)  # same cut as scipy.stats.trim_mean(x, 0.25), used by rliable
        ordered = np.sort(x.reshape(b, n, p), axis=1)
        return ordered[:, cut : n - cut].mean(axis=1)
    raise ValueError(f"unknown statistic {statistic!r}; valid: 'mean', 'median', 'iqm'")


def _apply(statistic: Statistic, x: np.ndarray, points: tuple[int, ...]) -> np.ndarray:
    """Statistic of each replicate of x (B, runs, tasks, P) -> (B, *points)."""
    if isinstance(statistic, str):
        out = _batched(statistic, x)
    else:
        b = x.shape[0]
        out = np.stack(
            [
                np.asarray(statistic(x[i].reshape(x.shape[1], x.shape[2], *points)), float).ravel()
                for i in range(b)
            ]
        )
    return out.reshape(out.shape[0], *points)


def _start_table(starts: Sequence, runs: int) -> tuple[list, np.ndarray, np.ndarray]:
    """Start ids, runs of each start padded to the largest count (U, R), and counts (U,)."""
    labels = np.asarray(list(starts), dtype=object)
    if labels.shape != (runs,):
        raise ValueError(f"starts must give one start per run ({runs}), got {labels.shape[0]}")
    ids = list(dict.fromkeys(labels.tolist()))
    members = [np.flatnonzero(labels == i) for i in ids]
    counts = np.array([len(m) for m in members])
    table = np.zeros((len(ids), counts.max()), int)
    for u, m in enumerate(members):
        table[u, : len(m)] = m
    return ids, table, counts


def _within(
    table: np.ndarray, counts: np.ndarray, drawn: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Run indices (B, U * R) for drawn start rows (B, U): R draws within each drawn start."""
    b, u = drawn.shape
    pos = np.floor(rng.random((b, u, table.shape[1])) * counts[drawn][..., None]).astype(int)
    return table[drawn[..., None], pos].reshape(b, -1)


def iqm(scores: np.ndarray) -> float | np.ndarray:
    """Interquartile mean of all run x task scores (per point when a points axis is present).

    >>> iqm(np.arange(1.0, 9.0))  # drops 1, 2 and 7, 8
    4.5
    """
    arr, points = _as_3d(scores)
    out = _apply("iqm", arr[None], points)[0]
    return float(out) if out.ndim == 0 else out


def stratified_bootstrap(
    scores: np.ndarray,
    statistic: Statistic = "mean",
    *,
    reps: int = 2000,
    seed: int | np.random.Generator = 0,
    starts: Sequence | None = None,
) -> np.ndarray:
    """Bootstrap replicates of a statistic, resampling runs independently within each task.

    Args:
        scores: array(runs, tasks[, points]) (a 1-D array is one task).
        statistic: see :data:`Statistic`.
        reps: number of replicates.
        seed: a seed or a generator; the same seed gives the same replicates.
        starts: each run's warm start (a sequence of ``runs`` ids): resample starts, then runs
            within them (module docstring), instead of runs within each task.

    Returns:
        array(reps, *points): the statistic of each resampled score array.
    """
    arr, points = _as_3d(scores)
    rng = np.random.default_rng(seed)
    runs, tasks, p = arr.shape
    if starts is not None:
        _, table, counts = _start_table(starts, runs)
        per_rep = table.size * tasks * p
        chunk = max(1, min(reps, _MAX_CHUNK_ELEMENTS // max(per_rep, 1)))
        out = []
        for begin in range(0, reps, chunk):
            b = min(chunk, reps - begin)
            drawn = rng.integers(0, len(counts), size=(b, len(counts)))
            idx = _within(table, counts, drawn, rng)  # (B, U * R)
            out.append(_apply(statistic, arr[idx], points))
        return np.concatenate(out, axis=0)
    per_rep = runs * tasks * p
    chunk = max(1, min(reps, _MAX_CHUNK_ELEMENTS // max(per_rep, 1)))
    task_idx = np.arange(tasks)[None, None, :]
    out = []
    for start in range(0, reps, chunk):
        b = min(chunk, reps - start)
        idx = rng.integers(0, runs, size=(b, runs, tasks))  # (B, runs, tasks)
        out.append(_apply(statistic, arr[idx, task_idx, :], points))  # (B, *points)
    return np.concatenate(out, axis=0)


def bootstrap_ci(
    scores: np.ndarray,
    statistic: Statistic = "mean",
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int | np.random.Generator = 0,
    starts: Sequence | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Point estimate and stratified-bootstrap percentile interval of a statistic (hierarchical
    over ``starts`` when given: :func:`stratified_bootstrap`).

    Returns:
        (estimate, lo, hi), each a 0-d array or array(*points). With a single run the interval
        collapses onto the estimate: seeds give no spread to resample.
    """
    arr, points = _as_3d(scores)
    estimate = _apply(statistic, arr[None], points)[0]
    boot = stratified_bootstrap(scores, statistic, reps=reps, seed=seed, starts=starts)
    alpha = (1.0 - confidence) / 2.0
    with np.errstate(invalid="ignore"):
        lo, hi = np.nanpercentile(boot, [100 * alpha, 100 * (1 - alpha)], axis=0)
    return estimate, lo, hi


def interval_estimates(
    score_dict: Mapping[str, np.ndarray],
    statistic: Statistic = "mean",
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    starts: Mapping[str, Sequence] | None = None,
) -> pd.DataFrame:
    """`bootstrap_ci` for every algorithm: columns algorithm, estimate, lo, hi, n_runs.

    Scalar statistics only (no points axis): this is the one-line table of a comparison.
    ``starts``: algorithm -> each run's warm start, for the hierarchical resampling.
    """
    rows = []
    for i, algo in enumerate(order_algorithms(score_dict)):
        scores = np.asarray(score_dict[algo], float)
        est, lo, hi = bootstrap_ci(
            scores,
            statistic,
            reps=reps,
            confidence=confidence,
            seed=seed + i,
            starts=None if starts is None else starts[algo],
        )
        rows.append(
            {
                "algorithm": algo,
                "estimate": float(est),
                "lo": float(lo),
                "hi": float(hi),
                "n_runs": scores.shape[0],
            }
        )
    return pd.DataFrame(rows, columns=["algorithm", "estimate", "lo", "hi", "n_runs"])


def _poi_batched(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) per replicate: x (B, Rx, T), y (B, Ry, T) -> (B,)."""
    xs = x[:, :, None, :]
    ys = y[:, None, :, :]
    wins = (xs > ys).astype(float) + 0.5 * (xs == ys)  # (B, Rx, Ry, T)
    return wins.mean(axis=(1, 2)).mean(axis=1)


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y): chance that a random run of X beats a random run of Y on a task, task-averaged.

    Args:
        x: array(runs_x, tasks) (or 1-D: one task); y: array(runs_y, tasks).

    1.0 when every run of X beats every run of Y, 0.5 when X and Y are identical.
    """
    xa, _ = _as_3d(x)
    ya, _ = _as_3d(y)
    if xa.shape[1] != ya.shape[1]:
        raise ValueError(f"x and y need the same tasks: {xa.shape[1]} vs {ya.shape[1]}")
    return float(_poi_batched(xa[None, :, :, 0], ya[None, :, :, 0])[0])


def probability_of_improvement_ci(
    x: np.ndarray,
    y: np.ndarray,
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int | np.random.Generator = 0,
    starts_x: Sequence | None = None,
    starts_y: Sequence | None = None,
) -> tuple[float, float, float]:
    """P(X > Y) with a stratified bootstrap interval (X and Y resampled independently).

    With ``starts_x`` and ``starts_y`` (each run's warm start) the resampling is hierarchical and
    paired: one draw of starts (with replacement) serves both algorithms, then each algorithm's
    runs are drawn within each drawn start. Every start needs runs of both.
    """
    xa, _ = _as_3d(x)
    ya, _ = _as_3d(y)
    if xa.shape[1] != ya.shape[1]:
        raise ValueError(f"x and y need the same tasks: {xa.shape[1]} vs {ya.shape[1]}")
    xa, ya = xa[:, :, 0], ya[:, :, 0]
    rng = np.random.default_rng(seed)
    tasks = np.arange(xa.shape[1])[None, None, :]
    estimate = probability_of_improvement(xa, ya)
    if (starts_x is None) != (starts_y is None):
        raise ValueError("give both starts_x and starts_y, or neither")
    if starts_x is not None:
        ids_x, tx, cx = _start_table(starts_x, xa.shape[0])
        ids_y, ty, cy = _start_table(starts_y, ya.shape[0])
        if set(ids_x) != set(ids_y):
            raise ValueError(
                f"x and y need runs from the same starts: {sorted(map(str, ids_x))} vs "
                f"{sorted(map(str, ids_y))}"
            )
        order = [ids_y.index(i) for i in ids_x]
        ty, cy = ty[order], cy[order]
        per_rep = tx.size * ty.size * xa.shape[1]
        chunk = max(1, min(reps, _MAX_CHUNK_ELEMENTS // max(per_rep, 1)))
        out = []
        for begin in range(0, reps, chunk):
            b = min(chunk, reps - begin)
            drawn = rng.integers(0, len(cx), size=(b, len(cx)))  # shared by x and y
            out.append(
                _poi_batched(xa[_within(tx, cx, drawn, rng)], ya[_within(ty, cy, drawn, rng)])
            )
        boot = np.concatenate(out)
        alpha = (1.0 - confidence) / 2.0
        lo, hi = np.percentile(boot, [100 * alpha, 100 * (1 - alpha)])
        return estimate, float(lo), float(hi)
    out = []
    per_rep = xa.shape[0] * ya.shape[0] * xa.shape[1]
    chunk = max(1, min(reps, _MAX_CHUNK_ELEMENTS // max(per_rep, 1)))
    for start in range(0, reps, chunk):
        b = min(chunk, reps - start)
        ix = rng.integers(0, xa.shape[0], size=(b, xa.shape[0], xa.shape[1]))
        iy = rng.integers(0, ya.shape[0], size=(b, ya.shape[0], ya.shape[1]))
        out.append(_poi_batched(xa[ix, tasks], ya[iy, tasks]))
    boot = np.concatenate(out)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.percentile(boot, [100 * alpha, 100 * (1 - alpha)])
    return estimate, float(lo), float(hi)


def improvement_estimates(
    score_dict: Mapping[str, np.ndarray],
    *,
    reference: str = REFERENCE,
    others: Sequence[str] | None = None,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    starts: Mapping[str, Sequence] | None = None,
) -> pd.DataFrame:
    """P(reference > other) with intervals, one row per other algorithm.

    Columns: algorithm_x (the reference), algorithm_y, probability, lo, hi. Empty when the
    reference algorithm is absent. ``starts``: algorithm -> each run's warm start, for the
    hierarchical paired resampling (:func:`probability_of_improvement_ci`).
    """
    columns = ["algorithm_x", "algorithm_y", "probability", "lo", "hi"]
    if reference not in score_dict:
        return pd.DataFrame(columns=columns)
    if others is None:
        others = [a for a in order_algorithms(score_dict) if a != reference]
    rows = []
    for i, other in enumerate(others):
        p, lo, hi = probability_of_improvement_ci(
            score_dict[reference],
            score_dict[other],
            reps=reps,
            confidence=confidence,
            seed=seed + i,
            starts_x=None if starts is None else starts[reference],
            starts_y=None if starts is None else starts[other],
        )
        rows.append(
            {"algorithm_x": reference, "algorithm_y": other, "probability": p, "lo": lo, "hi": hi}
        )
    return pd.DataFrame(rows, columns=columns)
