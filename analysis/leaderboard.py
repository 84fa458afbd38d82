"""The leaderboard: every algorithm of a suite at equal compute, over independent starts.

One row per algorithm, read from the eval points of one task: final accuracy, its interquartile
mean, the normalised area under the accuracy-versus-compute curve (the mean accuracy over the
budget: it rewards reaching an accuracy early, and is never censored), a rank with its interval,
the probability of improving on a reference, and what each costs (FLOPs, of which the critic's,
wall time per run and peak memory), so an algorithm that buys accuracy with critic compute shows
it. The unit of replication is the warm start (DESIGN §8): each algorithm's value at a start is
the mean over its RL seeds there, and every interval is over starts, paired by start where it
compares algorithms. Each interval is the one whose coverage held in simulation
(:mod:`analysis.board_coverage`, results/simulation/leaderboard_coverage.json):

* final and area: the studentized bootstrap over starts from 8 starts on, Student's t below
  (where the bootstrap-t has too few distinct resamples), cut to [0, 1]. Per-start accuracies
  near the ceiling or over skewed starts are skewed, and over 10 starts both Student's t and the
  percentile bootstrap this table printed before fall short of their level there.
* IQM: the percentile bootstrap over starts (a trimmed mean has no simple standard error); the
  page prints the coverage it reached.
* rank: the set of ranks compatible with simultaneous paired t intervals of every difference
  with the others (Bonferroni over them), as in Mogstad, Romano, Shaikh and Wilhelm (2024):
  it covers the true rank, 1 + the number of algorithms truly better, at least 95% whenever
  the paired intervals do, where a bootstrap of ranks undercovers near ties.
* P(> reference): Clopper–Pearson over the starts (exact for a share of independent starts; a
  tie counts half); a percentile bootstrap of a share of 10 starts collapses to a point at 10/10.

Two registered algorithms are controls, labelled as such: ``ppo_inert_critic`` (PPO whose critic
does not learn: REINFORCE with whitened returns) and ``spo`` (no learnt critic: a per-prompt Beta
tracker of success).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from scipy import stats

from analysis.metrics import (
    COMPUTE_FLOPS,
    COMPUTE_WALL_S,
    MEMORY_PEAK_BYTES,
    flops_phase,
)

from ._common import ACCURACY, BUDGET_FRACTION, algorithm_colors, order_algorithms

__all__ = [
    "CONTROLS",
    "LEADERBOARD_INTERVAL",
    "MIN_STUDENTIZED_STARTS",
    "board_intervals",
    "bootstrap_intervals",
    "improvement_interval",
    "rank_sets",
    "studentized_interval",
    "t_interval",
    "format_leaderboard",
    "leaderboard_datasets",
    "leaderboard_table",
    "per_start_scores",
    "plot_performance_profile",
    "run_scores",
    "same_scores",
]

#: What the control algorithms are, printed beside their rows.
CONTROLS: dict[str, str] = {
    "ppo_inert_critic": "control: PPO whose critic does not learn (REINFORCE, whitened returns)",
    "spo": "control: no learnt critic (a per-prompt Beta tracker of success)",
}
#: How the leaderboard's intervals are made, printed with the table.
LEADERBOARD_INTERVAL = (
    "95% intervals over starts: final and area a studentized bootstrap (Student's t below 8 "
    "starts), IQM a percentile "
    "bootstrap, rank the set compatible with simultaneous paired t intervals (Bonferroni), "
    "P(> ref) Clopper–Pearson"
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


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silences numpy's warnings on all-NaN rows (an algorithm a start lacks): NaN is the
    answer there."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


Interval = tuple[np.ndarray, np.ndarray, np.ndarray]


def t_interval(values: np.ndarray, level: float = 0.95) -> Interval:
    """Each row's mean over its starts (NaN: the start lacks it) with Student's t interval;
    NaN bounds below two starts."""
    n = (~np.isnan(values)).sum(axis=1)
    with _quiet():
        mean = np.nanmean(values, axis=1)
        half = stats.t.ppf(0.5 + level / 2, n - 1) * np.nanstd(values, axis=1, ddof=1) / np.sqrt(n)
    half = np.where(n >= 2, half, np.nan)
    return mean, mean - half, mean + half


#: Fewest starts the studentized bootstrap is used over; below, Student's t. Over 2 starts every
#: resample with spread has the mean's own mean (t* = 0: an interval of width 0), and over 5
#: the resampled standard errors are too often near 0 (its width reaches 7-20 times Student's
#: in 1% of simulated boards, :mod:`analysis.board_coverage`).
MIN_STUDENTIZED_STARTS = 8


def studentized_interval(
    values: np.ndarray,
    reps: int,
    rng: np.random.Generator,
    level: float = 0.95,
    bounds: tuple[float, float] = (0.0, 1.0),
    min_starts: int = MIN_STUDENTIZED_STARTS,
) -> Interval:
    """Each row's mean over its starts with the studentized (bootstrap-t) interval: the
    quantiles of (resampled mean - mean) / resampled standard error, each row resampling its
    own starts. Rows over as many starts share one draw of start indices (over complete rows,
    the starts resampled jointly, as the IQM's bootstrap does), so two rows with the same
    values get the same interval. Per-start accuracies near the ceiling or over skewed starts are skewed, where
    Student's t and the percentile bootstrap both fall short of their level over 10 starts; the
    studentized bootstrap corrects for the skew to second order (coverage:
    :mod:`analysis.board_coverage`). A row over fewer than ``min_starts`` starts gets Student's
    t instead (:data:`MIN_STUDENTIZED_STARTS`). Both are cut to ``bounds``, the range the score
    can take (an accuracy's, by default): the truth lies inside, so the cut never costs
    coverage. NaN bounds below two starts; resamples of one repeated value (no spread,
    probability S^(1-S)) are left out."""
    mean, lo, hi = t_interval(values, level)
    tail = (1 - level) / 2
    draws: dict[int, np.ndarray] = {}
    for j in range(values.shape[0]):
        v = values[j][~np.isnan(values[j])]
        if v.size < max(min_starts, 2):
            continue
        se = v.std(ddof=1) / np.sqrt(v.size)
        if v.size not in draws:
            draws[v.size] = rng.integers(0, v.size, size=(reps, v.size))
        boot = v[draws[v.size]]
        boot_se = boot.std(axis=1, ddof=1) / np.sqrt(v.size)
        spread = boot_se > 0
        t = (boot.mean(axis=1)[spread] - mean[j]) / boot_se[spread]
        if se == 0 or t.size == 0:
            lo[j] = hi[j] = mean[j]
            continue
        q_lo, q_hi = np.quantile(t, [tail, 1 - tail])
        lo[j], hi[j] = mean[j] - q_hi * se, mean[j] - q_lo * se
    return mean, np.clip(lo, *bounds), np.clip(hi, *bounds)


def rank_sets(values: np.ndarray, level: float = 0.95) -> Interval:
    """Each row's rank by mean (1 = best, ties averaged) and the set of ranks compatible with
    simultaneous paired t intervals of its differences with every other row.

    Row j's true rank is 1 + the number of rows with a higher true mean. With every interval
    of mu_k - mu_j (k != j) at level 1 - alpha / (A - 1) (Bonferroni), the set [1 + #{k: the
    interval is above 0}, A - #{k: it is below 0}] holds it with probability at least
    ``level`` (Mogstad, Romano, Shaikh and Wilhelm 2024, marginal rank sets). A pair sharing
    fewer than two starts is left undecided.
    """
    a = values.shape[0]
    with _quiet():
        point = _ranks(np.nanmean(values, axis=1))
        d = values[None, :, :] - values[:, None, :]  # d[j, k, s] = y_k - y_j
        n = (~np.isnan(d)).sum(axis=2)
        mean = np.nanmean(d, axis=2)
        q = stats.t.ppf(1 - (1 - level) / (2 * max(a - 1, 1)), n - 1)
        half = q * np.nanstd(d, axis=2, ddof=1) / np.sqrt(n)
        decided = (n >= 2) & ~np.eye(a, dtype=bool)
        better = decided & (mean - half > 0)
        worse = decided & (mean + half < 0)
    return point, 1.0 + better.sum(axis=1), float(a) - worse.sum(axis=1)


def improvement_interval(values: np.ndarray, reference: int, level: float = 0.95) -> Interval:
    """Each row's share of the starts (shared with the reference row) at which it beats the
    reference, a tie counting half, with the Clopper–Pearson interval (its beta quantiles taken
    at the half-integer count when a tie occurs); the reference's own row is NaN."""
    both = ~np.isnan(values) & ~np.isnan(values[reference])
    wins = (values > values[reference]) + 0.5 * (values == values[reference])
    k = np.where(both, wins, 0.0).sum(axis=1)
    n = both.sum(axis=1).astype(float)
    alpha = 1 - level
    with _quiet():
        p = k / n
        lo = np.where(k > 0, stats.beta.ppf(alpha / 2, k, n - k + 1), 0.0)
        hi = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
    out = [np.where(n > 0, x, np.nan) for x in (p, lo, hi)]
    for x in out:
        x[reference] = np.nan
    return out[0], out[1], out[2]


def bootstrap_intervals(
    values: np.ndarray, reference: int | None, reps: int, rng: np.random.Generator
) -> dict[str, Interval]:
    """Percentile bootstrap over starts (the same draw for every row) of the mean, the IQM, the
    rank and the share of starts beating the reference: the leaderboard's intervals before their
    coverage was checked, kept for the IQM (which has no simpler interval) and as the
    simulation's comparison."""
    s = values.shape[1]
    draws = rng.integers(0, s, size=(reps, s))  # (R, S)
    boot = values[:, draws]  # (A, R, S)
    with _quiet():
        mean = np.nanmean(boot, axis=2)  # (A, R)
        srt = np.sort(boot, axis=2)  # NaN last
        n = (~np.isnan(boot)).sum(axis=2)
        cut = np.floor(0.25 * n).astype(int)
        pos = np.arange(s)[None, None, :]
        keep = (pos >= cut[..., None]) & (pos < (n - cut)[..., None])
        iqm = np.where(keep, srt, 0.0).sum(axis=2) / keep.sum(axis=2)
        filled = np.where(np.isnan(mean), -np.inf, mean)
        above = (filled[None, :, :] > filled[:, None, :]).sum(axis=1)
        level = (filled[None, :, :] == filled[:, None, :]).sum(axis=1) - 1
        means = np.nanmean(values, axis=1)
        stat = {"mean": mean, "iqm": iqm, "rank": 1.0 + above + 0.5 * level}
        point = {
            "mean": means,
            "iqm": np.array([_iqm(row) for row in values]),
            "rank": _ranks(means),
        }
        if reference is not None:
            ref = boot[reference][None]
            both = ~np.isnan(boot) & ~np.isnan(ref)
            wins = (boot > ref) + 0.5 * (boot == ref)
            stat["p_improve"] = np.where(both, wins, np.nan).sum(axis=2) / both.sum(axis=2)
            point["p_improve"] = improvement_interval(values, reference)[0]
        out = {}
        for name, v in stat.items():
            lo = np.nanpercentile(v, 2.5, axis=1)
            hi = np.nanpercentile(v, 97.5, axis=1)
            if name == "p_improve":
                lo[reference], hi[reference] = np.nan, np.nan
            out[name] = (point[name], lo, hi)
    return out


def board_intervals(
    values: np.ndarray, reference: int | None, reps: int, rng: np.random.Generator
) -> dict[str, Interval]:
    """The leaderboard's estimate and 95% interval of each statistic of per-start scores
    (A algorithms x S starts, NaN where a start lacks one), each by the method whose coverage
    held in simulation (module docstring)."""
    out = {
        "mean": studentized_interval(values, reps, rng),
        "iqm": bootstrap_intervals(values, None, reps, rng)["iqm"],
        "rank": rank_sets(values),
    }
    if reference is not None:
        out["p_improve"] = improvement_interval(values, reference)
    return out


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
        reps: bootstrap replicates of the IQM's interval (resampled starts).
        seed: seeds that bootstrap.

    Returns:
        One row per algorithm: starts, runs, final / iqm / area with ``_lo`` and ``_hi``, rank with
        its interval, ``p_improve`` (P(algorithm > reference) at a start: paired by start, ties
        counted half) with its interval, the mean cost per run (FLOPs, critic FLOPs, wall
        seconds, peak MiB) and a note for the controls and for a row that repeats another's
        scores at every start (:func:`same_scores`).
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
    ref = algos.index(reference) if reference in algos else None
    on_final = board_intervals(final, ref, reps, np.random.default_rng(seed))
    columns = {
        "final": on_final["mean"],
        "iqm": on_final["iqm"],
        "area": studentized_interval(area, reps, np.random.default_rng(seed)),
        "rank": on_final["rank"],
    }
    if ref is not None:
        columns["p_improve"] = on_final["p_improve"]
    table = pd.DataFrame({"algorithm": algos})
    counts = runs.groupby("algorithm").size()
    table["starts"] = [int(grid["final"].loc[a].notna().sum()) for a in algos]
    table["runs"] = [int(counts.get(a, 0)) for a in algos]
    nothing = (np.full(len(algos), np.nan),) * 3
    for name in ("final", "iqm", "area", "rank", "p_improve"):
        point, lo, hi = columns.get(name, nothing)
        table[name], table[f"{name}_lo"], table[f"{name}_hi"] = point, lo, hi
    cost = runs.groupby("algorithm")[list(_COST)].mean()
    for name in _COST:
        table[name] = table["algorithm"].map(cost[name])
    twins = same_scores(grid["final"], grid["area"])
    table["note"] = [
        "; ".join(n for n in (CONTROLS.get(a, ""), twins.get(a, "")) if n) for a in algos
    ]
    return table.sort_values(
        ["final", "algorithm"], ascending=[False, True], kind="stable"
    ).reset_index(drop=True)


def same_scores(final: pd.DataFrame, area: pd.DataFrame) -> dict[str, str]:
    """A note for each algorithm whose final and area equal another's exactly at every start
    (algorithms x starts, NaN where a start lacks one), naming the other.

    Two rows that agree to the last bit at every start are one measurement printed twice: a
    reader should see it on the row rather than take it for two independent results. It happens
    where two objectives are the same update on the testbed (gspo and gmpo while no clip binds).
    """
    notes: dict[str, list[str]] = {}
    names = list(final.index)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            rows = [g.loc[[a, b]].to_numpy(float) for g in (final, area)]
            present = ~np.isnan(rows[0][0])
            if not present.any() or not all(
                np.array_equal(r[0], r[1], equal_nan=True) for r in rows
            ):
                continue
            notes.setdefault(a, []).append(b)
            notes.setdefault(b, []).append(a)
    return {
        a: f"same final and area as {', '.join(others)} at every start"
        for a, others in notes.items()
    }


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
