"""The real datasets graded through ``DatasetTask`` as the suite builds it, not the bare ``Grader``.

``test_grading.py`` checks the graders themselves on every gold answer. What it cannot see is the
wiring the trainer and the suite go through: a config node becomes a ``DatasetTask``
(``benchmarks/tasks/build.py``), each problem carries its grader kind, and ``DatasetTask.grade``
sends each row to its kind's grader and puts each verdict back on its own row. A task that scored
every response 0 (or 1, or shifted the verdicts by a row) would leave every accuracy in a run
plausible and wrong; these tests make each such defect fail.

A wrong answer is a *different problem's* gold answer, chosen so that it cannot be equivalent to
the right one by a rule that does not ask the grader (:func:`_certainly_different`): two plain
numbers that differ by more than any rounding a grader applies, or a plain number (or a matrix)
against a kind of answer no single number equals (a text label, a tuple, an interval, an
expression in variables). Answers whose value this rule cannot tell (``\\sqrt{51}``, ``90^\\circ``,
``4 \\text{ feet}``) are only checked against a neighbour of a kind that cannot equal them.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Sequence
from fractions import Fraction
from pathlib import Path

import pytest

from benchmarks.config import compose_config
from benchmarks.tasks.base import TaskProblem
from benchmarks.tasks.build import build_task
from benchmarks.tasks.dataset_task import DatasetTask
from benchmarks.tasks.datasets import (
    DATASETS,
    Problem,
    load_dataset,
    prompt_messages,
)
from benchmarks.tasks.grading import _DEBUG_PREFIX, DEBUG_ENV, GradeResult
from testkit.paths import needs_data, require_data

#: Rows per LaTeX (math-verify) dataset. The pool grades ~50 items a second on a loaded core and
#: every gold of MATH-500, Minerva and OlympiadBench already goes through the bare grader in
#: test_grading.py; here the subject is the task's routing and bookkeeping, which 30 rows of
#: mixed kinds exercise as well as 12000. The integer datasets are graded whole (in process, ms).
LATEX_SAMPLE = 30


# --- answer kinds, decided without a grader --------------------------------------------------

_EQUATION = re.compile(r"[A-Za-z]\s*=\s*(.+)", re.DOTALL)  # "x = 5" states the value 5
_FRAC = re.compile(r"(-?)\\[dt]?frac\{(-?\d+)\}\{(\d+)\}")
_SLASH = re.compile(r"(-?\d+)\s*/\s*(\d+)")
_DECIMAL = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_COMMAND = re.compile(r"\\[A-Za-z]+")
#: Anything that may carry a unit, a scale or a symbolic constant: its value is not read here.
_OPAQUE = ("\\text", "\\mathrm", "\\mbox", "%", "\\circ", "$", "\\in", "\\pi", "np.")


def _rational(s: str) -> Fraction | None:
    """The exact value of a plain number (``12``, ``-3.5``, ``4.5e33``, ``\\frac{3}{4}``,
    ``9,\\!000``), else None."""
    t = re.sub(r"(?<=\d)(?:,|\\!|\{,\})+(?=\d{3}\b)", "", s.replace("\\!", "")).strip()
    if _DECIMAL.fullmatch(t):
        return Fraction(t)
    if m := _FRAC.fullmatch(t):
        sign, num, den = m.groups()
        return (-1 if sign else 1) * Fraction(int(num), int(den)) if int(den) else None
    if m := _SLASH.fullmatch(t):
        return Fraction(int(m[1]), int(m[2])) if int(m[2]) else None
    return None


def answer_kind(answer: str) -> tuple[str, Fraction | None]:
    """``(kind, value)``: number, fraction, text, tuple, interval, matrix, expression or other;
    ``value`` is the exact value of a number or fraction."""
    s = answer.strip()
    if m := _EQUATION.fullmatch(s):
        s = m.group(1).strip()
    if "matrix}" in s:
        return "matrix", None
    if re.fullmatch(r"\\text\{[^{}0-9]*\}", s):
        return "text", None
    if re.fullmatch(r"[\(\[][^()\[\]]*,[^()\[\]]*[\)\]]", s):
        return ("interval" if "\\infty" in s or s[0] + s[-1] in ("(]", "[)") else "tuple"), None
    value = _rational(s)
    if value is not None:
        return ("number" if value.denominator == 1 or "frac" not in s else "fraction"), value
    if any(w in s for w in _OPAQUE):
        return "other", None
    # Variables other than e and i (constants) make a symbolic answer no number equals.
    if set(re.findall(r"[A-Za-z]", _COMMAND.sub(" ", s))) - {"e", "i"}:
        return "expression", None
    return "other", None


#: Kinds that are never equal to one plain number.
_NOT_A_NUMBER = {"text", "tuple", "interval", "matrix", "expression"}


def _certainly_different(gold: str, wrong: str) -> bool:
    """True when ``wrong`` cannot be equivalent to ``gold`` whatever the grader's normalisation."""
    (g_kind, g), (w_kind, w) = answer_kind(gold), answer_kind(wrong)
    if w is not None:  # a plain number
        if g is not None:
            # A gap no grader's tolerance bridges: 1% of the larger magnitude, and at least 0.01.
            return abs(g - w) >= Fraction(1, 100) * max(1, abs(g), abs(w))
        return g_kind in _NOT_A_NUMBER
    if w_kind == "matrix":  # a matrix is no number, label, expression or scalar of other form
        return g_kind in {"number", "fraction", "text", "expression", "other"}
    return False


