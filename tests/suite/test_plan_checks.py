"""``plan.validate``'s named checks: a value of the wrong kind names its field before any
compute, as a value out of its bounds does, and the start models' recipe carries the plan's
settings into ``benchmarks/training/start.py``."""

from __future__ import annotations

import pytest

from algorithms import ConfigError
from benchmarks.cli import main
from benchmarks.config import compose_config
from benchmarks.suite.plan import validate
from testkit.suites import MICRO

# (override, fragments the message must contain)
WRONG_KIND = [
    ("budget.limit=abc", ["budget.limit='abc'", "a number > 0"]),
    ("budget.limit=true", ["budget.limit=True", "a number > 0"]),
    ("budget.eval_fractions=abc", ["budget.eval_fractions='abc'", "a list", "[0, 1]"]),
    ("budget.eval_fractions=0.5", ["budget.eval_fractions=0.5", "a list"]),
    ("budget.eval_fractions=[0.0,a]", ["budget.eval_fractions=[0.0, 'a']", "a list"]),
    ("threads=abc", ["threads='abc'", "an integer >= 1"]),
    ("threads=1.5", ["threads=1.5", "an integer >= 1"]),
    ("seeds=abc", ["seeds='abc'", "an integer >= 1"]),
    ("seeds=true", ["seeds=True", "an integer >= 1"]),
    ("seed=abc", ["seed='abc'", "an integer"]),
    ("min_free_disk_gb=abc", ["min_free_disk_gb='abc'", "a number >= 0"]),
    ("algorithm.sppo.actor_lr=abc", ["algorithm.sppo.actor_lr='abc'", "a number > 0"]),
    ("algorithm.sppo.critic_lr=abc", ["algorithm.sppo.critic_lr='abc'", "> 0 or null"]),
    ("precision=fp16", ["precision='fp16'", "auto, fp32, bf16"]),
    ("warmstart.target=0.6", ["warmstart.target=0.6", "accuracy", "every", "max_steps"]),
    ("warmstart.curriculum_steps=100", ["warmstart.curriculum_steps=100", "warmstart.target"]),
]


@pytest.mark.parametrize(("override", "fragments"), WRONG_KIND, ids=[c[0] for c in WRONG_KIND])
def test_a_value_of_the_wrong_kind_names_its_field(override, fragments):
    with pytest.raises(ConfigError) as e:
        validate(compose_config([*MICRO, "algorithm=[sppo]", override]))
    for fragment in fragments:
        assert fragment in str(e.value), (fragment, str(e.value))


@pytest.mark.parametrize("override", ["budget.limit=abc", "seeds=abc", "min_free_disk_gb=abc"])
def test_the_cli_reports_it_without_a_traceback(override, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", *MICRO, override, f"cache_dir={tmp_path / 'cache'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sppo-bench: configuration error: " + override.split("=")[0]), err
    assert "Traceback" not in err and "could not convert" not in err and "int()" not in err
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "cache").exists()


def test_integers_and_numbers_as_given_still_pass():
    """Text that is a whole number (an environment variable's) is one; the values are the ones
    a plain conversion gives."""
    plan = validate(compose_config([*MICRO, "seed=3", "seeds=2", "threads=2", "budget.limit=64"]))
    assert (plan.seeds, plan.threads, plan.budget.limit) == ([3, 4], 2, 64.0)
    plan = validate(compose_config([*MICRO, "seeds='2'", "budget.limit='64'"]))
    assert (plan.seeds, plan.budget.limit) == ([0, 1], 64.0)


def test_the_start_recipe_carries_the_plan_s_settings(tmp_path):
    plan = validate(
        compose_config([*MICRO, f"cache_dir={tmp_path}", "threads=2", "trainer.temperature=0.7"])
    )
    recipe = plan.start_recipe
    assert recipe.spec == plan.model.spec and recipe.model_node == plan.model.node
    assert (recipe.cache_dir, recipe.run_threads, recipe.threads) == (str(tmp_path), 2, 2)
    assert recipe.task_node == plan.task_config.node and recipe.warmstart == plan.warmstart.node
    assert (recipe.temperature, recipe.max_new_tokens) == (0.7, plan.task_config.max_new_tokens)
    assert recipe.warm_starts(plan.task)
    off = validate(compose_config([*MICRO, "warmstart.enabled=false"])).start_recipe
    assert not off.warm_starts(plan.task)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        # ppo sets critic settings of its own (algorithm.ppo.critic.head_init), not epochs: a bad
        # trainer.critic_epochs is the user's trainer value and is named as such
        (["algorithm=[ppo]", "trainer.critic_epochs=0"], "trainer.critic_epochs=0"),
        (["algorithm=[ppo]", "algorithm.ppo.critic.epochs=0"], "algorithm.ppo.critic.epochs=0"),
        (["algorithm=[sppo]", "algorithm.sppo.critic.warmup_steps=-1"], "algorithm.sppo.critic"),
    ],
)
def test_a_bad_critic_setting_is_named_where_it_was_set(overrides, named):
    with pytest.raises(ConfigError) as e:
        validate(compose_config([*MICRO, *overrides]))
    assert str(e.value).startswith(named), str(e.value)


def test_samples_per_step_must_hold_whole_groups():
    with pytest.raises(
        ConfigError, match=r"trainer.samples_per_step=64 must be a multiple of rloo"
    ):
        validate(compose_config([*MICRO, "algorithm=[rloo]", "trainer.samples_per_step=64"]))
