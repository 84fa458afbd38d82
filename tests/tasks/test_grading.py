"""Graders and answer extraction.

Gold-versus-gold agreement runs on the offline data in ``../shared/data`` (or
``$SPPO_BENCH_DATA``); those tests are skipped when neither exists. The math-verify tests share
one pool per module so its start-up cost is paid once.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.tasks.datasets import (
    DATASETS,
    load_dataset,
)
from benchmarks.tasks.grading import _DEBUG_PREFIX, DEBUG_ENV, Grader, GradeResult, extract_answer
from testkit.paths import REPO, needs_data, require_data


def _raw_rows(name: str) -> list[dict[str, object]]:
    with (require_data() / DATASETS[name].path).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _say(answer: object) -> str:
    return f"Let me think... so the final answer is $\\boxed{{{answer}}}$."


@pytest.fixture(scope="module")
def mv() -> Iterator[Grader]:
    with Grader("math_verify", timeout_s=3.0, workers=2) as grader:
        yield grader


# --- extraction ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so $\\boxed{\\frac{1}{2}}$", "\\frac{1}{2}"),
        ("\\boxed{1} then \\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # last box, escaped braces
        ("\\fbox{x^{2}} is it", "x^{2}"),
        ("\\boxed 5$.", "5"),  # MATH's brace-less form
        ("first \\boxed{3} then cut off \\boxed{\\frac{1}{", None),  # unclosed last box
        ("The answer is $\\frac{3}{4}$.", "\\frac{3}{4}"),
        ("Thus the answer is 12.5.", "12.5"),
        ("no answer here 42", None),
        ("", None),
    ],
)
def test_extract_boxed(text: str, expected: str | None) -> None:
    assert extract_answer(text, "boxed") == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("She pays 2,125 dollars.\n#### 2,125", "2125"),
        ("... #### 18 dollars\nextra", "18"),
        ("\\boxed{025}", "025"),
        ("\\boxed{27.0}", "27.0"),
        ("\\boxed{\\$1,000}", "1000"),
        ("\\boxed{18 \\text{ dollars}}", "18"),
        ("\\boxed{x = -5}", "-5"),
        ("\\boxed{25\\%}", "25"),
        ("\\boxed{90^\\circ}", "90"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # not reduced to one of its digits
        ("\\boxed{\\sqrt{4}}", "\\sqrt{4}"),
        ("#### 1 \n then \\boxed{7}", "7"),  # the later marker wins
        ("\\boxed{7} and later #### 8", "8"),
        ("we get 3 apples, then 1,234 pears", "1234"),
        ("nothing numeric", None),
        ("\\boxed{}", None),
    ],
)
def test_extract_integer(text: str, expected: str | None) -> None:
    assert extract_answer(text, "integer") == expected


def test_extract_unknown_kind() -> None:
    with pytest.raises(ValueError, match="boxed, integer"):
        extract_answer("1", "latex")


# --- integer grader --------------------------------------------------------------------------


def test_integer_grader_equivalences() -> None:
    with Grader("integer") as g:
        result = g.grade(
            [
                "\\boxed{025}",
                "\\boxed{25}",
                "\\boxed{27.0}",
                "#### 2,125",
                "\\boxed{-1}",
                "\\boxed{\\frac{1}{2}}",
                "\\boxed{27.5}",
                "\\boxed{26}",
                "\\boxed{٢٥}",  # Arabic-Indic digits are not a written answer here
                "no answer",
            ],
            ["25", "025", "27", "2125", "-1", "2", "27", "25", "25", "25"],
        )
    assert result == GradeResult(scores=[1.0] * 5 + [0.0] * 5, timeouts=0, errors=0)


def test_integer_grader_rejects_bad_input() -> None:
    g = Grader("integer")
    with pytest.raises(ValueError, match="not an integer"):
        g.grade(["\\boxed{1}"], ["\\frac{1}{2}"])
    with pytest.raises(ValueError, match="2 responses but 1"):
        g.grade(["a", "b"], ["1"])
    with pytest.raises(TypeError, match="str"):
        g.grade([None], ["1"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="integer, math_verify"):
        Grader("exact")  # type: ignore[arg-type]


@needs_data
@pytest.mark.parametrize("name", ["aime24", "aime25", "amc23", "gsm8k", "gsm8k_train"])
def test_integer_datasets_gold_vs_gold(name: str) -> None:
    """Each gold (and the source's own spelling: ``025``, ``27.0``, ``2,125``) scores 1 against
    itself and 0 against a different neighbour."""
    rows = _raw_rows(name)
    golds = [str(r["answer"]) for r in rows]
    spelled = [_say(r.get("source_answer", r["answer"])) for r in rows]
    gsm_style = [
        f"{r.get('solution', '')}\n#### {r.get('source_answer', r['answer'])}" for r in rows
    ]
    neighbours = golds[1:] + golds[:1]
    with Grader("integer") as g:
        assert g.grade(spelled, golds).scores == [1.0] * len(rows)
        assert g.grade(gsm_style, golds).scores == [1.0] * len(rows)
        wrong = g.grade(spelled, neighbours).scores
    assert wrong == [1.0 if a == b else 0.0 for a, b in zip(golds, neighbours, strict=True)]


# --- math-verify grader ----------------------------------------------------------------------


def test_math_verify_equivalences(mv: Grader) -> None:
    cases = [
        (_say("0.5"), "\\frac{1}{2}", 1.0),
        (_say("\\dfrac12"), "\\frac{1}{2}", 1.0),
        ("The answer is 1/2.", "\\frac{1}{2}", 1.0),
        (_say("\\frac{2}{4}"), "0.5", 1.0),
        (_say("(3, \\frac{\\pi}{2})"), "\\left( 3, \\frac{\\pi}{2} \\right)", 1.0),
        (_say("025"), "25", 1.0),
        (_say("\\frac{1}{3}"), "\\frac{1}{2}", 0.0),
        (_say("\\sqrt{2}"), "2", 0.0),
        ("I do not know.", "7", 0.0),
    ]
    result = mv.grade([c[0] for c in cases], [c[1] for c in cases])
    assert result.scores == [c[2] for c in cases]
    assert (result.timeouts, result.errors) == (0, 0)
    assert mv.grade([], []) == GradeResult(scores=[], timeouts=0, errors=0)


@pytest.mark.slow  # a LaTeX dataset's golds through math-verify: ~6 s each
@needs_data
@pytest.mark.parametrize(
    ("name", "sample"),
    [("math500", None), ("minerva", None), ("olympiadbench", None), ("math", 300)],
)
def test_latex_datasets_gold_vs_gold(mv: Grader, name: str, sample: int | None) -> None:
    problems = load_dataset(name, data_dir=require_data())
    if sample is not None:
        problems = random.Random(0).sample(problems, sample)
    result = mv.grade([_say(p.answer) for p in problems], [p.answer for p in problems])
    failed = [(p.id, p.answer) for p, s in zip(problems, result.scores, strict=True) if s != 1.0]
    assert failed == []
    assert (result.timeouts, result.errors) == (0, 0)


@pytest.mark.slow  # all 500 MATH-500 solutions through math-verify: ~4 s
@needs_data
def test_math500_reference_solutions_are_correct(mv: Grader) -> None:
    rows = _raw_rows("math500")
    result = mv.grade([str(r["solution"]) for r in rows], [str(r["answer"]) for r in rows])
    assert sum(result.scores) == 500


@pytest.mark.slow  # MATH-500 through math-verify: ~4 s
@needs_data
def test_math500_wrong_neighbour_scores_zero(mv: Grader) -> None:
    problems = load_dataset("math500", data_dir=require_data())
    golds = [p.answer for p in problems]
    neighbours = golds[1:] + golds[:1]
    scores = mv.grade([_say(g) for g in golds], neighbours).scores
    ones = {(a, b) for a, b, s in zip(golds, neighbours, scores, strict=True) if s == 1.0}
    # Identical strings, and math-verify reading "x=5" as 5 (by design).
    assert ones == {(a, b) for a, b in zip(golds, neighbours, strict=True) if a == b} | {
        ("5", "x=5")
    }


@pytest.fixture
def debug_grader(monkeypatch: pytest.MonkeyPatch) -> Iterator[Grader]:
    monkeypatch.setenv(DEBUG_ENV, "1")
    with Grader("math_verify", timeout_s=0.5, kill_grace_s=0.25) as grader:
        yield grader


@pytest.mark.slow  # a pool whose workers time out and crash: ~4 s
def test_timeouts_and_crashes_are_counted_exactly(debug_grader: Grader) -> None:
    g = debug_grader
    g.start()
    pids = g._worker_pids()
    d = "__sppo_grader_debug__:"
    responses = [
        _say("\\frac{1}{2}"),
        d + "sleep:30",  # soft deadline: the worker survives
        d + "hang",  # ignores the soft deadline: killed by the parent
        d + "crash",  # os._exit
        d + "segv",
        d + "raise",
        d + "memory",  # MemoryError under the address-space cap
        d + "sleep:0",
        _say("0.5"),
    ]
    start = time.monotonic()
    result = g.grade(responses, ["\\frac{1}{2}"] * len(responses))
    elapsed = time.monotonic() - start
    assert result.scores == [1.0] + [0.0] * 7 + [1.0]
    assert (result.timeouts, result.errors) == (2, 4)
    assert elapsed < 20
    assert g._worker_pids() != pids  # replaced
    after = g.grade([_say("3"), _say("4")], ["3", "3"])
    assert after == GradeResult(scores=[1.0, 0.0], timeouts=0, errors=0)


def test_debug_prefix_is_plain_text_without_env(
    mv: Grader, monkeypatch: pytest.MonkeyPatch
) -> None:
    mv.start()  # the pool's workers start without the flag (a no-op if they run already)...
    monkeypatch.setenv(DEBUG_ENV, "1")  # ... so setting it now is too late for them
    pids = mv._worker_pids()
    result = mv.grade(["__sppo_grader_debug__:crash", "__sppo_grader_debug__:hang"], ["1", "1"])
    assert result == GradeResult(scores=[0.0, 0.0], timeouts=0, errors=0)
    assert mv._worker_pids() == pids


def _hostile(marker: Path) -> list[str]:
    m = str(marker)
    touch = f"__import__('os').system('touch {m}')"
    code = [
        touch,
        f"\\boxed{{{touch}}}",
        f"${touch}$",
        f"The answer is {touch}",
        f"Answer: {touch}",
        f'eval("{touch}")',
        f"exec('import os; os.system(\"touch {m}\")')",
        f"import os; os.system('touch {m}')",
        f"\\boxed{{open('{m}', 'w').write('x')}}",
        "\\boxed{().__class__.__base__.__subclasses__()}",
        "lambda: __import__('os').system('true')",
        f"\\boxed{{\\text{{{touch}}}}}",
        f"\\boxed{{\\mathrm{{exec}}(\\text{{'touch {m}'}})}}",
        f"\\immediate\\write18{{touch {m}}}",
        "\\input{/etc/passwd}",
        f"`touch {m}` $(touch {m})",
        "{{7*7}} ${7*7} %s%s%n",
    ]
    towers = [
        "\\boxed{9^{9^{9^{9}}}}",
        "9**9**9**9",
        "answer: 9^9^9^9",
        "\\boxed{10^{10^{10^{10}}}}",
        "\\boxed{2^{2^{2^{2^{2^{2^{2}}}}}}}",
        "\\boxed{9^{9^{9^{9^{9^{9}}}}} - 9^{9^{9^{9^{9^{9}}}}}}",
        "\\boxed{(10^{100})!}",
        "\\boxed{100!!!}",
        "\\boxed{\\sum_{n=1}^{10^{10}} n^{n}}",
        "\\boxed{\\prod_{k=1}^{10^{9}} k}",
        "\\boxed{\\int_0^\\infty e^{-x^{100}} dx}",
        "\\boxed{\\lim_{x\\to\\infty} x^{x^{x}}}",
        "\\boxed{\\frac{d^{100}}{dx^{100}} x^{x^{x^{x}}}}",
    ]
    nesting = [
        "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_000 + "}",
        "\\boxed{" + "(" * 3_000 + "1" + ")" * 3_000 + "}",
        "\\boxed{" + "\\frac{1}{" * 300 + "2" + "}" * 300 + "}",
        "\\boxed{" + "\\sqrt{" * 500 + "2" + "}" * 500 + "}",
        "\\boxed{" * 2_000,
        "\\left(" * 2_000,
        "\\begin{matrix}" * 1_000,
        "\\boxed{\\begin{pmatrix}" + "1&" * 3_000 + "1\\end{pmatrix}}",
    ]
    long = [
        "1" * 1_000_000,
        "\\boxed{" + "1+" * 500_000 + "1}",
        "\\boxed{" + "x" * 1_000_000 + "}",
        "a" * 2_000_000,
        "$" * 100_000,
        "answer is " * 20_000,
        "final answer is " * 10_000 + "2",
        "1," * 200_000,
    ]
    weird = [
        "\x00" * 1_000,
        "\\boxed{3\x00}",
        "\x00\\boxed{\x00}\x00",
        "\ud800\\boxed{\udfff}",  # lone surrogates
        "\u202e\\boxed{3}\u202c",
        "\\boxed{½}",
        "",
        "\\",
        "\\boxed",
        "}}}}{{{{",
        "\\boxed{1/0}",
        "\\boxed{\\log(0)}",
        "\\boxed{\\infty - \\infty}",
        "\\boxed{x=}",
        bytes(range(256)).decode("latin-1") * 100,
    ]
    return code + towers + nesting + long + weird


@pytest.fixture(scope="module")
def quick() -> Iterator[Grader]:
    """A short deadline: the mechanism is the same as at 3 s, the test just waits less."""
    with Grader("math_verify", timeout_s=0.5, kill_grace_s=0.5) as grader:
        yield grader


@pytest.mark.slow  # hostile outputs through the math-verify pool: ~10 s
def test_hostile_outputs(quick: Grader, tmp_path: Path) -> None:
    """Every nasty string scores 0 within the deadline plus a margin, without side effects, and
    the pool serves normally afterwards."""
    mv = quick
    marker = tmp_path / "pwned"
    hostile = _hostile(marker)
    assert len(hostile) >= 50
    gold = "\\frac{17}{19}"  # appears in none of them
    bound = mv.timeout_s + mv.kill_grace_s + 1.0
    timeouts = errors = 0
    slow: list[tuple[int, float]] = []
    for i, text in enumerate(hostile):
        mv.start()  # a replaced worker's start-up is not charged to the next item
        t0 = time.monotonic()
        result = mv.grade([text], [gold])
        dt = time.monotonic() - t0
        assert result.scores == [0.0], (i, text[:80])
        timeouts += result.timeouts
        errors += result.errors
        if dt > bound:
            slow.append((i, dt))
    assert slow == []
    assert not marker.exists()
    batch = mv.grade([_say("\\frac{17}{19}"), _say("1")], [gold, gold])
    assert batch == GradeResult(scores=[1.0, 0.0], timeouts=0, errors=0)
    # For the record (pytest -rP shows it): how many needed the deadline.
    print(f"hostile: {len(hostile)} strings, {timeouts} timeouts, {errors} errors")


def test_integer_grader_on_hostile_outputs(tmp_path: Path) -> None:
    hostile = _hostile(tmp_path / "pwned")
    start = time.monotonic()
    with Grader("integer") as g:
        result = g.grade(hostile, ["17"] * len(hostile))
    assert result == GradeResult(scores=[0.0] * len(hostile), timeouts=0, errors=0)
    assert time.monotonic() - start < 5.0
    assert not (tmp_path / "pwned").exists()


def test_workers_are_recycled() -> None:
    with Grader("math_verify", recycle_after=2) as g:
        g.start()
        pids = g._worker_pids()
        result = g.grade([_say(i) for i in range(5)], [str(i % 2) for i in range(5)])
        assert result.scores == [1.0, 1.0, 0.0, 0.0, 0.0]
        assert g._worker_pids() != pids


def test_parent_never_imports_sympy() -> None:
    """The caller's process grades with math-verify without importing sympy or math-verify."""
    code = (
        "import sys\n"
        "from benchmarks.tasks.grading import Grader\n"
        "if __name__ == '__main__':\n"
        "    with Grader('math_verify') as g:\n"
        "        r = g.grade(['\\\\boxed{0.5}', \"__import__('os')\"], ['\\\\frac{1}{2}', '1'])\n"
        "    assert r.scores == [1.0, 0.0], r\n"
        "    leaked = [m for m in ('sympy', 'math_verify') if m in sys.modules]\n"
        "    assert not leaked, leaked\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr


def test_start_up_failure_is_reported_and_recovers() -> None:
    with Grader("math_verify", startup_timeout_s=0.01) as g:
        with pytest.raises(RuntimeError, match="did not start"):
            g.grade(["\\boxed{1}"], ["1"])
        g.startup_timeout_s = 120.0
        assert g.grade(["\\boxed{1}"], ["1"]).scores == [1.0]


def test_closed_grader_refuses() -> None:
    g = Grader("math_verify")
    g.close()
    g.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        g.grade(["1"], ["1"])


# --- extraction edge cases, settings, the pool's workers and errors in full (docs/mutation.md) ---


def test_integer_gold_answers_with_separators_and_signs() -> None:
    """A gold written with thousands separators (``2,125``) is the integer it denotes, and the
    sign counts: ``-7`` is not ``7``."""
    with Grader("integer") as g:
        result = g.grade(
            ["\\boxed{2125}", "\\boxed{2,125}", "\\boxed{-7}", "\\boxed{7}", "\\boxed{-7}"],
            ["2,125", "2,125.0", "7", "-7", "-7"],
        )
    assert result == GradeResult(scores=[1.0, 1.0, 0.0, 0.0, 1.0], timeouts=0, errors=0)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\\boxed{\\text{3 or 4}}", "3 or 4"),
        ("\\boxed{\\$3 or \\$4}", "3 or  4"),
        ("\\boxed{$3$ or $4$}", "3  or  4"),
        ("\\boxed{3\\% or 4\\%}", "3  or 4"),
        ("\\boxed{3% or 4%}", "3  or 4"),
        ("\\boxed{90^\\circ or 45^{\\circ}}", "90 or 45"),
        ("\\boxed{3 \\quad or\\, 4}", "3   or  4"),
        ("#### 3 or 4.", "3 or 4"),  # the sentence's final period, not a decimal point
        ("#### .5 or 4", ".5 or 4"),
        ("#### 7 and 8 fit box X.", "7 and 8 fit box X"),
    ],
)
def test_integer_extraction_cleans_what_it_cannot_reduce(text: str, shown: str) -> None:
    """A box holding two numbers is not reduced to one of them (the grader scores it 0); the eval
    tables show its text with the wrappers, units and spacing commands blanked out, as the
    single-number case removes them."""
    assert extract_answer(text, "integer") == shown


