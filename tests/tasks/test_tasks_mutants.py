"""Properties of the tasks that the other task tests left unstated, found by mutation testing
(docs/mutation.md): each test below failed on at least one mutant that the rest of
``tests/tasks`` let through. They read the real data in ``../shared/data`` and grade with the
real graders (math-verify in its process pool), and a real transformers tokenizer. Two things
are stood in for: the Hugging Face hub (no network here: a stand-in ``datasets`` module serves
rows) and, once, a tokenizer that returns token ids where text was asked for (the error case).
"""

from __future__ import annotations

import types

import pytest

from benchmarks.tasks.arith import ArithTask
from benchmarks.tasks.base import TaskProblem
from benchmarks.tasks.dataset_task import DatasetTask
from benchmarks.tasks.datasets import (
    _ANSWER_TRANSFORMS,
    DATASETS,
    DatasetSpec,
    Problem,
    _read_hub,
    _spec,
    load_dataset,
    prompt_messages,
)
from benchmarks.tasks.grading import _DEBUG_PREFIX, DEBUG_ENV, Grader, GradeResult, extract_answer
from testkit.paths import needs_data, require_data

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


# --- arith -------------------------------------------------------------------------------------


def test_facts_are_the_whole_single_step_table() -> None:
    """The warm start's facts are every ``a op b`` over digit pairs and the three operations,
    once each, with the step as its solution: 300, not a sample, not longer chains."""
    facts = ArithTask(horizon=1, eval_size=1).facts()
    assert len(facts) == 300
    expected = {f"{a}{op}{b}=" for a in range(10) for op in "+-*" for b in range(10)}
    assert {f.prompt for f in facts} == expected
    for f in facts:
        a, op, b = int(f.prompt[0]), f.prompt[1], int(f.prompt[2])
        value = {"+": a + b, "-": a - b, "*": a * b}[op] % 10
        assert (f.answer, f.solution) == (str(value), f"{f.prompt}{value};#{value}")


# --- datasets: the hub's columns mapped to our answers -------------------------------------------


@pytest.mark.parametrize(
    ("transform", "value", "answer"),
    [
        # GSM8K solutions end in "#### <answer>"; the answer is after the last marker.
        ("gsm8k_final", "3 + 4 = <<3+4=7>>7\n#### 1,234", "1234"),
        ("gsm8k_final", "####72", "72"),
        ("gsm8k_final", "a #### 5 then #### 7", "7"),
        ("gsm8k_final", "no marker", ""),
        # AIME/AMC store floats: 27.0 is 27, anything else is kept as written.
        ("integer_float", 27.0, "27"),
        ("integer_float", "-025", "-25"),
        ("integer_float", 27.5, "27.5"),
        ("integer_float", "x", "x"),
        # OlympiadBench: the first of a list of answers, without its dollars.
        ("first_no_dollars", ["$69$", "$70$"], "69"),
        ("first_no_dollars", "$\\frac{1}{2}$", "\\frac{1}{2}"),
        ("first_no_dollars", [], ""),
        ("first_no_dollars", None, ""),
        # MATH: the last box of the solution; none gives the empty answer (the row is skipped).
        ("last_boxed", "So \\boxed{1} and then \\boxed{\\frac{3}{4}}.", "\\frac{3}{4}"),
        ("last_boxed", "no box here", ""),
        ("identity", "  \\pi  ", "\\pi"),
    ],
)
def test_hub_answer_transforms(transform: str, value: object, answer: str) -> None:
    """Each transform reproduces the normalisation of the local files (shared/data/README.md);
    an empty result marks a row without an answer."""
    assert _ANSWER_TRANSFORMS[transform](value) == answer


def test_hub_rows_without_an_answer_are_skipped_not_the_end() -> None:
    """A row whose answer is empty becomes a gap (``None``, counted and skipped later) and the
    rows after it are still read; rows without an id column are numbered by their position."""
    rows = [
        {"question": "q0", "answer": "#### 1"},
        {"question": "q1", "answer": "no marker"},
        {"question": "q2", "answer": "#### 3"},
    ]
    seen: list[tuple] = []

    def load_dataset_stand_in(hub_id: str, config: str | None, split: str) -> list[dict]:
        seen.append((hub_id, config, split))
        return rows

    hub = types.SimpleNamespace(load_dataset=load_dataset_stand_in)
    got = _read_hub(DATASETS["gsm8k"], hub)
    assert got == [
        Problem(id="gsm8k-0", question="q0", answer="1"),
        None,
        Problem(id="gsm8k-2", question="q2", answer="3"),
    ]
    assert seen == [("openai/gsm8k", "main", "test")]


