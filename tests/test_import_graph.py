"""The packages' import graph has no cycle and no private name crosses a module boundary.

A cycle means a shared piece lives in the wrong module (above one of its users); a function-local
import that dodges it still counts, since it still runs. Only ``if TYPE_CHECKING:`` imports are
left out: they never run. Read from the source with ``ast``, so nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

from testkit.paths import REPO

PACKAGES = ("algorithms", "benchmarks", "sweeps", "analysis")


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in sorted((root / pkg).rglob("*.py")):
            parts = list(p.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def import_graph(root: Path = REPO) -> tuple[dict[str, set[str]], list[str]]:
    """(module -> the project modules it imports, private imports as 'user: module.name')."""
    mods = _modules(root)

    def resolve(name: str) -> str | None:  # the longest prefix that is one of our modules
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            if ".".join(parts[:i]) in mods:
                return ".".join(parts[:i])
        return None

    edges: dict[str, set[str]] = {m: set() for m in mods}
    private: list[str] = []
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        skip = _type_checking_nodes(tree)
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                for a in node.names:
                    target = resolve(a.name)
                    if target and target != mod:
                        edges[mod].add(target)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                for a in node.names:
                    full = f"{base}.{a.name}"
                    target = full if full in mods else resolve(base)
                    if not target or target == mod:
                        continue
                    edges[mod].add(target)
                    if full not in mods and a.name.startswith("_") and not a.name.startswith("__"):
                        private.append(f"{mod}: {target}.{a.name}")
    return edges, private


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_no_import_cycles():
    edges, _ = import_graph()
    assert sum(len(v) for v in edges.values()) > 100  # the graph was really read
    assert cycles(edges) == []


def test_no_private_name_is_imported_from_another_module():
    _, private = import_graph()
    assert private == []


def test_the_checks_see_a_cycle_and_a_private_import(tmp_path):
    """The two checks above can fail: a planted cycle and a planted private import are found."""
    pkg = tmp_path / "benchmarks"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from benchmarks.b import _g\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nfrom benchmarks import a\n"
        "if TYPE_CHECKING:\n    from benchmarks.c import X\n"
    )
    (pkg / "c.py").write_text("import benchmarks.b\n")
    edges, private = import_graph(tmp_path)
    assert cycles(edges) == [["benchmarks.a", "benchmarks.b"]]  # b -> c is TYPE_CHECKING only
    assert private == ["benchmarks.a: benchmarks.b._g"]
    real, _ = import_graph()
    assert "benchmarks.telemetry.metrics" in real["benchmarks.training.trainer"]
    # a function-local import counts: the CLI imports the sweep CLI only inside main()
    assert "sweeps.cli" in real["benchmarks.cli"]


def test_algorithms_import_nothing_of_the_harness():
    edges, _ = import_graph()
    for mod, targets in edges.items():
        if mod.startswith("algorithms"):
            assert all(t.startswith("algorithms") for t in targets), (mod, targets)
        if mod.startswith("analysis"):  # analysis reads only MLflow and the metric schema
            assert all(
                t.startswith("analysis") or t == "benchmarks.telemetry.metrics" for t in targets
            ), (mod, targets)
