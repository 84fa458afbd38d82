"""pass@k and avg@k: what k graded samples per problem say about a model.

:func:`benchmarks.evaluation.evaluate.summarise` and the lm-eval hooks
(:mod:`benchmarks.evaluation.lm_eval.utils`) both score through these two functions, so the
native and the lm-eval routes report the same numbers for the same verdicts. Verdicts come from
the graders of :mod:`benchmarks.tasks.grading`; nothing here reads model text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["avg_at_k", "pass_at_k"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct (Chen et al. 2021, Codex).

    ``1 - C(n-c, k) / C(n, k)`` computed as ``1 - prod_{i=n-c+1}^{n} (1 - k/i)``, which never
    forms the huge binomials and stays accurate for large ``n``.

    >>> pass_at_k(2, 1, 1)
    0.5
    """
    if n < 1 or not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need n >= 1, 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def avg_at_k(scores: Sequence[float] | Sequence[Sequence[float]]) -> float:
    """avg@k: the mean score of sampled responses.

    ``scores`` is either one problem's k verdicts, or a (problems, k) nested sequence, in which
    case the result is the mean over problems of each problem's mean (problems weigh equally even
    if their sample counts differ).

    >>> avg_at_k([1, 0, 1, 1])
    0.75
    >>> avg_at_k([[1, 1], [0, 0, 0, 1]])
    0.625
    """
    if len(scores) == 0:
        raise ValueError("avg_at_k needs at least one score")
    if isinstance(scores[0], Sequence):
        rows = [avg_at_k(row) for row in scores]  # type: ignore[arg-type]
        return math.fsum(rows) / len(rows)
    return math.fsum(float(s) for s in scores) / len(scores)  # type: ignore[arg-type]
