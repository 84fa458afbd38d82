"""Gates: whether this testbed can separate the algorithms at all, checked before a verdict.

The one implementation of that question: the claims' gates (:func:`evaluate_gates`), the
suite's headroom lines (:mod:`benchmarks.suite.headroom`, through :func:`separation` and
:data:`CEILING`) and a sweep's admissibility (:mod:`sweeps.objective`: its critic screen through
:func:`late_means_per_start` and :func:`critic_gate`, the claims' critic gate on the weakest
start; any other metric through :func:`per_start_means` and :func:`start_gate`) all call this
module.

A comparison at a group every algorithm solves from the start, or where none learns, says
nothing about the algorithms; neither does a claim about credit assignment whose critic never
learnt to predict. The gates a claim gets (:class:`analysis.claims.spec.Claim` declares the first
three):

* ``start_max``: the start's accuracy at the group, the mean over runs of the first eval, at most
  this (room above the start), at the shortest and longest groups the estimand uses;
* ``gain_min``: the best algorithm's mean gain at the group (final eval minus first, over its
  runs), at least this (learning is visible there), at the same groups;
* the critic gate, one per algorithm ``final_min`` names: the critic's prompt-level Pearson
  correlation of its value with the empirical success rate on held-out prompts
  (:data:`PROMPT_PEARSON`: ``critic/first_value_pearson`` for a token critic,
  ``critic/calibration_pearson`` for a prompt critic, the same kind of statistic for both). Per
  run the mean over the second half of the evals that logged it, per start the mean over its
  runs; the gate reads the one-sided 95% lower confidence bound (t over starts) of the mean
  over starts, against :data:`CRITIC_PEARSON_MIN`, the level an inert critic reaches
  (:func:`calibrate_threshold`, docs/statistics.md). The held-out explained variance is printed
  beside a token critic's. The metric and minimum ``final_min`` declares name the critic; the
  statistic and threshold are the protocol's, calibrated, the same for every critic;
* saturation, on every claim: a start is saturated at a group where every compared algorithm
  (the claim's a and b) ends at or above :data:`CEILING`, and fails the check when it is
  saturated at every group the claim uses (no group left where the two could differ). The gate
  fails when more than half the starts fail (the verdict would then measure the ceiling); the
  claim re-estimated without the failing starts is a sensitivity line beside the verdict
  (:func:`unsaturated_starts`), never the verdict.

Why a bound over starts and not the weakest start: the weakest of S noisy values falls as S
grows, so "every start at least t" fails a critic that learns more often the more starts a suite
runs (a critic with held-out EV 0.15 on every start passes "min of 5 >= 0.1" 26-42% of the
time, "min of 10" 7-18%). A lower bound of the mean tightens as starts are added.

A claim with a failing gate reads ``untestable on this testbed: <gate> = <value> (needs
<threshold>)`` instead of a verdict (:func:`untestable`); its p-value counts as 1 in its family.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

from analysis import metrics as M

from .spec import Claim

__all__ = [
    "CEILING",
    "CONFIDENCE",
    "CRITIC_PEARSON_MIN",
    "INERT_CRITIC",
    "INERT_CRITIC_PEARSON",
    "PROMPT_PEARSON",
    "Gate",
    "Separation",
    "calibrate_threshold",
    "claim_datasets",
    "critic_gate",
    "critic_gates",
    "evaluate_gates",
    "gate_datasets",
    "inert_critic_statistics",
    "late_mean",
    "late_means_per_start",
    "lower_bound",
    "per_start_finals",
    "per_start_means",
    "saturation",
    "separation",
    "start_gate",
    "unsaturated_starts",
    "untestable",
]

#: Accuracy at or above which an algorithm has saturated a group: the suite's headroom line
#: ("no algorithm saturates", the best final accuracy below it) and the claims' per-start
#: saturation gate read the same number.
CEILING = 0.95
#: The critic gate's one-sided confidence: the lower bound of the mean over starts.
CONFIDENCE = 0.95

#: The prompt-level Pearson each critic kind logs at an eval (benchmarks/evaluation/
#: calibration.py), keyed by any metric that kind logs: a token critic's value at the first
#: response token (it reads only the prompt) against the prompt's empirical success rate over
#: k samples; a prompt critic's sigmoid(v(x)) against the same rate.
_TOKEN = (M.CRITIC_HELDOUT_EXPLAINED_VAR, M.CRITIC_FIRST_VALUE_PEARSON, M.CRITIC_EXPLAINED_VAR)
_PROMPT = (M.CRITIC_CALIBRATION_PEARSON, M.CRITIC_CALIBRATION_ECE, M.CRITIC_CALIBRATION_BRIER)
PROMPT_PEARSON: dict[str, str] = {
    **dict.fromkeys(_TOKEN, M.CRITIC_FIRST_VALUE_PEARSON),
    **dict.fromkeys(_PROMPT, M.CRITIC_CALIBRATION_PEARSON),
}
#: Printed beside the gate's Pearson (not gated): a token critic's held-out explained variance.
#: A prompt critic logs no explained variance (its calibration ECE and Brier instead).
_BESIDE = {M.CRITIC_FIRST_VALUE_PEARSON: M.CRITIC_HELDOUT_EXPLAINED_VAR}

#: The inert critic's gate statistic (:func:`inert_critic_statistics`: ``ppo_inert_critic``'s
#: late-eval mean of ``critic/first_value_pearson``) on each of ``leaderboard_arith``'s ten
#: independent starts, s10 to s19 in order (results/leaderboard_arith, commit f404b97): suite=
#: claims' task and budget (arith, horizons 1-12, 8,192 samples), the control at its tuned rate.
#: Recalibrated there as docs/statistics.md declared before those starts ran; the first
#: calibration pooled ten runs of two starts (mean 0.180, sd 0.213: 0.303) and understated the
#: spread between starts. tests/analysis/test_gates.py recomputes these from the results sets.
INERT_CRITIC_PEARSON = (
    0.421557, 0.658715, -0.024333, 0.130923, -0.224241,
    0.296450, -0.233980, 0.278361, 0.270024, 0.488687,
)  # fmt: skip


def calibrate_threshold(inert: Sequence[float], confidence: float = CONFIDENCE) -> float:
    """The critic gate's threshold from an inert critic's per-start statistics: the one-sided
    upper confidence bound of their mean (t), to three decimals.

    Why: the gate passes a critic whose lower bound of the mean over starts reaches the
    threshold. An inert critic whose true mean is at or below the threshold then passes at most
    1 - ``confidence`` of the time (5%), and with the threshold at the upper bound of the inert
    critic's measured mean, that holds unless the measurement itself was low by chance (5%).
    """
    v = np.asarray(inert, float)
    v = v[np.isfinite(v)]
    if len(v) < 2:
        raise ValueError(f"calibrating needs two or more inert values, got {len(v)}")
    half = student_t.ppf(confidence, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v))
    return round(float(v.mean() + half), 3)


#: The critic gate's threshold on the prompt-level Pearson, for both critic kinds:
#: ``calibrate_threshold(INERT_CRITIC_PEARSON)`` (mean 0.206, sd 0.296 over 10 starts: 0.378).
CRITIC_PEARSON_MIN = 0.378


@dataclass(frozen=True)
class Gate:
    """One precondition's measured value against its threshold (NaN: not measured, fails)."""

    name: str
    value: float
    threshold: float
    #: ``"<="``, ``"<"`` or ``">="``: how the value must compare with the threshold.
    direction: str
    #: What the value is made of (per-start values, what is printed beside it); may be empty.
    detail: str = ""

    @property
    def passes(self) -> bool:
        if not np.isfinite(self.value):
            return False
        if self.direction == "<=":
            return self.value <= self.threshold
        if self.direction == "<":
            return self.value < self.threshold
        return self.value >= self.threshold

    @property
    def text(self) -> str:
        """``start accuracy at arith_h1 = 0.990 (needs <= 0.8)`` and its detail in brackets."""
        value = f"{self.value:.3f}" if np.isfinite(self.value) else "not measured"
        tail = f" [{self.detail}]" if self.detail else ""
        return f"{self.name} = {value} (needs {self.direction} {self.threshold:g}){tail}"


