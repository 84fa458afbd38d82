"""Exact values where mutation testing found the algorithm tests loose (docs/mutation.md).

Each test pins a behaviour a surviving mutant changed: the full text of every error message
(a user reads it to fix a config or a call), float64 inputs that keep their dtype end to end
(a tensor made in the default dtype rounds a float64 result to float32), the ``meta`` device
(every output stays on the input's device: a tensor made on the default device is the bug an
accelerator would raise on), and the documented special cases (fewer than two valid elements,
a group of one) on the inputs where they differ from the general formula.

Everything that builds a config or registers an algorithm does it inside the test: mutmut forks
its workers after the modules are imported, so work done at import time runs unmutated.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import sys
import textwrap
from dataclasses import dataclass
from typing import Literal

import pytest
import torch

import algorithms.base as base
import algorithms.ppo as ppo_module
from algorithms import (
    Algorithm,
    AlgorithmConfig,
    ConfigError,
    UnknownAlgorithmError,
    config_field,
    get_algorithm,
    register_algorithm,
)
from algorithms.base import ENTRY_POINT_GROUP, _reset_plugins_loaded, _restore_registry, _unregister
from algorithms.common import (
    clipped_surrogate,
    explained_variance,
    group_index,
    group_mean_std,
    kl_penalty,
    masked_var,
    outcome_at_last_token,
    outcome_to_tokens,
)
from algorithms.dapo import DAPOConfig
from algorithms.grpo import GRPOConfig
from algorithms.ppo import gae
from algorithms.sppo import SPPO, SPPOConfig

F64 = torch.float64
INF = math.inf
META = torch.device("meta")


def f64(x) -> torch.Tensor:
    return torch.tensor(x, dtype=F64)


# --- configuration and registry -------------------------------------------------------------


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
    with pytest.raises(ConfigError, match=r"^Bounded\.lo=-0\.1 is invalid: must be >= 0\.0$"):
        Bounded(lo=-0.1)
    with pytest.raises(ConfigError, match=r"^Bounded\.hi=1\.0 is invalid: must be < 1\.0$"):
        Bounded(hi=1.0)
    with pytest.raises(ConfigError, match=r"^Bounded\.opt=0\.0 is invalid: must be > 0\.0$"):
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


class _Free(Algorithm):
    """A complete critic-free algorithm to register under broken declarations."""

    def advantages(self, rewards, response_mask, group_ids, **_):
        raise NotImplementedError


def test_registration_refuses_a_config_that_is_not_an_algorithm_config():
    @dataclass(frozen=True)
    class PlainDataclass:  # a dataclass, but not an AlgorithmConfig
        x: int = 0

    class NotADataclass:  # neither
        pass

    for config in (PlainDataclass, NotADataclass):
        bad = type("BadConfig", (_Free,), {"Config": config})
        with (
            _restore_registry(),
            pytest.raises(
                TypeError, match=r"^BadConfig\.Config must be an AlgorithmConfig dataclass$"
            ),
        ):
            register_algorithm("bad-config")(bad)


def test_registration_refuses_an_unknown_critic_kind():
    bad = type("BadCritic", (_Free,), {"critic": "value"})
    with (
        _restore_registry(),
        pytest.raises(
            TypeError,
            match=r"^BadCritic\.critic='value' is not one of \('none', 'token', 'prompt'\)$",
        ),
    ):
        register_algorithm("bad-critic")(bad)


def test_unregistering_an_unknown_name_is_a_no_op():
    with _restore_registry():
        _unregister("never-registered")
        assert "grpo" in base._REGISTRY


def test_repr_names_the_class_the_name_and_the_config():
    assert repr(get_algorithm("grpo")) == f"GRPO(name='grpo', config={GRPOConfig()!r})"


def test_unknown_algorithm_error_prints_its_message_only():
    assert str(UnknownAlgorithmError("unknown algorithm 'x'")) == "unknown algorithm 'x'"
    assert str(UnknownAlgorithmError()) == ""


# --- every error message, in full -------------------------------------------------------------

MASK23 = torch.ones(2, 3, dtype=torch.bool)
R2 = torch.tensor([1.0, 0.0])


def _ppo_value_loss(**shapes: tuple[int, ...]):
    """PPO's value loss with (2, 3) tensors except those in ``shapes``."""
    t = {k: torch.zeros(shapes.get(k, (2, 3))) for k in ("values", "targets", "old_values")}
    return get_algorithm("ppo").value_loss(t["values"], t["targets"], MASK23, t["old_values"])


