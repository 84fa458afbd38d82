"""Answer extraction and safe grading of model output.

Model output is untrusted input (docs/design.md §3, "Rewards"). Two graders:

* ``integer``: exact integer match, in process. The answer is pulled out with a regular
  expression and converted with :func:`int` (never ``eval``), so ``025``, ``25``, ``27.0`` and
  ``2,125`` read as the integers they denote. Used for AIME, AMC and GSM8K.
* ``math_verify``: LaTeX/sympy equivalence with `math-verify`_, in a pool of worker processes.
  math-verify parses with sympy (whose ``parse_expr`` is an ``eval``) and can spend unbounded time
  or memory on inputs such as ``9^{9^{9^{9}}}``; its own timeouts use ``signal.alarm``, which only
  works on a main thread and cannot interrupt long C calls (big-integer powers). So:

  - no model text is parsed in the caller's process: workers are separate interpreters
    (``spawn``), each with its address space capped (``RLIMIT_AS``) and core dumps off;
  - each item gets a *soft* deadline inside the worker (``setitimer`` on the worker's main thread
    raising an exception that math-verify's ``except Exception`` blocks cannot swallow; its own
    per-call alarms are disabled because they share that timer), and a *hard* deadline in the
    parent: a worker still busy ``kill_grace_s`` after the soft deadline is killed and replaced;
  - a timed-out item scores 0 and is counted in :attr:`GradeResult.timeouts`; a worker that dies
    (``os._exit``, segfault) or an item that raises scores 0 and is counted in
    :attr:`GradeResult.errors`; the pool keeps serving either way;
  - the pool starts on first use and is reused across calls, so the start-up cost (about a
    second per worker, math-verify and sympy imported and warmed up) is paid once.

  The gold answer is wrapped in ``\boxed{}`` and parsed with LaTeX extraction only; the response
  is parsed with expression and LaTeX extraction, as verl's ``reward_score/math_verify.py`` does.
  Only the last ``max_response_chars`` characters of a response are graded: final answers sit at
  the end, and the cap bounds the regular-expression work on megabyte-long outputs.

Workers are started with ``spawn``, so a script that creates a :class:`Grader` at import time must
guard its entry point with ``if __name__ == "__main__":`` (the usual multiprocessing rule).

Tests can force a timeout or crash deterministically: with ``SPPO_BENCH_GRADER_DEBUG=1`` in the
environment when the pool starts, a response starting with ``__sppo_grader_debug__:<action>``
(``sleep:<s>``, ``hang``, ``crash``, ``segv``, ``raise``, ``memory``) triggers that action in the
worker. Without the variable such responses are graded as ordinary text.

.. _math-verify: https://github.com/huggingface/Math-Verify
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import multiprocessing as mp
import os
import re
import signal
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, Literal

__all__ = [
    "DEBUG_ENV",
    "GradeResult",
    "Grader",
    "GraderKind",
    "extract_answer",
]


logger = logging.getLogger(__name__)

GraderKind = Literal["integer", "math_verify", "reasoning_gym"]
#: Kinds graded in the sandboxed worker pool (they parse model text with third-party code).
_POOL_KINDS = ("math_verify", "reasoning_gym")

#: Environment variable that enables the test-only debug actions in grader workers.
DEBUG_ENV = "SPPO_BENCH_GRADER_DEBUG"
_DEBUG_PREFIX = "__sppo_grader_debug__:"


@dataclass(frozen=True)
class GradeResult:
    """Scores of one batch and how many items could not be graded normally.

    Attributes:
        scores: One score in {0.0, 1.0} per response, in input order.
        timeouts: Items that ran past their deadline (scored 0); logged as ``grader/timeouts``.
        errors: Items whose grading raised or whose worker died (scored 0); ``grader/errors``.
    """

    scores: list[float]
    timeouts: int = 0
    errors: int = 0


# --- answer extraction ----------------------------------------------------------------------

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)  # an escaped char, or a brace
_ANSWER_IS = re.compile(r"answer is\s*:?\s*(.+?)\s*(?:\.\s|\.?$|\n)", re.IGNORECASE | re.MULTILINE)
# An integer or decimal, with optional thousands separators ("2,125"). ASCII digits only:
# int() also accepts other Unicode digits, which should not count as a written answer.
_NUMBER = re.compile(r"(?<![0-9.])[-+]?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?")
_INT_TEXT = re.compile(r"\s*([-+]?)0*([0-9]{1,100})(?:\.0*)?\s*")
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_SPACING = re.compile(r"\\[,!;: ]|\\q?quad\b|~|\\left\b|\\right\b")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?")
_NOT_PLAIN = re.compile(r"\\[A-Za-z]+|[/^_*]")


def _last_boxed(text: str) -> tuple[int, str | None]:
    """Position and content of the last ``\\boxed``/``\\fbox`` (braces matched; ``None`` if unclosed).

    The position is -1 when there is none. ``\\boxed 5`` (no braces, seen in MATH) gives ``5``.
    """
    start = max(text.rfind(cmd) for cmd in _BOX_COMMANDS)
    if start < 0:
        return -1, None
    cmd = next(c for c in _BOX_COMMANDS if text.startswith(c, start))
    i = start + len(cmd)
    j = i
    while j < len(text) and text[j] == " ":
        j += 1
    if j < len(text) and text[j] == "{":
        depth = 0
        for tok in _BRACE_TOKEN.finditer(text, j):
            if tok.group() == "{":
                depth += 1
            elif tok.group() == "}":
                depth -= 1
                if depth == 0:
                    return start, text[j + 1 : tok.start()]
        return start, None  # unclosed, e.g. a response cut at the length limit
    if j > i:
        m = re.match(r"[^\s$]+", text[j:])
        return start, (m.group() if m else None)
    return start, None


def _clean_integer_marker(content: str) -> str:
    """Reduce the text after an answer marker to a bare number when it is one.

    ``18 \\text{ dollars}``, ``\\$1,000``, ``x = 5``, ``25\\%``, ``90^\\circ`` become the number;
    anything with more than one number or other maths (``\\frac{1}{2}``, ``2^{10}``, ``\\sqrt{4}``)
    is returned cleaned but unreduced, so it cannot be mistaken for one of its digits.
    """
    s = _TEXT_WRAPPER.sub(r" \1 ", content)
    s = s.replace("\\$", " ").replace("$", " ").replace("\\%", " ").replace("%", " ")
    s = _DEGREES.sub(" ", _SPACING.sub(" ", s))
    if "=" in s:
        s = s.rsplit("=", 1)[1]
    s = s.strip().rstrip(".").strip()
    numbers = _NUMBER.findall(s)
    if len(numbers) == 1:
        rest = _NUMBER.sub(" ", s, count=1)
        if not _NOT_PLAIN.search(rest) and not re.search(r"[0-9]", rest):
            return numbers[0].replace(",", "")
    return s


def extract_answer(text: str, kind: str) -> str | None:
    """The final answer written in ``text``, or ``None`` when there is none.

    ``kind="boxed"``: the content of the last ``\\boxed{...}`` or ``\\fbox{...}`` (braces
    matched); with no box, or a last box left unclosed (a response cut at the length limit), the
    phrase after the last "answer is" (``$`` and a final period stripped). No last-number fallback: LaTeX answers are rarely a bare
    number, and the math-verify grader does its own, more careful extraction; this function is
    for display (eval tables) and dataset preparation.

    ``kind="integer"``: the text after the last marker (``\\boxed{}`` or ``####``, whichever
    comes last), reduced to a number when it is a single number (units, ``$``, ``%``, ``x =``,
    thousands separators removed), else the cleaned marker text; with no marker, the last number
    in the text. Commas of thousands are dropped (``2,125`` -> ``2125``); other formatting is kept
    (``025``, ``27.0``) for :class:`Grader` to read with :func:`int`.

    >>> extract_answer(r"so $x = \\boxed{\\frac{1}{2}}$.", "boxed")
    '\\\\frac{1}{2}'
    >>> extract_answer("She pays 2,125 dollars.\\n#### 2,125", "integer")
    '2125'
    """
    if kind == "boxed":
        _, boxed = _last_boxed(text)
        if boxed is not None:
            return boxed.strip()
        matches = list(_ANSWER_IS.finditer(text))
        if not matches:
            return None
        answer = matches[-1].group(1).strip().strip("$").strip().rstrip(".").strip()
        return answer or None
    if kind == "integer":
        text = text.replace("\u2212", "-")  # Unicode minus, as some models write it
        box_at, boxed = _last_boxed(text)
        hash_at = text.rfind("####")
        if hash_at > box_at:
            line = text[hash_at + 4 :].lstrip().split("\n", 1)[0]
            return _clean_integer_marker(line) or None
        if box_at >= 0:
            return None if boxed is None else (_clean_integer_marker(boxed) or None)
        numbers = _NUMBER.findall(text)
        return numbers[-1].replace(",", "") if numbers else None
    raise ValueError(f"unknown answer kind {kind!r}; valid: boxed, integer")


def _parse_int(text: str | None) -> int | None:
    """``int`` of an integer written as text (``025``, ``+7``, ``27.0``, ``2,125``), else ``None``."""
    if text is None:
        return None
    t = text.strip()
    if re.fullmatch(r"[-+]?[0-9]{1,3}(?:,[0-9]{3})+(?:\.0*)?", t):
        t = t.replace(",", "")
    m = _INT_TEXT.fullmatch(t)
    return int(m.group(1) + m.group(2)) if m else None


# --- worker process -------------------------------------------------------------------------


class _SoftTimeout(BaseException):
    """Raised by the worker's alarm; a BaseException so library ``except Exception`` misses it."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise _SoftTimeout


