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
    DATA_DIR_ENV,
    DATASETS,
    PROMPT_TEMPLATES,
    Problem,
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
