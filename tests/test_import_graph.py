"""The packages' import graph has no cycle, runs only down the layers, and no private name
crosses a module boundary. At folder level the packages form one chain.

A cycle, or an import from a lower layer up to a higher one, means a shared piece lives in the
wrong module (above one of its users). Every import counts: a function-local one still runs, and
an ``if TYPE_CHECKING:`` one still ties the two modules together for whoever reads or moves
them. Read from the source with ``ast``, so nothing is imported.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from testkit.paths import REPO

PACKAGES = ("algorithms", "benchmarks", "sweeps", "analysis")

#: The project's layers, lowest first. A module imports from its own package and from the layers
#: below; packages that share a layer do not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    # pure tensor functions and their configs: they know no model, file or harness
    ("algorithms",),
    # results as data: the metric schema, finished runs read from MLflow or results sets, the
    # statistics, the claims protocol and the pages; no torch
    ("analysis",),
    # services every layer of the harness uses: meter, tracking and store checks; fault injection
    ("benchmarks.telemetry", "benchmarks.faults"),
    # what a model learns and how an answer is graded
    ("benchmarks.tasks",),
    # generating and scoring a policy's tokens
    ("benchmarks.engines",),
    # a model's accuracy on tasks, through an engine
    ("benchmarks.evaluation",),
    # models and their warm starts, the trainer, its checkpoints
    ("benchmarks.training",),
    # composing the Hydra config tree, whose trainer node is TrainerConfig's declared fields
    ("benchmarks.config",),
    # a validated suite of runs over the trainer; the engines' and trainer's speed benchmarks
    ("benchmarks.suite", "benchmarks.bench"),
    # a suite's plan translated for verl
    ("benchmarks.verl_engine",),
    # the command line over the harness and analysis (sweeps/ adds its commands by entry point)
    ("benchmarks.cli",),
    # hyper-parameter sweeps: suites as Optuna trials
    ("sweeps",),
)
#: The top-level folders, lowest first: each imports only from the folders before it, so no two
#: import each other (docs/design.md, "Folders and layers").
FOLDERS = ("algorithms", "analysis", "benchmarks", "sweeps")
#: Packages whose ``__init__`` only names them (it imports nothing), below every layer.
ROOTS = ("benchmarks",)


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in sorted((root / pkg).rglob("*.py")):
            parts = list(p.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


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
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(tree):
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


def layer(module: str) -> tuple[int, str] | None:
    """(layer index, the package of ``LAYERS`` it belongs to), or None for a module no layer
    holds."""
    for i, packages in enumerate(LAYERS):
        for pkg in packages:
            if module == pkg or module.startswith(pkg + "."):
                return i, pkg
    return (-1, module) if module in ROOTS else None


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    """Imports that run from a layer up to a higher one, or across to another package of the
    same layer, as 'importer -> imported'."""
    out = []
    for mod, targets in sorted(edges.items()):
        src = layer(mod)
        for target in sorted(targets):
            dst = layer(target)
            if src is None or dst is None:
                continue  # test_every_module_has_a_layer reports it
            if dst[0] > src[0] or (dst[0] == src[0] and dst[1] != src[1]):
                out.append(f"{mod} -> {target}")
    return out


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


def test_every_module_has_a_layer():
    edges, _ = import_graph()
    assert [m for m in edges if layer(m) is None] == []
    assert all(not edges[root] for root in ROOTS)  # a root's __init__ imports nothing


def test_no_import_runs_up_the_layers():
    edges, _ = import_graph()
    assert upward_imports(edges) == []


def folder_imports(edges: dict[str, set[str]]) -> list[str]:
    """Imports from a folder to one at or after it in :data:`FOLDERS`, as 'importer -> imported'."""
    rank = {folder: i for i, folder in enumerate(FOLDERS)}
    out = []
    for mod, targets in sorted(edges.items()):
        src = mod.split(".")[0]
        out += [f"{mod} -> {t}" for t in sorted(targets) if rank[t.split(".")[0]] > rank[src]]
    return out


def test_the_folders_form_one_chain():
    edges, _ = import_graph()
    assert set(FOLDERS) == set(PACKAGES)
    assert folder_imports(edges) == []


def test_the_folder_check_sees_an_import_up_the_chain():
    edges = {"analysis.report": {"benchmarks.suite.run"}, "benchmarks.cli": {"analysis"}}
    assert folder_imports(edges) == ["analysis.report -> benchmarks.suite.run"]


def test_no_private_name_is_imported_from_another_module():
    _, private = import_graph()
    assert private == []


def test_the_checks_see_a_cycle_and_a_private_import(tmp_path):
    """The checks above can fail: a planted cycle and a planted private import are found, with
    a type-only import in the cycle."""
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
    # b -> c is type-only, and still closes the cycle b -> c -> b
    assert cycles(edges) == [["benchmarks.a", "benchmarks.b", "benchmarks.c"]]
    assert private == ["benchmarks.a: benchmarks.b._g"]
    real, _ = import_graph()
    assert "analysis.metrics" in real["benchmarks.training.trainer"]
    # a function-local import counts: the CLI imports the eval CLI only inside main()
    assert "benchmarks.evaluation.cli" in real["benchmarks.cli"]


def test_the_layer_check_sees_an_import_up_the_stack(tmp_path):
    """A planted type-only import from training up to the suite, a function-local one from
    tasks up to engines, one from analysis up to the harness and one across a layer (telemetry
    -> faults) are found; imports down the layers and within a package are not."""
    root = tmp_path
    files = {
        "benchmarks/__init__.py": "",
        "benchmarks/suite/__init__.py": "",
        "benchmarks/suite/plan.py": "from benchmarks.training import start\n",
        "benchmarks/training/__init__.py": "",
        "benchmarks/training/start.py": (
            "from typing import TYPE_CHECKING\nfrom benchmarks.training import modeling\n"
            "if TYPE_CHECKING:\n    from benchmarks.suite.plan import SuitePlan\n"
        ),
        "benchmarks/training/modeling.py": "",
        "benchmarks/tasks/__init__.py": "",
        "benchmarks/tasks/base.py": (
            "import analysis\ndef f():\n    from benchmarks.engines import rollout\n"
        ),
        "benchmarks/engines/__init__.py": "",
        "benchmarks/engines/rollout.py": "from benchmarks.tasks import base\n",
        "benchmarks/telemetry/__init__.py": "import benchmarks.faults\n",
        "benchmarks/faults.py": "",
        "analysis/__init__.py": "from benchmarks.tasks import base\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    edges, _ = import_graph(root)
    assert upward_imports(edges) == [
        "analysis -> benchmarks.tasks.base",
        "benchmarks.tasks.base -> benchmarks.engines.rollout",
        "benchmarks.telemetry -> benchmarks.faults",
        "benchmarks.training.start -> benchmarks.suite.plan",
    ]


def test_algorithms_import_nothing_of_the_harness():
    edges, _ = import_graph()
    for mod, targets in edges.items():
        if mod.startswith("algorithms"):
            assert all(t.startswith("algorithms") for t in targets), (mod, targets)
        if mod.startswith("analysis"):  # MLflow, its own modules, and the config kit
            assert all(t.startswith("analysis") or t == "algorithms.configkit" for t in targets), (
                mod,
                targets,
            )


def test_the_analysis_layer_and_the_config_kit_load_no_torch():
    """A fresh interpreter parses claims with the kit, and reads the metric schema and the
    statistics: torch never loads (the algorithms package imports its modules on first use)."""
    code = (
        "import sys\n"
        "from analysis.claims.spec import parse_claims\n"
        "import analysis.metrics, analysis.stats, algorithms\n"
        "from algorithms import ConfigError\n"
        "try:\n"
        "    parse_claims([{'name': 'x', 'estimand': 'area_difference', 'a': 'sppo', 'b': 'grpo',"
        " 'direction': 'a >= b', 'margin': 'wide', 'groups': 'all',"
        " 'family': {'name': 'f', 'size': 1}}])\n"
        "except ConfigError as e:\n"
        "    print(e)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')[:3])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    ).stdout.splitlines()
    assert out == ["claims[0].margin='wide': must be a number", "[]"]
