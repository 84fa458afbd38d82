"""Gates: whether a declared claim can be tested on this testbed at all, checked before a verdict.

A comparison at a group every algorithm solves from the start, or where none learns, says
nothing about the algorithms; neither does a claim about credit assignment whose critic never
learnt to predict. Each claim (:class:`analysis.claims.Claim`) declares its thresholds; the gates
read them at the groups its estimand uses, their shortest and longest (the ends a slope leans
on most):

* ``start_max``: the start's accuracy at the group, the mean over runs of the first eval, at most
  this (room above the start);
* ``gain_min``: the best algorithm's mean gain at the group (final eval minus first, over its
  runs), at least this (learning is visible there);
* ``final_min``: per algorithm and metric, the metric's last value in each of its runs, averaged
  over each start's runs, at least this on every start (``ppo:
  {critic/heldout_explained_variance: 0.1}``: the token critic explains held-out returns). The
  start is the unit of replication, so a critic idle on one start fails the gate: that start's
  effect would compare against a critic-free method under the critic method's name.

A claim with a failing gate reads ``untestable on this testbed: <gate> = <value> (needs
<threshold>)`` instead of a verdict (:func:`untestable`); its p-value counts as 1 in its family.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .claims import Claim

__all__ = [
    "Gate",
    "claim_datasets",
    "evaluate_gates",
    "gate_datasets",
    "per_start_finals",
    "untestable",
]


@dataclass(frozen=True)
class Gate:
    """One precondition's measured value against its threshold (NaN: not measured, fails)."""

    name: str
    value: float
    threshold: float
    #: ``"<="`` or ``">="``: how the value must compare with the threshold.
    direction: str

    @property
    def passes(self) -> bool:
        if not np.isfinite(self.value):
            return False
        if self.direction == "<=":
            return self.value <= self.threshold
        return self.value >= self.threshold

    @property
    def text(self) -> str:
        """``start accuracy at arith_h1 = 0.990 (needs <= 0.8)``."""
        value = f"{self.value:.3f}" if np.isfinite(self.value) else "not measured"
        return f"{self.name} = {value} (needs {self.direction} {self.threshold:g})"


