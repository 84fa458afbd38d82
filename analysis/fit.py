"""Saturating compute-performance fit (ScaleRL, Khatri et al. 2025, arXiv 2510.13786).

    R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)

A is the asymptotic accuracy (where more compute leads), B the scaling exponent (how sharply it
gets there), C_mid the compute at which half of the gain A - R0 is reached (efficiency). Two
algorithms with the same A differ in cost by their C_mid ratio; this is what lets a short budget
say something about a long one.

Fitting: (C_mid / C)^B = exp(B (log C_mid - log C)), so the model is
R0 + (A - R0) * expit(B (log C - log C_mid)), fitted in (A, B, log C_mid) by bounded least
squares (``scipy.optimize.curve_fit``, trust region) from a small grid of starts, which keeps
C_mid's scale out of the optimiser. R0 is fixed to the mean accuracy at zero compute when the runs
log an eval at the start (the harness does), else it is a fourth free parameter. Intervals:
percentile bootstrap over seeds (runs resampled with replacement, all their points refitted); with
one seed, over residuals.

Deviation from ScaleRL: it fits on the tail of the curve only and fixes R0 from the start; here
every eval point is used (short budgets have few points).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import OptimizeWarning, curve_fit
from scipy.special import expit

from analysis.metrics import COMPUTE_FLOPS

from ._common import ACCURACY, order_algorithms, order_datasets

__all__ = ["SaturatingFit", "fit_curves", "fit_saturating", "saturating_curve"]

logger = logging.getLogger(__name__)

_B_BOUNDS = (1e-2, 20.0)
_CMID_SPAN = 1e3  # C_mid may lie this factor outside the observed compute range


def saturating_curve(
    c: np.ndarray | float, r0: float, a: float, b: float, c_mid: float
) -> np.ndarray:
    """R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B); R(0) = R0, R(inf) = A."""
    c = np.asarray(c, dtype=float)
    with np.errstate(divide="ignore"):
        log_c = np.log(c)
    return r0 + (a - r0) * expit(b * (log_c - np.log(c_mid)))


@dataclass(frozen=True)
class SaturatingFit:
    """Fitted parameters of :func:`saturating_curve`.

    ``r0_fitted`` says whether R0 was a free parameter (no zero-compute point) or fixed.
    """

    r0: float
    a: float
    b: float
    c_mid: float
    rmse: float
    n_points: int
    r0_fitted: bool

    def __call__(self, c: np.ndarray | float) -> np.ndarray:
        """Predicted accuracy at compute c."""
        return saturating_curve(c, self.r0, self.a, self.b, self.c_mid)


def _bounds(y: np.ndarray) -> tuple[float, float]:
    """Range allowed for A and R0: [0, 1] for accuracies, else a generous span around the data."""
    lo, hi = float(np.min(y)), float(np.max(y))
    if lo >= 0.0 and hi <= 1.0:
        return 0.0, 1.0
    span = max(hi - lo, 1e-12)
    return lo - 2 * span, hi + 2 * span


def fit_saturating(
    compute: np.ndarray,
    accuracy: np.ndarray,
    *,
    r0: float | None = None,
    start: SaturatingFit | None = None,
) -> SaturatingFit:
    """Least-squares fit of the saturating curve to (compute, accuracy) points.

    Args:
        compute: array(n) of compute values; points with C <= 0 only set R0.
        accuracy: array(n).
        r0: fix R0; default: the mean accuracy of the C <= 0 points when any, else fitted.
        start: initial values (the bootstrap passes the full-data fit) instead of the start grid.

    Raises:
        ValueError: fewer positive-compute points than free parameters.
    """
    c = np.asarray(compute, float).ravel()
    y = np.asarray(accuracy, float).ravel()
    ok = np.isfinite(c) & np.isfinite(y)
    c, y = c[ok], y[ok]
    zero = c <= 0
    if r0 is None and zero.any():
        r0 = float(y[zero].mean())
    c, y = c[~zero], y[~zero]
    free_r0 = r0 is None
    n_params = 4 if free_r0 else 3
    if c.size < n_params:
        raise ValueError(f"need at least {n_params} points with compute > 0, got {c.size}")
    log_c = np.log(c)
    y_lo, y_hi = _bounds(y if free_r0 else np.append(y, r0))
    lcm_lo = float(log_c.min() - np.log(_CMID_SPAN))
    lcm_hi = float(log_c.max() + np.log(_CMID_SPAN))

    if free_r0:

        def model(lc: np.ndarray, a: float, b: float, lcm: float, r: float) -> np.ndarray:
            return r + (a - r) * expit(b * (lc - lcm))

        def jac(lc: np.ndarray, a: float, b: float, lcm: float, r: float) -> np.ndarray:
            s = expit(b * (lc - lcm))
            ds = (a - r) * s * (1.0 - s)
            return np.stack([s, ds * (lc - lcm), -ds * b, 1.0 - s], axis=1)

        lower = [y_lo, _B_BOUNDS[0], lcm_lo, y_lo]
        upper = [y_hi, _B_BOUNDS[1], lcm_hi, y_hi]
    else:
        r_fixed = float(r0)

        def model(lc: np.ndarray, a: float, b: float, lcm: float) -> np.ndarray:
            return r_fixed + (a - r_fixed) * expit(b * (lc - lcm))

        def jac(lc: np.ndarray, a: float, b: float, lcm: float) -> np.ndarray:
            s = expit(b * (lc - lcm))
            ds = (a - r_fixed) * s * (1.0 - s)
            return np.stack([s, ds * (lc - lcm), -ds * b], axis=1)

        lower = [y_lo, _B_BOUNDS[0], lcm_lo]
        upper = [y_hi, _B_BOUNDS[1], lcm_hi]

    if start is not None:
        starts = [[start.a, start.b, np.log(start.c_mid)] + ([start.r0] if free_r0 else [])]
    else:
        order = np.argsort(c)
        y_first, y_last = float(y[order[0]]), float(y[order[-1]])
        rising = y_last >= (y_first if free_r0 else r0)
        a0 = float(y.max() if rising else y.min())
        a0 += 0.05 * (y.max() - y.min()) * (1 if rising else -1)
        starts = [
            [a0, b0, float(np.quantile(log_c, q))] + ([y_first] if free_r0 else [])
            for b0 in (0.5, 1.0, 2.0)
            for q in (0.2, 0.5, 0.8)
        ]
    best: tuple[float, np.ndarray] | None = None
    for p0 in starts:
        p0 = np.clip(p0, np.add(lower, 1e-9), np.subtract(upper, 1e-9))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", OptimizeWarning)
                params, _ = curve_fit(
                    model,
                    log_c,
                    y,
                    p0=p0,
                    jac=jac,  # analytic: a report fits thousands of bootstrap replicates
                    bounds=(lower, upper),
                    method="trf",
                    # Accuracies carry noise of 1e-2 or more: 1e-9 is ample, and far cheaper on
                    # the flat, ill-posed fits bootstrap replicates often are.
                    ftol=1e-9,
                    xtol=1e-9,
                    gtol=1e-9,
                    max_nfev=2000,
                )
        except (RuntimeError, ValueError) as err:
            logger.debug("saturating fit from %s failed: %s", p0, err)
            continue
        sse = float(np.sum((model(log_c, *params) - y) ** 2))
        if best is None or sse < best[0]:
            best = (sse, params)
    if best is None:
        raise RuntimeError("saturating fit did not converge from any start")
    sse, params = best
    a, b, lcm = (float(v) for v in params[:3])
    r0_value = float(params[3]) if free_r0 else float(r0)
    return SaturatingFit(
        r0=r0_value,
        a=a,
        b=b,
        c_mid=float(np.exp(lcm)),
        rmse=float(np.sqrt(sse / c.size)),
        n_points=int(c.size),
        r0_fitted=free_r0,
    )


def _bootstrap(
    runs: list[tuple[np.ndarray, np.ndarray]],
    full: SaturatingFit,
    reps: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, str]:
    """Replicates of (A, B, C_mid): over seeds when there are several, else over residuals."""
    out = []
    if len(runs) > 1:
        kind = "seeds"
        for _ in range(reps):
            pick = rng.integers(0, len(runs), size=len(runs))
            c = np.concatenate([runs[i][0] for i in pick])
            y = np.concatenate([runs[i][1] for i in pick])
            try:
                f = fit_saturating(c, y, start=full)  # R0 re-estimated from the resampled starts
            except (RuntimeError, ValueError):
                continue
            out.append((f.a, f.b, f.c_mid))
    else:
        kind = "residuals"
        c, y = runs[0]
        pos = c > 0
        fitted = full(c[pos])
        resid = y[pos] - fitted
        for _ in range(reps):
            y_star = y.copy()
            y_star[pos] = fitted + rng.choice(resid, size=resid.size, replace=True)
            try:
                f = fit_saturating(c, y_star, r0=None if full.r0_fitted else full.r0, start=full)
            except (RuntimeError, ValueError):
                continue
            out.append((f.a, f.b, f.c_mid))
    return np.asarray(out, float).reshape(-1, 3), kind


def fit_curves(
    points: pd.DataFrame,
    x: str = COMPUTE_FLOPS,
    dataset: str | None = None,
    metric: str = ACCURACY,
    *,
    reps: int = 200,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Saturating fit per (dataset, algorithm) on all eval points of all seeds, with intervals.

    Args:
        points: output of :func:`analysis.eval_points`.
        x: compute column (``compute/flops``, ``compute/rollout_tokens``, ...).
        dataset: one dataset, or None for every dataset present.
        metric: eval metric leaf.
        reps: bootstrap replicates (0: no intervals).

    Returns:
        Columns dataset, algorithm, x, R0, A, A_lo, A_hi, B, B_lo, B_hi, C_mid, C_mid_lo,
        C_mid_hi, rmse, n_runs, n_points, bootstrap ("seeds" | "residuals" | "none"). Pairs whose
        fit fails (too few points) are left out and logged.
    """
    if x not in points.columns or metric not in points.columns:
        raise ValueError(f"eval points need columns {x!r} and {metric!r}")
    datasets = [dataset] if dataset is not None else order_datasets(points["dataset"].unique())
    rng = np.random.default_rng(seed)
    alpha = (1.0 - confidence) / 2.0
    rows = []
    for ds in datasets:
        pts = points[points["dataset"] == ds]
        for algo in order_algorithms(pts["algorithm"].dropna().unique()):
            sub = pts[pts["algorithm"] == algo]
            runs = [
                (g[x].to_numpy(float), g[metric].to_numpy(float))
                for _, g in sub.groupby("run_id", sort=True)
            ]
            c_all = np.concatenate([r[0] for r in runs])
            y_all = np.concatenate([r[1] for r in runs])
            try:
                full = fit_saturating(c_all, y_all)
            except (RuntimeError, ValueError) as err:
                logger.info("no saturating fit for %s on %s: %s", algo, ds, err)
                continue
            row = {
                "dataset": ds,
                "algorithm": algo,
                "x": x,
                "R0": full.r0,
                "A": full.a,
                "B": full.b,
                "C_mid": full.c_mid,
                "rmse": full.rmse,
                "n_runs": len(runs),
                "n_points": full.n_points,
                "bootstrap": "none",
            }
            for name in ("A", "B", "C_mid"):
                row[f"{name}_lo"] = row[f"{name}_hi"] = float("nan")
            if reps > 0:
                boot, kind = _bootstrap(runs, full, reps, rng)
                if len(boot):
                    lo, hi = np.percentile(boot, [100 * alpha, 100 * (1 - alpha)], axis=0)
                    for j, name in enumerate(("A", "B", "C_mid")):
                        row[f"{name}_lo"], row[f"{name}_hi"] = float(lo[j]), float(hi[j])
                    row["bootstrap"] = kind
            rows.append(row)
    columns = [
        "dataset",
        "algorithm",
        "x",
        "R0",
        "A",
        "A_lo",
        "A_hi",
        "B",
        "B_lo",
        "B_hi",
        "C_mid",
        "C_mid_lo",
        "C_mid_hi",
        "rmse",
        "n_runs",
        "n_points",
        "bootstrap",
    ]
    return pd.DataFrame(rows, columns=columns)
