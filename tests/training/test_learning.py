"""RL works: from the shared warm start, SPPO and GRPO each raise held-out greedy accuracy by
more than 3 standard errors under the default budget (the default suite, one seed)."""

from __future__ import annotations

import pytest

from benchmarks.config import compose_config
from benchmarks.suite.run import run_suite


@pytest.mark.slow
def test_sppo_and_grpo_learn_under_the_default_budget(tmp_path):
    cfg = compose_config(
        [
            "algorithm=[sppo,grpo]",
            "seeds=1",
            "suite.report=false",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
            f"cache_dir={tmp_path / 'cache'}",
            f"output_dir={tmp_path / 'out'}",
        ]
    )
    result = run_suite(cfg, progress=False)
    assert [r.algorithm for r in result.runs] == ["sppo", "grpo"]
    for r in result.runs:
        assert r.status == "FINISHED", r.error
        gain = r.final_accuracy - r.start_accuracy
        assert gain > 3 * r.final_se and gain > 3 * 0.015, (
            r.algorithm,
            r.start_accuracy,
            r.final_accuracy,
        )
    # Both started from the same weights.
    assert result.runs[0].start_accuracy == result.runs[1].start_accuracy
