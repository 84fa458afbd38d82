"""The path of ``sppo-bench run``'s arguments to a running suite: which of the project's modules
they pass through, and how often the call sequence comes back to ``benchmarks/suite/plan.py``.

Runs ``sppo-bench run ARGS`` in this process under a profiler, up to the suite's first call of
``run_one`` (its first run: the warm start is built, nothing trains with RL). A module counts when one of its functions is called with the arguments in
some form: the argv or override list, the composed config or one of its nodes, or the validated
plan. An entry into the plan module is a call of one of its functions (a plan's method
included) from another project module's.

    python scripts/argv_walk.py -- suite=claims tracking.uri=sqlite:////tmp/walk.db

Run it with ``PYTHONPATH`` at another commit's worktree to compare two commits.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

PROJECT = ("algorithms", "benchmarks", "analysis", "sweeps")
PLAN = "benchmarks.suite.plan"


class _Reached(BaseException):
    """Raised when ``run_one`` is called: the walk is over."""


def _carries(value: Any, argv: list[str]) -> bool:
    from omegaconf import Container

    if isinstance(value, Container):
        return True
    if type(value).__name__ == "SuitePlan":
        return True
    return isinstance(value, list | tuple) and bool(value) and list(value)[: len(argv)] == argv


def walk(argv: list[str]) -> tuple[list[str], Counter[str]]:
    """The modules the arguments pass through, in first-visit order, and the entries into the
    plan module by the module they came from."""
    from benchmarks.cli import main

    modules: list[str] = []
    entries = Counter[str]()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        mod = frame.f_globals.get("__name__", "")
        if mod.split(".")[0] not in PROJECT:
            return
        if frame.f_code.co_name == "run_one":
            raise _Reached
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
        if mod == PLAN and caller != PLAN and caller.split(".")[0] in PROJECT:
            entries[caller] += 1
        args = frame.f_code.co_varnames[: frame.f_code.co_argcount + frame.f_code.co_kwonlyargcount]
        if mod not in modules and any(_carries(frame.f_locals.get(a), argv) for a in args):
            modules.append(mod)

    sys.setprofile(profile)
    try:
        main(["run", *argv])
    except _Reached:
        pass
    finally:
        sys.setprofile(None)
    return modules, entries


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--"]:
        args = args[1:]
    mods, entries = walk(args)
    sys.stdout.write(f"{len(mods)} modules, {sum(entries.values())} entries into {PLAN}\n")
    for m in mods:
        sys.stdout.write(f"  {m}\n")
    sys.stdout.write("entries into the plan, by the module they came from:\n")
    for m, n in entries.most_common():
        sys.stdout.write(f"  {n:3d}  {m}\n")
