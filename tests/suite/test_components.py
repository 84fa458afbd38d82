"""The components' typed configs (``benchmarks/suite/components.py``): each read from its node
by ``from_node``, a bad field named with what it allows, and the plan holding the result."""

from __future__ import annotations

import pytest

from algorithms import ConfigError
from benchmarks.config import compose_config
from benchmarks.suite.components import RayConfig, TrackingConfig
from benchmarks.suite.plan import validate
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
