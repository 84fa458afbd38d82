"""The grader's worker, run in the test's own process.

The pool tests of ``test_grading.py`` drive the worker through spawned processes, which is how
it runs, but what a spawned process executes is invisible to coverage and to mutation testing
(docs/mutation.md: mutmut records which tests reach a function in the test's process only). Here
the worker's loop, its debug hooks, its resource cap and the Reasoning Gym scorer are called
directly: the protocol the parent relies on (``ready`` first, then one answer per item, in
order, tagged ``ok``, ``timeout`` or ``error``; a start-up failure reported as ``fatal``) and
the limits a worker puts on itself. The actions that end or hang a process run in a spawned
child, as they do in the pool.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import resource
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from benchmarks.tasks.grading import (
    _DEBUG_PREFIX,
    _debug_action,
    _limit_resources,
    _reasoning_gym_grader,
    _worker_main,
)


@pytest.fixture
def worker_signals() -> Iterator[None]:
    """The worker takes SIGINT and SIGALRM for itself; give them back to pytest afterwards.
    (It also turns core dumps off, for good: a hard limit cannot be raised again without
    privileges, and the test process needs none.)"""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGALRM)}
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    for s, handler in saved.items():
        signal.signal(s, handler)


def test_worker_answers_every_item_in_order_with_its_tag(worker_signals) -> None:
    """``ready`` with the worker's pid first, then one answer per item in order: a right answer
    scores 1, a wrong one 0, a slow one is cut at the soft deadline (``timeout``), a raising one
    is an ``error`` with the exception's type and message; the worker stops on ``None`` and
    leaves no alarm armed and SIGINT ignored (Ctrl-C is the parent's)."""
    parent, child = mp.Pipe(duplex=True)
    items = [
        ("so the answer is $\\boxed{\\frac{1}{2}}$", "0.5"),
        ("so the answer is $\\boxed{3}$", "4"),
        (_DEBUG_PREFIX + "sleep:30", "1"),
        (_DEBUG_PREFIX + "raise", "1"),
        ("$\\boxed{7}$", "7"),
    ]
    for item in [*items, None]:
        parent.send(item)
    logging.getLogger("math_verify").setLevel(logging.NOTSET)  # as in a fresh worker
    _worker_main(child, 0.3, None, True)
    assert parent.recv() == ("ready", os.getpid())
    assert [parent.recv() for _ in items] == [
        ("ok", 1.0),
        ("ok", 0.0),
        ("timeout", 0.0),
        ("error", "RuntimeError: debug: requested failure"),
        ("ok", 1.0),
    ]
    assert not parent.poll()  # nothing more: one answer per item
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert resource.getrlimit(resource.RLIMIT_CORE) == (0, 0)  # no core dumps of model text
    # math-verify's warnings about its own (disabled) timeouts are silenced, and only they.
    assert logging.getLogger("math_verify").level == logging.ERROR
    assert logging.getLogger().level != logging.ERROR


def test_without_debug_a_debug_request_is_graded_as_text(worker_signals) -> None:
    """Debug hooks are off unless the pool started with them: the request is ordinary text."""
    parent, child = mp.Pipe(duplex=True)
    for item in [(_DEBUG_PREFIX + "raise", "1"), (_DEBUG_PREFIX + "sleep:30", "1"), None]:
        parent.send(item)
    _worker_main(child, 0.3, None, False)
    assert parent.recv()[0] == "ready"
    assert [parent.recv(), parent.recv()] == [("ok", 0.0), ("ok", 0.0)]


def test_worker_returns_when_the_parent_goes_away(worker_signals) -> None:
    """A closed pipe ends the worker (the parent died, or closed the grader while the worker
    was idle): it returns instead of waiting for ever."""
    parent, child = mp.Pipe(duplex=True)
    got: list = []

    def parent_side() -> None:  # the parent reads "ready", then goes away
        got.append(parent.recv())
        parent.close()

    t = threading.Thread(target=parent_side)
    t.start()
    _worker_main(child, 0.3, None, False)  # returns: the test would hang otherwise
    t.join(5)
    assert got[0][0] == "ready"


def test_start_up_failure_is_reported_not_silent(worker_signals) -> None:
    """A worker that cannot start says why (``fatal`` and the exception) and sends nothing
    else, so the parent raises with the reason instead of waiting for a worker that never
    comes."""
    parent, child = mp.Pipe(duplex=True)
    parent.send(None)
    _worker_main(child, 0.3, "not a size", False)  # type: ignore[arg-type]
    tag, why = parent.recv()
    assert (tag, why.split(":")[0]) == ("fatal", "TypeError")
    assert not parent.poll()


def test_reasoning_gym_items_are_graded_by_the_datasets_scorer(worker_signals) -> None:
    """kind="reasoning_gym": the gold is the JSON payload; the answer is what follows the last
    ``#`` (the tiny model's format) or the ``<answer>`` tag; only full credit scores 1 (the
    scorers give 0.01 to a present but wrong answer)."""
    entry = {"question": "1 + 2 =", "answer": "3", "metadata": {}}

    def gold(fmt: str) -> str:
        return json.dumps({"dataset": "chain_sum", "entry": entry, "answer_format": fmt})

    parent, child = mp.Pipe(duplex=True)
    items = [
        ("1+2=3#3", gold("hash")),
        ("#4", gold("hash")),
        ("no hash at all 3", gold("hash")),
        ("<answer>3</answer>", gold("tag")),
        ("3", gold("tag")),
        ("#3", json.dumps({"dataset": "z" * 300, "entry": entry, "answer_format": "hash"})),
    ]
    for item in [*items, None]:
        parent.send(item)
    _worker_main(child, 5.0, None, False, kind="reasoning_gym")
    assert parent.recv()[0] == "ready"
    assert [parent.recv() for _ in items] == [
        ("ok", 1.0),
        ("ok", 0.0),
        ("ok", 0.0),
        ("ok", 1.0),
        ("ok", 0.0),
        # A scorer's error travels back cut to 200 characters of message (an unknown dataset).
        ("error", "ValueError: " + ("Dataset '" + "z" * 300)[:200]),
    ]


def test_reasoning_gym_grader_in_process() -> None:
    """The scorer itself: the hash format takes the text after the *last* ``#``, stripped."""
    grade = _reasoning_gym_grader()
    entry = {"question": "5 + 7 =", "answer": "12", "metadata": {}}
    g = json.dumps({"dataset": "chain_sum", "entry": entry, "answer_format": "hash"})
    assert grade("5+7=12#1#12 ", g) == 1.0
    assert grade("5+7=12#12#1", g) == 0.0
    t = json.dumps({"dataset": "chain_sum", "entry": entry, "answer_format": "tag"})
    assert grade("<answer>12</answer>", t) == 1.0
    assert grade("<answer>13</answer>", t) == 0.0


def test_the_memory_cap_is_headroom_above_what_the_worker_maps() -> None:
    """``RLIMIT_AS`` becomes what the process maps now plus the cap (a worker that mapped a lot
    at start keeps the same headroom), never above the hard limit; restored afterwards."""
    saved_as = resource.getrlimit(resource.RLIMIT_AS)

    def vm_size() -> int:
        with open("/proc/self/status", encoding="ascii") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))

    cap = 1 << 40
    try:
        before = vm_size()
        _limit_resources(cap)
        after = vm_size()
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        assert hard == saved_as[1]
        expected_lo, expected_hi = before + cap, after + cap
        if hard != resource.RLIM_INFINITY:
            expected_lo, expected_hi = min(expected_lo, hard), min(expected_hi, hard)
        assert expected_lo <= soft <= expected_hi
        assert resource.getrlimit(resource.RLIMIT_CORE) == (0, 0)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, saved_as)


