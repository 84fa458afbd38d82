"""The README stays true: its worked example is the tested file, its commands exist."""

from __future__ import annotations

import re

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
