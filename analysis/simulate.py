"""Simulated claims suites with a known truth, to measure the protocol's coverage and power.

A suite follows the shipped claims design: ``n_starts`` independent warm starts, ``n_seeds`` RL
seeds per start, two algorithms a and b, difficulty groups at ``horizons`` with ``items`` eval
items each (the same items for every run and every start), evals at ``evals`` evenly spaced
budget fractions, greedy 0/1 scores.

The score of item i of group g for a run of algorithm x at budget fraction t is Bernoulli with

    logit p = q_i + u_s + gain * (prog(t / speed_x) - 1) + prog(t) * (effect_x,s,g + c_x,i + e_x,s,r)

* q_i: the item's difficulty, normal around a group mean falling linearly from ``easy`` (the
  shortest horizon) to ``hard`` (the longest), sd ``difficulty_sd``;
* u_s: the start's offset, shared by both algorithms (the pairing removes it), sd ``offset_sd``;
* prog(t) = (1 - exp(-3 t)) / (1 - exp(-3)): the learning curve, 1 at the budget; ``speed`` is
  a's time scale relative to b's (below 1, a learns faster: claim (b));
* effect_a,s,g = shift + slope * (h_g - mean h) + z_s * (start_sd + start_slope_sd * (h_g -
  mean h)), effect_b = 0: a's advantage, with a per-start part z_s of mean 0 and variance 1,
  normal (``start_dist="normal"``), skewed (``"gamma"``: a centred gamma of shape 2, skewness
  1.4) or heavily skewed (``"lognormal"``: a centred lognormal with sigma 1, skewness 6.2);
* c_x,i: an algorithm-by-item effect, sd ``alg_item_sd``, shared by every start;
* e_x,s,r: the run's RL-seed noise, sd ``seed_sd``.

The truth of each estimand is its expectation over starts, items and seeds
(:func:`true_effect`): the start effect is integrated on a grid of its quantiles and the rest by
Monte Carlo with common random numbers (error about 1e-4 on the accuracy scale).
:func:`null_design` moves ``shift`` (final difference, area difference) or ``slope`` (horizon
slope) so that the truth is 0.

:func:`critic_gate_pass_rates` simulates the critic gate (:mod:`analysis.claims.gates`): per start a
true level of the critic's statistic (normal around ``level``, sd ``start_sd``), per eval of the
second half of the run that level plus eval-to-eval noise (sd ``eval_sd``); the old rule reads
the last eval of every start against the threshold ("min of S"), the new one the one-sided 95%
lower bound over starts of each start's late-eval mean. ``python -m analysis.simulate gates``
prints the table in docs/statistics.md (:func:`critic_gate_table`).

``python -m analysis.simulate`` prints the area difference's table in docs/statistics.md:
coverage and null rejection at 3, 5 and 10 starts, and its power beside the compute ratio's
where a reaches b's final accuracy twice as fast.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy import optimize, stats

from .claims.protocol import (
    ITEM_COLUMNS,
    Intervals,
    area_intervals,
    linear_intervals,
    ratio_intervals,
    reached_level,
)

__all__ = [
    "START_DISTS",
    "CriticDesign",
    "Design",
    "SimulationResult",
    "area_table",
    "critic_gate_pass_rates",
    "critic_gate_table",
    "draw_start",
    "evaluate",
    "null_design",
    "simulate_items",
    "true_effect",
]

START_DISTS = ("normal", "gamma", "lognormal")
_LINEAR = ("horizon_slope", "final_difference")
#: Estimands with a truth from :func:`true_effect`.
_TRUTHS = (*_LINEAR, "area_difference")


@dataclass(frozen=True)
class Design:
    """A simulated claims suite (module docstring for the model)."""

    n_starts: int = 5
    n_seeds: int = 1
    horizons: tuple[float, ...] = (3.0, 4.0, 5.0, 6.0, 7.0, 8.0)
    items: int = 57
    evals: int = 8
    shift: float = 0.0
    slope: float = 0.0
    speed: float = 1.0
    start_sd: float = 0.4
    start_slope_sd: float = 0.08
    start_dist: str = "normal"
    offset_sd: float = 0.5
    easy: float = 1.5
    hard: float = -1.5
    difficulty_sd: float = 1.2
    alg_item_sd: float = 0.3
    seed_sd: float = 0.25
    gain: float = 1.5
    compute_per_eval: float = 1000.0

    def __post_init__(self) -> None:
        if self.start_dist not in START_DISTS:
            raise ValueError(
                f"start_dist must be one of {list(START_DISTS)}, got {self.start_dist!r}"
            )
        for name in ("n_starts", "n_seeds", "items", "evals"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if len(self.horizons) < 2:
            raise ValueError(f"horizons needs two or more groups, got {self.horizons}")
        if self.speed <= 0:
            raise ValueError(f"speed must be > 0, got {self.speed}")


def _standard(dist: str, u: np.ndarray) -> np.ndarray:
    """The start-effect distribution's quantiles at u, standardised to mean 0, variance 1."""
    if dist == "normal":
        return stats.norm.ppf(u)
    if dist == "gamma":
        k = 2.0
        return (stats.gamma.ppf(u, k) - k) / np.sqrt(k)
    s2 = 1.0  # lognormal, sigma 1
    mean, var = np.exp(s2 / 2), (np.exp(s2) - 1) * np.exp(s2)
    return (stats.lognorm.ppf(u, np.sqrt(s2)) - mean) / np.sqrt(var)


