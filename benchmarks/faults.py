"""Test-only fault injection: a NaN loss or a ``kill -9`` at a chosen training step.

The reliability tests need real faults at exact places, in a real subprocess, without a mock in
the code under test. They are switched on by one environment variable, read at each hook (so a
test can set it for a subprocess or with ``monkeypatch``); without it every hook is a no-op::

    SPPO_BENCH_FAULTS="nan_loss@grpo:3,nan_loss@sppo:2-9,kill@ppo:4:save"

Each entry is ``<fault>@<algorithm>:<steps>[:<where>]``: ``<algorithm>`` is a registered name or
``*``; ``<steps>`` is ``N`` or ``A-B`` (inclusive) in the trainer's step counter (the step being
computed for ``nan_loss``, the step just finished for ``kill``). Faults:

* ``nan_loss``: the policy loss of that step is NaN (the update is skipped and counted).
* ``kill``: the process sends itself SIGKILL. ``<where>`` says when: ``step`` (default: after the
  step's metrics are logged, before any checkpoint), ``save`` (in the middle of writing the
  checkpoint: the temporary file is written, not yet renamed) or ``saved`` (right after it).

Not for production use: nothing else reads this variable.
"""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["FAULTS_ENV", "KILL_POINTS", "active", "maybe_kill"]

log = logging.getLogger(__name__)

FAULTS_ENV = "SPPO_BENCH_FAULTS"
KILL_POINTS = ("step", "save", "saved")
_KINDS = ("nan_loss", "kill")


@dataclass(frozen=True)
class _Fault:
    kind: str
    algorithm: str
    first: int
    last: int
    where: str


@lru_cache(maxsize=8)
def _parse(spec: str) -> tuple[_Fault, ...]:
    out = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        try:
            kind, rest = item.split("@", 1)
            alg, steps, *where = rest.split(":")
            a, _, b = steps.partition("-")
            f = _Fault(kind, alg, int(a), int(b or a), where[0] if where else "step")
        except ValueError as e:
            raise ValueError(
                f"{FAULTS_ENV}: cannot parse {item!r}; expected <fault>@<algorithm>:<step>[-<step>]"
                f"[:<where>] with fault in {list(_KINDS)}"
            ) from e
        if f.kind not in _KINDS or (f.kind == "kill" and f.where not in KILL_POINTS):
            raise ValueError(
                f"{FAULTS_ENV}: {item!r}: fault must be one of {list(_KINDS)}, "
                f"kill points one of {list(KILL_POINTS)}"
            )
        out.append(f)
    return tuple(out)


def active(kind: str, algorithm: str, step: int, where: str = "step") -> bool:
    """Whether fault ``kind`` is injected for ``algorithm`` at ``step`` (and ``where``)."""
    spec = os.environ.get(FAULTS_ENV)
    if not spec:
        return False
    return any(
        f.kind == kind
        and f.algorithm in ("*", algorithm)
        and f.first <= step <= f.last
        and (kind != "kill" or f.where == where)
        for f in _parse(spec)
    )


def maybe_kill(algorithm: str, step: int, where: str) -> None:
    """SIGKILL this process if a ``kill`` fault is set here: a real, uncatchable kill -9."""
    if active("kill", algorithm, step, where):
        log.warning("fault injection: SIGKILL at %s step %d (%s)", algorithm, step, where)
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)
