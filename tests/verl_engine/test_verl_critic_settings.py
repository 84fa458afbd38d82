"""The trainer's critic settings map onto verl's keys (verl-free: the translation only)."""

from __future__ import annotations

import pytest

from algorithms import ConfigError
from benchmarks.training.config import TrainerConfig
from benchmarks.verl_engine.translate import _critic_schedule


def test_unset_settings_leave_the_algorithms_values():
    assert _critic_schedule(TrainerConfig(samples_per_step=64), 64) == {}


def test_each_setting_has_its_verl_key():
    t = TrainerConfig(
        samples_per_step=64, critic_warmup_steps=5, critic_epochs=3, critic_mini_batches=4
    )
    assert _critic_schedule(t, 16) == {
        "trainer.critic_warmup": 5,
        "critic.ppo_epochs": 3,
        "critic.ppo_mini_batch_size": 4,  # verl counts mini-batches in prompts
    }


def test_refusals_name_the_key():
    t = TrainerConfig(samples_per_step=64, critic_mini_batches=4)
    with pytest.raises(ConfigError, match=r"trainer.critic_mini_batches=4 must divide .* \(6\)"):
        _critic_schedule(t, 6)
    t = TrainerConfig(samples_per_step=64, critic_head_init="start_success")
    with pytest.raises(ConfigError, match=r"critic_head_init='start_success'.*\['normal'\]"):
        _critic_schedule(t, 16)


def test_verls_critic_head_is_hfs_normal_one_and_a_zero_head_is_said_not_to_reach_it(caplog):
    """verl builds its critic as HF's token-classification model, whose head HF initialises
    normally: ``normal`` runs as set; the trainer's default ``zero`` runs too, with a warning."""
    caplog.set_level("WARNING", logger="benchmarks.verl_engine.translate")
    assert _critic_schedule(TrainerConfig(samples_per_step=64, critic_head_init="normal"), 16) == {}
    assert caplog.records == []
    assert _critic_schedule(TrainerConfig(samples_per_step=64, critic_head_init="zero"), 16) == {}
    (record,) = caplog.records
    assert "critic_head_init=zero does not reach verl" in record.getMessage()


def test_critic_model_maps_onto_critic_model_path():
    from benchmarks.suite.components import VerlEngineConfig
    from benchmarks.verl_engine.translate import _critic_path

    t = TrainerConfig(samples_per_step=64)
    assert _critic_path(t, VerlEngineConfig(), "policy") == "policy"
    assert _critic_path(t, VerlEngineConfig(critic_model="eng"), "policy") == "eng"
    own = TrainerConfig(samples_per_step=64, critic_model="org/small")
    assert _critic_path(own, VerlEngineConfig(), "policy") == "org/small"
    assert _critic_path(own, VerlEngineConfig(critic_model="org/small"), "policy") == "org/small"
    with pytest.raises(ConfigError, match="disagree"):
        _critic_path(own, VerlEngineConfig(critic_model="org/other"), "policy")
    tiny = TrainerConfig(samples_per_step=64, critic_model={"hidden_size": 64})
    with pytest.raises(ConfigError, match="needs an HF id or directory"):
        _critic_path(tiny, VerlEngineConfig(), "policy")