def draw_start(dist: str, rng: np.random.Generator, size: int | tuple[int, ...]) -> np.ndarray:
    """Start effects of mean 0 and variance 1 from the named distribution (normal, gamma,
    lognormal): the skew a simulated design gives its starts; the leaderboard's simulation
    (:mod:`analysis.board_coverage`) draws its starts the same way."""
    return _standard(dist, rng.random(size))


def _prog(t: np.ndarray) -> np.ndarray:
    return (1 - np.exp(-3 * t)) / (1 - np.exp(-3))


def _centred(design: Design) -> np.ndarray:
    h = np.asarray(design.horizons, float)
    return h - h.mean()


def _group_means(design: Design) -> np.ndarray:
    return np.linspace(design.easy, design.hard, len(design.horizons))


def _final_logits(design: Design, z: np.ndarray, q: np.ndarray, u, c, e) -> tuple:
    """Final-eval logits of a and b. z: (..., S, 1, 1, 1) start effects; q: item difficulties
    (..., 1, 1, G, I); u: start offsets; c: (2, ..., G, I) item effects; e: (2, ...) seed noise."""
    dh = _centred(design)[:, None]
    effect = design.shift + design.slope * dh + z * (design.start_sd + design.start_slope_sd * dh)
    base = q + u
    la = base + design.gain * (_prog(1 / design.speed) - 1) + effect + c[0] + e[0]
    lb = base + c[1] + e[1]
    return la, lb


@functools.lru_cache(maxsize=64)
def true_effect(design: Design, estimand: str, scale: str = "accuracy") -> float:
    """The estimand's expectation over starts, items and seeds under ``design``.

    ``horizon_slope`` / ``final_difference`` (accuracy scale; ``scale="logit"`` for the slope
    of the groups' logit accuracies at their expected accuracies); ``area_difference``: the
    expected difference of the trapezoid mean accuracy over the evals. Deterministic: the start
    effect on 200 quantile midpoints, the rest on 4,000 common random draws per group.
    """
    if estimand not in _TRUTHS:
        raise ValueError(f"true_effect knows {list(_TRUTHS)}, got {estimand!r}")
    if estimand == "area_difference":
        return _area_truth(design)
    rng = np.random.default_rng(12345)
    g = len(design.horizons)
    m = 4000
    z = _standard(design.start_dist, (np.arange(200) + 0.5) / 200)[:, None, None]  # (Z, 1, 1)
    q = _group_means(design)[:, None] + design.difficulty_sd * rng.standard_normal((g, m))
    u = design.offset_sd * rng.standard_normal((g, m))
    c = design.alg_item_sd * rng.standard_normal((2, g, m))
    e = design.seed_sd * rng.standard_normal((2, g, m))
    la, lb = _final_logits(design, z, q, u, c, e)  # (Z, G, M)
    pa = (1 / (1 + np.exp(-la))).mean(axis=(0, 2))
    pb = (1 / (1 + np.exp(-lb))).mean(axis=-1)  # b has no start effect: (G, M)
    if scale == "logit":
        d = np.log(pa / (1 - pa)) - np.log(pb / (1 - pb))
    else:
        d = pa - pb
    if estimand == "final_difference":
        return float(d.mean())
    dh = _centred(design)
    return float((dh * d).sum() / (dh * dh).sum())