def _ordered(items: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(datasets with a horizon, shortest first; whole-task datasets, by name)."""
    h = items.groupby("dataset")["horizon"].first()
    grouped = h[h.notna()].sort_values(kind="stable")
    return list(grouped.index), sorted(h[h.isna()].index)


def claim_datasets(claim: Claim, items: pd.DataFrame) -> list[str]:
    """The datasets a claim's estimand uses in this item table.

    ``all``: every group with a horizon for ``horizon_slope``, the whole task (the datasets
    without a horizon; the groups when none was logged) for the others; ``ends``: the shortest and longest groups; a list: the
    datasets it names that have items (the plan checked them against the task).
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


def _run_accuracy(items: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """Per run (start, seed, algorithm): accuracy at its first and its last eval."""
    sub = items[items["dataset"] == dataset]
    run = ["start", "seed", "algorithm"]
    acc = sub.groupby([*run, "budget_fraction"])["correct"].mean().reset_index()
    acc = acc.sort_values("budget_fraction", kind="stable").groupby(run)["correct"]
    return pd.DataFrame({"first": acc.first(), "last": acc.last()}).reset_index()


def _final_by_start(
    df: pd.DataFrame, items: pd.DataFrame, algorithm: str, metric: str
) -> pd.DataFrame:
    """Per start, the metric's last logged value in each of the algorithm's runs, averaged over
    the start's runs: columns ``start``, ``value``, ``runs``, weakest start first. Runs the item
    table does not place (no ``run_id``/``start`` columns, or a run without items) form one
    group, ``start`` NaN."""
    rows = df[(df["algorithm"] == algorithm) & (df["metric"] == metric)].dropna(subset=["value"])
    cols = ["start", "value", "runs"]
    if rows.empty:
        return pd.DataFrame(columns=cols)
    last = rows.sort_values("step", kind="stable").groupby("run_id")["value"].last()
    frame = last.rename("value").to_frame()
    if {"run_id", "start"} <= set(items.columns):
        start_of = items.drop_duplicates("run_id").set_index("run_id")["start"]
        frame["start"] = start_of.reindex(frame.index).to_numpy()
    else:
        frame["start"] = np.nan
    g = frame.groupby("start", dropna=False)["value"]
    out = pd.DataFrame({"value": g.mean(), "runs": g.size()}).reset_index()
    return out.sort_values(["value", "start"], kind="stable").reset_index(drop=True)[cols]


def per_start_finals(
    claims: Sequence[Claim], items: pd.DataFrame, df: pd.DataFrame
) -> pd.DataFrame:
    """The ``final_min`` gates' metrics start by start: one row per (start, algorithm, metric),
    the metric's last value in each run of that start, averaged over its RL seeds. The gate
    reads the weakest start: a critic that learns on four starts and sits idle on the fifth
    leaves that start's comparison one against a critic-free method.

    Args:
        claims: the declared claims (their ``final_min`` gates name the metrics).
        items: the item table (:func:`analysis.load_items`): which start each run began from.
        df: the tidy frame (:func:`analysis.load_runs`).
    """
    wanted = {
        (a, m, t) for c in claims for a, ms in c.gates.final_min.items() for m, t in ms.items()
    }
    cols = ["start", "algorithm", "metric", "value", "runs", "threshold"]
    if not wanted or items.empty or df.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for algorithm, metric, threshold in sorted(wanted):
        per = _final_by_start(df, items, algorithm, metric).dropna(subset=["start"])
        for r in per.sort_values("start", kind="stable").itertuples():
            rows.append((r.start, algorithm, metric, float(r.value), int(r.runs), threshold))
    return pd.DataFrame(rows, columns=cols)


def evaluate_gates(claim: Claim, items: pd.DataFrame, df: pd.DataFrame | None) -> list[Gate]:
    """Every gate the claim declares, measured on this suite.

    Args:
        claim: the declared claim.
        items: the item table (:func:`analysis.load_items`).
        df: the tidy frame (:func:`analysis.load_runs`), for ``final_min``; None: those gates
            are not measured (and fail).
    """
    g = claim.gates
    gates: list[Gate] = []
    if g.start_max is not None or g.gain_min is not None:
        for ds in gate_datasets(claim_datasets(claim, items), items):
            acc = _run_accuracy(items, ds)
            if g.start_max is not None:
                start = float(acc["first"].mean()) if len(acc) else float("nan")
                gates.append(Gate(f"start accuracy at {ds}", start, g.start_max, "<="))
            if g.gain_min is not None:
                gain = (acc["last"] - acc["first"]).groupby(acc["algorithm"]).mean()
                best = gain.idxmax() if gain.notna().any() else None
                value = float(gain[best]) if best is not None else float("nan")
                name = f"best gain at {ds}" + (f" ({best})" if best is not None else "")
                gates.append(Gate(name, value, g.gain_min, ">="))
    for algorithm, metrics in g.final_min.items():
        for metric, minimum in metrics.items():
            name, value = f"{algorithm} {metric} at the end", float("nan")
            per = None if df is None else _final_by_start(df, items, algorithm, metric)
            if per is not None and len(per):
                value = float(per["value"].iloc[0])
                if len(per) > 1:
                    name += f", weakest of {len(per)} starts ({per['start'].iloc[0]})"
            gates.append(Gate(name, value, minimum, ">="))
    return gates


def untestable(gates: Sequence[Gate]) -> str | None:
    """``untestable on this testbed: <gate> = <value> (needs <threshold>)`` for the failing
    gates (joined by "; "), or None when every gate passes."""
    failing = [gate.text for gate in gates if not gate.passes]
    return "untestable on this testbed: " + "; ".join(failing) if failing else None