def _limit_resources(memory_limit_bytes: int | None) -> None:
    """Cap address-space *growth* to ``memory_limit_bytes`` and turn off core dumps.

    The cap is added to the size already mapped after imports, so an interpreter that maps a lot
    at start (e.g. if a package ``__init__`` pulls in a big library) still has the same headroom.
    """
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_limit_bytes is None:
        return
    current = 0
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    current = int(line.split()[1]) * 1024
    except OSError:
        pass
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = current + memory_limit_bytes
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _debug_action(response: str, memory_limit_bytes: int | None) -> float | None:
    """Test hooks (see the module docstring); ``None`` when ``response`` is not a debug request."""
    if not response.startswith(_DEBUG_PREFIX):
        return None
    action = response[len(_DEBUG_PREFIX) :].strip()
    if action.startswith("sleep:"):
        time.sleep(float(action.split(":", 1)[1]))  # interruptible: a soft timeout
        return 0.0
    if action == "hang":  # ignore the soft deadline, like a long C call: the parent must kill us
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        while True:
            time.sleep(3600)
    if action == "crash":
        os._exit(70)
    if action == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(60)
    if action == "raise":
        raise RuntimeError("debug: requested failure")
    if action == "memory":  # more than the cap allows: MemoryError under RLIMIT_AS, else fine
        _ = bytearray((memory_limit_bytes or 0) + (256 << 20))
        return 0.0
    return None