def _area_truth(design: Design) -> float:
    """The expected area difference: per eval, the expected accuracy of a minus b (as in
    :func:`true_effect`, on the learning curves of :func:`_simulate`), weighted by the trapezoid
    weights of the evals' budget fractions."""
    from .claims.protocol import trapezoid_weights

    rng = np.random.default_rng(12345)
    g, m = len(design.horizons), 4000
    z = _standard(design.start_dist, (np.arange(200) + 0.5) / 200)[:, None, None]  # (Z, 1, 1)
    q = _group_means(design)[:, None] + design.difficulty_sd * rng.standard_normal((g, m))
    u = design.offset_sd * rng.standard_normal((g, m))
    c = design.alg_item_sd * rng.standard_normal((2, g, m))
    e = design.seed_sd * rng.standard_normal((2, g, m))
    dh = _centred(design)[:, None]
    effect = design.shift + design.slope * dh + z * (design.start_sd + design.start_slope_sd * dh)
    fractions = np.arange(1, design.evals + 1) / design.evals
    diff = []
    for t in fractions:
        grow = _prog(t)
        la = q + u + design.gain * (_prog(t / design.speed) - 1) + grow * (effect + c[0] + e[0])
        lb = q + u + design.gain * (_prog(t) - 1) + grow * (c[1] + e[1])
        diff.append(float((1 / (1 + np.exp(-la))).mean() - (1 / (1 + np.exp(-lb))).mean()))
    return float((trapezoid_weights(fractions) * np.asarray(diff)).sum())


def null_design(design: Design, estimand: str) -> Design:
    """``design`` with ``shift`` (final_difference, area_difference) or ``slope``
    (horizon_slope) moved so that the estimand's truth is 0 (the other left as given)."""
    field = "slope" if estimand == "horizon_slope" else "shift"

    def truth(v: float) -> float:
        return true_effect(replace(design, **{field: float(v)}), estimand)

    root = optimize.brentq(truth, -3.0, 3.0, xtol=1e-6)
    return replace(design, **{field: float(root)})


def _simulate(design: Design, n_suites: int, rng: np.random.Generator, curves: bool):
    """Scores of a and b: (B, S, R, G, I) at the final eval, or (B, S, R, G, I, E) with
    ``curves``, and the evals' budget fractions."""
    b, s, r, g, i = n_suites, design.n_starts, design.n_seeds, len(design.horizons), design.items
    z = draw_start(design.start_dist, rng, (b, s, 1, 1, 1))
    u = design.offset_sd * rng.standard_normal((b, s, 1, 1, 1))
    q = _group_means(design)[:, None] + design.difficulty_sd * rng.standard_normal((b, 1, 1, g, i))
    c = design.alg_item_sd * rng.standard_normal((2, b, 1, 1, g, i))
    e = design.seed_sd * rng.standard_normal((2, b, s, r, 1, 1))
    fractions = np.arange(1, design.evals + 1) / design.evals
    dh = _centred(design)[:, None]
    effect = design.shift + design.slope * dh + z * (design.start_sd + design.start_slope_sd * dh)
    if not curves:
        la, lb = _final_logits(design, z, q, u, c, e)
        pa, pb = 1 / (1 + np.exp(-la)), 1 / (1 + np.exp(-lb))
        return (
            (rng.random(pa.shape) < pa).astype(float),
            (rng.random(pb.shape) < pb).astype(float),
            fractions,
        )
    t = fractions
    base = (q + u)[..., None]
    grow = _prog(t)
    la = (
        base
        + design.gain * (_prog(t / design.speed) - 1)
        + grow * (effect + c[0] + e[0])[..., None]
    )
    lb = base + design.gain * (_prog(t) - 1) + grow * (c[1] + e[1])[..., None]
    pa, pb = 1 / (1 + np.exp(-la)), 1 / (1 + np.exp(-lb))
    ya = (rng.random(pa.shape) < pa).astype(float)
    yb = (rng.random(pb.shape) < pb).astype(float)
    return ya, yb, fractions


def _folds(design: Design, folds: int) -> tuple[np.ndarray, int]:
    k = min(folds, design.items)
    return np.arange(design.items) % k, k


def _fold_sum(y: np.ndarray, fold: np.ndarray, k: int) -> np.ndarray:
    """Sum over the item axis (last) into k folds: (..., I) -> (..., K)."""
    out = np.zeros(y.shape[:-1] + (k,))
    for j in range(k):
        out[..., j] = y[..., fold == j].sum(axis=-1)
    return out