def _policy_loss(bad: str):
    """SPPO's policy loss with (2, 3) tensors, ``bad`` one (2, 4)."""
    names = ("log_probs", "old_log_probs", "advantages", "response_mask", "ref_log_probs")
    t = {k: torch.zeros((2, 4) if k == bad else (2, 3)) for k in names}
    return get_algorithm("sppo").policy_loss(*t.values())


def _shapes(bad: str) -> str:
    names = ("log_probs", "old_log_probs", "advantages", "response_mask", "ref_log_probs")
    return ", ".join(f"'{k}': {(2, 4) if k == bad else (2, 3)}" for k in names)


ERRORS = [
    (
        lambda: SPPO(GRPOConfig()),
        TypeError,
        "SPPO needs a SPPOConfig, got GRPOConfig",
    ),
    *(
        (
            lambda bad=bad: _policy_loss(bad),
            ValueError,
            f"expected tensors of one (B, T) shape, got {{{_shapes(bad)}}}",
        )
        for bad in ("log_probs", "old_log_probs", "advantages", "response_mask", "ref_log_probs")
    ),
    (
        lambda: outcome_to_tokens(torch.zeros(3), torch.ones(2, 5)),
        ValueError,
        "scores must have shape (B,) = (2,), got (3,)",
    ),
    (
        lambda: get_algorithm("grpo").value_loss(R2, R2, None),
        NotImplementedError,
        "grpo has no critic (critic='none'); value_loss exists only for algorithms with critic "
        "'token' or 'prompt'",
    ),
    (
        lambda: group_index(torch.zeros(2, 2)),
        ValueError,
        "group_ids must have shape (B,), got (2, 2)",
    ),
    (
        lambda: DAPOConfig(overlong_buffer=4096, max_response_length=4096),
        ConfigError,
        "DAPOConfig.overlong_buffer=4096 is invalid: must be < max_response_length=4096",
    ),
    (
        lambda: get_algorithm("dapo").shape_rewards(R2, torch.tensor([1, 2, 3])),
        ValueError,
        "dapo: response_lengths (3,) must match rewards (2,)",
    ),
    (
        lambda: get_algorithm("ppo").advantages(R2, MASK23, None),
        ValueError,
        "ppo: values must be the critic's (B, T) token values (2, 3), got None",
    ),
    (
        lambda: get_algorithm("ppo").advantages(R2, MASK23, None, values=torch.zeros(2, 4)),
        ValueError,
        "ppo: values must be the critic's (B, T) token values (2, 3), got (2, 4)",
    ),
    (
        lambda: get_algorithm("ppo", kl_in_reward=True).advantages(
            R2, MASK23, None, values=torch.zeros(2, 3)
        ),
        ValueError,
        "ppo: token_kl (B, T) is required when kl_in_reward=True",
    ),
    (
        lambda: get_algorithm("ppo").value_loss(torch.zeros(2, 3), torch.zeros(2, 3), None),
        ValueError,
        "ppo: value_loss needs the (B, T) response_mask",
    ),
    (
        lambda: _ppo_value_loss(values=(2, 4)),
        ValueError,
        "ppo: expected (B, T) = (2, 3), got {'values': (2, 4), 'targets': (2, 3), "
        "'old_values': (2, 3)}",
    ),
    (
        lambda: _ppo_value_loss(targets=(2, 4)),
        ValueError,
        "ppo: expected (B, T) = (2, 3), got {'values': (2, 3), 'targets': (2, 4), "
        "'old_values': (2, 3)}",
    ),
    (
        lambda: _ppo_value_loss(old_values=(2, 4)),
        ValueError,
        "ppo: expected (B, T) = (2, 3), got {'values': (2, 3), 'targets': (2, 3), "
        "'old_values': (2, 4)}",
    ),
    (
        lambda: get_algorithm("remax").advantages(R2, MASK23, None),
        ValueError,
        "remax: baseline_rewards (the greedy responses' rewards, shape (2,)) is required, got None",
    ),
    (
        lambda: get_algorithm("remax").advantages(
            R2, MASK23, None, baseline_rewards=torch.zeros(3)
        ),
        ValueError,
        "remax: baseline_rewards (the greedy responses' rewards, shape (2,)) is required, got (3,)",
    ),
    (
        lambda: get_algorithm("rloo").advantages(R2, MASK23, None),
        ValueError,
        "rloo: group_ids (B,) is required",
    ),
    (
        lambda: get_algorithm("sppo").advantages(R2, MASK23, None),
        ValueError,
        "sppo: values (the prompt critic's (B,) logits) is required",
    ),
    (
        lambda: get_algorithm("sppo").value_loss(torch.zeros(2, 2), torch.zeros(2, 2)),
        ValueError,
        "sppo: values and targets must both be (B,), got (2, 2) and (2, 2)",
    ),
    (
        lambda: get_algorithm("sppo").value_loss(torch.zeros(2), torch.tensor([0.0, 1.5])),
        ValueError,
        "sppo: value_loss targets must lie in [0, 1] (the critic predicts a success "
        "probability); got min 0.0, max 1.5",
    ),
]


