"""``benchmarks/training/start.py``: the start models of a run, from a recipe (no suite plan)."""

from __future__ import annotations

import math

import torch

from benchmarks.tasks.arith import ArithTask
from benchmarks.training.modeling import ModelSpec, build_char_tokenizer, build_tiny_llama
from benchmarks.training.start import StartRecipe, critic_start, policy_start, run_copies

SPEC = ModelSpec(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32)


def _recipe(precision: str = "fp32", cache_dir: str | None = None, **warmstart) -> StartRecipe:
    return StartRecipe(
        spec=SPEC,
        warmstart={"enabled": False, "lr": 1e-3, **warmstart},
        task_node={"name": "arith", "max_new_tokens": 18},
        model_node={"hidden_size": 16},
        cache_dir=cache_dir,
        run_threads=1,
        dtype="float32",
        temperature=1.0,
        top_p=1.0,
        precision=precision,
    )


def test_the_cache_key_names_threads_only_when_not_one():
    recipe = _recipe(threads=2, per_seed=False, difficulty_prompts=8)
    assert recipe.threads == 2
    # enabled, per_seed and the difficulty measurement do not change what it trains
    assert recipe.identity() == {"lr": 1e-3, "threads": 2}
    assert recipe.identity(threads=1) == {"lr": 1e-3}
    assert _recipe().threads == 1 and _recipe().identity() == {"lr": 1e-3}


def test_without_a_warm_start_the_start_is_the_seeded_random_model():
    task = ArithTask(horizon=1)
    tok = build_char_tokenizer(task.alphabet)
    recipe = _recipe()
    assert not recipe.warm_starts(task)
    model, info = policy_start(recipe, 3, task, tok)
    same = build_tiny_llama(SPEC, len(tok), seed=3)
    for p, q in zip(model.parameters(), same.parameters(), strict=True):
        assert torch.equal(p, q)
    assert info["steps"] == 0 and math.isnan(info["val_accuracy"]) and info["path"] is None
    critic = critic_start(recipe, {"hidden_size": 8}, 3, task, tok)
    assert critic.config.hidden_size == 8
    assert critic_start(recipe, None, 3, task, tok) is None  # the policy's copy


def test_a_run_trains_a_copy_and_keeps_a_frozen_reference():
    start = build_tiny_llama(SPEC, 20, seed=0)
    policy, reference = run_copies(start, reference=True)
    assert policy is not start and reference is not start and reference is not policy
    assert not reference.training and not any(p.requires_grad for p in reference.parameters())
    assert all(p.requires_grad for p in policy.parameters())
    assert run_copies(start, reference=False)[1] is None


def test_a_bf16_start_is_trained_and_cached_apart_from_the_fp32_one(tmp_path):
    """The resolved precision keys the warm start: each is built once, in its own precision,
    and read back from its own cache entry."""
    task = ArithTask(horizon=1)
    tok = build_char_tokenizer(task.alphabet)
    ws = {
        "enabled": True,
        "phases": [{"steps": 3, "direct_fraction": 0.0}],
        "batch_size": 8,
        "eval_every": 3,
        "val_size": 4,
    }
    built = {}
    for precision in ("fp32", "bf16"):
        recipe = _recipe(precision, str(tmp_path), **ws)
        model, info = policy_start(recipe, 0, task, tok)
        again, info2 = policy_start(recipe, 0, task, tok)
        assert not info["cached"] and info2["cached"] and info2["path"] == info["path"]
        for p, q in zip(model.parameters(), again.parameters(), strict=True):
            assert torch.equal(p, q) and p.dtype == torch.float32
        built[precision] = (info["path"], [p.detach() for p in model.parameters()])
    assert built["fp32"][0] != built["bf16"][0]
    assert not all(
        torch.equal(p, q) for p, q in zip(built["fp32"][1], built["bf16"][1], strict=True)
    )