@pytest.mark.parametrize(
    ("text", "answer"),
    [("\\boxed{2x = 10}", "10"), ("\\boxed{y = 2x = 10}", "10"), ("#### x=3", "3")],
)
def test_integer_extraction_reads_the_value_after_the_last_equals_sign(
    text: str, answer: str
) -> None:
    """``2x = 10`` answers 10 (not its coefficient 2), also in a chain of equalities."""
    assert extract_answer(text, "integer") == answer


def test_a_number_with_a_trailing_fragment_is_not_read_as_its_prefix() -> None:
    """``12.0.5`` (a version, a date, a typo) holds one well-formed number, ``12.0``, and a
    leftover digit: it is shown whole and is not the integer 12."""
    assert extract_answer("#### 12.0.5", "integer") == "12.0.5"
    with Grader("integer") as g:
        assert g.grade(["#### 12.0.5", "#### 12.0"], ["12", "12"]).scores == [0.0, 1.0]


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        # Another command that starts with \fbox is not a box: the phrase answers.
        ("set \\fboxsep=2pt, the answer is 4.", "4"),
        # A box with nothing after it (a response cut at the length limit): no answer.
        ("cut off at \\boxed  ", None),
        ("\\boxed $5$", None),
        ("\\boxed 5$.", "5"),  # MATH's brace-less form
    ],
)
def test_boxed_extraction_of_brace_less_and_cut_boxes(text: str, answer: str | None) -> None:
    """Only ``\\boxed``/``\\fbox`` followed by a brace or by spaces and a token is a box."""
    assert extract_answer(text, "boxed") == answer


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("The answer is $7.$", "7"),  # a period inside the dollars ends the sentence
        ("The answer is $X$.", "X"),  # a variable named X is kept whole
    ],
)
def test_boxed_extraction_from_the_answer_phrase(text: str, answer: str) -> None:
    """Without a box, the phrase after "answer is", its dollars and final period stripped."""
    assert extract_answer(text, "boxed") == answer


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("\\boxed{\u22127}", "-7"),  # the Unicode minus sign is a minus
        ("#### 1\n#### 2", "2"),  # the last marker
        ("#### x = 5", "5"),  # the whole marker line, not its first word
        ("#### 5\nstep 2\ndone", "5"),  # the marker's line only
        ("####\n42", "42"),  # the answer on the line after the marker
        ("####72", "72"),  # no space after the marker
    ],
)
def test_integer_extraction_after_the_gsm8k_marker(text: str, answer: str) -> None:
    """The answer of ``####`` is the first line of text after the last marker."""
    assert extract_answer(text, "integer") == answer