def test_a_spec_registers_under_its_own_name() -> None:
    """The registry's entries are built by ``_spec`` (at import): positional and keyword fields
    both reach the spec, and its key is the spec's name."""
    name, spec = _spec("x", "x/test.jsonl", 3, "integer", hub_id="o/x", hub_split="test")
    assert name == "x"
    assert spec == DatasetSpec(
        name="x", path="x/test.jsonl", rows=3, grader="integer", hub_id="o/x", hub_split="test"
    )


def test_unknown_dataset_message_lists_the_names_in_full() -> None:
    """The message a user reads to fix ``task.name``: every valid name, sorted, comma-separated."""
    with pytest.raises(ValueError) as info:
        load_dataset("math5000")
    assert str(info.value) == (
        "unknown dataset 'math5000'; valid names: aime24, aime25, amc23, gsm8k, gsm8k_train, "
        "math, math500, math_test, minerva, olympiadbench"
    )


def test_prompt_messages_of_every_template_in_full() -> None:
    """The messages verl's parquet and chat templates receive: a text template is one user
    message with the whole prompt, a chat template its system message (if any) then the user's."""
    p = Problem(id="t", question="What is $1+1$?", answer="2")
    assert prompt_messages(p, "plain") == [
        {"role": "user", "content": f"Question: What is $1+1$?\n{INSTRUCTION}\nAnswer:"}
    ]
    assert prompt_messages(p, "qwen_math_chat") == [
        {"role": "system", "content": INSTRUCTION},
        {"role": "user", "content": "What is $1+1$?"},
    ]


# --- grading -----------------------------------------------------------------------------------


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


def test_chatml_fallback_of_a_two_message_template_in_full() -> None:
    """Without a tokenizer a chat template is rendered in ChatML, message after message."""
    from benchmarks.tasks.datasets import render_prompt

    p = Problem(id="t", question="What is $1+1$?", answer="2")
    assert render_prompt(p, "qwen_math_chat") == (
        f"<|im_start|>system\n{INSTRUCTION}<|im_end|>\n"
        "<|im_start|>user\nWhat is $1+1$?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_template_errors_say_what_is_wrong() -> None:
    """An unknown template lists the valid ones; a tokenizer whose chat template gives token ids
    instead of text (one that ignores ``tokenize=False``) is named by what it returned."""
    from benchmarks.tasks.datasets import render_prompt

    p = Problem(id="t", question="q", answer="2")
    with pytest.raises(ValueError) as info:
        render_prompt(p, "alpaca")
    assert str(info.value) == (
        "unknown prompt template 'alpaca'; valid: chat, plain, qwen_math_chat"
    )

    class IdsTokenizer:  # stands in for a tokenizer that always tokenizes
        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return [1, 2, 3]

    with pytest.raises(TypeError) as info:
        render_prompt(p, "chat", IdsTokenizer())
    assert str(info.value) == "tokenizer.apply_chat_template returned list, expected str"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("{not json", "not valid JSON (Expecting property name enclosed in double quotes)"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('"text"', "expected a JSON object, got str"),
        ('{"id": "x"}', "missing field(s) ['problem', 'answer']"),
        ('{"id": "x", "problem": " ", "answer": "3"}', "`problem` must be a non-empty string"),
        ('{"id": "x", "problem": 7, "answer": "3"}', "`problem` must be a non-empty string"),
        ('{"id": "x", "problem": "q", "answer": 3}', "`answer` must be a string, got 3"),
    ],
)
def test_a_bad_row_is_reported_in_full(tmp_path, row: str, message: str) -> None:
    """The message a user reads to fix a data file: the file, the line (blank lines counted),
    and what is wrong with the row."""
    path = tmp_path / "aime24" / "test.jsonl"
    path.parent.mkdir()
    path.write_text('{"id": "a", "problem": "1+1?", "answer": "2"}\n\n' + row + "\n")
    with pytest.raises(ValueError) as info:
        load_dataset("aime24", data_dir=tmp_path)
    assert str(info.value) == f"{path}:3: {message}"


def test_warnings_name_the_file_and_what_was_done(tmp_path, caplog, monkeypatch) -> None:
    """Skipped rows are counted against the file they came from; a missing file is named
    before the hub is tried."""
    import logging

    path = tmp_path / "aime24" / "test.jsonl"
    path.parent.mkdir()
    path.write_text(
        '{"id": "a", "problem": "p", "answer": " "}\n{"id": "b", "problem": "q", "answer": "2"}\n'
    )
    with caplog.at_level(logging.WARNING, logger="benchmarks.tasks.datasets"):
        assert [p.id for p in load_dataset("aime24", data_dir=tmp_path)] == ["b"]
    assert caplog.messages == [f"{path}: skipped 1 row(s) with an empty answer"]
    caplog.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with caplog.at_level(logging.WARNING, logger="benchmarks.tasks.datasets"):
        with pytest.raises(FileNotFoundError):
            load_dataset("aime25", data_dir=tmp_path)
    missing = tmp_path / "aime25" / "test.jsonl"
    assert caplog.messages == [f"aime25: {missing} not found; trying the Hugging Face hub"]


