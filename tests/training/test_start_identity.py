"""The warm-start cache: two suites whose starts differ never share a cached start, and suites
whose starts are the same do. A start's cache key (:meth:`StartRecipe.policy_key`, the folder
``policy_start`` reads or writes) must change with every setting that changes what the warm
start trains: every field of the ``task``, ``model`` and ``warmstart`` nodes except the few that
do not touch the weights, the start seed, the threads it is built with and the precision."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.config import compose_config
from benchmarks.suite.plan import validate
from benchmarks.tasks.arith import ArithTask
from benchmarks.training.modeling import ModelSpec, build_char_tokenizer
from benchmarks.training.start import StartRecipe, build_starts, policy_start

#: ``warmstart`` fields that do not change the weights it trains: whether it runs, which seeds
#: share it, and the difficulty measurement taken after it.
NOT_THE_START = {
    ("warmstart", "enabled"),
    ("warmstart", "per_seed"),
    ("warmstart", "difficulty_prompts"),
    ("warmstart", "difficulty_samples"),
}


def _changed(value: Any) -> Any:
    """Another value of the same kind (None: a set one, 2: not the one-thread default)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.5 + 0.25
    if isinstance(value, str):
        return value + "_x"
    if value is None:
        return 2
    raise AssertionError(f"no change for {value!r}")


def _leaves(node: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, (*path, i))
        yield (*path, len(node)), None  # an element more
    else:
        yield path, node


def _with(node: Any, path: tuple, value: Any) -> Any:
    """A copy of ``node`` with ``path`` set to ``value`` (one past a list's end: appended)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(node, list):
        out = list(node)
        if head == len(out):
            out.append(value)
        else:
            out[head] = _with(out[head], rest, value)
        return out
    return {**node, head: _with(node.get(head), rest, value)}


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> StartRecipe:
    """The default suite's start recipe, with a target so its settings are in the key too."""
    cache = tmp_path_factory.mktemp("cache")
    cfg = compose_config(
        [f"cache_dir={cache}", "+warmstart.target={accuracy:0.85,every:50,max_steps:2000}"]
    )
    return validate(cfg).start_recipe


_NODES = {"warmstart": "warmstart", "task": "task_node", "model": "model_node"}


def _every_change(recipe: StartRecipe) -> Iterator[tuple[tuple, StartRecipe]]:
    for name, attr in _NODES.items():
        node = dict(getattr(recipe, attr))
        for path, value in _leaves(node):
            changed = _with(node, path, _changed(value))
            yield (name, *path), dataclasses.replace(recipe, **{attr: changed})


def test_every_field_that_changes_a_start_changes_its_key(recipe):
    base = recipe.policy_key(0)
    changes = list(_every_change(recipe))
    assert len(changes) > 30
    for path, other in changes:
        if path[:2] in NOT_THE_START:
            assert other.policy_key(0) == base, path  # the same start, shared
        else:
            assert other.policy_key(0) != base, path
    # Beside the nodes: the start seed, the threads it is built with, the precision.
    assert recipe.policy_key(1) != base
    assert dataclasses.replace(recipe, run_threads=2).policy_key(0) != base
    assert dataclasses.replace(recipe, precision="bf16").policy_key(0) != base
    # Neither the sampling of the difficulty measurement nor the runs' dtype trains the start.
    same = dataclasses.replace(recipe, temperature=0.3, top_p=0.5, dtype="bfloat16")
    assert same.policy_key(0) == base


def _keys(overrides: list[str], cache: Path) -> set[str]:
    """The cache keys of every seed's start in the suite these overrides compose."""
    plan = validate(compose_config([f"cache_dir={cache}", *overrides]))
    return {plan.start_recipe.policy_key(plan.start_seed(s)) for s in plan.seeds}


@pytest.fixture(scope="module")
def base_keys(tmp_path_factory) -> set[str]:
    """The default suite's start keys (the cache folder is not part of them)."""
    return _keys([], tmp_path_factory.mktemp("base"))


@pytest.mark.parametrize(
    "override",
    [
        ["task.horizon=3"],
        ["task.test_fraction=0.25"],
        ["model.hidden_size=64"],
        ["model.num_layers=3"],
        ["warmstart.lr=0.002"],
        ["warmstart.batch_size=32"],
        ["warmstart.phases=[{steps:200,per_chain_step:25,direct_fraction:0.0}]"],
        ["warmstart.threads=2"],
        ["threads=2"],  # the start is built with the runs' threads unless warmstart.threads
        ["precision=bf16"],
        ["seed=1"],  # one start shared by every seed: the first seed's
        ["warmstart.per_seed=true"],  # a start per seed, the first seed's among them
    ],
)
def test_two_suites_whose_starts_differ_share_no_cached_start(override, base_keys, tmp_path):
    base = base_keys
    other = _keys(override, tmp_path)
    if override == ["warmstart.per_seed=true"]:
        assert base < other and len(other) == 3
    else:
        assert base.isdisjoint(other)