def _neighbour(pool: Sequence[TaskProblem], at: int) -> TaskProblem | None:
    """The first problem after ``pool[at]`` (cyclically) whose gold is certainly not ``pool[at]``'s."""
    gold = pool[at].answer
    for j in range(1, len(pool)):
        cand = pool[(at + j) % len(pool)]
        if _certainly_different(gold, cand.answer):
            return cand
    return None


def _say(answer: str) -> str:
    """A response in the format every real-dataset prompt asks for (a final ``\\boxed{}``)."""
    return f"First I set up the equations and simplify; so the answer is $\\boxed{{{answer}}}$."


# --- the task, as the suite builds it --------------------------------------------------------


def _suite_task(data_dir: Path, train: str, test: str, train_size: int = 8) -> DatasetTask:
    """``build_task`` on the composed task node, as ``benchmarks/suite/plan.py`` does: the
    config group of the grader kind (gsm8k: integer, math: math-verify), datasets overridden."""
    group = "gsm8k" if DATASETS[test].grader == "integer" else "math"
    cfg = compose_config(
        [
            f"task={group}",
            f"task.train_dataset={train}",
            f"task.eval_datasets=[{test}]",
            f"task.data_dir={data_dir}",
            f"task.train_size={train_size}",
            "task.eval_size=null",
            "task.grader_workers=1",
        ]
    )
    task = build_task(cfg.task)
    assert isinstance(task, DatasetTask)
    return task


@pytest.fixture
def task_of(data_dir: Path) -> Iterator:
    """Builds suite tasks and closes their grader pools after the test."""
    built: list[DatasetTask] = []

    def make(train: str, test: str, train_size: int = 8) -> DatasetTask:
        built.append(_suite_task(data_dir, train, test, train_size))
        return built[-1]

    yield make
    for t in built:
        t.close()


@needs_data
@pytest.mark.parametrize("name", sorted(DATASETS))
def test_own_gold_scores_one_and_a_neighbours_gold_zero(task_of, name: str) -> None:
    task = task_of(name, name)
    problems = list(task.eval_problems())
    kind = DATASETS[name].grader
    assert {p.grader for p in problems} == {kind}
    assert all("\\boxed{}" in p.prompt for p in problems)  # the format _say answers in
    sample = range(len(problems))
    if kind == "math_verify" and len(problems) > LATEX_SAMPLE:
        sample = sorted(random.Random(0).sample(sample, LATEX_SAMPLE))
    rows = [problems[i] for i in sample]
    pairs = [(p, _neighbour(problems, i)) for p, i in zip(rows, sample, strict=True)]
    wrong = [(p, n) for p, n in pairs if n is not None]
    # Only answers of a kind the rule cannot value (\sqrt, units) go without a neighbour.
    assert len(wrong) >= 0.8 * len(rows), [p.answer for p, n in pairs if n is None]

    right = task.grade([_say(p.answer) for p in rows], rows)
    assert [p.answer for p, s in zip(rows, right.scores, strict=True) if s != 1.0] == []
    bad = task.grade([_say(n.answer) for _, n in wrong], [p for p, _ in wrong])
    false_hits = [(p.answer, n.answer) for (p, n), s in zip(wrong, bad.scores, strict=True) if s]
    assert false_hits == []
    assert (right.timeouts, right.errors, bad.timeouts, bad.errors) == (0, 0, 0, 0)


