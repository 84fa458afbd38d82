"""The warm start's target: the chain phase ends when held-out greedy accuracy reaches it (or at
its step cap), after a curriculum from short chains to long and a learning-rate warm-up; and its
settings, checked before any compute."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from benchmarks.tasks.arith import ArithTask
from benchmarks.training.modeling import ModelSpec, build_char_tokenizer, build_tiny_llama
from benchmarks.training.warmstart import _Curriculum, parse_target, warm_start

_SPEC = ModelSpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
_FIXED = {
    "phases": [{"steps": 6, "direct_fraction": 0.0}, {"steps": 2, "direct_fraction": 0.5}],
    "batch_size": 16,
    "lr": 3e-3,
    "eval_every": 10**6,
    "val_size": 16,
    "stop_accuracy": None,
}


def _start(tmp_path: Path, cfg: dict, seed: int = 0, **kw) -> dict:
    task = ArithTask(horizon=[1, 2])
    tok = build_char_tokenizer(ArithTask.alphabet)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _, info = warm_start(
            task=task,
            build_model=lambda: build_tiny_llama(_SPEC, len(tok), seed=seed),
            tokenizer=tok,
            cfg=cfg,
            identity={"test": "warmstart"},
            seed=seed,
            cache_dir=tmp_path,
            max_new_tokens=12,
            **kw,
        )
    finally:
        torch.set_num_threads(threads)
    return info


@pytest.mark.parametrize(
    ("target", "named"),
    [
        ({"accuracy": 1.5, "every": 5, "max_steps": 10}, r"warmstart\.target\.accuracy=1\.5"),
        ({"accuracy": 0.0, "every": 5, "max_steps": 10}, r"warmstart\.target\.accuracy=0\.0"),
        ({"accuracy": 0.5, "every": 0, "max_steps": 10}, r"warmstart\.target\.every=0"),
        ({"accuracy": 0.5, "every": 2.5, "max_steps": 10}, r"warmstart\.target\.every=2\.5"),
        ({"accuracy": 0.5, "every": 5, "max_steps": "many"}, r"warmstart\.target\.max_steps"),
        ({"accuracy": 0.5, "every": 5, "max_steps": True}, r"warmstart\.target\.max_steps"),
        ({"accuracy": 0.5, "every": 5}, r"warmstart\.target=.*exactly the keys"),
        ({"accuracy": 0.5, "every": 5, "max_steps": 9, "x": 1}, r"exactly the keys"),
        (0.6, r"warmstart\.target=0\.6: allowed: null, or a mapping"),
    ],
)
def test_a_bad_target_is_named_with_what_it_allows(target, named):
    with pytest.raises(ValueError, match=named):
        parse_target({"target": target})


def test_curriculum_and_warmup_need_a_target_and_a_count():
    good = {"accuracy": 0.6, "every": 50, "max_steps": 1500}
    assert parse_target({"target": None, "curriculum_steps": 0, "warmup_steps": None}) is None
    assert parse_target({}) is None
    assert parse_target({"target": good, "curriculum_steps": 300, "warmup_steps": 100}) == good
    with pytest.raises(ValueError, match=r"warmstart\.curriculum_steps=300: applies only"):
        parse_target({"target": None, "curriculum_steps": 300})
    for bad in (-1, 1.5, "ten", True):
        with pytest.raises(ValueError, match=r"warmstart\.warmup_steps=.*integer >= 0"):
            parse_target({"target": good, "warmup_steps": bad})


def test_the_curriculum_rises_from_the_shortest_chain_to_the_longest():
    task = ArithTask(horizon=[1, 2, 4])
    train = list(task.train_problems())
    cur = _Curriculum(task, train, steps=10, batch=16)
    assert (cur.lo, cur.hi) == (1, 4)
    assert [cur.longest(t) for t in (0, 1, 3, 4, 7, 10, 50)] == [1, 2, 2, 3, 4, 4, 4]
    rng = random.Random(0)
    steps = {p.id: task.sft_target(p, rng, 0.0).count(";") for p in train}
    assert {steps[p.id] for p in cur.pool(0)} == {1}
    assert {steps[p.id] for p in cur.pool(1)} == {1, 2}
    assert len(cur.pool(10)) == len(train)
    # A length with fewer problems than a batch takes the next length's too.
    big = _Curriculum(task, train, steps=10, batch=len(cur.pools[1]) + 1)
    assert big.pool(0) is big.pools[2] and {steps[p.id] for p in big.pool(0)} == {1, 2}


def test_the_fixed_step_start_keeps_its_key_and_ignores_the_target_keys(tmp_path):
    """Null target settings name nothing in the cache key: the fixed-step start is read back."""
    first = _start(tmp_path, _FIXED)
    again = _start(tmp_path, {**_FIXED, "target": None, "curriculum_steps": 0, "warmup_steps": 0})
    assert (first["cached"], again["cached"]) == (False, True)
    assert again["path"] == first["path"]
    assert first["steps"] == 8 and "target_step" not in first


def test_a_bf16_start_is_cached_apart_from_the_fp32_one(tmp_path):
    fp32 = _start(tmp_path, _FIXED)
    bf16 = _start(tmp_path, _FIXED, precision="bf16")
    assert bf16["cached"] is False and bf16["path"] != fp32["path"]
    assert _start(tmp_path, _FIXED, precision="bf16")["cached"] is True
    assert bf16["steps"] == fp32["steps"] == 8


def test_the_chain_phase_ends_at_the_first_check_that_reaches_the_target(tmp_path):
    """A target of 0.05 at checks every 4 steps (after a 6-step curriculum, so from step 8):
    it stops at the first check at or above it; the bare-answer phase then runs its 2 steps.
    The target's own checks are the only validation of the chain phase."""
    cfg = {
        **_FIXED,
        "lr": 1e-2,
        "target": {"accuracy": 0.05, "every": 4, "max_steps": 400},
        "curriculum_steps": 6,
        "warmup_steps": 3,
    }
    info = _start(tmp_path, cfg)
    reached = info["target_step"]
    assert reached is not None and reached % 4 == 0 and reached >= 8
    assert info["chain_steps"] == reached and info["steps"] == reached + 2
    assert 0.0 < info["validation_seconds"] < info["seconds"]
    stored = json.loads((Path(info["path"]) / "warmstart.json").read_text())
    assert stored["target_step"] == reached


def test_a_target_not_reached_ends_the_chain_phase_at_its_cap(tmp_path):
    cfg = {**_FIXED, "target": {"accuracy": 1.0, "every": 3, "max_steps": 7}}
    info = _start(tmp_path, cfg)
    assert info["target_step"] is None
    assert (info["chain_steps"], info["steps"]) == (7, 9)


@pytest.mark.slow  # the claims suites' plans composed: ~5 s
def test_the_claims_suites_end_their_chain_phase_on_a_target_and_the_default_does_not():
    from benchmarks.config import compose_config
    from benchmarks.suite.plan import validate

    assert parse_target(validate(compose_config([])).warmstart.node) is None
    for suite in ("claims", "claims_chain_sum"):
        ws = validate(compose_config([f"suite={suite}"])).warmstart.node
        target = parse_target(ws)
        assert target is not None and target["max_steps"] >= 1000, suite
        assert ws["curriculum_steps"] > 0 and ws["warmup_steps"] > 0, suite