@dataclass(frozen=True)
class SimulationResult:
    """Coverage, rejection rate and width of one estimand's interval over simulated suites.

    ``coverage``: the share of intervals that hold the truth; ``rejection``: the share that
    exclude no effect (0, or a ratio of 1): the null rejection rate when ``truth`` is 0 (or the
    ratio 1), else the power; ``width``: the median width (a ratio's on the log scale).
    """

    estimand: str
    design: Design
    n_suites: int
    truth: float
    coverage: float
    rejection: float
    width: float
    confidence: float


def evaluate(
    design: Design,
    estimand: str,
    n_suites: int = 400,
    *,
    seed: int = 0,
    confidence: float = 0.95,
    folds: int = 20,
    truth: float | None = None,
    method: str = "t",
    reps: int = 1000,
) -> tuple[SimulationResult, Intervals]:
    """Simulate ``n_suites`` suites of ``design`` and run the protocol's interval on each.

    ``truth``: the estimand's true value (default :func:`true_effect`; for ``compute_ratio``
    give it, e.g. 1 for a design where a and b are the same algorithm). ``folds=1`` drops the
    shared-item variance (a t interval over starts alone); ``method``/``reps``: the linear
    estimands' interval (:func:`analysis.claims.protocol.linear_intervals`). ``area_difference`` and
    ``compute_ratio`` simulate whole learning curves (every eval).
    """
    rng = np.random.default_rng(seed)
    fold, k = _folds(design, folds)
    if estimand in _LINEAR:
        ya, yb, _ = _simulate(design, n_suites, rng, curves=False)  # (B, S, R, G, I)
        sa = _fold_sum(ya.mean(axis=2), fold, k)  # (B, S, G, K)
        sb = _fold_sum(yb.mean(axis=2), fold, k)
        n = _fold_sum(np.ones_like(ya[:, :, 0]), fold, k)
        h = np.asarray(design.horizons) if estimand == "horizon_slope" else None
        est = linear_intervals(
            sa, sb, n, h, confidence=confidence, method=method, reps=reps, seed=seed + 1
        )
        if truth is None:
            truth = true_effect(design, estimand)
        null = 0.0
        width = np.median(est.hi - est.lo)
    elif estimand in ("compute_ratio", "area_difference"):
        if truth is None and estimand == "compute_ratio":
            raise ValueError("compute_ratio has no closed-form truth: pass truth=")
        s, n, x, fractions = _curve_sums(design, n_suites, rng, fold, k)
        if estimand == "compute_ratio":
            est = ratio_intervals(s, n, x, fractions, confidence=confidence)
            null = 1.0
            with np.errstate(divide="ignore"):
                width = np.median(np.log(est.hi) - np.log(est.lo))
        else:
            est = area_intervals(s, n, x, confidence=confidence)
            truth = true_effect(design, estimand) if truth is None else truth
            null = 0.0
            width = np.median(est.hi - est.lo)
    else:
        raise ValueError(f"estimand must be one of {[*_TRUTHS, 'compute_ratio']}, got {estimand!r}")
    covered = (est.lo <= truth) & (truth <= est.hi)
    rejected = (est.lo > null) | (est.hi < null)
    result = SimulationResult(
        estimand=estimand,
        design=design,
        n_suites=n_suites,
        truth=float(truth),
        coverage=float(covered.mean()),
        rejection=float(rejected.mean()),
        width=float(width),
        confidence=confidence,
    )
    return result, est


def _curve_sums(design: Design, n_suites: int, rng: np.random.Generator, fold, k: int):
    """Whole learning curves as item-fold sums: s, n (B, S, R, 2, G, E, K), the compute x
    (B, S, R, 2, E) and the evals' budget fractions."""
    ya, yb, fractions = _simulate(design, n_suites, rng, curves=True)  # (B, S, R, G, I, E)
    y = np.stack([ya, yb], axis=3)  # (B, S, R, 2, G, I, E)
    s = _fold_sum(np.swapaxes(y, -1, -2), fold, k)  # (B, S, R, 2, G, E, K)
    n = np.broadcast_to(_fold_sum(np.ones(design.items), fold, k), s.shape)
    x = np.broadcast_to(
        fractions * design.compute_per_eval * design.evals, s.shape[:4] + (design.evals,)
    )
    return s, n, x, fractions


