"""Float64 rows for the ratio-shaping surrogates (GMPO, GSPO, CISPO) and the plain-Python
recomputation their tests compare against.

Their only other value tests compare them with verl's own functions, which run in the verl tests
and so outside the mutation run (docs/mutation.md): each surrogate's test recomputes it token by
token, in float64, from the formula its module docstring gives, on rows built here.
"""

from __future__ import annotations

import torch

from testkit.tensors import F64, META, NAN
from testkit.tolerances import fp_tol

#: Tolerance between the torch result and the plain-Python float64 recomputation, relative and
#: absolute. Each value is a sum of at most 4 log-ratios of magnitude < 1 (|sum| < 3), then one
#: division, one exp and one or two products: the first-order rounding bound is about
#: 4 * eps64 * 3 for the sum plus one ulp per later operation, under 32 * eps64 (7e-15) of the
#: value. Every mutant the tests kill moves a value or a gradient by more than 1e-3.
TOL = fp_tol(32, dtype=F64)

OLD = -1.0  # every valid old log-prob: the log-ratio is logp - old, computed the same way here


def assert_f64_close(actual: torch.Tensor, expected: list) -> None:
    """``actual`` is float64 and within :data:`TOL` of ``expected``."""
    assert actual.dtype == F64
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=F64), rtol=TOL, atol=TOL)


def ratio_inputs(rows: list[tuple[list[float], list[float]]], t: int):
    """``(log_probs, old_log_probs, advantages, mask)`` in float64 from rows of (log-ratios,
    advantages), one entry per valid token, left-aligned and padded to ``t`` with NaN (masked
    positions may hold anything)."""
    logp, old, adv, mask = [], [], [], []
    for ls, adv_row in rows:
        pad = [NAN] * (t - len(ls))
        logp.append([OLD + x for x in ls] + pad)
        old.append([OLD] * len(ls) + pad)
        adv.append(list(adv_row) + pad)
        mask.append([1] * len(ls) + [0] * (t - len(ls)))
    lp = torch.tensor(logp, dtype=F64, requires_grad=True)
    return lp, torch.tensor(old, dtype=F64), torch.tensor(adv, dtype=F64), torch.tensor(mask)


def log_ratios(lp: torch.Tensor, mask: torch.Tensor) -> list[list[float]]:
    """Each row's valid log-ratios, ``logp - old`` as float64 computes it (the same rounding)."""
    return [
        [p - OLD for p, m in zip(row, mrow, strict=True) if m]
        for row, mrow in zip(lp.tolist(), mask.tolist(), strict=True)
    ]


def padded(rows: list[list[float]], t: int) -> list[list[float]]:
    """Rows right-padded with 0 to ``t`` (what a masked position's loss and gradient are)."""
    return [row + [0.0] * (t - len(row)) for row in rows]


def assert_stays_on_meta_in_f64(surrogate) -> None:
    """``meta`` stands in for an accelerator (a tensor made on the default device would be the
    bug it raises on); float64 in, float64 out, statistics included."""
    t = [torch.zeros(2, 3, dtype=F64, device=META) for _ in range(3)]
    mask = torch.ones(2, 3, dtype=torch.bool, device=META)
    losses, stats = surrogate(*t, mask, 0.2, 0.2)
    for v in (losses, *stats.values()):
        assert v.device == META and v.dtype == F64
