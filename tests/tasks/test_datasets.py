"""Real datasets: row counts, validation and error messages, hub fallback (faked), prompts.

The data is the offline copy in ``../shared/data`` (next to the repository), or wherever
``SPPO_BENCH_DATA`` points; tests that need it are skipped when neither exists.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import types
from pathlib import Path

import pytest

from benchmarks.tasks.datasets import (
    _ANSWER_TRANSFORMS,
    DATA_DIR_ENV,
    DATASETS,
    PROMPT_TEMPLATES,
    DatasetSpec,
    Problem,
    _read_hub,
    _spec,
    load_dataset,
    prompt_messages,
    render_prompt,
    resolve_data_dir,
)
from testkit.paths import needs_data, require_data


@pytest.fixture(autouse=True)
def _hub_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """CI sets HF_HUB_OFFLINE; these tests drive the hub path with a fake `datasets` module."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


def test_offline_skips_the_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the hub must not be tried offline")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=never))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="HF_HUB_OFFLINE is set"):
        load_dataset("aime25")


# Rows after loading: the file's line count, minus the two MATH train rows with an empty answer.
EXPECTED_ROWS = {
    "math500": 500,
    "aime24": 30,
    "aime25": 30,
    "amc23": 40,
    "minerva": 272,
    "olympiadbench": 675,
    "gsm8k": 1319,
    "gsm8k_train": 7473,
    "math": 12000 - 2,
    "math_test": 5000,
}


@pytest.fixture(autouse=True)
def _no_env_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests choose their data dir explicitly; a developer's shell variable must not leak in."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)


@pytest.fixture
def no_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import datasets`` fail, as on a machine without the optional package."""
    monkeypatch.setitem(sys.modules, "datasets", None)


def test_registry_covers_the_design_names() -> None:
    assert set(DATASETS) == set(EXPECTED_ROWS)
    for name, spec in DATASETS.items():
        assert spec.name == name
        assert spec.grader in ("integer", "math_verify")
        assert spec.hub_id and spec.hub_split
    integer = {n for n, s in DATASETS.items() if s.grader == "integer"}
    assert integer == {"aime24", "aime25", "amc23", "gsm8k", "gsm8k_train"}


@needs_data
@pytest.mark.parametrize("name", sorted(EXPECTED_ROWS))
def test_every_local_dataset_loads_with_documented_rows(name: str) -> None:
    problems = load_dataset(name, data_dir=require_data())
    assert len(problems) == EXPECTED_ROWS[name]
    assert all(isinstance(p, Problem) and p.question and p.answer for p in problems)
    assert len({p.id for p in problems}) == len(problems)
    spec = DATASETS[name]
    with (require_data() / spec.path).open(encoding="utf-8") as f:
        assert sum(1 for _ in f) == spec.rows


@needs_data
def test_integer_golds_are_integers() -> None:
    for name, spec in DATASETS.items():
        if spec.grader == "integer":
            for p in load_dataset(name, data_dir=require_data()):
                # Canonical form: no sign other than "-", no leading zeros, no separators.
                assert re.fullmatch(r"-?[1-9][0-9]*|0", p.answer), (name, p.id, p.answer)


@needs_data
def test_env_var_and_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(require_data()))
    first = load_dataset("aime24", limit=3)
    assert [p.id for p in first] == [p.id for p in load_dataset("aime24")[:3]]
    assert load_dataset("aime24", limit=0) == []
    with pytest.raises(ValueError, match="limit"):
        load_dataset("aime24", limit=-1)


@needs_data
def test_empty_answers_are_skipped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="benchmarks.tasks.datasets"):
        problems = load_dataset("math", data_dir=require_data())
    ids = {p.id for p in problems}
    assert "train/number_theory/7115.json" not in ids
    assert "train/number_theory/7117.json" not in ids
    assert "skipped 2 row(s) with an empty answer" in caplog.text


def test_resolve_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert resolve_data_dir(None) is None
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "env"))
    assert resolve_data_dir(None) == tmp_path / "env"
    assert resolve_data_dir(tmp_path / "arg") == tmp_path / "arg"  # explicit wins
    assert resolve_data_dir(str(tmp_path)) == tmp_path


def test_missing_file_error_says_where_and_how(tmp_path: Path, no_hub: None) -> None:
    with pytest.raises(FileNotFoundError) as info:
        load_dataset("math500", data_dir=tmp_path)
    msg = str(info.value)
    assert str(tmp_path / "math500" / "test.jsonl") in msg
    assert DATA_DIR_ENV in msg and "--data-dir" in msg and "task.data_dir=" in msg
    assert "HuggingFaceH4/MATH-500" in msg and "not installed" in msg


def test_no_data_dir_error(no_hub: None) -> None:
    with pytest.raises(FileNotFoundError, match=DATA_DIR_ENV):
        load_dataset("gsm8k")


def test_unknown_name_lists_valid_ones() -> None:
    with pytest.raises(ValueError) as info:
        load_dataset("math5000")
    for name in DATASETS:
        assert name in str(info.value)


def _write(path: Path, rows: list[object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8"
    )


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("{not json", "not valid JSON"),
        ({"id": "x", "problem": "q"}, r"missing field\(s\) \['answer'\]"),
        ({"id": "x", "problem": "q", "answer": 3}, "`answer` must be a string"),
        ({"id": "x", "problem": "", "answer": "3"}, "`problem` must be a non-empty string"),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_bad_row_reports_file_and_line(tmp_path: Path, bad: object, message: str) -> None:
    path = tmp_path / "aime24" / "test.jsonl"
    _write(path, [{"id": "a", "problem": "1+1?", "answer": "2"}, "", bad])
    with pytest.raises(ValueError, match=message) as info:
        load_dataset("aime24", data_dir=tmp_path)
    assert f"{path}:3" in str(info.value)


def test_hub_fallback_maps_columns(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A fake `datasets` module stands in for the hub: no network is used."""
    calls: list[tuple[str, str | None, str]] = []
    tables = {
        "openai/gsm8k": [
            {"question": "How many?", "answer": "3 + 4 = <<3+4=7>>7\n#### 2,125"},
            {"question": "Empty?", "answer": "no marker"},
        ],
        "Hothan/OlympiadBench": [{"id": 7, "question": "Find n.", "final_answer": ["$69$"]}],
        "DigitalLearningGmbH/MATH-lighteval": [
            {"problem": "p", "solution": "So $\\boxed{\\frac{1}{2}}$ and \\boxed{\\frac{3}{4}}."}
        ],
        "math-ai/amc23": [{"id": 0, "question": "q", "answer": 27.0}],
    }

    def fake_load(hub_id: str, config: str | None, split: str) -> list[dict[str, object]]:
        calls.append((hub_id, config, split))
        return tables[hub_id]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=fake_load))
    gsm = load_dataset("gsm8k", data_dir=tmp_path)  # dir without the file: falls back
    assert gsm == [Problem(id="gsm8k-0", question="How many?", answer="2125")]
    assert calls == [("openai/gsm8k", "main", "test")]
    assert load_dataset("olympiadbench")[0] == Problem(id="7", question="Find n.", answer="69")
    assert load_dataset("math_test")[0].answer == "\\frac{3}{4}"
    assert load_dataset("amc23")[0].answer == "27"