@needs_data
def test_one_batch_of_mixed_answer_kinds_and_graders(task_of) -> None:
    """One ``grade`` call on a shuffled batch of right and wrong answers of every kind, from a
    task whose training set (GSM8K, integer grader) and held-out set (MATH-500, math-verify)
    need different graders: every row gets its own verdict back, in order."""
    task = task_of("gsm8k_train", "math500", train_size=4)
    first_of_kind: dict[str, TaskProblem] = {}
    for p in task.eval_problems():
        first_of_kind.setdefault(answer_kind(p.answer)[0], p)
    assert set(first_of_kind) >= {"number", "fraction", "expression", "interval", "text"}
    pool = list(first_of_kind.values()) + list(task.train_problems())
    assert {p.grader for p in pool} == {"integer", "math_verify"}
    batch: list[tuple[str, TaskProblem, float]] = []
    for i, p in enumerate(pool):
        batch.append((_say(p.answer), p, 1.0))
        n = _neighbour(pool, i)
        if n is not None:
            batch.append((_say(n.answer), p, 0.0))
    assert sum(v == 0.0 for *_, v in batch) >= len(pool) - 1
    random.Random(0).shuffle(batch)
    result = task.grade([r for r, _, _ in batch], [p for _, p, _ in batch])
    assert result.scores == [v for *_, v in batch]
    assert (result.timeouts, result.errors) == (0, 0)