@pytest.mark.parametrize("call, kind, message", ERRORS, ids=[e[2][:60] for e in ERRORS])
def test_error_message_in_full(call, kind, message):
    with pytest.raises(kind) as err:
        call()
    assert str(err.value) == message


# --- special cases on the inputs where they matter -------------------------------------------


def test_masked_var_with_two_and_with_one_valid_element():
    # Two valid elements: (1 - 2)^2 + (3 - 2)^2 = 2 over n - 1 = 1 (Bessel) -> 2; biased -> 1.
    assert masked_var(f64([1.0, 3.0]), torch.tensor([1, 1])).item() == 2.0
    assert masked_var(f64([1.0, 3.0]), torch.tensor([1, 1]), unbiased=False).item() == 1.0
    # Fewer than two valid elements: defined as 0 whatever the one value is (inf - inf is NaN).
    assert masked_var(f64([INF, 5.0]), torch.tensor([1, 0])).item() == 0.0


def test_group_statistics_biased_and_of_a_group_of_one():
    values, ids = f64([1.0, 2.0, 4.0, INF]), torch.tensor([0, 0, 0, 9])
    mean, std, count = group_mean_std(values, ids, unbiased=False)
    # group 0: mean 7/3, squared deviations 16/9 + 1/9 + 25/9 = 42/9, over n = 3 -> 14/9
    assert mean[0].item() == pytest.approx(7 / 3, rel=1e-15)
    assert std[0].item() == pytest.approx(math.sqrt(14 / 9), rel=1e-15)
    _, std_unbiased, _ = group_mean_std(values, ids)
    assert std_unbiased[0].item() == pytest.approx(math.sqrt(7 / 3), rel=1e-15)  # 42/9 over 2
    # A group of one has (unbiased) std 0, even when its one value makes the deviation NaN.
    assert std_unbiased[3].item() == 0.0
    assert count.tolist() == [3.0, 3.0, 3.0, 1.0]


def test_rloo_group_of_one_keeps_its_reward_exactly():
    adv, _ = get_algorithm("rloo").advantages(
        f64([INF, 1.0, 0.0]), torch.ones(3, 1), torch.tensor([5, 6, 6])
    )
    # singleton: A = R (inf - inf would be NaN); pair [1, 0]: 1 - 0 = 1 and 0 - 1 = -1
    assert adv[:, 0].tolist() == [INF, 1.0, -1.0]