def test_a_closed_grader_refuses_to_travel_and_says_why() -> None:
    """Sending a closed grader to a suite's worker is a bug in the caller; the error says so."""
    import pickle

    g = Grader("integer")
    g.close()
    with pytest.raises(RuntimeError) as info:
        pickle.dumps(g)
    assert str(info.value) == "a closed grader cannot be sent to another process"


def test_a_grader_sent_to_another_process_keeps_its_settings() -> None:
    """A suite's worker receives the task with its grader: the copy has the same kind, deadline,
    pool size and limits (and starts a pool of its own there)."""
    import pickle

    with Grader("math_verify", timeout_s=0.7, workers=2, kill_grace_s=0.1, recycle_after=5) as g:
        copy = pickle.loads(pickle.dumps(g))
    keep = ("kind", "timeout_s", "workers", "kill_grace_s", "memory_limit_bytes")
    keep += ("max_response_chars", "startup_timeout_s", "recycle_after")
    assert {k: getattr(copy, k) for k in keep} == {k: getattr(g, k) for k in keep}
    assert (copy.timeout_s, copy.workers, copy.recycle_after) == (0.7, 2, 5)
    copy.close()


def test_grader_defaults_and_its_workers_processes() -> None:
    """A pool grader defaults to one worker and a 3 s deadline (the rest as documented); its
    workers are spawned, not forked (a fork would copy the trainer's threads and memory), daemon
    processes (they die with the trainer, never outliving a killed run), named so they can be
    told apart."""
    g = Grader("math_verify")
    assert (g.timeout_s, g.workers, g.kill_grace_s, g.memory_limit_bytes) == (3.0, 1, 0.5, 2 << 30)
    assert (g.max_response_chars, g.startup_timeout_s, g.recycle_after) == (32_768, 120.0, 50_000)
    assert g._ctx.get_start_method() == "spawn"
    with g:
        g.start()
        procs = [w.process for w in g._pool]
        assert [(p.name, p.daemon) for p in procs] == [("sppo-bench-grader", True)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"kind": "sympy"},
            "unknown grader kind 'sympy'; valid: integer, math_verify, reasoning_gym",
        ),
        ({"timeout_s": 0.0}, "need timeout_s > 0 and kill_grace_s >= 0, got 0.0, 0.5"),
        ({"kill_grace_s": -0.1}, "need timeout_s > 0 and kill_grace_s >= 0, got 3.0, -0.1"),
        ({"workers": 0}, "workers must be >= 1, got 0"),
        ({"recycle_after": 0}, "recycle_after must be >= 1 or None, got 0"),
        ({"max_response_chars": 0}, "max_response_chars must be >= 1, got 0"),
    ],
)
def test_grader_settings_out_of_range_are_refused_in_full(kwargs, message) -> None:
    settings = {"kind": "math_verify", **kwargs}
    with pytest.raises(ValueError) as err:
        Grader(settings.pop("kind"), **settings)
    assert str(err.value) == message


