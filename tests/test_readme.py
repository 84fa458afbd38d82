"""The README stays true: its worked example is the tested file, its commands exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testkit.paths import REPO


def test_readme_example_is_examples_dr_grpo():
    readme = (REPO / "README.md").read_text()
    block = re.search(
        r"<!-- example:dr_grpo -->\n```python\n(.*?)```\n<!-- /example -->", readme, re.S
    )
    assert block is not None
    assert block.group(1) == (REPO / "examples" / "dr_grpo.py").read_text()


def test_quickstart_targets_exist():
    makefile = (REPO / "Makefile").read_text()
    readme = (REPO / "README.md").read_text()
    for target in ("run", "test", "install-vllm", "test-vllm"):
        assert f"make {target}" in readme
        assert re.search(rf"^{target}:", makefile, re.M)
    ci = (REPO / ".ci" / "run").read_text()
    assert "make test" in ci and "make install" in ci


@pytest.mark.slow  # a user algorithm through a micro suite: ~13 s
def test_user_algorithm_runs_through_the_harness(tmp_path, monkeypatch):
    """The README's route for a new algorithm: a registered module + a YAML; no harness change."""
    import sys

    from algorithms.base import _restore_registry
    from benchmarks.config import compose_config
    from benchmarks.suite.run import run_suite

    monkeypatch.syspath_prepend(str(REPO))
    conf = tmp_path / "conf" / "algorithm"
    conf.mkdir(parents=True)
    yaml = re.search(
        r"```yaml\n# @package algorithm\.dr_grpo\n(.*?)```", (REPO / "README.md").read_text(), re.S
    )
    assert yaml is not None
    # The README's route for the example: the same lines under the example's own name.
    (conf / "dr_grpo_example.yaml").write_text(
        "# @package algorithm.dr_grpo_example\n" + yaml.group(1)
    )
    with _restore_registry():
        try:
            cfg = compose_config(
                [
                    f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
                    "plugins=[examples.dr_grpo]",
                    "algorithm=[dr_grpo_example]",
                    "seeds=1",
                    "warmstart.phases=[{steps:20,direct_fraction:0.0}]",
                    "task.horizon=1",
                    "trainer.samples_per_step=16",
                    "algorithm.dr_grpo_example.params.group_size=4",
                    "budget.limit=32",
                    "budget.eval_fractions=[0.0,1.0]",
                    "suite.report=false",
                    f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
                    f"cache_dir={tmp_path / 'cache'}",
                    f"output_dir={tmp_path / 'out'}",
                ]
            )
            result = run_suite(cfg, progress=False)
        finally:
            sys.modules.pop("examples.dr_grpo", None)
    assert [r.algorithm for r in result.runs] == ["dr_grpo_example"]
    assert result.runs[0].status == "FINISHED" and result.runs[0].steps == 2


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown page (code blocks skipped; repeats get -1, -2...)."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def test_readme_and_docs_links_resolve():
    """Every relative link of the README and docs/ names a file that exists, and every #anchor a
    heading of that file: the README is a product page that points into docs/."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+://", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path) if path else page
            if not file.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken
    assert _anchors(REPO / "README.md") >= {"quickstart", "the-claims-suites"}


def test_readme_stays_a_product_page():
    """Measurement logs belong in docs/ (results, testbeds, performance, memory, statistics)."""
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; move details to docs/"


def test_algorithm_table_lists_every_shipped_algorithm():
    """The README's algorithm table names every algorithm with a config entry, each registered."""
    from algorithms import list_algorithms

    readme = (REPO / "README.md").read_text()
    table = re.search(r"^\| name \| samples/prompt .*?\n\|[-|]+\|\n((?:\|.*\n)+)", readme, re.M)
    assert table is not None
    names = {row.split("|")[1].strip() for row in table.group(1).splitlines()}
    shipped = {p.stem for p in (REPO / "benchmarks" / "conf" / "algorithm").glob("*.yaml")}
    assert names == shipped
    assert names <= set(list_algorithms())