def test_k3_of_an_impossible_token_is_the_clamp():
    # ref - logp = +inf (the policy gives the token probability 0): the log-ratio clamp at 20
    # keeps exp() finite, so k3 is the 10 of the outer clamp, not inf - inf = NaN.
    kl = kl_penalty(f64([[-INF, 0.0]]), f64([[0.0, 0.0]]), "k3")
    assert kl.tolist() == [[10.0, 0.0]]


def test_gae_over_a_single_token():
    adv, returns = gae(f64([[1.0]]), f64([[0.25]]), torch.ones(1, 1), 1.0, 1.0)
    assert adv.tolist() == [[0.75]] and returns.tolist() == [[1.0]]


def test_ppo_value_clipping_on_the_low_side():
    # V = -1 moved below V_old - c = -0.5; target -2: clipped V = -0.5 is farther from it,
    # (1.5)^2 = 2.25 > (1)^2 = 1, so the clipped term is the max: loss 0.5 * 2.25.
    loss, metrics = get_algorithm("ppo").value_loss(
        f64([[-1.0]]), f64([[-2.0]]), torch.ones(1, 1), old_values=f64([[0.0]])
    )
    assert loss.item() == 1.125
    assert metrics["critic/clip_frac"] == 1.0


def test_ppo_explained_variance_counts_valid_tokens_only():
    values = f64([[1.0, 2.0, 7.0], [3.0, 0.0, 0.0]])
    targets = f64([[1.0, 3.0, -5.0], [2.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    _, metrics = get_algorithm("ppo").value_loss(values, targets, mask)
    # valid: V = [1, 2, 3], G = [1, 3, 2]; Var(G) = 2/3, residual [0, 1, -1]: Var 2/3 -> EV 0
    assert metrics["critic/explained_variance"] == pytest.approx(0.0, abs=1e-15)


def test_sppo_value_loss_refuses_two_dimensional_logits():
    with pytest.raises(ValueError, match=r"must both be \(B,\)"):
        get_algorithm("sppo").value_loss(torch.zeros(2, 1), torch.zeros(2, 1))


def test_sppo_targets_just_above_one_are_refused():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        get_algorithm("sppo").value_loss(torch.zeros(1), torch.tensor([1.5]))


def test_dapo_filter_without_dynamic_sampling_is_a_bool_keep_mask():
    keep = get_algorithm("dapo", dynamic_sampling=False).filter_groups(
        torch.zeros(3), torch.tensor([0, 0, 1])
    )
    assert keep.dtype == torch.bool and keep.tolist() == [True, True, True]


def test_clipped_surrogate_clamps_a_tiny_ratio_at_exp_minus_20():
    # log-ratio -30 is clamped to -20: A = 1 keeps the unclipped -A * ratio (ratio < 0.8)
    one = torch.ones(1, 1, dtype=F64)
    pg, stats = clipped_surrogate(f64([[-30.0]]), f64([[0.0]]), one, one, 0.2, 0.2)
    assert pg.item() == pytest.approx(-math.exp(-20.0), rel=1e-15)
    assert stats["approx_kl"].item() == 20.0


def test_dual_clip_bounds_negative_advantages_only():
    # A = +0.5 at ratio 1: no dual clip (the bound -A * c = -1.5 is for A < 0): loss -0.5
    one = torch.ones(1, 1, dtype=F64)
    pg, stats = clipped_surrogate(f64([[0.0]]), f64([[0.0]]), f64([[0.5]]), one, 0.2, 0.2, 3.0)
    assert pg.item() == -0.5 and stats["dual_clip_frac"].item() == 0.0


def test_dual_clip_fraction_counts_strictly_bounded_tokens():
    # A = -1 at a ratio exactly c: the surrogate max(r, 1.2) = c equals the bound -A * c, which
    # is then not active (nothing is bounded), so the fraction is 0
    c = torch.exp(f64(0.5)).item()
    one = torch.ones(1, 1, dtype=F64)
    pg, stats = clipped_surrogate(f64([[0.5]]), f64([[0.0]]), -one, one, 0.2, 0.2, c)
    assert pg.item() == c and stats["dual_clip_frac"].item() == 0.0


def test_a_zero_kl_coefficient_keeps_an_infinite_kl_out_of_the_loss():
    # k1 KL of a token the reference gives probability 0 is +inf: logged, but weight 0 disables
    # the term (0 * inf would be NaN)
    algo = get_algorithm("sppo", kl_penalty="k1")
    zeros, one = torch.zeros(1, 2), torch.ones(1, 2)
    loss, metrics = algo.policy_loss(
        zeros, zeros, one, one, ref_log_probs=torch.tensor([[-INF, 0.0]])
    )
    assert loss.item() == -1.0  # the surrogate alone: -A * ratio, token mean
    assert metrics["train/kl"] == INF


# --- float64 in, float64 out ---------------------------------------------------------------


def test_dapo_overlong_penalty_in_float64():
    dapo = get_algorithm("dapo", max_response_length=10, overlong_buffer=3)
    # ramp from L_max - L_buf = 7: len 8 -> -1/3, len 10 -> -1, len 5 -> 0
    shaped = dapo.shape_rewards(f64([1.0, 0.0, 1.0]), torch.tensor([5, 8, 10]))
    assert shaped.dtype == F64
    assert shaped.tolist() == [1.0, -1 / 3, 0.0]  # exact: the same IEEE operations in float64


def test_dapo_filter_in_float64():
    # rewards differing by less than float32 resolves: a float32 max/min would call them equal
    r = f64([0.5, 0.5 + 1e-12, 1.0, 1.0])
    keep = get_algorithm("dapo").filter_groups(r, torch.tensor([0, 0, 1, 1]))
    assert keep.tolist() == [True, True, False, False]


def test_outcome_at_last_token_in_float64():
    out = outcome_at_last_token(f64([0.1, 0.7]), torch.tensor([[1, 1, 0], [1, 0, 1]]))
    assert out.dtype == F64
    assert out.tolist() == [[0.0, 0.1, 0.0], [0.0, 0.0, 0.7]]


def test_remax_advantage_in_the_rewards_dtype():
    adv, _ = get_algorithm("remax").advantages(
        torch.tensor([1.0, 0.0]), torch.ones(2, 1), None, baseline_rewards=f64([0.1, 0.0])
    )
    assert adv.dtype == torch.float32  # the baseline is cast to the rewards, not the reverse
    assert adv[:, 0].tolist() == [(torch.tensor(1.0) - torch.tensor(0.1)).item(), 0.0]


def test_ppo_value_loss_in_the_critic_dtype():
    # float64 targets and old values for a float32 critic: the loss stays float32
    values = torch.tensor([[0.5, -0.5]], requires_grad=True)
    loss, _ = get_algorithm("ppo").value_loss(
        values, f64([[1.0, 0.0]]), torch.ones(1, 2), old_values=f64([[0.0, 0.0]])
    )
    assert loss.dtype == torch.float32


def test_sppo_value_loss_in_the_critic_dtype():
    logits = torch.tensor([0.3, -0.2], requires_grad=True)
    loss, _ = get_algorithm("sppo").value_loss(logits, f64([1.0, 0.0]))
    assert loss.dtype == torch.float32


def test_explained_variance_in_the_prediction_dtype():
    # float32 targets against float64 predictions are compared in float64
    target32 = torch.tensor([0.1, 0.7, 0.3, 0.9])
    pred = f64([0.2, 0.5, 0.4, 0.6])
    t = target32.double()
    expected = 1 - torch.var(t - pred, unbiased=False) / torch.var(t, unbiased=False)
    got = explained_variance(pred, target32)
    assert got.dtype == F64
    # float64 sums of 4 terms of size <= 1: rounding ~1e-15; float32 statistics differ by ~1e-8
    assert got.item() == pytest.approx(expected.item(), abs=1e-13)


# --- the input's device -------------------------------------------------------------------


def _on_meta(out) -> list[torch.device]:
    tensors = out if isinstance(out, tuple) else (out,)
    return [t.device for t in tensors if isinstance(t, torch.Tensor)]


def _meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype, device=META)


IDS_CPU = torch.tensor([0, 0, 1])  # group ids may stay on the CPU beside accelerator rewards
META_CALLS = {
    "group_mean_std": lambda: group_mean_std(_meta(3), IDS_CPU),
    "dapo.filter_groups": lambda: get_algorithm("dapo").filter_groups(_meta(3), IDS_CPU),
    "grpo.advantages": lambda: get_algorithm("grpo").advantages(
        _meta(3), _meta(3, 4, dtype=torch.bool), IDS_CPU
    ),
    "rloo.advantages": lambda: get_algorithm("rloo").advantages(
        _meta(3), _meta(3, 4, dtype=torch.bool), IDS_CPU
    ),
    "outcome_at_last_token": lambda: outcome_at_last_token(_meta(3), _meta(3, 4, dtype=torch.bool)),
    "ppo.gae": lambda: gae(_meta(3, 4), _meta(3, 4), _meta(3, 4, dtype=torch.bool), 1.0, 1.0),
}


@pytest.mark.parametrize("name", list(META_CALLS))
def test_outputs_stay_on_the_inputs_device(name):
    """``meta`` stands in for an accelerator: like CUDA it refuses a non-scalar CPU tensor in
    an operation on its tensors (0-dim CPU tensors are scalars to both)."""
    devices = _on_meta(META_CALLS[name]())
    assert devices and all(d == META for d in devices)


@pytest.mark.parametrize("old_values", [False, True], ids=["unclipped", "clipped"])
def test_ppo_value_loss_metrics_stay_on_the_critics_device(old_values, monkeypatch):
    """The metrics are stacked into one tensor before the one device sync (``to_floats``): a
    metric made on the CPU would fail that stack beside an accelerator's."""
    monkeypatch.setattr(ppo_module, "to_floats", lambda metrics: metrics)
    v = _meta(2, 3)
    _, metrics = get_algorithm("ppo").value_loss(
        v, _meta(2, 3), _meta(2, 3, dtype=torch.bool), _meta(2, 3) if old_values else None
    )
    assert {k: t.device for k, t in metrics.items()} == dict.fromkeys(metrics, META)


# --- entry-point plugins ----------------------------------------------------------------------

PLUGIN = "sppo_bench_mutants_plugin"
MISSING = "sppo_bench_mutants_no_such_module"


def test_plugins_load_once_each_and_only_broken_ones_warn(tmp_path, monkeypatch, caplog):
    """A broken entry point listed twice warns once and does not stop the scan; a module entry
    point (registering by its decorator) and a class that is no Algorithm are loaded silently."""
    (tmp_path / f"{PLUGIN}.py").write_text(
        textwrap.dedent(
            """
            from algorithms import Algorithm, register_algorithm


            @register_algorithm("mutants_plugin_decorated")
            class Decorated(Algorithm):
                def advantages(self, rewards, response_mask, group_ids, **_):
                    raise NotImplementedError


            class NotAnAlgorithm:
                pass
            """
        )
    )
    dist = tmp_path / "sppo_bench_mutants_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: sppo-bench-mutants-plugin\nVersion: 0.1\n"
    )
    (dist / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n"
        f"mutants_broken = {MISSING}\n"
        f"mutants_broken = {MISSING}\n"
        f"mutants_module = {PLUGIN}\n"
        f"mutants_not_an_algorithm = {PLUGIN}:NotAnAlgorithm\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, PLUGIN, raising=False)
    try:
        with _restore_registry(), caplog.at_level(logging.WARNING, logger="algorithms.base"):
            _reset_plugins_loaded()
            names = base.list_algorithms()
            assert "mutants_plugin_decorated" in names
            assert not {"mutants_broken", "mutants_module", "mutants_not_an_algorithm"} & set(names)
            assert [r.getMessage() for r in caplog.records] == [
                f"could not load algorithm plugin 'mutants_broken' ({MISSING}): "
                f"ModuleNotFoundError: No module named '{MISSING}'"
            ]
    finally:
        sys.modules.pop(PLUGIN, None)