@pytest.mark.parametrize(
    "override",
    [
        ["trainer.samples_per_step=32"],
        ["budget.limit=1000"],
        ["algorithm=[grpo]"],
        ["warmstart.difficulty_samples=4"],
        ["seeds=5"],
    ],
)
def test_suites_whose_starts_are_the_same_share_them(override, base_keys, tmp_path):
    assert _keys(override, tmp_path) == base_keys


@pytest.mark.parametrize("target", [True, False])
def test_the_key_is_the_one_existing_caches_were_written_under(recipe, target):
    """Recomputed by hand from what it hashes: a change of layout would orphan every cached
    start (each is minutes of SFT) without changing any start. Without a target (and with
    curriculum and warm-up at 0) the target's settings are not named, nor is fp32."""
    import hashlib
    import json

    from benchmarks.training.warmstart import WARMSTART_VERSION, cache_key

    if not target:
        recipe = dataclasses.replace(recipe, warmstart={**recipe.warmstart, "target": None})
    ws = {k: v for k, v in recipe.warmstart.items() if ("warmstart", k) not in NOT_THE_START}
    ws.pop("threads")  # one thread: not named
    ws = {
        k: v for k, v in ws.items() if v or k not in ("target", "curriculum_steps", "warmup_steps")
    }
    assert ("target" in ws) is target
    parts = {
        "v": WARMSTART_VERSION,
        "identity": {"task": dict(recipe.task_node), "model": dict(recipe.model_node)},
        "warmstart": ws,
        "seed": 7,
    }
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    assert recipe.policy_key(7) == hashlib.sha256(blob).hexdigest()[:16]
    bf16 = {**parts, "precision": "bf16"}
    blob = json.dumps(bf16, sort_keys=True, default=str).encode()
    assert (
        dataclasses.replace(recipe, precision="bf16").policy_key(7)
        == (hashlib.sha256(blob).hexdigest()[:16])
    )
    # fp32 is the default, and named by neither.
    same = {"identity": parts["identity"], "cfg": recipe.identity(), "seed": 7}
    assert cache_key(**same) == cache_key(**same, precision="fp32") == recipe.policy_key(7)
    # A value JSON has no type for is named by its text (a path, as a data directory may be).
    as_path = {**same, "identity": {"data": Path("/data/x")}}
    assert cache_key(**as_path) == cache_key(**{**same, "identity": {"data": "/data/x"}})


def _tiny_recipe(cache_dir: Path) -> StartRecipe:
    """A start of a few seconds: a 1-layer model, 2 warm-start steps on arith's horizon 1."""
    return StartRecipe(
        spec=ModelSpec(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32),
        warmstart={
            "phases": [{"steps": 2, "direct_fraction": 0.0}],
            "batch_size": 4,
            "eval_every": 2,
            "val_size": 4,
            "lr": 1e-3,
        },
        task_node={"name": "arith", "horizon": 1, "max_new_tokens": 8},
        model_node={"hidden_size": 16},
        cache_dir=str(cache_dir),
        run_threads=1,
        dtype="float32",
        temperature=1.0,
        top_p=1.0,
    )


def test_the_key_names_the_folder_policy_start_reads_and_writes(tmp_path):
    task = ArithTask(horizon=1)
    tok = build_char_tokenizer(task.alphabet)
    recipe = _tiny_recipe(tmp_path)
    _, info = policy_start(recipe, 4, task, tok)
    assert Path(info["path"]) == tmp_path / "warmstart" / recipe.policy_key(4)
    _, again = policy_start(recipe, 4, task, tok)
    assert again["cached"] and again["path"] == info["path"]


def test_build_starts_builds_each_start_seed_once_into_the_cache_runs_read(tmp_path):
    """A sweep builds its trials' starts ahead of its workers (``build_starts``): each distinct
    start seed once, into the folder ``policy_start`` then reads as cached; a fresh model (no
    warm start) has nothing to build."""
    task = ArithTask(horizon=1)
    recipe = _tiny_recipe(tmp_path)
    built = build_starts(recipe, [3, 1, 3], task)
    assert sorted(built) == [1, 3] and not any(info["cached"] for info in built.values())
    for seed in (1, 3):
        assert Path(built[seed]["path"]) == tmp_path / "warmstart" / recipe.policy_key(seed)
        _, info = policy_start(recipe, seed, task, build_char_tokenizer(task.alphabet))
        assert info["cached"] and info["path"] == built[seed]["path"]
    fresh = dataclasses.replace(recipe, warmstart={**recipe.warmstart, "enabled": False})
    assert build_starts(fresh, [5], task) == {}
    assert not (tmp_path / "warmstart" / recipe.policy_key(5)).exists()