def test_a_missing_dataset_is_reported_in_full(tmp_path, monkeypatch) -> None:
    """Where it looked, how to point at the data, and why the hub could not help: the config
    (when the hub copy has one) and split, and whether the package is missing or the hub is
    switched off."""
    import sys

    monkeypatch.delenv("SPPO_BENCH_DATA", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", None)  # as without the optional package
    how = "with `--data-dir DIR`, `task.data_dir=DIR` or the SPPO_BENCH_DATA environment variable"
    with pytest.raises(FileNotFoundError) as info:
        load_dataset("olympiadbench", data_dir=tmp_path)
    assert str(info.value) == (
        f"dataset 'olympiadbench': looked for a local file at "
        f"{tmp_path / 'olympiadbench' / 'test.jsonl'}. Point at a directory holding "
        f"olympiadbench/test.jsonl {how}. Hugging Face hub fallback 'Hothan/OlympiadBench' "
        "(config 'OE_TO_maths_en_COMP'), split 'train': the optional `datasets` package is not "
        "installed."
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError) as info:
        load_dataset("aime24")
    assert str(info.value) == (
        "dataset 'aime24': looked for a local file at nowhere (no data dir given and "
        f"$SPPO_BENCH_DATA unset). Point at a directory holding aime24/test.jsonl {how}. "
        "Hugging Face hub fallback 'HuggingFaceH4/aime_2024', split 'train': HF_HUB_OFFLINE is "
        "set."
    )


@pytest.mark.parametrize(
    ("value", "offline"), [("1", True), ("True", True), ("YES", True), ("0", False), ("no", False)]
)
def test_hf_hub_offline_is_read_as_the_hub_reads_it(monkeypatch, value: str, offline: bool) -> None:
    """``HF_HUB_OFFLINE`` switches the hub off in any spelling huggingface_hub accepts (1, true,
    yes, any case), so a CI machine fails at once instead of after network retries."""
    import sys

    monkeypatch.delenv("SPPO_BENCH_DATA", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", None)
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    with pytest.raises(FileNotFoundError) as info:
        load_dataset("aime24")
    why = "HF_HUB_OFFLINE is set" if offline else "the optional `datasets` package is not installed"
    assert str(info.value).endswith(f": {why}.")


def test_the_hub_copy_is_limited_and_its_gaps_counted_like_a_file(monkeypatch, caplog) -> None:
    """From the hub too, ``limit`` keeps the first rows with an answer and skipped rows are
    counted against their source (the hub id). A stand-in for the ``datasets`` package serves
    the rows: there is no network here."""
    import logging
    import sys

    rows = [{"question": f"q{i}", "answer": a} for i, a in enumerate(["none", "#### 1", "#### 2"])]
    hub = types.SimpleNamespace(load_dataset=lambda hub_id, config, split: rows)
    monkeypatch.delenv("SPPO_BENCH_DATA", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", hub)
    with caplog.at_level(logging.WARNING, logger="benchmarks.tasks.datasets"):
        got = load_dataset("gsm8k", limit=1)
    assert got == [Problem(id="gsm8k-1", question="q1", answer="1")]
    assert caplog.messages == ["hub:openai/gsm8k: skipped 1 row(s) with an empty answer"]


def test_an_empty_data_dir_falls_back_to_the_environment(monkeypatch, tmp_path) -> None:
    """``task.data_dir=""`` (an empty flag, an unset interpolation) means "not given": the
    environment variable decides, and without it there is no local folder."""
    from benchmarks.tasks.datasets import resolve_data_dir

    monkeypatch.delenv("SPPO_BENCH_DATA", raising=False)
    assert resolve_data_dir("") is None
    monkeypatch.setenv("SPPO_BENCH_DATA", str(tmp_path))
    assert resolve_data_dir("") == tmp_path


def test_the_hash_split_is_stable_and_takes_the_asked_share() -> None:
    """``split_of`` names one of two splits, the held-out one for about ``test_fraction`` of
    keys, and the same split for a key on every machine and in every version: a changed hash
    would silently move problems between training and evaluation (the values below were
    recorded once and must never change)."""
    from collections import Counter

    from benchmarks.tasks.base import split_of

    keys = [f"{a}+{b}=" for a in range(3) for b in range(4)]
    assert [split_of(k, 0.2) for k in keys] == ["train"] * 9 + ["test", "test", "train"]
    counts = Counter(split_of(str(i), 0.2) for i in range(10_000))
    assert set(counts) == {"train", "test"}
    assert counts["test"] == 2052  # 20.5%: the recorded draw, close to the asked 20%


def test_the_arith_held_out_set_is_the_published_one() -> None:
    """Every published arith number was measured on these held-out problems (recorded once:
    they must never change), and an enumerable horizon gives the same set whatever
    ``max_problems`` is, as long as it covers every problem (9000 at horizon 2)."""
    h2 = ["4*2+1=", "0*4+3=", "2+5-9=", "2-9+3=", "7*2*8="]
    h3 = ["1-5-1-7=", "6-3*2-7=", "3+9-7*0=", "6*6-1*8=", "8-0*4*4="]
    assert [p.prompt for p in ArithTask(horizon=2, eval_size=5).eval_problems()] == h2
    assert [p.prompt for p in ArithTask(horizon=3, eval_size=5).eval_problems()] == h3
    exact = ArithTask(horizon=2, eval_size=5, max_problems=9000)
    assert [p.prompt for p in exact.eval_problems()] == h2


def test_max_problems_caps_the_problems_drawn() -> None:
    """Below the count of distinct problems (9000 at horizon 2), ``max_problems`` is how many
    there are, split between training and held-out."""
    task = ArithTask(horizon=2, max_problems=8000, eval_size=10_000)
    assert len(task.train_problems()) + len(task.eval_problems()) == 8000


def test_an_arith_problem_in_full() -> None:
    """A problem as a task built in this test has it (not as a module fixture built it: mutmut
    credits only the test that built the fixture): its id, prompt, answer, and the worked
    solution the warm start is trained on, each step ``a op b = c`` modulo 10 and left to right
    (no operator precedence), ``;``-separated, then ``#`` and the answer."""
    problems = ArithTask(horizon=3, eval_size=5).eval_problems()
    assert problems[1] == TaskProblem(
        id="6-3*2-7", prompt="6-3*2-7=", answer="9", solution="6-3=3;3*2=6;6-7=9;#9"
    )


def test_arith_horizons_from_1_to_the_maximum_and_nothing_else() -> None:
    """Every integer horizon in [1, MAX_HORIZON] builds; a bool (an int to Python), 0 and
    MAX_HORIZON + 1 are refused with the whole message."""
    from benchmarks.tasks.arith import MAX_HORIZON

    assert ArithTask(horizon=MAX_HORIZON, eval_size=1, max_problems=50).horizon == MAX_HORIZON
    for bad in (True, 0, MAX_HORIZON + 1):
        with pytest.raises(ValueError) as err:
            ArithTask(horizon=bad)
        assert str(err.value) == (
            f"task.horizon={bad} is not allowed: use an integer in [1, {MAX_HORIZON}] "
            "or a list of them (problems are drawn from every listed horizon)"
        )


def test_arith_defaults_are_the_documented_ones() -> None:
    """Horizon 2 with 1000 held-out problems, and at most 20 000 problems per horizon (seen at
    horizon 4, which has more: horizon 2 enumerates its 9000)."""
    task = ArithTask()
    assert (task.horizon, len(task.eval_problems())) == (2, 1000)
    h4 = ArithTask(horizon=4, eval_size=10**6)
    assert len(h4.train_problems()) + len(h4.eval_problems()) == 20_000


def test_a_mixed_arith_task_trains_on_equal_shares_in_a_fixed_order() -> None:
    """Without weights every horizon gets an equal share of ``max_problems`` training problems,
    shuffled once with a fixed seed (recorded: the training order is part of what a seed draws,
    so it must not change between runs or machines)."""
    task = ArithTask(horizon=[1, 2], max_problems=20, eval_size=1)
    train = task.train_problems()
    ops = [sum(c in "+-*" for c in p.prompt) for p in train]
    assert (len(train), ops.count(1), ops.count(2)) == (20, 10, 10)
    assert [p.prompt for p in train[:6]] == [
        "0-1+1=",
        "8*8*5=",
        "2+8+2=",
        "8+4-0=",
        "2+9=",
        "0+2+5=",
    ]


def test_a_small_share_of_a_mixed_arith_task_still_gets_one_problem() -> None:
    """A horizon whose share rounds to no problem still gets one (and only one): every listed
    horizon is trained on."""
    task = ArithTask(horizon=[1, 2], horizon_weights=[0.005, 0.995], max_problems=100, eval_size=1)
    ops = [sum(c in "+-*" for c in p.prompt) for p in task.train_problems()]
    assert (ops.count(1), ops.count(2)) == (1, 100)


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