@pytest.mark.parametrize(
    ("gold", "wrong", "different"),
    [
        ("5", "x=5", False),  # an equation states its value
        ("\\frac{1}{2}", "0.5", False),
        ("1.24e-8", "9.35e-9", False),  # closer than 0.01: the rule does not judge tiny floats
        ("27", "28", True),
        ("9,\\!000,\\!000", "9000000", False),
        ("\\text{(C)}", "3", True),
        ("(2,\\infty)", "2", True),
        ("p - q", "\\frac{3}{4}", True),
        ("\\sqrt{51}", "7", False),  # irrational value: not read by the rule
        ("90^\\circ", "90", False),
        ("\\sqrt{51}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", True),
        ("(1, 2)", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", False),
        ("x \\in [2,5)", "[2,5)", False),
    ],
)
def test_the_neighbour_rule_refuses_what_it_cannot_tell(
    gold: str, wrong: str, different: bool
) -> None:
    """The rule the tests above rely on says "different" only where no grader could disagree."""
    assert _certainly_different(gold, wrong) is different


# --- a DatasetTask built from its settings, and build_task (docs/mutation.md) -----------------


@needs_data
def test_a_dataset_tasks_grader_settings_reach_its_graders(monkeypatch) -> None:
    """``task.grader_timeout_s`` is the deadline of the math-verify pool and
    ``task.grader_workers`` its size; one batch of both kinds (MATH-500 under math-verify, GSM8K
    under the integer grader) counts the timeouts and errors of every kind: an answer that takes
    longer than the task's deadline (the debug hook sleeps 1.5 s, within the default 3 s) is a
    timeout, one whose grading raises an error, each scored 0, the rest graded as usual."""
    monkeypatch.setenv(DEBUG_ENV, "1")  # before the pool starts: the test-only hooks
    task = DatasetTask(
        name="math",
        train_dataset="gsm8k_train",
        eval_datasets=["math500"],
        data_dir=str(require_data()),
        eval_size=3,
        train_size=1,
        grader_timeout_s=0.4,
        grader_workers=2,
    )
    try:
        held, train = list(task.eval_problems()), list(task.train_problems())
        result = task.grade(
            [
                _DEBUG_PREFIX + "sleep:1.5",  # within the default 3 s, past the task's 0.4 s
                _DEBUG_PREFIX + "raise",
                f"\\boxed{{{held[2].answer}}}",
                f"#### {train[0].answer}",
            ],
            [*held, train[0]],
        )
        assert result == GradeResult(scores=[0.0, 0.0, 1.0, 1.0], timeouts=1, errors=1)
        assert len(task._graders._graders["math_verify"]._worker_pids()) == 2
    finally:
        task.close()


@needs_data
def test_a_dataset_task_is_built_from_its_settings(monkeypatch) -> None:
    """The task reads the named files from the given folder (not from ``$SPPO_BENCH_DATA``),
    keeps the datasets' ids, takes ``train_size`` and ``eval_size`` first rows, evaluates on
    the first of ``eval_datasets`` (the task's own name without them) and names its metrics
    after it unless ``eval_name`` is set; the prompt template is ``plain`` by default."""
    from benchmarks.tasks.datasets import render_prompt

    monkeypatch.delenv("SPPO_BENCH_DATA", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a wrong folder fails at once, no download
    task = DatasetTask(
        name="math",
        train_dataset="gsm8k_train",
        eval_datasets=["aime24", "amc23"],
        data_dir=str(require_data()),
        eval_size=3,
        train_size=2,
    )
    aime, gsm = (
        load_dataset("aime24", data_dir=require_data()),
        load_dataset("gsm8k_train", data_dir=require_data()),
    )
    assert (task.name, task.eval_name) == ("math", "aime24")
    assert [(p.id, p.answer, p.grader) for p in task.eval_problems()] == [
        (p.id, p.answer, "integer") for p in aime[:3]
    ]
    assert [p.id for p in task.train_problems()] == [p.id for p in gsm[:2]]
    assert task.eval_problems()[0].prompt == render_prompt(aime[0], "plain")
    task.close()
    own = DatasetTask(name="aime25", data_dir=str(require_data()), eval_size=1, eval_name="held")
    assert (own.eval_name, own.eval_problems()[0].id) == (
        "held",
        load_dataset("aime25", data_dir=require_data())[0].id,
    )
    own.close()


def _jinja_tokenizer():
    """A real transformers tokenizer with a Jinja chat template of its own."""
    from benchmarks.training.modeling import build_char_tokenizer

    tok = build_char_tokenizer("abc")
    tok.chat_template = (
        "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant] {% endif %}"
    )
    return tok


def _in_jinja_format(problem: Problem, template: str) -> str:
    return (
        "".join(f"[{m['role']}] {m['content']}\n" for m in prompt_messages(problem, template))
        + "[assistant] "
    )


@needs_data
def test_a_chat_template_is_rendered_by_the_models_tokenizer() -> None:
    """With a tokenizer the prompt is the model's own chat format, not the ChatML fallback."""
    task = DatasetTask(
        name="aime24",
        data_dir=str(require_data()),
        template="chat",
        eval_size=1,
        train_size=1,
        tokenizer=_jinja_tokenizer(),
    )
    first = load_dataset("aime24", data_dir=require_data())[0]
    assert task.eval_problems()[0].prompt == _in_jinja_format(first, "chat")
    task.close()


@needs_data
def test_build_task_gives_a_dataset_config_its_name_and_the_models_tokenizer() -> None:
    """``build_task`` on a composed real-dataset node (as the suite does): the task is named
    after the config (its metrics and checkpoints are), and the model's tokenizer renders its
    chat prompts."""
    from benchmarks.config import compose_config
    from benchmarks.tasks.build import build_task

    cfg = compose_config(
        [
            "task=math",
            "task.train_dataset=aime24",
            "task.eval_datasets=[aime25]",
            f"task.data_dir={require_data()}",
            "task.train_size=1",
            "task.eval_size=1",
            "task.template=qwen_math_chat",
        ]
    )
    task = build_task(cfg.task, tokenizer=_jinja_tokenizer())
    try:
        assert isinstance(task, DatasetTask)
        assert (task.name, task.eval_name) == ("math", "aime25")
        first = load_dataset("aime25", data_dir=require_data())[0]
        assert task.eval_problems()[0].prompt == _in_jinja_format(first, "qwen_math_chat")
    finally:
        task.close()