def test_grader_settings_at_their_bounds_are_accepted() -> None:
    """The smallest allowed values build a grader (no pool starts until it grades)."""
    g = Grader("math_verify", timeout_s=0.01, kill_grace_s=0.0, recycle_after=1)
    h = Grader("math_verify", max_response_chars=1, recycle_after=None)
    assert (g.kill_grace_s, g.recycle_after, h.max_response_chars, h.recycle_after) == (
        0.0,
        1,
        1,
        None,
    )
    g.close()
    h.close()


def test_a_worker_that_died_idle_is_replaced_and_the_item_graded() -> None:
    """A worker killed between batches (an OOM kill, say) fails the next send: the item goes
    back to the queue, not lost or scored 0, and a new worker grades it."""
    with Grader("math_verify") as g:
        g.start()
        (dead,) = g._pool
        dead.process.kill()
        dead.process.join()
        result = g.grade(["so $\\boxed{3}$", "so $\\boxed{4}$"], ["3", "3"])
        assert result == GradeResult(scores=[1.0, 0.0], timeouts=0, errors=0)
        assert [w.process for w in g._pool] != [dead.process]


@pytest.mark.parametrize(
    ("hook", "settings", "counts", "warning"),
    [
        # past its deadline (timeout plus grace): killed, a timeout
        (
            "hang",
            {"timeout_s": 0.3, "kill_grace_s": 0.2},
            (1, 0),
            "item 0 exceeded 0.5s, killing worker {pid}",
        ),
        # the worker dies on the item (the hook exits 70): an error
        ("crash", {}, (0, 1), "worker {pid} died (exit code 70) on item 0"),
    ],
)
def test_a_lost_item_s_warning_names_the_worker(
    hook, settings, counts, warning, monkeypatch, caplog
) -> None:
    """An item lost to a hang or a dying worker scores 0, counted as a timeout or an error, and
    the warning names the item and the worker process (its exit code when it died), so a user
    can match it with the system's logs."""
    monkeypatch.setenv(DEBUG_ENV, "1")  # before the pool starts: its worker honours the hook
    with Grader("math_verify", **settings) as g:
        g.start()
        (w,) = g._pool
        with caplog.at_level("WARNING", logger="benchmarks.tasks.grading"):
            result = g.grade([_DEBUG_PREFIX + hook], ["1"])
    assert result == GradeResult(scores=[0.0], timeouts=counts[0], errors=counts[1])
    assert "grader: " + warning.format(pid=w.pid) in caplog.messages


