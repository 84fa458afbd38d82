"""Item tables, estimates, a tolerance and a warnings guard shared by the test files of the verdict
protocol (analysis/claims/protocol.py): tests/analysis/test_protocol.py,
test_protocol_intervals.py and test_protocol_arrays.py, its mutation scope (docs/mutation.md).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pandas as pd

from analysis.claims.protocol import ITEM_COLUMNS, ClaimEstimate

#: Sums and means of at most a few hundred values in [0, 1] in float64, taken in another order by
#: the test: rounding is a few ulps of the result's magnitude (<= ~10); a wrong weight or item
#: moves them by >= 1e-3.
TOL = 1e-9

B = [0.2, 0.4, 0.6, 0.6]  # b reaches 0.6 at 750 (test_protocol.test_compute_ratio_hand_worked)


@contextmanager
def no_warnings() -> Iterator[None]:
    """Any warning inside is an error (the code under test silences its own 0 / 0 and x / 0)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def curves(curves: dict, items: int = 10, datasets: tuple[str, ...] = ("d",)) -> pd.DataFrame:
    """{(start, seed, algorithm): [accuracy at fractions 0.25, 0.5, 0.75, 1]} -> item table, the
    first round(acc * items) items correct, compute 1000 x fraction, on each of ``datasets``."""
    rows = []
    for (start, seed, algo), accs in curves.items():
        for ds in datasets:
            for f, acc in zip((0.25, 0.5, 0.75, 1.0), accs, strict=True):
                for i in range(items):
                    rows.append((start, seed, algo, ds, np.nan, f"i{i}", f, 1000 * f,
                                 float(i < round(acc * items))))  # fmt: skip
    return pd.DataFrame(rows, columns=list(ITEM_COLUMNS))


def groups(acc: dict[str, tuple[float, float]], items: int) -> pd.DataFrame:
    """Final evals of 3 identical starts: per dataset ``h<horizon>`` a's and b's accuracy."""
    rows = []
    for s in range(3):
        for ds, (acc_a, acc_b) in acc.items():
            for algo, v in (("a", acc_a), ("b", acc_b)):
                for i in range(items):
                    rows.append((f"s{s}", s, algo, ds, float(ds[1:]), f"i{i}", 1.0, 1000.0,
                                 float(i < round(v * items))))  # fmt: skip
    return pd.DataFrame(rows, columns=list(ITEM_COLUMNS))


def est(effect: float, se: float, df: float) -> ClaimEstimate:
    """A final-difference estimate over 5 starts with this effect, se and df (no interval yet)."""
    return ClaimEstimate(
        estimand="final_difference", a="a", b="b", effect=effect, lo=float("nan"),
        hi=float("nan"), level=0.95, p_value=0.5, n_starts=5, n_seeds=1, mde=float("nan"),
        conditional=False, per_start=(), se=se, df=df,
    )  # fmt: skip
