"""Default hyper-parameters (the papers') and config validation.

The config kit's own checks (``config_field``'s bounds and help strings, annotations that do not
resolve) are declared inside the tests: mutmut forks its workers after the modules are imported,
so a config built at import time runs unmutated (docs/mutation.md)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import pytest

from algorithms import AlgorithmConfig, ConfigError, algorithm_class, config_field, get_algorithm
from algorithms.dapo import DAPOConfig
from algorithms.grpo import GRPOConfig
from algorithms.sppo import SPPO, SPPOConfig
from testkit.messages import assert_raises_exactly, message_cases


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
        ("grpo", dict(group_size=1), r"^GRPOConfig\.group_size=1 must be >= 2\. Samples per prompt"),
        ("rloo", dict(group_size=0), r"group_size=0 .* >= 2"),
        ("dapo", dict(group_size=1), r"group_size=1 .* >= 2"),
        ("sppo", dict(clip_ratio_low=1.0), r"clip_ratio_low=1.0 must be in \(0, 1\)"),
        ("sppo", dict(clip_ratio_low=0), r"clip_ratio_low=0 must be in \(0, 1\)"),
        ("dapo", dict(clip_ratio_high=-0.1), r"clip_ratio_high=-0.1 .* > 0"),
        ("sppo", dict(clip_ratio_c=0.5), r"clip_ratio_c=0.5 .* > 1"),
        ("ppo", dict(gamma=1.5), r"gamma=1.5 must be in \[0, 1\]"),
        ("ppo", dict(lam=-0.1), r"lam=-0.1 must be in \[0, 1\]"),
        ("grpo", dict(kl_loss_coef=-1), r"kl_loss_coef=-1 must be >= 0"),
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
        ("gspo", dict(clip_ratio_low=1.0), r"clip_ratio_low=1.0 must be in \(0, 1\)"),
        ("cispo", dict(clip_ratio_low=0.0), r"clip_ratio_low=0.0 must be > 0\. IS weight"),
        ("gmpo", dict(loss_agg_mode="token-mean"), r"loss_agg_mode='token-mean' .* 'seq-mean-token-mean'"),
        ("gmpo", dict(clip_ratio_high=0.0), r"clip_ratio_high=0.0 .* > 0"),
        ("spo", dict(rho_min=0.97), r"rho_min=0.97 .* <= rho_max=0.96"),
        ("spo", dict(rho_max=1.5), r"rho_max=1.5 must be in \(0, 1\]"),
        ("spo", dict(drift_half_life=0.0), r"drift_half_life=0.0 .* > 0"),
        ("spo", dict(prior_alpha=-1), r"prior_alpha=-1 must be > 0"),
        ("reinforce_pp", dict(gamma=2), r"gamma=2 must be in \[0, 1\]"),
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


# --- the config kit: bounds, help strings, annotations, overrides -----------------------------
#
# Configs are declared and built inside the tests: mutmut forks its workers after the modules are
# imported, so work done at import time runs unmutated (docs/mutation.md).


def test_config_field_keeps_every_bound_in_its_metadata():
    field = config_field(0.5, "help text", ge=0.0, gt=-1.0, le=1.0, lt=2.0)
    assert field.default == 0.5
    assert dict(field.metadata) == {
        "help": "help text",
        "ge": 0.0,
        "gt": -1.0,
        "le": 1.0,
        "lt": 2.0,
    }
    assert dict(config_field(3, "no bounds").metadata) == {"help": "no bounds"}


def test_a_config_declared_in_a_test_enforces_each_bound():
    @dataclass(frozen=True, kw_only=True)
    class Bounded(AlgorithmConfig):
        lo: float = config_field(0.5, "ge bound", ge=0.0)
        hi: float = config_field(0.5, "lt bound", lt=1.0)
        opt: float | None = config_field(None, "optional", gt=0.0)
        mode: int | Literal["auto"] = config_field("auto", "a count, or auto")
        flag: bool = config_field(True, "bounds constrain numbers, not bools", le=0.0)

    cfg = Bounded()  # "auto" fails int, then matches the Literal: every member is tried
    assert (cfg.lo, cfg.mode, cfg.flag) == (0.5, "auto", True)  # True is not held to le=0
    assert Bounded(mode=3).mode == 3
    with pytest.raises(ConfigError, match=r"^Bounded\.lo=-0\.1 must be >= 0\. ge bound$"):
        Bounded(lo=-0.1)
    with pytest.raises(ConfigError, match=r"^Bounded\.hi=1\.0 must be < 1\. lt bound$"):
        Bounded(hi=1.0)
    with pytest.raises(ConfigError, match=r"^Bounded\.opt=0\.0 must be > 0 or null\. optional$"):
        Bounded(opt=0.0)
    # a union's name: types.UnionType has no __name__, so its str
    with pytest.raises(
        ConfigError, match=r"^SPPOConfig\.clip_ratio_c='x' is invalid: expected float \| None$"
    ):
        SPPOConfig(clip_ratio_c="x")


def test_a_blank_help_string_is_refused():
    @dataclass(frozen=True, kw_only=True)
    class Blank(AlgorithmConfig):
        y: float = config_field(0.0, "   ")

    with pytest.raises(
        TypeError, match=r"^Blank\.y has no help string: declare it with config_field$"
    ):
        Blank()


def test_annotations_that_do_not_resolve_name_the_class_and_the_fix():
    class Local:
        pass

    @dataclass(frozen=True, kw_only=True)
    class Unresolvable(AlgorithmConfig):
        x: Local | None = config_field(None, "a type only this function knows")

    with pytest.raises(TypeError) as err:
        Unresolvable()
    assert str(err.value) == (
        f"cannot resolve the field annotations of {Unresolvable.__qualname__} "
        "(name 'Local' is not defined); define the config and the types it names at module level"
    )


def test_unknown_override_keys_are_listed_with_every_valid_field():
    valid = ", ".join(f.name for f in dataclasses.fields(GRPOConfig))
    with pytest.raises(ConfigError) as err:
        get_algorithm("grpo", zz=1, aa=2)
    assert str(err.value) == f"unknown grpo config field(s) aa, zz; valid fields: {valid}"


CONFIG_ERRORS = [
    (
        lambda: SPPO(GRPOConfig()),
        TypeError,
        "SPPO needs a SPPOConfig, got GRPOConfig",
    ),
    (
        lambda: DAPOConfig(overlong_buffer=4096, max_response_length=4096),
        ConfigError,
        "DAPOConfig.overlong_buffer=4096 is invalid: must be < max_response_length=4096",
    ),
]


@message_cases(CONFIG_ERRORS)
def test_error_message_in_full(call, kind, message):
    assert_raises_exactly(call, kind, message)
