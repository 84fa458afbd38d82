"""``warmstart.per_seed=false``: one warm start, built once, that every seed's runs begin from."""

from __future__ import annotations

from pathlib import Path

import pytest

from algorithms import ConfigError
from analysis import metrics as M
from benchmarks.config import compose_config
from benchmarks.suite.plan import validate
from benchmarks.suite.run import run_suite
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


@pytest.mark.slow  # every shipped suite's plan: ~7 s
def test_which_suites_share_their_warm_start():
    """The default suite fits its time budget with one warm start; the claims suites (a verdict
    replicates over starts) and the horizon suite pair their runs by seed over a start each."""
    assert validate(compose_config([])).warmstart.per_seed is False  # the default suite
    chain_sum = validate(compose_config(["suite=claims_chain_sum"]))
    assert chain_sum.warmstart.per_seed is True
    for suite in ("claims", "horizon"):
        plan = validate(compose_config([f"suite={suite}"]))
        assert (plan.warmstart.per_seed, plan.start_recipe.threads) == (True, 1), suite


def test_per_seed_must_be_a_boolean():
    with pytest.raises(ConfigError, match=r"warmstart\.per_seed='sometimes': allowed values"):
        validate(compose_config([*MICRO, "warmstart.per_seed=sometimes"]))


@pytest.mark.slow  # two warm starts of the micro suite: ~20 s
def test_warmstart_threads_build_the_start_apart_from_the_runs_threads(tmp_path):
    """``warmstart.threads=2`` builds the start with two threads, caches it apart from the
    one-thread start (their weights may differ in the last bits) and gives the runs back their
    own thread count."""
    import torch

    from benchmarks.training.modeling import build_char_tokenizer
    from benchmarks.training.start import policy_start

    one = validate(compose_config(_suite(tmp_path)))
    two = validate(compose_config(_suite(tmp_path, "warmstart.threads=2")))
    assert "threads" not in one.start_recipe.identity()  # every one-thread start keeps its key
    assert two.start_recipe.identity() == {**one.start_recipe.identity(), "threads": 2}
    assert "threads" not in two.start_recipe.identity(threads=1)  # a critic model built in a run
    tok = build_char_tokenizer(one.task.alphabet)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        _, info_one = policy_start(one.start_recipe, 0, one.task, tok)
        _, info_two = policy_start(two.start_recipe, 0, two.task, tok)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert (info_one["threads"], info_two["threads"]) == (1, 2)
    assert info_one["cached"] is info_two["cached"] is False
    assert info_one["path"] != info_two["path"]
    assert len(_starts(tmp_path)) == 2


def test_warmstart_threads_must_be_a_positive_integer():
    for bad in ("0", "two", "1.5"):
        with pytest.raises(ConfigError, match=r"warmstart\.threads=.*allowed values are null"):
            validate(compose_config([*MICRO, f"warmstart.threads={bad}"]))
