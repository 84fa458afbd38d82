"""Properties of the paired verdicts (analysis/verdicts.py), one per test, written for the
verdicts scope of the mutation round (docs/mutation.md): the verdict rules at their thresholds,
the bootstrap interval's construction, censoring, the claims table and its text.

Small hand-made frames and seeded bootstraps of a few hundred replicates: fast and exact.
"""

from __future__ import annotations

import math

from analysis.verdicts import (
    DOES_NOT_HOLD,
    HOLDS,
    MIN_VERDICT_SEEDS,
    NOT_RESOLVED,
    difference_verdict,
)

NAN = float("nan")

# --- verdict rules ---------------------------------------------------------------------------


def test_difference_verdict_needs_the_interval_strictly_off_zero() -> None:
    """"a >= b" holds only when the whole interval is above 0 and fails only when it is below:
    an interval that touches 0 (lo == 0 or hi == 0) includes the null, so it is not resolved.
    A strict comparison is what keeps a zero effect from being called."""
    n = MIN_VERDICT_SEEDS
    assert difference_verdict(1e-12, 1.0, n) == HOLDS
    assert difference_verdict(0.0, 1.0, n) == NOT_RESOLVED
    assert difference_verdict(-1.0, -1e-12, n) == DOES_NOT_HOLD
    assert difference_verdict(-1.0, 0.0, n) == NOT_RESOLVED
    assert difference_verdict(-1.0, 1.0, n) == NOT_RESOLVED
    assert math.isnan(NAN)
