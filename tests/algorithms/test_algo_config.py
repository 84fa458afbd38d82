"""Default hyper-parameters (the papers') and config validation."""

from __future__ import annotations

import dataclasses

import pytest

from algorithms import AlgorithmConfig, ConfigError, algorithm_class, get_algorithm


@pytest.mark.parametrize(
    "name, expected",
    [
        ("sppo", dict(n=1, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0,
                      loss_agg_mode="token-mean", kl_loss_coef=0.0, ppo_epochs=1, critic_lr=5e-6)),
        ("ppo", dict(n=1, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=None,
                     loss_agg_mode="token-mean", gamma=1.0, lam=1.0, whiten_advantages=True,
                     cliprange_value=0.5, critic_warmup_steps=50, critic_lr=1e-5,
                     kl_in_reward=False, kl_coef=0.001, kl_loss_coef=0.0)),
        ("grpo", dict(group_size=8, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=None,
                      loss_agg_mode="seq-mean-token-mean", kl_loss_coef=0.001, kl_penalty="k3",
                      norm_adv_by_std=True, eps=1e-6)),
        ("dapo", dict(group_size=16, clip_ratio_low=0.2, clip_ratio_high=0.28,
                      loss_agg_mode="token-mean", kl_loss_coef=0.0, dynamic_sampling=True,
                      max_gen_batches=10, overlong_penalty=True, max_response_length=20480,
                      overlong_buffer=4096, overlong_penalty_factor=1.0)),
        ("rloo", dict(group_size=5, loss_agg_mode="seq-mean-token-mean", kl_loss_coef=0.001)),
        ("remax", dict(n=1, clip_ratio_c=None, loss_agg_mode="token-mean", kl_loss_coef=0.0)),
        ("gspo", dict(group_size=8, clip_ratio_low=3e-4, clip_ratio_high=4e-4,
                      loss_agg_mode="seq-mean-token-mean", kl_loss_coef=0.0, norm_adv_by_std=True)),
        ("cispo", dict(group_size=8, clip_ratio_low=1.0, clip_ratio_high=0.2,
                       loss_agg_mode="token-mean", kl_loss_coef=0.0, norm_adv_by_std=True)),
        ("dr_grpo", dict(group_size=8, clip_ratio_low=0.2, clip_ratio_high=0.2,
                         norm_adv_by_std=False, loss_agg_mode="seq-mean-token-sum",
                         kl_loss_coef=0.0)),
        ("gmpo", dict(group_size=8, clip_ratio_low=0.4, clip_ratio_high=0.4,
                      loss_agg_mode="seq-mean-token-mean", kl_loss_coef=0.0)),
        ("grpo2", dict(group_size=2, clip_ratio_low=0.2, clip_ratio_high=0.2,
                       loss_agg_mode="seq-mean-token-mean", kl_loss_coef=0.001, kl_penalty="k3",
                       norm_adv_by_std=True, eps=1e-6)),
        ("reinforce_pp", dict(n=1, gamma=1.0, kl_in_reward=True, kl_coef=0.001, kl_penalty="k1",
                              clip_ratio_low=0.2, clip_ratio_high=0.2, loss_agg_mode="token-mean",
                              kl_loss_coef=0.0)),
        ("reinforce_pp_baseline", dict(group_size=8, kl_in_reward=True, kl_coef=0.001,
                                       kl_penalty="k1", loss_agg_mode="token-mean",
                                       kl_loss_coef=0.0)),
        ("spo", dict(n=1, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=10.0,
                     loss_agg_mode="token-mean", kl_loss_coef=0.0, rho_min=0.875, rho_max=0.96,
                     drift_half_life=0.06, prior_alpha=0.5, prior_beta=0.5, adv_eps=1e-8)),
    ],
)  # fmt: skip
def test_paper_defaults(name, expected):
    config = get_algorithm(name).config
    assert {k: getattr(config, k) for k in expected} == expected


@pytest.mark.parametrize(
    "name, spp, critic, ref, greedy, gen, warmup, lr",
    [
        ("sppo", 1, "prompt", False, False, 1, 0, 5e-6),
        ("ppo", 1, "token", False, False, 1, 50, 1e-5),
        ("grpo", 8, "none", True, False, 1, 0, None),
        ("dapo", 16, "none", False, False, 10, 0, None),
        ("rloo", 5, "none", True, False, 1, 0, None),
        ("remax", 1, "none", False, True, 1, 0, None),
        ("gspo", 8, "none", False, False, 1, 0, None),
        ("cispo", 8, "none", False, False, 1, 0, None),
        ("dr_grpo", 8, "none", False, False, 1, 0, None),
        ("gmpo", 8, "none", False, False, 1, 0, None),
        ("grpo2", 2, "none", True, False, 1, 0, None),
        ("reinforce_pp_baseline", 8, "none", True, False, 1, 0, None),
        ("spo", 1, "none", False, False, 1, 0, None),
    ],
)
def test_derived_properties(name, spp, critic, ref, greedy, gen, warmup, lr):
    algo = get_algorithm(name)
    assert algo.name == name
    assert (algo.samples_per_prompt, algo.critic, algo.uses_reference) == (spp, critic, ref)
    assert (algo.needs_greedy_baseline, algo.max_gen_batches) == (greedy, gen)
    assert (algo.critic_warmup_steps, algo.critic_lr, algo.ppo_epochs) == (warmup, lr, 1)
    assert algo.kl_in_reward is (name == "reinforce_pp_baseline")
    assert (algo.needs_prompt_keys, algo.needs_updated_log_probs) == (name == "spo",) * 2


def test_reinforce_pp_reads_the_kl_in_its_reward():
    algo = get_algorithm("reinforce_pp")
    assert (algo.samples_per_prompt, algo.kl_in_reward, algo.uses_reference) == (1, True, True)
    assert not get_algorithm("reinforce_pp", kl_in_reward=False).uses_reference