def test_hub_failure_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(*args: object, **kwargs: object) -> None:
        raise ConnectionError("no network")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=offline))
    with pytest.raises(FileNotFoundError, match="ConnectionError: no network"):
        load_dataset("aime25")


# --- prompts ---------------------------------------------------------------------------------

PROBLEM = Problem(id="t", question="What is $\\{1\\} \\cup \\{2\\}$? Use {braces}.", answer="2")


def test_plain_template_keeps_latex_braces() -> None:
    text = render_prompt(PROBLEM, "plain")
    assert text.startswith("Question: What is $\\{1\\} \\cup \\{2\\}$? Use {braces}.\n")
    assert "\\boxed{}" in text and text.endswith("Answer:")


def test_chat_templates_messages() -> None:
    msgs = prompt_messages(PROBLEM, "chat")
    assert msgs == [
        {
            "role": "user",
            "content": PROBLEM.question
            + "\nPlease reason step by step, and put your final answer within \\boxed{}.",
        }
    ]
    qwen = prompt_messages(PROBLEM, "qwen_math_chat")
    assert [m["role"] for m in qwen] == ["system", "user"]
    assert qwen[1]["content"] == PROBLEM.question
    assert prompt_messages(PROBLEM, "plain")[0]["content"] == render_prompt(PROBLEM, "plain")


def test_chat_rendering_with_and_without_tokenizer() -> None:
    class FakeTokenizer:
        def apply_chat_template(
            self, messages: list[dict[str, str]], tokenize: bool, add_generation_prompt: bool
        ) -> str:
            assert tokenize is False and add_generation_prompt is True
            return "|".join(f"{m['role']}:{m['content']}" for m in messages) + "|assistant:"

    rendered = render_prompt(PROBLEM, "chat", tokenizer=FakeTokenizer())
    assert rendered.startswith("user:" + PROBLEM.question) and rendered.endswith("|assistant:")
    chatml = render_prompt(PROBLEM, "chat")
    assert chatml.startswith("<|im_start|>user\n" + PROBLEM.question)
    assert chatml.endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_unknown_template_lists_valid_ones() -> None:
    with pytest.raises(ValueError) as info:
        render_prompt(PROBLEM, "alpaca")
    for name in PROMPT_TEMPLATES:
        assert name in str(info.value)


# --- hub columns, specs, prompts, templates and errors in full (docs/mutation.md) -------------


INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


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
