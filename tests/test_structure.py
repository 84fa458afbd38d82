"""Sizes a newcomer can read: the trainer's class stays within the length the structure passes
set, and the modules split into one function per step keep every function within 60 lines,
measured from the source (a class or function is the lines from its ``class``/``def`` to its
last statement)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _length(path: Path, name: str) -> int:
    tree = ast.parse(path.read_text())
    node = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.ClassDef | ast.FunctionDef) and n.name == name
    )
    return node.end_lineno - node.lineno + 1


#: Modules whose long logic was split into short functions (issue 46), each held at 60 lines a
#: function so the split cannot grow back: the report (one function per section) and the sweep
#: spec (one validator per part of the spec).
SHORT_FUNCTIONS = ("analysis/report.py", "sweeps/spec.py")


def _functions_over(path: Path, limit: int) -> dict[str, int]:
    tree = ast.parse(path.read_text())
    return {
        f.name: f.end_lineno - f.lineno + 1
        for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
        and f.end_lineno - f.lineno + 1 > limit
    }


@pytest.mark.parametrize("module", SHORT_FUNCTIONS)
def test_no_function_of_a_split_module_is_over_60_lines(module: str) -> None:
    assert _functions_over(REPO / module, 60) == {}


def test_the_function_length_check_sees_a_long_function(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(60))
    (tmp_path / "m.py").write_text(f"def short():\n    pass\n\n\ndef long():\n{body}")
    assert _functions_over(tmp_path / "m.py", 60) == {"long": 61}


def test_the_trainer_class_is_at_most_500_lines() -> None:
    n = _length(REPO / "benchmarks" / "training" / "trainer.py", "RLTrainer")
    assert 100 < n <= 500, f"RLTrainer is {n} lines: move a self-contained part to a function"