def test_overrides_reach_properties():
    assert get_algorithm("grpo", group_size=4).samples_per_prompt == 4
    assert get_algorithm("sppo", n=2, ppo_epochs=3).ppo_epochs == 3
    assert get_algorithm("sppo", kl_loss_coef=0.01).uses_reference
    assert not get_algorithm("grpo", kl_loss_coef=0).uses_reference
    assert get_algorithm("ppo", critic_lr=3e-6, critic_warmup_steps=0).critic_lr == 3e-6


@pytest.mark.parametrize(
    "name, overrides, pattern",
    [
        ("grpo", dict(group_size=1), r"group_size=1 is invalid: must be >= 2"),
        ("rloo", dict(group_size=0), r"group_size=0 .* >= 2"),
        ("dapo", dict(group_size=1), r"group_size=1 .* >= 2"),
        ("sppo", dict(clip_ratio_low=1.0), r"clip_ratio_low=1.0 .* < 1"),
        ("sppo", dict(clip_ratio_low=0), r"clip_ratio_low=0.0 .* > 0"),
        ("dapo", dict(clip_ratio_high=-0.1), r"clip_ratio_high=-0.1 .* > 0"),
        ("sppo", dict(clip_ratio_c=0.5), r"clip_ratio_c=0.5 .* > 1"),
        ("ppo", dict(gamma=1.5), r"gamma=1.5 .* <= 1"),
        ("ppo", dict(lam=-0.1), r"lam=-0.1 .* >= 0"),
        ("grpo", dict(kl_loss_coef=-1), r"kl_loss_coef=-1.0 .* >= 0"),
        ("grpo", dict(eps=0.0), r"eps=0.0 .* > 0"),
        ("sppo", dict(ppo_epochs=0), r"ppo_epochs=0 .* >= 1"),
        ("dapo", dict(overlong_buffer=100, max_response_length=50), r"overlong_buffer=100.*< max"),
        ("grpo", dict(loss_agg_mode="mean"),
         r"loss_agg_mode='mean' .* 'token-mean', 'seq-mean-token-mean', 'seq-mean-token-sum'"),
        ("grpo", dict(kl_penalty="k2"), r"kl_penalty='k2' .* 'k1', 'k3'"),
        ("grpo", dict(eps="1e-6"), r"eps='1e-6' is invalid: expected float, got str"),
        ("grpo", dict(group_size=8.0), r"group_size=8.0 is invalid: expected int"),
        ("grpo", dict(group_size=True), r"group_size=True is invalid"),
        ("grpo", dict(norm_adv_by_std=1), r"norm_adv_by_std=1 is invalid: expected bool"),
        ("sppo", dict(critic_lr=float("nan")), r"critic_lr=nan .* finite"),
        ("sppo", dict(clip_ratio_c="3"), r"clip_ratio_c='3' is invalid"),
        ("grpo2", dict(group_size=1), r"group_size=1 .* >= 2"),
        ("gspo", dict(clip_ratio_low=1.0), r"clip_ratio_low=1.0 .* < 1"),
        ("cispo", dict(clip_ratio_low=0.0), r"clip_ratio_low=0.0 .* > 0"),
        ("gmpo", dict(loss_agg_mode="token-mean"), r"loss_agg_mode='token-mean' .* 'seq-mean-token-mean'"),
        ("gmpo", dict(clip_ratio_high=0.0), r"clip_ratio_high=0.0 .* > 0"),
        ("spo", dict(rho_min=0.97), r"rho_min=0.97 .* <= rho_max=0.96"),
        ("spo", dict(rho_max=1.5), r"rho_max=1.5 .* <= 1"),
        ("spo", dict(drift_half_life=0.0), r"drift_half_life=0.0 .* > 0"),
        ("spo", dict(prior_alpha=-1), r"prior_alpha=-1.0 .* > 0"),
        ("reinforce_pp", dict(gamma=2), r"gamma=2.0 .* <= 1"),
        ("reinforce_pp_baseline", dict(group_size=1), r"group_size=1 .* >= 2"),
    ],
)  # fmt: skip
def test_validation_names_field_value_and_range(name, overrides, pattern):
    with pytest.raises(ConfigError, match=pattern):
        get_algorithm(name, **overrides)


def test_ints_accepted_for_float_fields_and_none_for_optional():
    config = get_algorithm("sppo", clip_ratio_high=1, critic_lr=1, clip_ratio_c=None).config
    assert type(config.clip_ratio_high) is float and config.clip_ratio_high == 1.0
    assert config.clip_ratio_c is None


def test_unknown_override_names_key_and_lists_fields():
    with pytest.raises(
        ConfigError, match=r"clip_ration.*valid fields:.*clip_ratio_low.*group_size"
    ):
        get_algorithm("grpo", clip_ration=0.3)


def test_configs_are_frozen_and_validate_on_replace():
    config = get_algorithm("grpo").config
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.group_size = 4  # type: ignore[misc]
    with pytest.raises(ConfigError, match="group_size"):
        dataclasses.replace(config, group_size=1)


def test_field_help_lists_every_field():
    help_ = algorithm_class("dapo").Config.field_help()
    assert list(help_) == [f.name for f in dataclasses.fields(algorithm_class("dapo").Config)]
    assert "overlong" in help_["overlong_buffer"].lower()


def test_field_without_help_is_rejected():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Bad(AlgorithmConfig):
        x: int = 1

    with pytest.raises(TypeError, match="Bad.x has no help"):
        Bad()


def test_wrong_config_class_rejected():
    with pytest.raises(TypeError, match="GRPOConfig"):
        algorithm_class("grpo")(algorithm_class("sppo").Config())