# --- reading a metric per start ----------------------------------------------------------------


def late_mean(values: Sequence[float]) -> float:
    """The mean of the second half of a run's evals of a metric, in step order (the last
    ceil(n/2): one eval gives itself). Why: one eval at plateau moves by about ±0.05, and the
    early evals are before the critic has had the budget to learn."""
    v = np.asarray(values, float)
    if not len(v):
        return float("nan")
    return float(v[len(v) // 2 :].mean())


def per_start_means(pairs: Iterable[tuple[Hashable, float]]) -> dict[Hashable, float]:
    """Per start, the mean of its runs' values, from (start, value) pairs, one per run: the
    start is the unit of replication, its RL seeds are not."""
    by: dict[Hashable, list[float]] = {}
    for start, value in pairs:
        by.setdefault(start, []).append(float(value))
    return {s: sum(v) / len(v) for s, v in sorted(by.items(), key=lambda kv: str(kv[0]))}


def late_means_per_start(
    runs: Iterable[tuple[Hashable, Sequence[float]]],
) -> dict[Hashable, float]:
    """Per start, the mean over its runs of each run's :func:`late_mean`, from (start, the run's
    values of a metric in step order) pairs, one per run: how the critic gate reads a metric."""
    return per_start_means((start, late_mean(values)) for start, values in runs)


def lower_bound(values: np.ndarray | Sequence[float], confidence: float = CONFIDENCE) -> np.ndarray:
    """The one-sided lower confidence bound of the mean over the last axis (t with n - 1 degrees
    of freedom); NaN with fewer than two values. Batched: the simulation's path too."""
    v = np.asarray(values, float)
    n = v.shape[-1]
    if n < 2:
        return np.full(v.shape[:-1], np.nan)
    half = student_t.ppf(confidence, n - 1) * v.std(axis=-1, ddof=1) / math.sqrt(n)
    return v.mean(axis=-1) - half


def start_gate(
    name: str,
    per_start: Mapping[Hashable, float],
    threshold: float,
    *,
    confidence: float | None = CONFIDENCE,
    beside: str = "",
) -> Gate:
    """A metric read per start, against a minimum.

    ``confidence``: the one-sided lower bound of the mean over starts (the claims' critic gate);
    None: the weakest start (a sweep's admissibility, whose trials have two starts, where a 95%
    bound has t = 6.31 and admits nothing). One start: that start's value, no bound. Starts
    whose value is NaN are left out; none left: not measured.
    """
    vals = {s: float(v) for s, v in per_start.items() if np.isfinite(v)}
    per = ", ".join(f"{s} {v:.3f}" for s, v in vals.items())
    n = len(vals)
    if n == 0:
        return Gate(name, float("nan"), threshold, ">=", beside)
    arr = np.fromiter(vals.values(), float)
    if confidence is None:
        weakest = min(vals, key=vals.__getitem__)
        label = f"{name}, weakest of {n} starts ({weakest})" if n > 1 else name
        return Gate(
            label, float(arr.min()), threshold, ">=", "; ".join(filter(None, [per, beside]))
        )
    if n == 1:
        detail = "; ".join(filter(None, [f"one start ({per}): no bound", beside]))
        return Gate(name, float(arr[0]), threshold, ">=", detail)
    value = float(lower_bound(arr, confidence))
    detail = f"mean {arr.mean():.3f}; per start {per}"
    label = f"{name}, {confidence:.0%} lower bound over {n} starts"
    return Gate(label, value, threshold, ">=", "; ".join(filter(None, [detail, beside])))


def critic_gate(
    name: str,
    per_start: Mapping[Hashable, float],
    *,
    confidence: float | None = CONFIDENCE,
    beside: str = "",
) -> Gate:
    """The critic gate: a critic's prompt-level Pearson (:data:`PROMPT_PEARSON`), per start the
    late-eval mean of each run averaged over the start's runs (:func:`late_means_per_start`),
    against :data:`CRITIC_PEARSON_MIN`, the threshold calibrated on the inert critic.

    ``confidence``: the claims' one-sided lower bound of the mean over starts; None: the weakest
    start, a sweep's screen (:func:`start_gate`: a trial has two starts, where the bound has
    t = 6.31). One statistic and one threshold for every critic, whoever reads it.
    """
    return start_gate(name, per_start, CRITIC_PEARSON_MIN, confidence=confidence, beside=beside)


# --- the datasets a claim uses -----------------------------------------------------------------


def _ordered(items: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(datasets with a horizon, shortest first; whole-task datasets, by name)."""
    h = items.groupby("dataset")["horizon"].first()
    grouped = h[h.notna()].sort_values(kind="stable")
    return list(grouped.index), sorted(h[h.isna()].index)


def claim_datasets(claim: Claim, items: pd.DataFrame) -> list[str]:
    """The datasets a claim's estimand uses in this item table.

    ``all``: every group with a horizon for ``horizon_slope``, the whole task (the datasets
    without a horizon; the groups when none was logged) for the others; ``ends``: the shortest
    and longest groups; a list: the datasets it names that have items (the plan checked them
    against the task).
    """
    grouped, whole = _ordered(items)
    if claim.groups == "ends":
        return [grouped[0], grouped[-1]] if len(grouped) >= 2 else grouped
    if claim.groups == "all":
        return grouped if claim.estimand == "horizon_slope" or not whole else whole
    present = set(grouped) | set(whole)
    return [d for d in claim.groups if d in present]


def gate_datasets(used: Sequence[str], items: pd.DataFrame) -> list[str]:
    """The groups the headroom gates read: the shortest and longest of ``used`` when they have
    horizons, else every dataset used."""
    grouped, _ = _ordered(items[items["dataset"].isin(list(used))])
    if len(grouped) >= 2:
        return [grouped[0], grouped[-1]]
    return list(used)


# --- headroom: room above the start, visible learning, the ceiling -----------------------------


@dataclass(frozen=True)
class Separation:
    """What the headroom checks read from runs' first and last accuracies (NaN: no run).

    Attributes:
        start: the mean over runs of the first accuracy; runs: how many runs.
        best_final, best_final_algorithm: the highest mean final accuracy over an algorithm's
            runs, and whose (ties: the first by name);
        best_gain, best_gain_algorithm: likewise for the mean of final minus first.
    """

    start: float
    runs: int
    best_final: float
    best_final_algorithm: str | None
    best_gain: float
    best_gain_algorithm: str | None


def separation(acc: pd.DataFrame) -> Separation:
    """Headroom from per-run accuracies: columns ``algorithm``, ``first``, ``last``. The suite's
    headroom lines (whole task, finished runs) and the claims' gates (per group) both read it."""
    nan = float("nan")
    if acc.empty:
        return Separation(nan, 0, nan, None, nan, None)
    by = acc.assign(gain=acc["last"] - acc["first"]).groupby("algorithm", sort=True)
    final, gain = by["last"].mean(), by["gain"].mean()
    fa = final.idxmax() if final.notna().any() else None
    ga = gain.idxmax() if gain.notna().any() else None
    return Separation(
        float(acc["first"].mean()),
        len(acc),
        float(final[fa]) if fa is not None else nan,
        None if fa is None else str(fa),
        float(gain[ga]) if ga is not None else nan,
        None if ga is None else str(ga),
    )


def _run_accuracy(items: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """Per run (start, seed, algorithm): accuracy at its first and its last eval."""
    sub = items[items["dataset"] == dataset]
    run = ["start", "seed", "algorithm"]
    acc = sub.groupby([*run, "budget_fraction"])["correct"].mean().reset_index()
    acc = acc.sort_values("budget_fraction", kind="stable").groupby(run)["correct"]
    return pd.DataFrame({"first": acc.first(), "last": acc.last()}).reset_index()


def saturation(claim: Claim, items: pd.DataFrame, ceiling: float = CEILING) -> pd.DataFrame:
    """Per start and group the claim uses: whether every compared algorithm (a and b) ends at or
    above ``ceiling`` there (final eval, mean over the start's RL seeds). Columns ``start``,
    ``dataset``, ``saturated``; a start where a or b has no run is left out."""
    rows = []
    for ds in claim_datasets(claim, items):
        acc = _run_accuracy(items[items["algorithm"].isin([claim.a, claim.b])], ds)
        final = acc.groupby(["start", "algorithm"])["last"].mean().unstack("algorithm")
        if not {claim.a, claim.b} <= set(final.columns):
            continue
        both = final[[claim.a, claim.b]].dropna()
        for start, row in both.iterrows():
            rows.append((start, ds, bool((row >= ceiling).all())))
    return pd.DataFrame(rows, columns=["start", "dataset", "saturated"])


def unsaturated_starts(claim: Claim, items: pd.DataFrame, ceiling: float = CEILING) -> list:
    """The starts that pass the saturation check: not saturated at every group the claim uses.
    The claim re-estimated on these alone is the sensitivity line, never the verdict."""
    sat = saturation(claim, items, ceiling)
    if sat.empty:
        return []
    every = sat.groupby("start")["saturated"].all()
    return sorted(every[~every].index, key=str)


def _saturation_gate(claim: Claim, items: pd.DataFrame) -> Gate | None:
    sat = saturation(claim, items)
    if sat.empty:
        return None
    every = sat.groupby("start")["saturated"].all()
    failing = sorted(every[every].index, key=str)
    n = len(every)
    name = f"starts where {claim.a} and {claim.b} end >= {CEILING:g} on every group used"
    detail = f"{len(failing)} of {n}" + (f": {', '.join(map(str, failing))}" if failing else "")
    return Gate(name, len(failing) / n, 0.5, "<=", detail)


# --- the critics -------------------------------------------------------------------------------


def _late_by_start(
    df: pd.DataFrame, items: pd.DataFrame, algorithm: str, metric: str
) -> pd.DataFrame:
    """Per start, the metric's mean over the second half of each of the algorithm's runs' evals
    (:func:`late_mean`), averaged over the start's runs: columns ``start``, ``value``, ``runs``.
    Runs the item table does not place (no ``run_id``/``start`` columns, or a run without
    items) form one group, ``start`` NaN."""
    rows = df[(df["algorithm"] == algorithm) & (df["metric"] == metric)].dropna(subset=["value"])
    cols = ["start", "value", "runs"]
    if rows.empty:
        return pd.DataFrame(columns=cols)
    ordered = rows.sort_values("step", kind="stable").groupby("run_id")["value"]
    frame = ordered.agg(lambda v: late_mean(v.to_numpy())).rename("value").to_frame()
    if {"run_id", "start"} <= set(items.columns):
        start_of = items.drop_duplicates("run_id").set_index("run_id")["start"]
        frame["start"] = start_of.reindex(frame.index).to_numpy()
    else:
        frame["start"] = np.nan
    g = frame.groupby("start", dropna=False)["value"]
    out = pd.DataFrame({"value": g.mean(), "runs": g.size()}).reset_index()
    return out.sort_values("start", kind="stable", key=lambda s: s.astype(str)).reset_index(
        drop=True
    )[cols]


#: The control whose critic gives the critic gate its threshold: PPO with a zero value head and a
#: critic learning rate below the actor's, a critic not meant to learn.
INERT_CRITIC = "ppo_inert_critic"


def inert_critic_statistics(items: pd.DataFrame, df: pd.DataFrame) -> dict[str, float]:
    """The inert critic's gate statistic start by start: the statistic the critic gate reads
    (the late-eval mean of ``critic/first_value_pearson``, averaged over a start's runs), on the
    control. :func:`calibrate_threshold` turns it into the threshold, so the threshold and the
    gate read the same number the same way. Starts the item table does not place are left out.
    """
    per = _late_by_start(df, items, INERT_CRITIC, M.CRITIC_FIRST_VALUE_PEARSON)
    return {str(r.start): float(r.value) for r in per.dropna(subset=["start"]).itertuples()}


def _critics(claim: Claim) -> dict[str, str]:
    """algorithm -> the prompt-level Pearson its critic is gated on, from ``final_min``."""
    out: dict[str, str] = {}
    for algorithm, metrics in claim.gates.final_min.items():
        for metric in metrics:
            if metric in PROMPT_PEARSON:
                out.setdefault(algorithm, PROMPT_PEARSON[metric])
    return out


def _per_start(table: pd.DataFrame) -> dict:
    return dict(zip(table["start"], table["value"], strict=True))


def critic_gates(claim: Claim, items: pd.DataFrame, df: pd.DataFrame | None) -> list[Gate]:
    """One gate per critic the claim rests on (its ``final_min`` algorithms): the prompt-level
    Pearson's one-sided 95% lower bound over starts against :data:`CRITIC_PEARSON_MIN`, a token
    critic's held-out explained variance (mean and bound) beside it. None: not measured."""
    gates = []
    for algorithm, pearson in _critics(claim).items():
        name = f"{algorithm} {pearson}, late-eval mean"
        if df is None:
            gates.append(Gate(name, float("nan"), CRITIC_PEARSON_MIN, ">="))
            continue
        per = _late_by_start(df, items, algorithm, pearson)
        beside = ""
        if pearson in _BESIDE:
            ev = _per_start(_late_by_start(df, items, algorithm, _BESIDE[pearson]))
            vals = np.array([v for v in ev.values() if np.isfinite(v)])
            if len(vals):
                beside = f"beside: {_BESIDE[pearson]} mean {vals.mean():.3f}"
                if len(vals) > 1:
                    beside += f", {CONFIDENCE:.0%} lower bound {float(lower_bound(vals)):.3f}"
        gates.append(critic_gate(name, _per_start(per), beside=beside))
    return gates


def per_start_finals(
    claims: Sequence[Claim], items: pd.DataFrame, df: pd.DataFrame
) -> pd.DataFrame:
    """The critic gates' statistics start by start: one row per (start, algorithm, metric), the
    metric's mean over the second half of each run's evals, averaged over the start's RL seeds;
    the gated Pearson with its threshold, a token critic's held-out explained variance beside it
    (threshold NaN: reported, not gated).

    Args:
        claims: the declared claims (their ``final_min`` names the critics).
        items: the item table (:func:`analysis.load_items`): which start each run began from.
        df: the tidy frame (:func:`analysis.load_runs`).
    """
    wanted: dict[tuple[str, str], float] = {}
    for c in claims:
        for algorithm, pearson in _critics(c).items():
            wanted[(algorithm, pearson)] = CRITIC_PEARSON_MIN
            if pearson in _BESIDE:
                wanted.setdefault((algorithm, _BESIDE[pearson]), float("nan"))
    cols = ["start", "algorithm", "metric", "value", "runs", "threshold"]
    if not wanted or items.empty or df.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for (algorithm, metric), threshold in sorted(wanted.items()):
        per = _late_by_start(df, items, algorithm, metric).dropna(subset=["start"])
        for r in per.itertuples():
            rows.append((r.start, algorithm, metric, float(r.value), int(r.runs), threshold))
    return pd.DataFrame(rows, columns=cols)


# --- every gate of a claim ---------------------------------------------------------------------


def evaluate_gates(claim: Claim, items: pd.DataFrame, df: pd.DataFrame | None) -> list[Gate]:
    """Every gate of the claim, measured on this suite: its declared headroom gates, its
    critics', and the saturation gate.

    Args:
        claim: the declared claim.
        items: the item table (:func:`analysis.load_items`).
        df: the tidy frame (:func:`analysis.load_runs`), for the critic gates; None: those gates
            are not measured (and fail).
    """
    g = claim.gates
    gates: list[Gate] = []
    if g.start_max is not None or g.gain_min is not None:
        for ds in gate_datasets(claim_datasets(claim, items), items):
            sep = separation(_run_accuracy(items, ds))
            if g.start_max is not None:
                gates.append(Gate(f"start accuracy at {ds}", sep.start, g.start_max, "<="))
            if g.gain_min is not None:
                best = sep.best_gain_algorithm
                name = f"best gain at {ds}" + (f" ({best})" if best is not None else "")
                gates.append(Gate(name, sep.best_gain, g.gain_min, ">="))
    gates += critic_gates(claim, items, df)
    if {"start", "seed"} <= set(items.columns) and {"correct", "dataset"} <= set(items.columns):
        sat = _saturation_gate(claim, items)
        if sat is not None:
            gates.append(sat)
    return gates


def untestable(gates: Sequence[Gate]) -> str | None:
    """``untestable on this testbed: <gate> = <value> (needs <threshold>)`` for the failing
    gates (joined by "; "), or None when every gate passes."""
    failing = [gate.text for gate in gates if not gate.passes]
    return "untestable on this testbed: " + "; ".join(failing) if failing else None
