"""Sizes a newcomer can read: the trainer's class stays within the length the structure passes
set, measured from the source (a class is the lines from its ``class`` to its last statement)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _length(path: Path, name: str) -> int:
    tree = ast.parse(path.read_text())
    node = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.ClassDef | ast.FunctionDef) and n.name == name
    )
    return node.end_lineno - node.lineno + 1


def test_the_trainer_class_is_at_most_500_lines() -> None:
    n = _length(REPO / "benchmarks" / "training" / "trainer.py", "RLTrainer")
    assert 100 < n <= 500, f"RLTrainer is {n} lines: move a self-contained part to a function"