def _blocks_sigalrm(pid: int) -> bool:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        blocked = next(int(line.split()[1], 16) for line in f if line.startswith("SigBlk:"))
    return bool(blocked >> (signal.SIGALRM - 1) & 1)


def test_debug_actions_do_what_the_tests_ask_of_them() -> None:
    """The hooks the pool tests use to force each failure (module docstring of grading.py): none
    on ordinary text or an unknown action, ``sleep`` and ``raise`` in process, and in a spawned
    process as in the pool: ``crash`` exits at once, ``segv`` dies of SIGSEGV, ``hang`` blocks
    the soft deadline's SIGALRM and sleeps until killed."""
    assert _debug_action("The answer is 3.", None) is None
    assert _debug_action(_DEBUG_PREFIX + "dance", None) is None
    t0 = time.monotonic()
    assert _debug_action(_DEBUG_PREFIX + " sleep:0.2 ", None) == 0.0
    assert time.monotonic() - t0 >= 0.2
    with pytest.raises(RuntimeError, match="^debug: requested failure$"):
        _debug_action(_DEBUG_PREFIX + "raise", None)
    ctx = mp.get_context("spawn")
    for action, exitcode in (("crash", 70), ("segv", -signal.SIGSEGV)):
        p = ctx.Process(target=_debug_action, args=(_DEBUG_PREFIX + action, None))
        p.start()
        p.join(30)
        assert p.exitcode == exitcode, action
    p = ctx.Process(target=_debug_action, args=(_DEBUG_PREFIX + "hang", None))
    p.start()
    try:
        deadline = time.monotonic() + 30
        while not _blocks_sigalrm(p.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(p.pid, signal.SIGALRM)  # its default action ends a process that does not block it
        p.join(0.5)
        assert p.is_alive()
    finally:
        p.kill()
        p.join(5)