@pytest.mark.parametrize(
    ("planted", "message"),
    [
        # an import that raises: the worker catches it and reports it (`fatal`)
        (
            "raise ImportError('planted: a broken install')",
            "grader worker failed to start: ImportError: planted: a broken install",
        ),
        # an import that ends the process before it can report anything
        ("import os\nos._exit(3)", "grader worker exited during start-up (exit code 3)"),
    ],
)
def test_a_worker_that_cannot_start_fails_the_pool_with_why(
    planted, message, tmp_path, monkeypatch
) -> None:
    """A worker whose start-up fails (math-verify broken, say) is not retried for ever nor
    waited on until its start-up deadline: the pool raises at once with the worker's own reason,
    or its exit code where it died without one, and keeps no dead worker. The defect is planted
    as a real one would be: a broken ``math_verify`` first on the path the spawned worker
    inherits from this process."""
    (tmp_path / "math_verify.py").write_text(planted + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with Grader("math_verify", startup_timeout_s=60.0) as g:
        with pytest.raises(RuntimeError) as err:
            g.start()
        assert str(err.value) == message
        assert g._pool == []


@pytest.mark.parametrize(
    ("responses", "golds", "message"),
    [
        ([3], ["3"], "every response must be a str, got int"),
        (["3"], [None], "every gold must be a str, got NoneType"),
    ],
)
def test_non_string_input_is_refused_naming_the_field_and_type(responses, golds, message) -> None:
    """Refused before any worker starts, naming which input and what it got."""
    with Grader("math_verify") as g:
        with pytest.raises(TypeError) as err:
            g.grade(responses, golds)
        assert str(err.value) == message
        assert g._pool == []


def test_a_closed_grader_says_so_in_full() -> None:
    g = Grader("math_verify")
    g.close()
    with pytest.raises(RuntimeError) as err:
        g.grade(["1"], ["1"])
    assert str(err.value) == "Grader is closed"


def test_a_worker_is_recycled_after_exactly_recycle_after_items() -> None:
    """``recycle_after=2``: the worker that graded its second item is replaced, not the one
    that graded its first (nor only after a third)."""
    with Grader("math_verify", recycle_after=2) as g:
        g.start()
        first = g._worker_pids()
        g.grade(["so $\\boxed{1}$"], ["1"])
        assert g._worker_pids() == first
        g.grade(["so $\\boxed{2}$"], ["2"])
        g.start()  # the replacement has a pid once it is ready
        second = g._worker_pids()
        assert second != first
        g.grade(["so $\\boxed{3}$"], ["3"])
        assert g._worker_pids() == second


def test_every_timeout_and_error_of_a_batch_is_counted_and_an_error_named(
    monkeypatch, caplog
) -> None:
    """Two items past the soft deadline are two timeouts, two that raise two errors; each error's
    warning names the item and the exception the worker caught."""
    monkeypatch.setenv(DEBUG_ENV, "1")  # before the pool starts: its worker honours the hooks
    sleep, fail = _DEBUG_PREFIX + "sleep:5", _DEBUG_PREFIX + "raise"
    with Grader("math_verify", timeout_s=0.3) as g:
        g.start()
        with caplog.at_level("WARNING", logger="benchmarks.tasks.grading"):
            result = g.grade([sleep, fail, sleep, fail, "$\\boxed{1}$"], ["1"] * 5)
    assert result == GradeResult(scores=[0.0, 0.0, 0.0, 0.0, 1.0], timeouts=2, errors=2)
    raised = [m for m in caplog.messages if " raised " in m]
    assert raised == [
        f"grader: item {i} raised RuntimeError: debug: requested failure" for i in (1, 3)
    ]
