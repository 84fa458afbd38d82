"""``warmstart.per_seed=false``: one warm start, built once, that every seed's runs begin from."""

from __future__ import annotations

from pathlib import Path

import pytest

from algorithms import ConfigError
from benchmarks.config import compose_config
from benchmarks.suite.plan import validate
from benchmarks.suite.run import run_suite
from benchmarks.telemetry import metrics as M
from testkit.suites import MICRO


def _suite(tmp_path: Path, *extra: str) -> list[str]:
    return [
        *MICRO,
        "algorithm=[grpo]",
        "seeds=2",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        f"cache_dir={tmp_path / 'cache'}",
        f"output_dir={tmp_path / 'out'}",
        *extra,
    ]


def _starts(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "warmstart").glob("*/warmstart.json"))


@pytest.mark.slow  # two warm starts of the micro suite and eight short runs: ~60 s on 2 cores
def test_a_shared_warm_start_is_built_once_and_every_seed_starts_from_it(tmp_path):
    shared = run_suite(
        compose_config(_suite(tmp_path, "warmstart.per_seed=false", "jobs=2")), progress=False
    )
    # MICRO's DAPO setting selects DAPO beside GRPO: two algorithms x two seeds.
    assert [r.status for r in shared.runs] == ["FINISHED"] * 4
    assert [(r.algorithm, r.seed) for r in shared.runs] == [
        ("grpo", 0),
        ("dapo", 0),
        ("grpo", 1),
        ("dapo", 1),
    ]
    assert list(shared.warmstart) == ["0"]  # one start, the first seed's
    assert len(_starts(tmp_path)) == 1
    # The same model, evaluated greedily, gives the same start; the RL seeds still differ.
    assert len({r.start_accuracy for r in shared.runs}) == 1
    g0, g1 = shared.runs[0], shared.runs[2]
    assert g0.metrics[M.COMPUTE_ROLLOUT_TOKENS] != g1.metrics[M.COMPUTE_ROLLOUT_TOKENS]

    # Per seed: the first seed's start is that same cached model, the second is new.
    own = run_suite(
        compose_config(_suite(tmp_path, "warmstart.per_seed=true", "jobs=1")), progress=False
    )
    assert sorted(own.warmstart) == ["0", "1"]
    assert own.warmstart["0"]["cached"] is True
    assert own.warmstart["1"]["cached"] is False
    assert len(_starts(tmp_path)) == 2
    assert own.runs[0].start_accuracy == g0.start_accuracy
    assert own.runs[0].final_accuracy == g0.final_accuracy  # same start, same seed, same run
    assert own.warmstart["0"]["path"] == shared.warmstart["0"]["path"]
    assert own.warmstart["1"]["path"] != shared.warmstart["0"]["path"]  # seed 1's own start


def test_the_default_suite_shares_and_the_claims_suites_do_not():
    """The default suite fits its time budget with one warm start; the claims suites pair their
    runs by seed over a warm start each."""
    assert validate(compose_config([])).warmstart["per_seed"] is False
    for suite in ("claims", "claims_chain_sum", "horizon"):
        assert validate(compose_config([f"suite={suite}"])).warmstart["per_seed"] is True, suite


def test_per_seed_must_be_a_boolean():
    with pytest.raises(ConfigError, match=r"warmstart\.per_seed='sometimes': allowed values"):
        validate(compose_config([*MICRO, "warmstart.per_seed=sometimes"]))
