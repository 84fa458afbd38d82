"""Real math datasets: specs, a validating JSONL loader with a Hugging Face hub fallback, prompts.

A task is dataset + prompt template + grader (docs/design.md §3). This module owns the first two
for the real benchmarks; the grader kind each dataset needs is recorded in its spec and applied by
:mod:`benchmarks.tasks.grading`. The synthetic ``arith`` task lives elsewhere.

Data comes from a local JSONL directory first (``--data-dir`` / ``task.data_dir=...`` or the
``SPPO_BENCH_DATA`` environment variable), laid out as in ``shared/data`` (see its README for
sources and fields): one problem per line with ``id``, ``problem`` and ``answer`` (a string).
Without a local file the loader tries the Hugging Face hub, but only when the optional
``datasets`` package is importable; it is not a dependency, so a CPU install stays small and a
machine without network fails with a message that says where it looked instead of a stack trace
from deep inside a download. The hub ids are well-known public copies of the same benchmarks;
they are **not exercised by the test suite** (no network here), and their row order and, for a
few sets, their answer normalisation may differ from the local files.

Simplifications: a :class:`Problem` carries only what training and evaluation need (id, question,
gold answer); metadata such as MATH's subject and level stays in the JSONL.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

__all__ = [
    "DATASETS",
    "DATA_DIR_ENV",
    "DatasetSpec",
    "PROMPT_TEMPLATES",
    "Problem",
    "PromptTemplate",
    "load_dataset",
    "prompt_messages",
    "render_prompt",
    "resolve_data_dir",
]


logger = logging.getLogger(__name__)

#: Environment variable naming the local JSONL directory (same layout as ``shared/data``).
DATA_DIR_ENV = "SPPO_BENCH_DATA"

GraderKind = Literal["integer", "math_verify"]


@dataclass(frozen=True)
class Problem:
    """One benchmark problem.

    Attributes:
        id: Stable identifier from the source (e.g. ``test/precalculus/807.json``, ``2024-I-7``).
        question: The raw problem text, with no prompt template or instruction.
        answer: The gold final answer as a string (an integer for AIME/AMC/GSM8K, LaTeX otherwise).
    """

    id: str
    question: str
    answer: str


@dataclass(frozen=True)
class DatasetSpec:
    """Where a dataset lives and how to grade it.

    Attributes:
        name: Registry name (``math500``, ``gsm8k_train``, ...).
        path: File relative to the data directory, e.g. ``math500/test.jsonl``.
        rows: Number of lines in the local file (rows with an empty answer are later skipped).
        grader: ``"integer"`` (exact integer match) or ``"math_verify"`` (LaTeX equivalence).
        hub_id: Hugging Face dataset id used when no local file is found.
        hub_split: Split of ``hub_id``.
        hub_config: Config (subset) name of ``hub_id``, if it has several.
        hub_question_field: Column holding the problem text.
        hub_answer_field: Column holding the answer (or the solution, see ``hub_answer_transform``).
        hub_id_field: Column holding an id; ``None`` numbers rows as ``<name>-<index>``.
        hub_answer_transform: How to turn the hub column into our answer string; one of
            ``identity``, ``gsm8k_final`` (text after ``####``, commas removed), ``integer_float``
            (``27.0`` -> ``27``), ``first_no_dollars`` (first list element, ``$`` removed),
            ``last_boxed`` (content of the last ``\\boxed{}`` of a solution). These reproduce the
            normalisation of the local files (``shared/data/README.md``).
    """

    name: str
    path: str
    rows: int
    grader: GraderKind
    hub_id: str
    hub_split: str
    hub_config: str | None = None
    hub_question_field: str = "problem"
    hub_answer_field: str = "answer"
    hub_id_field: str | None = None
    hub_answer_transform: str = "identity"


def _spec(*args: Any, **kwargs: Any) -> tuple[str, DatasetSpec]:
    spec = DatasetSpec(*args, **kwargs)
    return spec.name, spec


#: Every real dataset by name. Hub ids are for users with network and are not tested here.
DATASETS: Mapping[str, DatasetSpec] = MappingProxyType(
    dict(
        [
            _spec(
                "math500",
                "math500/test.jsonl",
                500,
                "math_verify",
                hub_id="HuggingFaceH4/MATH-500",
                hub_split="test",
                hub_id_field="unique_id",
            ),
            _spec(
                "aime24",
                "aime24/test.jsonl",
                30,
                "integer",
                hub_id="HuggingFaceH4/aime_2024",
                hub_split="train",
                hub_id_field="id",
                hub_answer_transform="integer_float",
            ),
            _spec(
                "aime25",
                "aime25/test.jsonl",
                30,
                "integer",
                hub_id="math-ai/aime25",
                hub_split="test",
                hub_id_field="id",
                hub_answer_transform="integer_float",
            ),
            _spec(
                "amc23",
                "amc23/test.jsonl",
                40,
                "integer",
                hub_id="math-ai/amc23",
                hub_split="test",
                hub_question_field="question",
                hub_id_field="id",
                hub_answer_transform="integer_float",
            ),
            _spec(
                "minerva",
                "minerva_math/test.jsonl",
                272,
                "math_verify",
                hub_id="math-ai/minervamath",
                hub_split="test",
                hub_question_field="question",
            ),
            _spec(
                "olympiadbench",
                "olympiadbench/test.jsonl",
                675,
                "math_verify",
                hub_id="Hothan/OlympiadBench",
                hub_config="OE_TO_maths_en_COMP",
                hub_split="train",
                hub_question_field="question",
                hub_answer_field="final_answer",
                hub_id_field="id",
                hub_answer_transform="first_no_dollars",
            ),
            _spec(
                "gsm8k",
                "gsm8k/test.jsonl",
                1319,
                "integer",
                hub_id="openai/gsm8k",
                hub_config="main",
                hub_split="test",
                hub_question_field="question",
                hub_answer_transform="gsm8k_final",
            ),
            _spec(
                "gsm8k_train",
                "gsm8k/train.jsonl",
                7473,
                "integer",
                hub_id="openai/gsm8k",
                hub_config="main",
                hub_split="train",
                hub_question_field="question",
                hub_answer_transform="gsm8k_final",
            ),
            _spec(
                "math",
                "math/train12k.jsonl",
                12000,
                "math_verify",
                hub_id="hiyouga/math12k",
                hub_split="train",
            ),
            _spec(
                "math_test",
                "math/test.jsonl",
                5000,
                "math_verify",
                hub_id="DigitalLearningGmbH/MATH-lighteval",
                hub_split="test",
                hub_answer_field="solution",
                hub_answer_transform="last_boxed",
            ),
        ]
    )
)


def resolve_data_dir(data_dir: str | os.PathLike[str] | None) -> Path | None:
    """The local data directory: the explicit argument, else ``$SPPO_BENCH_DATA``, else ``None``.

    An explicit argument wins so a config or CLI flag can override a shell default.
    """
    if data_dir is not None and str(data_dir) != "":
        return Path(data_dir).expanduser()
    env = os.environ.get(DATA_DIR_ENV, "")
    if env:
        return Path(env).expanduser()
    return None


def _valid_names() -> str:
    return ", ".join(sorted(DATASETS))


def _get_spec(name: str) -> DatasetSpec:
    try:
        return DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; valid names: {_valid_names()}") from None


def load_dataset(
    name: str,
    data_dir: str | os.PathLike[str] | None = None,
    limit: int | None = None,
) -> list[Problem]:
    """Load a dataset as a list of :class:`Problem`, in source order.

    Looks for ``<data_dir>/<spec.path>`` (``data_dir`` resolved by :func:`resolve_data_dir`);
    without that file, loads ``spec.hub_id`` from the Hugging Face hub if the optional
    ``datasets`` package is importable. Rows with an empty answer are skipped with a warning
    (two MATH train problems have one: their solutions end in an empty ``\\boxed{}``).

    Args:
        name: A key of :data:`DATASETS`.
        data_dir: Local JSONL directory; ``None`` falls back to ``$SPPO_BENCH_DATA``.
        limit: Keep only the first ``limit`` problems (after skipping empty answers).

    Raises:
        ValueError: Unknown ``name`` (the message lists valid names), a negative ``limit``, or a
            malformed row (the message gives the file and line number).
        FileNotFoundError: No local file and no usable hub copy; the message lists the paths
            looked at and how to point at data.
    """
    spec = _get_spec(name)
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    root = resolve_data_dir(data_dir)
    looked: list[str] = []
    if root is not None:
        path = root / spec.path
        if path.is_file():
            return _take(_read_jsonl(path), limit, source=str(path))
        looked.append(str(path))
        logger.warning("%s: %s not found; trying the Hugging Face hub", name, path)
    hub_error = "the optional `datasets` package is not installed"
    hf_datasets = None
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        hub_error = "HF_HUB_OFFLINE is set"  # fail at once instead of after network retries
    else:
        try:
            import datasets as hf_datasets  # optional, heavy: imported only when needed
        except ImportError:
            pass
    if hf_datasets is not None:
        try:
            rows = _read_hub(spec, hf_datasets)
        except Exception as exc:  # network, auth, schema: report them all the same way
            hub_error = f"loading it failed: {type(exc).__name__}: {exc}"
        else:
            return _take(rows, limit, source=f"hub:{spec.hub_id}")
    where = (
        ", ".join(looked) if looked else f"nowhere (no data dir given and ${DATA_DIR_ENV} unset)"
    )
    raise FileNotFoundError(
        f"dataset {name!r}: looked for a local file at {where}. Point at a directory holding "
        f"{spec.path} with `--data-dir DIR`, `task.data_dir=DIR` or the {DATA_DIR_ENV} environment "
        f"variable. Hugging Face hub fallback {spec.hub_id!r}"
        f"{f' (config {spec.hub_config!r})' if spec.hub_config else ''}, split "
        f"{spec.hub_split!r}: {hub_error}."
    )


def _take(rows: Iterable[Problem | None], limit: int | None, source: str) -> list[Problem]:
    """Drop empty-answer rows (``None``), log how many, and apply ``limit``."""
    out: list[Problem] = []
    skipped = 0
    if limit == 0:
        return out
    for problem in rows:
        if problem is None:
            skipped += 1
            continue
        out.append(problem)
        if limit is not None and len(out) >= limit:
            break
    if skipped:
        logger.warning("%s: skipped %d row(s) with an empty answer", source, skipped)
    return out


def _read_jsonl(path: Path) -> Iterable[Problem | None]:
    """Parse and validate a JSONL file; yields ``None`` for a row whose answer is empty."""
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
            missing = [k for k in ("id", "problem", "answer") if k not in row]
            if missing:
                raise ValueError(f"{where}: missing field(s) {missing}")
            problem, answer = row["problem"], row["answer"]
            if not isinstance(problem, str) or not problem.strip():
                raise ValueError(f"{where}: `problem` must be a non-empty string")
            if not isinstance(answer, str):
                raise ValueError(f"{where}: `answer` must be a string, got {answer!r}")
            if not answer.strip():
                yield None
                continue
            yield Problem(id=str(row["id"]), question=problem, answer=answer.strip())


# --- hub fallback ---------------------------------------------------------------------------


def _last_boxed(solution: str) -> str:
    # Local import keeps datasets.py free of the grading module at import time.
    from benchmarks.tasks.grading import extract_answer

    return extract_answer(solution, "boxed") or ""


def _gsm8k_final(text: str) -> str:
    return text.rsplit("####", 1)[-1].strip().replace(",", "") if "####" in text else ""


def _integer_float(value: Any) -> str:
    s = str(value).strip()
    m = re.fullmatch(r"(-?)0*(\d+)(?:\.0*)?", s)  # "27.0" -> "27", "025" -> "25"
    return f"{m[1]}{m[2]}" if m else s


def _first_no_dollars(value: Any) -> str:
    first = value[0] if isinstance(value, list | tuple) and value else value
    return str(first or "").replace("$", "").strip()


_ANSWER_TRANSFORMS: dict[str, Callable[[Any], str]] = {
    "identity": lambda v: str(v).strip(),
    "gsm8k_final": lambda v: _gsm8k_final(str(v)),
    "integer_float": _integer_float,
    "first_no_dollars": _first_no_dollars,
    "last_boxed": lambda v: _last_boxed(str(v)),
}


def _read_hub(spec: DatasetSpec, hf_datasets: Any) -> list[Problem | None]:
    """Load ``spec.hub_id`` through ``datasets.load_dataset`` and map columns to :class:`Problem`."""
    transform = _ANSWER_TRANSFORMS[spec.hub_answer_transform]
    ds = hf_datasets.load_dataset(spec.hub_id, spec.hub_config, split=spec.hub_split)
    rows: list[Problem | None] = []
    for i, row in enumerate(ds):
        answer = transform(row[spec.hub_answer_field])
        if not answer:
            rows.append(None)
            continue
        pid = str(row[spec.hub_id_field]) if spec.hub_id_field else f"{spec.name}-{i}"
        rows.append(Problem(id=pid, question=str(row[spec.hub_question_field]), answer=answer))
    return rows


# --- prompts --------------------------------------------------------------------------------

_BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


@dataclass(frozen=True)
class PromptTemplate:
    """A prompt format. ``{question}`` is substituted literally (no ``str.format``: LaTeX braces).

    Attributes:
        name: Registry name.
        kind: ``"text"`` renders ``text`` as is (base models); ``"chat"`` builds chat messages
            from ``system`` and ``user`` and renders them with a tokenizer's chat template.
        text: The full prompt of a text template.
        system: Optional system message of a chat template.
        user: The user message of a chat template.
    """

    name: str
    kind: Literal["text", "chat"]
    text: str = ""
    system: str | None = None
    user: str = "{question}"


#: Built-in templates. ``chat`` is the DeepSeek-R1/SimpleRL-style user turn; ``qwen_math_chat``
#: is Qwen2.5-Math's own CoT format (the same instruction as a system message).
PROMPT_TEMPLATES: Mapping[str, PromptTemplate] = MappingProxyType(
    {
        "plain": PromptTemplate(
            name="plain", kind="text", text=f"Question: {{question}}\n{_BOXED_INSTRUCTION}\nAnswer:"
        ),
        "chat": PromptTemplate(
            name="chat", kind="chat", user=f"{{question}}\n{_BOXED_INSTRUCTION}"
        ),
        "qwen_math_chat": PromptTemplate(
            name="qwen_math_chat", kind="chat", system=_BOXED_INSTRUCTION, user="{question}"
        ),
    }
)


def _get_template(template: str) -> PromptTemplate:
    try:
        return PROMPT_TEMPLATES[template]
    except KeyError:
        valid = ", ".join(sorted(PROMPT_TEMPLATES))
        raise ValueError(f"unknown prompt template {template!r}; valid: {valid}") from None


def prompt_messages(problem: Problem, template: str) -> list[dict[str, str]]:
    """Chat messages for ``problem`` (a text template becomes one user message).

    This is the form verl's parquet ``prompt`` column and chat-template tokenizers take.
    """
    tpl = _get_template(template)
    if tpl.kind == "text":
        return [{"role": "user", "content": tpl.text.replace("{question}", problem.question)}]
    messages: list[dict[str, str]] = []
    if tpl.system is not None:
        messages.append({"role": "system", "content": tpl.system})
    messages.append({"role": "user", "content": tpl.user.replace("{question}", problem.question)})
    return messages


def render_prompt(problem: Problem, template: str, tokenizer: Any = None) -> str:
    """The prompt string for ``problem``.

    Chat templates go through ``tokenizer.apply_chat_template(..., add_generation_prompt=True)``
    when a tokenizer is given; without one they are rendered in ChatML (the format of the Qwen
    models the paper uses), so tests and tiny models need no tokenizer. Text templates ignore the
    tokenizer.

    Raises:
        ValueError: Unknown template name (the message lists valid ones).
    """
    tpl = _get_template(template)
    if tpl.kind == "text":
        return tpl.text.replace("{question}", problem.question)
    messages = prompt_messages(problem, template)
    if tokenizer is not None:
        rendered = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        if not isinstance(rendered, str):
            raise TypeError(
                f"tokenizer.apply_chat_template returned {type(rendered).__name__}, expected str"
            )
        return rendered
    parts = [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages]
    return "".join(parts) + "<|im_start|>assistant\n"