def _reasoning_gym_grader() -> Any:
    """``grade(response, gold)`` with a Reasoning Gym dataset's own ``score_answer``. ``gold`` is
    the JSON of ``{"dataset", "entry", "answer_format"}`` (:mod:`benchmarks.tasks.reasoning_gym`):
    the answer is cut from the response here, in the worker, then scored by the dataset. Scorers
    give partial credit to some wrong answers (0.01 for a present but wrong one); a verdict is
    correct only at full score, so accuracy stays the share of right answers."""
    import json

    from reasoning_gym import get_score_answer_fn
    from reasoning_gym.utils import extract_answer as extract_tagged

    @functools.lru_cache(maxsize=256)
    def scorer(dataset: str) -> Any:
        return get_score_answer_fn(dataset)

    def grade(response: str, gold: str) -> float:
        g = json.loads(gold)
        if g["answer_format"] == "hash":  # the tiny model's "<steps>#<answer>"
            answer = response.rsplit("#", 1)[1].strip() if "#" in response else None
        else:  # real models: "<answer>...</answer>", the Reasoning Gym convention
            answer = extract_tagged(response)
        if answer is None:
            return 0.0
        return 1.0 if float(scorer(g["dataset"])(answer=answer, entry=g["entry"])) >= 1.0 else 0.0

    return grade


