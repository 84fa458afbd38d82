"""pass@k and avg@k: the unbiased estimator against brute force, and avg@k by hand."""

from __future__ import annotations

import itertools
from fractions import Fraction
from math import comb

import pytest

from benchmarks.evaluation.estimators import avg_at_k, pass_at_k


def _pass_at_k_brute(n: int, c: int, k: int) -> Fraction:
    """Fraction of the k-subsets of n samples (c correct) that contain a correct one."""
    verdicts = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(verdicts, k))
    return Fraction(sum(1 for s in subsets if any(s)), len(subsets))


def test_pass_at_k_matches_brute_force() -> None:
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(
                    float(_pass_at_k_brute(n, c, k)), abs=1e-12
                )


def test_pass_at_k_large_n_is_stable() -> None:
    n, c, k = 1000, 5, 100
    exact = 1 - Fraction(comb(n - c, k), comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12)
    assert pass_at_k(16, 0, 16) == 0.0
    assert pass_at_k(16, 1, 16) == 1.0
    assert pass_at_k(16, 4, 1) == pytest.approx(0.25)
    for bad in [(0, 0, 1), (4, 5, 1), (4, 1, 5), (4, 1, 0)]:
        with pytest.raises(ValueError):
            pass_at_k(*bad)


def test_avg_at_k_hand_made() -> None:
    verdicts = [[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1]]  # (problems, k)
    assert avg_at_k(verdicts[0]) == 0.75
    assert avg_at_k(verdicts) == pytest.approx((0.75 + 0 + 1) / 3)
    assert avg_at_k([[1, 1], [0, 0, 0, 1]]) == pytest.approx(0.625)  # problems weigh equally
    # pass@k over the same matrix: mean over problems.
    per_problem = [pass_at_k(len(v), sum(v), 2) for v in verdicts]
    assert per_problem == pytest.approx([1.0, 0.0, 1.0])
    with pytest.raises(ValueError):
        avg_at_k([])