def area_table(suites: int = 2000, ratio_suites: int = 1000, seed: int = 0) -> list[str]:
    """The area difference's coverage, null rejection and power, as Markdown table lines.

    Per start-effect design (``normal``, ``gamma``, ``lognormal`` and ``items``, as
    ``scripts/coverage_table.py``) and 3, 5 and 10 starts: coverage and rejection rate of the
    protocol's interval at a design whose truth is 0 (:func:`null_design`), and at one where a
    learns twice as fast (``speed=0.5``) and ends level with b (``shift`` moved so that the
    final difference's truth is 0): the area's power there, its truth, and the compute ratio's
    rejection rate on ``ratio_suites`` suites of the same design (two-sided, as Holm reads it).
    """
    designs = {
        "normal": Design(start_dist="normal"),
        "gamma": Design(start_dist="gamma"),
        "lognormal": Design(start_dist="lognormal"),
        "items": Design(start_sd=0.1, start_slope_sd=0.02, alg_item_sd=0.8),
    }
    lines = [
        "| design | starts | coverage (null) | null rejection | printed level | coverage "
        "(twice as fast) | power of the area (truth) | power of the compute ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, base in designs.items():
        for j, n_starts in enumerate((3, 5, 10)):
            design = replace(base, n_starts=n_starts)
            null = null_design(design, "area_difference")
            fast = null_design(replace(design, speed=0.5), "final_difference")
            cell = seed + 1000 * j + 7
            t_null, _ = evaluate(null, "area_difference", suites, seed=cell)
            t_fast, _ = evaluate(fast, "area_difference", suites, seed=cell + 1)
            ratio, _ = evaluate(fast, "compute_ratio", ratio_suites, seed=cell + 1, truth=0.5)
            level = reached_level(n_starts, 0.95, "area_difference")
            lines.append(
                f"| {name} | {n_starts} | {t_null.coverage:.3f} | {t_null.rejection:.3f} | "
                f"{level:.2f} | {t_fast.coverage:.3f} | {t_fast.rejection:.3f} "
                f"({t_fast.truth:+.3f}) | {ratio.rejection:.3f} |"
            )
    return lines


@dataclass(frozen=True)
class CriticDesign:
    """A critic's gate statistic over starts (module docstring): the true mean over starts,
    the spread of the per-start level, the eval-to-eval noise and how many evals fall in the
    second half of a run (the last eval among them)."""

    level: float
    start_sd: float = 0.0
    eval_sd: float = 0.05
    late_evals: int = 1

    def __post_init__(self) -> None:
        if self.late_evals < 1:
            raise ValueError(f"late_evals must be >= 1, got {self.late_evals}")
        if self.start_sd < 0 or self.eval_sd < 0:
            raise ValueError(f"sds must be >= 0, got {self.start_sd}, {self.eval_sd}")


def critic_gate_pass_rates(
    design: CriticDesign, n_starts: int, threshold: float, n: int = 4000, seed: int = 0
) -> dict[str, float]:
    """How often each rule passes a critic of ``design`` over ``n_starts`` starts, in ``n``
    simulated suites: ``"min"``, every start's last eval at least ``threshold`` (the old gate);
    ``"bound"``, the one-sided 95% lower bound over starts of the late-eval means at least
    ``threshold`` (:func:`analysis.claims.gates.lower_bound`, the gate the claims read)."""
    from .claims.gates import lower_bound

    rng = np.random.default_rng(seed)
    level = design.level + design.start_sd * rng.standard_normal((n, n_starts))
    x = level[..., None] + design.eval_sd * rng.standard_normal((n, n_starts, design.late_evals))
    old = (x[..., -1].min(axis=-1) >= threshold).mean()
    new = (lower_bound(x.mean(axis=-1)) >= threshold).mean()
    return {"min": float(old), "bound": float(new)}


def gate_designs() -> tuple[tuple[str, CriticDesign, float], ...]:
    """The designs of docs/statistics.md's gate table: (label, design, threshold). The first
    three are the case the old EV gate was audited on (held-out EV 0.15 on every start against
    0.1, eval noise 0.05 and 0.07). Then learning critics on the prompt-level Pearson, at the
    levels and start spreads the claims suites measured (their mean 0.39-0.72, sd over starts
    0.12-0.21). Last, the inert critic at the calibrated threshold (the worst case the
    calibration allows) and at its measured mean and spread. Threshold, mean and spread are
    read from :mod:`analysis.claims.gates`, so the table follows a recalibration."""
    from .claims.gates import CRITIC_PEARSON_MIN as T
    from .claims.gates import INERT_CRITIC_PEARSON

    inert = np.asarray(INERT_CRITIC_PEARSON, float)
    mean, sd = round(float(inert.mean()), 3), round(float(inert.std(ddof=1)), 3)
    return (
        ("EV 0.15 every start, noise 0.05 (vs 0.1)", CriticDesign(0.15, 0.0, 0.05), 0.1),
        ("EV 0.15 every start, noise 0.07 (vs 0.1)", CriticDesign(0.15, 0.0, 0.07), 0.1),
        ("EV 0.15, noise 0.07, 3 late evals (vs 0.1)", CriticDesign(0.15, 0.0, 0.07, 3), 0.1),
        ("learning: Pearson 0.45, start sd 0.15", CriticDesign(0.45, 0.15, 0.05), T),
        ("learning: Pearson 0.60, start sd 0.15", CriticDesign(0.60, 0.15, 0.05), T),
        (f"inert at the threshold: {T:.3f}, sd {sd:.3f}", CriticDesign(T, sd, 0.05), T),
        (f"inert as measured: {mean:.3f}, sd {sd:.3f}", CriticDesign(mean, sd, 0.05), T),
    )


def critic_gate_table(n: int = 4000, seed: int = 0) -> list[str]:
    """docs/statistics.md's gate table: each design's pass rate under "min of S" and under the
    lower bound, at 3, 5 and 10 starts (``n`` suites a cell)."""
    lines = [
        "| critic (threshold) | min of 3 | bound, 3 | min of 5 | bound, 5 | min of 10 | bound, 10 |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, (label, design, threshold) in enumerate(gate_designs()):
        cells = []
        for j, starts in enumerate((3, 5, 10)):
            r = critic_gate_pass_rates(design, starts, threshold, n, seed + 100 * i + j)
            cells += [f"{r['min']:.3f}", f"{r['bound']:.3f}"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def simulate_items(design: Design, seed: int = 0, a: str = "sppo", b: str = "grpo") -> pd.DataFrame:
    """One simulated suite as an item table (:data:`analysis.claims.protocol.ITEM_COLUMNS`), every
    eval of every run; datasets ``sim_h<h>`` with their horizons; compute = budget fraction x
    ``compute_per_eval`` x ``evals``; start ids ``start<k>``, seeds unique across starts."""
    rng = np.random.default_rng(seed)
    ya, yb, fractions = _simulate(design, 1, rng, curves=True)
    s, r, g, i, e = ya.shape[1:]
    frames = []
    for algo, y in ((a, ya[0]), (b, yb[0])):
        si, ri, gi, ii, ei = np.meshgrid(*map(np.arange, (s, r, g, i, e)), indexing="ij")
        h = np.asarray(design.horizons, float)[gi.ravel()]
        frames.append(
            pd.DataFrame(
                {
                    "start": [f"start{k}" for k in si.ravel()],
                    "seed": (si * r + ri).ravel(),
                    "algorithm": algo,
                    "dataset": [f"sim_h{v:g}" for v in h],
                    "horizon": h,
                    "item": [f"q{k}" for k in ii.ravel()],
                    "budget_fraction": fractions[ei.ravel()],
                    "compute": fractions[ei.ravel()] * design.compute_per_eval * design.evals,
                    "correct": y.ravel(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)[list(ITEM_COLUMNS)]


if __name__ == "__main__":  # python -m analysis.simulate [suites] [ratio_suites] | gates [n]
    import sys
    import time

    t0 = time.time()
    if sys.argv[1:2] == ["gates"]:
        n = int(sys.argv[2]) if len(sys.argv) > 2 else 4000
        for line in critic_gate_table(n):
            sys.stdout.write(line + "\n")
        sys.stdout.write(f"\n{n} suites a cell; {time.time() - t0:.0f} s.\n")
        sys.exit(0)
    args = [int(v) for v in sys.argv[1:3]]
    for line in area_table(*args):
        sys.stdout.write(line + "\n")
    sys.stdout.write(f"\n{args or [2000, 1000]} suites; {time.time() - t0:.0f} s.\n")
