"""The components' typed configs (``benchmarks/suite/components.py``): each read from its node
by ``from_node``, a bad field named with what it allows, and the plan holding the result."""

from __future__ import annotations

import pytest

from algorithms import ConfigError
from benchmarks.config import compose_config
from benchmarks.suite.components import (
    ModelConfig,
    RayConfig,
    TaskConfig,
    TorchEngineConfig,
    TrackingConfig,
    VerlEngineConfig,
    WarmStartConfig,
    engine_from_node,
)
from benchmarks.suite.plan import as_dict, validate
from testkit.suites import MICRO


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"adress": "auto"}, "ray.adress: unknown key; allowed: ['address', 'max_retries']"),
        ({"address": "10.0.0.5"}, "ray.address='10.0.0.5': allowed 'auto' (the cluster"),
        ({"address": "h:70000"}, "ray.address='h:70000': allowed 'auto'"),
        ({"max_retries": -1}, "ray.max_retries=-1 must be >= 0"),
        ({"max_retries": "many"}, "ray.max_retries='many': must be an integer >= 0"),
    ],
)
def test_a_bad_ray_field_is_named_with_what_it_allows(node, message):
    with pytest.raises(ConfigError) as err:
        RayConfig.from_node(node)
    assert message in str(err.value)


def test_the_ray_node_read_into_its_config():
    assert RayConfig.from_node(None) == RayConfig("auto", 3)
    assert RayConfig.from_node({"address": " 10.0.0.5:6379 ", "max_retries": "0"}) == RayConfig(
        "10.0.0.5:6379", 0
    )


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (
            {"uri": None, "experiment": "x", "url": "y"},
            "tracking.url: unknown key; allowed: ['uri'",
        ),
        ({"uri": None, "experiment": " "}, "tracking.experiment=' ': must be a non-empty string"),
        ({"uri": None}, "tracking.experiment=None: must be a non-empty string"),
    ],
)
def test_a_bad_tracking_field_is_named_with_what_it_allows(node, message):
    with pytest.raises(ConfigError) as err:
        TrackingConfig.from_node(node)
    assert message in str(err.value)


def test_the_tracking_uri_comes_from_the_node_else_the_environment(tmp_path, monkeypatch):
    given = f"sqlite:///{tmp_path / 'a.db'}"
    env = f"sqlite:///{tmp_path / 'b.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", env)
    assert TrackingConfig.from_node({"uri": given, "experiment": 7}) == TrackingConfig(
        given, "tracking.uri", "7"
    )
    assert TrackingConfig.from_node({"uri": None, "experiment": "e"}) == TrackingConfig(
        env, "MLFLOW_TRACKING_URI", "e"
    )


def test_the_plan_holds_the_components_read_from_the_composed_config(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    plan = validate(
        compose_config(
            [*MICRO, f"tracking.uri={uri}", "tracking.experiment=mine", "ray.max_retries=5"]
        )
    )
    assert plan.tracking == TrackingConfig(uri, "tracking.uri", "mine")
    assert plan.ray == RayConfig("auto", 5)


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"name": "jax"}, "engine.name='jax': allowed ['torch', 'verl']"),
        ({"name": "torch", "device": "tpu"}, "engine.device='tpu': allowed: cpu, cuda"),
        ({"name": "torch", "rollout": "sglang"}, "engine.rollout='sglang': allowed:"),
        ({"name": "torch", "rollout_batch_size": 0}, "engine.rollout_batch_size=0 must be >= 1"),
        ({"name": "torch", "dry_run": True}, "engine.dry_run: unknown key; allowed: ['name'"),
        ({"name": "verl", "val_n": 0}, "engine.val_n=0 must be >= 1"),
        ({"name": "verl", "rollout": "hf"}, "engine.rollout='hf' is invalid: must be one of"),
        ({"name": "verl", "gpu_memory_utilization": 1.5}, "must be in (0, 1]"),
        ({"name": "verl", "train_batch_size": "x"}, "engine.train_batch_size='x' is invalid"),
        ({"name": "verl", "extra_overrides": "a=1"}, "engine.extra_overrides='a=1': must be a"),
        ({"name": "verl", "device": "cuda"}, "engine.device: unknown key; allowed: ['dry_run'"),
    ],
)
def test_a_bad_engine_field_is_named_with_what_it_allows(node, message):
    with pytest.raises(ConfigError) as err:
        engine_from_node(node)
    assert message in str(err.value)


def test_each_engine_group_reads_into_its_own_config():
    torch_engine = engine_from_node(as_dict(compose_config([]).engine))
    assert torch_engine == TorchEngineConfig("cpu", "torch", 512, None)
    verl = compose_config(["engine=verl", "engine.val_n=4", "engine.extra_overrides=['a=1']"])
    engine = engine_from_node(as_dict(verl.engine))
    assert isinstance(engine, VerlEngineConfig)
    assert (engine.name, engine.device, engine.val_n, engine.extra_overrides) == (
        "verl",
        "cuda",
        4,
        ("a=1",),
    )
    # The eval temperature reaches verl's validation through the group's interpolation.
    assert engine.val_temperature == float(verl.trainer.eval_temperature)


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"max_new_tokens": 8}, "task.name=None: must name a task"),
        ({"name": "arith", "max_new_tokens": 0}, "task.max_new_tokens=0 must be >= 1"),
        ({"name": "arith"}, "task.max_new_tokens=None: must be an integer >= 1"),
    ],
)
def test_a_bad_task_field_is_named(node, message):
    with pytest.raises(ConfigError) as err:
        TaskConfig.from_node(node)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("warmstart.per_seed=2", "warmstart.per_seed=2: allowed values are true"),
        ("warmstart.threads=0", "warmstart.threads=0: allowed values are null"),
        ("warmstart.lr=0", "warmstart.lr=0 must be > 0"),
        ("warmstart.batch_size=x", "warmstart.batch_size='x': must be an integer >= 1"),
    ],
)
def test_a_bad_warm_start_field_is_named(override, message):
    with pytest.raises(ConfigError) as err:
        WarmStartConfig.from_node(as_dict(compose_config([override]).warmstart))
    assert message in str(err.value)


def test_a_bad_model_shape_is_named_before_the_task_is_known():
    node = as_dict(compose_config(["model.num_heads=3"]).model)
    with pytest.raises(ConfigError, match=r"model\.hidden_size=128 must be a multiple of"):
        ModelConfig.from_node(node)
    real = ModelConfig.from_node({**node, "name_or_path": "some/model"})
    assert real.real and real.spec is None


def test_the_plan_keeps_each_node_as_given_for_the_warm_start_cache():
    """The task, warm-start and model nodes key the warm-start cache: the configs keep them
    exactly as composed, so a start cached before the configs existed is found again."""
    cfg = compose_config(MICRO)
    plan = validate(cfg)
    assert plan.task_config.node == as_dict(cfg.task)
    assert plan.warmstart.node == as_dict(cfg.warmstart)
    assert plan.model.node == as_dict(cfg.model)
    assert (plan.task_config.name, plan.task_config.horizon) == ("arith", cfg.task.horizon)
    assert plan.start_seeds == (plan.seeds if plan.warmstart.per_seed else plan.seeds[:1])