def _worker_main(
    conn: Connection,
    soft_timeout_s: float,
    memory_limit_bytes: int | None,
    debug: bool,
    kind: str = "math_verify",
) -> None:
    """Grade ``(response, gold)`` items from ``conn`` until it closes; never raise out."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
        if kind == "reasoning_gym":
            rg_grade = _reasoning_gym_grader()
        # Its per-call timeouts are disabled below on purpose; silence the warning about that.
        logging.getLogger("math_verify").setLevel(logging.ERROR)
        from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

        gold_config = [LatexExtractionConfig()]
        pred_config = [ExprExtractionConfig(), LatexExtractionConfig()]

        @functools.lru_cache(maxsize=4096)
        def parse_gold(gold: str) -> list[Any]:
            wrapped = (
                gold if "\\boxed" in gold or gold.lstrip().startswith("$") else f"\\boxed{{{gold}}}"
            )
            return parse(wrapped, extraction_config=gold_config, parsing_timeout=None)

        def grade(response: str, gold: str) -> float:
            if debug:
                forced = _debug_action(response, memory_limit_bytes)
                if forced is not None:
                    return forced
            if kind == "reasoning_gym":
                return rg_grade(response, gold)
            pred = parse(response, extraction_config=pred_config, parsing_timeout=None)
            return 1.0 if verify(parse_gold(gold), pred, timeout_seconds=None) else 0.0

        # Warm up (lazy sympy/antlr imports) so the first real item is not charged for them.
        if kind == "math_verify":
            grade("The answer is $\\frac{1}{2}$.", "0.5")
        _limit_resources(memory_limit_bytes)
        signal.signal(signal.SIGALRM, _on_alarm)
    except BaseException as exc:  # report start-up failures instead of dying silently
        conn.send(("fatal", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            item = conn.recv()
        except (EOFError, OSError):
            return
        if item is None:
            return
        response, gold = item
        try:
            try:
                signal.setitimer(signal.ITIMER_REAL, soft_timeout_s)
                result: tuple[str, float | str] = ("ok", grade(response, gold))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _SoftTimeout:
            result = ("timeout", 0.0)
        except Exception as exc:  # MemoryError, RecursionError, sympy bugs: the item scores 0
            result = ("error", f"{type(exc).__name__}: {str(exc)[:200]}")
        try:
            conn.send(result)
        except (EOFError, OSError):
            return


# --- the pool -------------------------------------------------------------------------------


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    start_deadline: float
    ready: bool = False
    item: int | None = None
    deadline: float = math.inf
    pid: int | None = None
    graded: int = 0


def _ask_to_stop(w: _Worker) -> None:
    try:
        if w.ready and w.item is None:
            w.conn.send(None)
    except (OSError, ValueError):
        pass


def _stop_worker(w: _Worker, graceful: bool) -> None:
    if graceful:
        _ask_to_stop(w)
        w.process.join(timeout=2.0)
    if w.process.is_alive():
        w.process.kill()
        w.process.join(timeout=5.0)
    w.conn.close()


def _shutdown(workers: list[_Worker]) -> None:
    """Stop every worker (also run by the finaliser when a Grader is garbage collected)."""
    for w in workers:
        _ask_to_stop(w)  # all at once, then wait: they exit in parallel
    for w in workers:
        _stop_worker(w, graceful=True)
    workers.clear()


@dataclass
class _Batch:
    scores: list[float]
    timeouts: int = 0
    errors: int = 0
    pending: deque[int] = field(default_factory=deque)


class Grader:
    """Scores responses against gold answers; see the module docstring for the safety model.

    Args:
        kind: ``"integer"`` (in process), ``"math_verify"`` or ``"reasoning_gym"`` (a Reasoning
            Gym dataset's own scorer; the gold is a JSON payload): both in the process pool.
        timeout_s: Per-item budget in seconds (soft deadline inside the worker).
        workers: Pool size for the pool kinds.
        kill_grace_s: Extra time after the soft deadline before the parent kills the worker.
        memory_limit_bytes: Address-space growth allowed per worker (``None``: no cap).
        max_response_chars: Only this many trailing characters of a response are graded.
        startup_timeout_s: Time a worker may take to import math-verify and report ready.
        recycle_after: Replace a worker after it has graded this many items (``None``: never),
            so caches that grow over a long training run are dropped now and then.

    Use as a context manager or call :meth:`close`; :meth:`grade` is serialised by a lock.
    """

    def __init__(
        self,
        kind: GraderKind,
        timeout_s: float = 3.0,
        workers: int = 1,
        *,
        kill_grace_s: float = 0.5,
        memory_limit_bytes: int | None = 2 << 30,
        max_response_chars: int = 32_768,
        startup_timeout_s: float = 120.0,
        recycle_after: int | None = 50_000,
    ) -> None:
        if kind not in ("integer", *_POOL_KINDS):
            raise ValueError(
                f"unknown grader kind {kind!r}; valid: integer, {', '.join(_POOL_KINDS)}"
            )
        if not timeout_s > 0 or kill_grace_s < 0:
            raise ValueError(
                f"need timeout_s > 0 and kill_grace_s >= 0, got {timeout_s}, {kill_grace_s}"
            )
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if recycle_after is not None and recycle_after < 1:
            raise ValueError(f"recycle_after must be >= 1 or None, got {recycle_after}")
        if max_response_chars < 1:
            raise ValueError(f"max_response_chars must be >= 1, got {max_response_chars}")
        self.kind: GraderKind = kind
        self.timeout_s = float(timeout_s)
        self.workers = workers
        self.kill_grace_s = float(kill_grace_s)
        self.memory_limit_bytes = memory_limit_bytes
        self.max_response_chars = max_response_chars
        self.startup_timeout_s = float(startup_timeout_s)
        self.recycle_after = recycle_after
        self._ctx = mp.get_context("spawn")
        self._pool: list[_Worker] = []
        self._lock = threading.Lock()
        self._closed = False
        self._finalizer = weakref.finalize(self, _shutdown, self._pool)

    # -- lifecycle --
    def __getstate__(self) -> dict[str, object]:
        """Its settings only: a grader sent to another process (a suite's worker receives its
        task) starts a pool of its own there, lazily, as a new one would."""
        keep = ("kind", "timeout_s", "workers", "kill_grace_s", "memory_limit_bytes")
        keep += ("max_response_chars", "startup_timeout_s", "recycle_after")
        if self._closed:
            raise RuntimeError("a closed grader cannot be sent to another process")
        return {k: getattr(self, k) for k in keep}

    def __setstate__(self, state: dict[str, object]) -> None:
        kind = state.pop("kind")
        self.__init__(kind, **state)  # type: ignore[misc, arg-type]

    def __enter__(self) -> Grader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers. Idempotent; the grader cannot be used afterwards."""
        with self._lock:
            self._closed = True
            self._finalizer()

    def start(self) -> None:
        """Start the pool now and wait until every worker is ready (otherwise done lazily)."""
        if self.kind not in _POOL_KINDS:
            return
        with self._lock:
            self._check_open()
            self._fill_pool()
            batch = _Batch(scores=[])
            with self._abandon_on_error():
                while not all(w.ready for w in self._pool):
                    self._step([], [], batch)

    # -- grading --
    def grade(self, responses: Sequence[str], golds: Sequence[str]) -> GradeResult:
        """Score each response against the gold answer at the same index.

        Never raises because of a response's content: an item that cannot be graded scores 0
        and is counted. Raises ``ValueError`` for mismatched lengths (and, for the integer
        grader, a gold answer that is not an integer: that is a data error), ``TypeError`` for
        non-string input, ``RuntimeError`` if workers cannot start at all.
        """
        if len(responses) != len(golds):
            raise ValueError(f"{len(responses)} responses but {len(golds)} gold answers")
        for seq, what in ((responses, "response"), (golds, "gold")):
            for x in seq:
                if not isinstance(x, str):
                    raise TypeError(f"every {what} must be a str, got {type(x).__name__}")
        tails = [r[-self.max_response_chars :] for r in responses]
        if self.kind == "integer":
            return self._grade_integer(tails, golds)
        if not tails:
            return GradeResult(scores=[])
        with self._lock:
            self._check_open()
            self._fill_pool()
            batch = _Batch(scores=[0.0] * len(tails), pending=deque(range(len(tails))))
            with self._abandon_on_error():
                while batch.pending or any(w.item is not None for w in self._pool):
                    self._step(tails, golds, batch)
            return GradeResult(scores=batch.scores, timeouts=batch.timeouts, errors=batch.errors)

    def _grade_integer(self, responses: Sequence[str], golds: Sequence[str]) -> GradeResult:
        gold_ints = []
        for g in golds:
            value = _parse_int(g)
            if value is None:
                raise ValueError(f"integer grader: gold answer {g!r} is not an integer")
            gold_ints.append(value)
        scores: list[float] = []
        errors = 0
        for response, gold in zip(responses, gold_ints, strict=True):
            try:
                pred = _parse_int(extract_answer(response, "integer"))
            except Exception:  # defensive: extraction is regex-only and should not raise
                logger.exception("integer grader failed on a response")
                errors += 1
                pred = None
            scores.append(1.0 if pred is not None and pred == gold else 0.0)
        return GradeResult(scores=scores, timeouts=0, errors=errors)

    # -- pool internals (called with the lock held) --
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Grader is closed")

    def _spawn(self) -> _Worker:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=_worker_main,
            args=(
                child_conn,
                self.timeout_s,
                self.memory_limit_bytes,
                os.environ.get(DEBUG_ENV) == "1",
                self.kind,
            ),
            name="sppo-bench-grader",
            daemon=True,
        )
        process.start()
        child_conn.close()  # so the parent sees EOF when the worker dies
        return _Worker(process, parent_conn, time.monotonic() + self.startup_timeout_s)

    def _fill_pool(self) -> None:
        while len(self._pool) < self.workers:
            self._pool.append(self._spawn())

    def _replace(self, w: _Worker) -> None:
        _stop_worker(w, graceful=False)
        self._pool[self._pool.index(w)] = self._spawn()

    def _discard(self, w: _Worker) -> None:
        _stop_worker(w, graceful=False)
        self._pool.remove(w)

    @contextlib.contextmanager
    def _abandon_on_error(self) -> Iterator[None]:
        """If a batch is left by an exception (start-up failure, Ctrl-C), stop busy workers.

        Their late answers would otherwise be read as answers to the next batch's items.
        """
        try:
            yield
        except BaseException:
            for w in [w for w in self._pool if w.item is not None or not w.ready]:
                self._discard(w)
            raise

    def _step(self, responses: Sequence[str], golds: Sequence[str], batch: _Batch) -> None:
        """Dispatch to idle workers, wait for one event (result, death, deadline), handle it."""
        now = time.monotonic()
        for w in self._pool:
            if w.ready and w.item is None and batch.pending:
                i = batch.pending.popleft()
                try:
                    w.conn.send((responses[i], golds[i]))
                except (OSError, ValueError):  # died while idle: not the item's fault, requeue
                    batch.pending.appendleft(i)
                    self._replace(w)
                    return
                w.item, w.deadline = i, now + self.timeout_s + self.kill_grace_s
        waiting = [w for w in self._pool if w.item is not None or not w.ready]
        if not waiting:
            return
        next_deadline = min(w.deadline if w.ready else w.start_deadline for w in waiting)
        handles: list[Any] = [h for w in waiting for h in (w.conn, w.process.sentinel)]
        ready = set(wait(handles, timeout=max(0.0, next_deadline - time.monotonic())))
        now = time.monotonic()
        for w in list(waiting):
            if w.conn in ready or w.process.sentinel in ready:
                self._receive(w, batch)
            elif w.ready and w.item is not None and now >= w.deadline:
                logger.warning(
                    "grader: item %d exceeded %.1fs, killing worker %s",
                    w.item,
                    self.timeout_s + self.kill_grace_s,
                    w.pid,
                )
                batch.scores[w.item] = 0.0
                batch.timeouts += 1
                self._replace(w)
            elif not w.ready and now >= w.start_deadline:
                self._discard(w)
                raise RuntimeError(
                    f"grader worker did not start within {self.startup_timeout_s:.0f}s"
                )

    def _receive(self, w: _Worker, batch: _Batch) -> None:
        msg: tuple[Any, ...] | None = None
        try:
            if w.conn.poll():
                msg = w.conn.recv()
        except (EOFError, OSError):
            msg = None
        if msg is None:  # the process ended (or the pipe broke) without answering
            w.process.join(timeout=1.0)
            code = w.process.exitcode
            if not w.ready:
                self._discard(w)
                raise RuntimeError(f"grader worker exited during start-up (exit code {code})")
            if w.item is not None:
                logger.warning(
                    "grader: worker %s died (exit code %s) on item %d", w.pid, code, w.item
                )
                batch.scores[w.item] = 0.0
                batch.errors += 1
            self._replace(w)
            return
        tag = msg[0]
        if tag == "ready":
            w.ready, w.pid = True, msg[1]
        elif tag == "fatal":
            self._discard(w)
            raise RuntimeError(f"grader worker failed to start: {msg[1]}")
        elif w.item is not None:
            if tag == "ok":
                batch.scores[w.item] = float(msg[1])
            elif tag == "timeout":
                batch.scores[w.item] = 0.0
                batch.timeouts += 1
            else:
                logger.warning("grader: item %d raised %s", w.item, msg[1])
                batch.scores[w.item] = 0.0
                batch.errors += 1
            w.item, w.deadline = None, math.inf
            w.graded += 1
            if self.recycle_after is not None and w.graded >= self.recycle_after:
                self._replace(w)  # bounds slow growth of sympy/math-verify caches

    def _worker_pids(self) -> list[int | None]:
        """Pids of the current workers (tests use it to see a worker replaced)."""
        return [w.pid for w in self._pool]
