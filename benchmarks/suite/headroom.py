"""Headroom: whether a finished suite's testbed could have separated the algorithms at all.

A comparison resolves nothing when every algorithm saturates, when nothing learns, or when the
start leaves no prompt half-solved. Four properties, checked on every suite and printed with its
table (thresholds: docs/design.md §8):

* the start is far from solved: mean start accuracy <= 0.5;
* no algorithm saturates: every algorithm's mean final accuracy < 0.95 (the ceiling the claims'
  saturation gate reads, :data:`analysis.claims.gates.CEILING`);
* learning is visible: the best algorithm's mean gain over the start >= 0.15;
* difficulty varies: at the start, >= 30% of held-out prompts have a success rate in [0.1, 0.9].

The values come from :func:`analysis.claims.gates.separation`, the one implementation of "can this
testbed separate the algorithms" that the claims' gates and a sweep's admissibility call too; a
check is an :class:`analysis.claims.gates.Gate`.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.claims.gates import CEILING, Gate, separation

__all__ = ["THRESHOLDS", "HeadroomCheck", "headroom"]

#: name -> (threshold, direction): the property holds when value <= (or >=) the threshold.
THRESHOLDS: dict[str, tuple[float, str]] = {
    "start_accuracy": (0.5, "<="),
    "best_final_accuracy": (CEILING, "<"),
    "best_gain": (0.15, ">="),
    "start_mid_fraction": (0.30, ">="),
}


@dataclass(frozen=True)
class HeadroomCheck(Gate):
    """One headroom property: a :class:`analysis.claims.gates.Gate` with the suite's line format."""

    @property
    def holds(self) -> bool:
        return self.passes

    def line(self) -> str:
        mark = "ok  " if self.holds else "FAIL"
        return (
            f"{mark} {self.name} = {self.value:.3f} (needs {self.direction} {self.threshold:g}): "
            f"{self.detail}"
        )


def headroom(
    runs: Sequence[Any], warmstart: Mapping[str, Mapping[str, Any]]
) -> list[HeadroomCheck]:
    """The four checks from a suite's finished runs (``RunSummary``: algorithm, status,
    start_accuracy, final_accuracy) and its per-seed warm-start info (``difficulty``)."""
    done = [r for r in runs if r.status == "FINISHED"]
    nan = float("nan")
    acc = pd.DataFrame(
        [(r.algorithm, r.start_accuracy, r.final_accuracy) for r in done],
        columns=["algorithm", "first", "last"],
    )
    sep = separation(acc)
    mids = [
        float(info["difficulty"]["mid_fraction"])
        for info in warmstart.values()
        if info.get("difficulty")
    ]
    best_final, best_gain = sep.best_final_algorithm, sep.best_gain_algorithm
    values = {
        "start_accuracy": (sep.start, f"mean over {len(done)} runs"),
        "best_final_accuracy": (
            sep.best_final,
            f"{best_final}, mean over seeds" if best_final else "no finished run",
        ),
        "best_gain": (
            sep.best_gain,
            f"{best_gain}, mean final minus start over seeds" if best_gain else "no run",
        ),
        "start_mid_fraction": (
            statistics.fmean(mids) if mids else nan,
            f"mean over {len(mids)} seeds' starts" if mids else "not measured",
        ),
    }
    return [
        HeadroomCheck(name, values[name][0], t, d, values[name][1])
        for name, (t, d) in THRESHOLDS.items()
    ]
