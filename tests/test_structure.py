"""Sizes a newcomer can read: the trainer's class stays within the length the structure passes
set, the modules split into one function per step keep every function within 60 lines, and no
module of ``sweeps/`` passes 400 lines, measured from the source (a class or function is the
lines from its ``class``/``def`` to its last statement; a module is its lines)."""

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
#: spec (its data model, one reader per field, its check against the composed config).
SHORT_FUNCTIONS = (
    "analysis/report.py",
    "sweeps/spec.py",
    "sweeps/spec_fields.py",
    "sweeps/spec_check.py",
)
#: The most lines a module of ``sweeps/`` may have: past it, a module holds more than one job.
SWEEPS_MODULE_LINES = 400


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


def _modules_over(folder: Path, limit: int) -> dict[str, int]:
    lengths = {p.name: len(p.read_text().splitlines()) for p in sorted(folder.glob("*.py"))}
    return {name: n for name, n in lengths.items() if n > limit}


def test_every_sweeps_module_is_at_most_400_lines() -> None:
    assert len(list((REPO / "sweeps").glob("*.py"))) > 5  # the folder was really read
    assert _modules_over(REPO / "sweeps", SWEEPS_MODULE_LINES) == {}


def test_the_module_length_check_sees_a_long_module(tmp_path: Path) -> None:
    (tmp_path / "short.py").write_text("x = 0\n" * SWEEPS_MODULE_LINES)
    (tmp_path / "long.py").write_text("x = 0\n" * (SWEEPS_MODULE_LINES + 1))
    assert _modules_over(tmp_path, SWEEPS_MODULE_LINES) == {"long.py": 401}


def test_the_trainer_class_is_at_most_500_lines() -> None:
    n = _length(REPO / "benchmarks" / "training" / "trainer.py", "RLTrainer")
    assert 100 < n <= 500, f"RLTrainer is {n} lines: move a self-contained part to a function"
