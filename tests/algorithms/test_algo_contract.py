"""The contract every registered algorithm must honour, whoever wrote it.

Parametrised over ``list_algorithms()`` at collection time (so a plugin installed through the
``sppo_bench.algorithms`` entry points is covered too) plus the worked example
``examples/dr_grpo.py``. Nothing here knows a specific algorithm: inputs are built from the
algorithm's declared needs (critic kind, samples per prompt, greedy baseline, KL in reward).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import sys
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from algorithms import Algorithm, ConfigError, get_algorithm, list_algorithms
from algorithms.base import _restore_registry
from testkit.paths import EXAMPLES

EXAMPLE = EXAMPLES / "dr_grpo.py"
EXAMPLE_NAME = "dr_grpo_example"  # the built-in Dr. GRPO is `dr_grpo`
EXAMPLE_PARAM = f"{EXAMPLE_NAME}[examples/dr_grpo.py]"
NAMES = [*list_algorithms(), EXAMPLE_PARAM]


def load_example(path: Path, module_name: str) -> None:
    """Import a standalone example file as a module (which registers its algorithm)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)


@pytest.fixture(params=NAMES)
def name(request) -> Iterator[str]:
    """An algorithm name, valid in the registry for the duration of the test."""
    if request.param != EXAMPLE_PARAM:
        yield request.param
        return
    with _restore_registry():
        load_example(EXAMPLE, "_contract_dr_grpo")
        try:
            yield EXAMPLE_NAME
        finally:
            sys.modules.pop("_contract_dr_grpo", None)


@pytest.fixture
def algo(name: str) -> Algorithm:
    return get_algorithm(name)


def make_batch(algo: Algorithm, seed: int, n_prompts: int = 3, t: int = 6) -> dict:
    """Random inputs shaped by what ``algo`` declares it needs; prompt ids shuffled."""
    g = torch.Generator().manual_seed(seed)
    n = algo.samples_per_prompt
    b = n_prompts * n
    perm = torch.randperm(b, generator=g)
    group_ids = (torch.arange(n_prompts).repeat_interleave(n) * 13 - 5)[perm]
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = torch.arange(t)[None, :] < lengths[:, None]  # (B, T) right-padded
    rewards = torch.randint(0, 2, (b,), generator=g).float()
    rewards[0], rewards[1] = 1.0, 0.0  # never all-equal overall
    batch = dict(rewards=rewards, response_mask=mask, group_ids=group_ids, values=None)
    if algo.critic == "prompt":
        batch["values"] = torch.randn(b, generator=g)
    elif algo.critic == "token":
        batch["values"] = torch.randn(b, t, generator=g)
    if algo.needs_greedy_baseline:
        batch["baseline_rewards"] = torch.randint(0, 2, (b,), generator=g).float()
    if algo.kl_in_reward:
        batch["token_kl"] = torch.rand(b, t, generator=g)
    if algo.needs_prompt_keys:
        batch["prompt_keys"] = [f"prompt-{int(i)}" for i in group_ids]
    return batch


def with_garbage(x: torch.Tensor, mask: torch.Tensor, fill: float) -> torch.Tensor:
    return torch.where(mask, x, torch.full_like(x, fill))


# --- advantages -----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_advantage_and_return_shapes(algo, seed):
    batch = make_batch(algo, seed)
    mask = batch["response_mask"]
    adv, returns = algo.advantages(**batch)
    assert adv.shape == mask.shape
    assert torch.isfinite(adv).all()
    assert (adv[~mask] == 0).all(), "advantages must be 0 on masked positions"
    assert not adv.requires_grad
    if algo.critic == "none":
        assert returns is None
    else:
        assert returns is not None and returns.shape == batch["values"].shape
        assert torch.isfinite(returns).all() and not returns.requires_grad


def _reading_every_input(name: str) -> Algorithm:
    """``name`` with its KL-in-reward switched on where its config has that field, so that
    ``token_kl`` is an input it reads."""
    fields = {f.name for f in dataclasses.fields(get_algorithm(name).Config)}
    return get_algorithm(name, **({"kl_in_reward": True} if "kl_in_reward" in fields else {}))


def test_masked_values_never_matter(name):
    """Garbage at masked positions of every (B, T) input (token values, the KL term, which
    every algorithm gets: one that ignores it must ignore it) changes no advantage or return;
    and where the algorithm reads an input, a change at a valid position does change them, so
    the check looks at tensors that are read."""
    algo = _reading_every_input(name)
    batch = make_batch(algo, seed=7)
    mask = batch["response_mask"]
    if batch.get("token_kl") is None:
        batch["token_kl"] = torch.rand(mask.shape, generator=torch.Generator().manual_seed(8))
    adv, returns = algo.advantages(**batch)
    assert torch.isfinite(adv).all() and (adv[~mask] == 0).all()
    inputs = [k for k in ("values", "token_kl") if batch.get(k) is not None]
    inputs = [k for k in inputs if batch[k].shape == mask.shape]
    assert "token_kl" in inputs
    for key in inputs:
        for fill in (float("nan"), 1e30, -1e30):
            garbage = dict(batch, **{key: with_garbage(batch[key], mask, fill)})
            adv2, returns2 = algo.advantages(**garbage)
            assert torch.equal(adv, adv2), (key, fill)
            assert (returns is None and returns2 is None) or torch.equal(returns, returns2)
    read = {"values"} if algo.critic == "token" else set()
    read |= {"token_kl"} if algo.kl_in_reward else set()
    for key in read:  # a valid position moved: the algorithm does read this input
        moved = batch[key].clone()
        moved[0, 0] += 1.0  # row 0 has at least one valid token
        adv3, returns3 = algo.advantages(**dict(batch, **{key: moved}))
        changed = not torch.equal(adv, adv3)
        assert changed or (returns is not None and not torch.equal(returns, returns3)), key


def test_shaping_and_filter_contract(algo):
    batch = make_batch(algo, seed=3)
    lengths = batch["response_mask"].sum(-1)
    shaped = algo.shape_rewards(batch["rewards"], lengths)
    assert shaped.shape == batch["rewards"].shape and torch.isfinite(shaped).all()
    keep = algo.filter_groups(batch["rewards"], batch["group_ids"])
    assert keep.dtype == torch.bool and keep.shape == batch["rewards"].shape
    # a filter keeps or drops whole groups
    for gid in batch["group_ids"].unique():
        assert keep[batch["group_ids"] == gid].unique().numel() == 1


# --- policy loss ----------------------------------------------------------------------------


def _policy_inputs(algo: Algorithm, seed: int) -> dict:
    batch = make_batch(algo, seed)
    mask = batch["response_mask"]
    g = torch.Generator().manual_seed(seed + 100)
    adv, _ = algo.advantages(**batch)
    old = -torch.rand(mask.shape, generator=g) * 3
    logp = (old + 0.3 * torch.randn(mask.shape, generator=g)).requires_grad_(True)
    ref = old + 0.1 * torch.randn(mask.shape, generator=g)
    return dict(
        log_probs=logp,
        old_log_probs=old,
        advantages=adv,
        response_mask=mask,
        ref_log_probs=ref if algo.uses_reference else None,
    )


@pytest.mark.parametrize("seed", range(2))
def test_policy_loss_finite_with_finite_grad(algo, seed):
    inputs = _policy_inputs(algo, seed)
    loss, metrics = algo.policy_loss(**inputs)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    grad = inputs["log_probs"].grad
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0
    assert (grad[~inputs["response_mask"]] == 0).all()
    assert "train/policy_loss" in metrics and "train/clip_frac" in metrics
    assert all(type(v) is float for v in metrics.values())
    assert all(k.startswith("train/") for k in metrics)


@pytest.mark.parametrize("fill", [float("nan"), float("inf"), 1e30, -1e30])
def test_policy_loss_ignores_masked_garbage(algo, fill):
    inputs = _policy_inputs(algo, seed=5)
    mask = inputs["response_mask"]
    loss, metrics = algo.policy_loss(**inputs)
    loss.backward()
    clean_grad = inputs["log_probs"].grad.clone()

    logp = with_garbage(inputs["log_probs"].detach(), mask, fill).requires_grad_(True)
    dirty = dict(inputs, log_probs=logp)
    for key in ("old_log_probs", "advantages", "ref_log_probs"):
        if inputs[key] is not None:
            dirty[key] = with_garbage(inputs[key], mask, fill)
    loss2, metrics2 = algo.policy_loss(**dirty)
    loss2.backward()
    assert torch.equal(loss, loss2)
    assert metrics == metrics2
    assert torch.equal(clean_grad, logp.grad)  # finite, and exactly 0 on padding


def test_zero_loss_and_grad_at_ratio_one_zero_advantage(algo):
    inputs = _policy_inputs(algo, seed=11)
    logp = inputs["old_log_probs"].clone().requires_grad_(True)
    ref = logp.detach() if algo.uses_reference else None
    loss, metrics = algo.policy_loss(
        logp, inputs["old_log_probs"], torch.zeros_like(logp), inputs["response_mask"], ref
    )
    loss.backward()
    assert loss.item() == 0.0
    assert (logp.grad == 0).all()
    assert metrics["train/clip_frac"] == 0.0


def test_one_sgd_step_raises_probability_of_advantaged_action(algo):
    """A linear softmax policy over 4 actions; tokens that chose action 2 get A = +1."""
    g = torch.Generator().manual_seed(0)
    b, t, d, n_actions, target = 4, 6, 3, 4, 2
    w = torch.randn(n_actions, d, generator=g, requires_grad=True)
    x = torch.randn(b, t, d, generator=g)
    mask = torch.ones(b, t, dtype=torch.bool)
    mask[0, 4:] = False
    with torch.no_grad():
        actions = torch.distributions.Categorical(logits=x @ w.T).sample()
    actions[1, :2] = target  # make sure the target action occurs

    def log_probs() -> torch.Tensor:
        return torch.log_softmax(x @ w.T, -1).gather(-1, actions[..., None]).squeeze(-1)

    def p_target() -> float:
        return torch.softmax(x @ w.T, -1)[..., target][mask].mean().item()

    old = log_probs().detach()
    adv = ((actions == target) & mask).float()  # (B, T)
    before = p_target()
    loss, _ = algo.policy_loss(
        log_probs(), old, adv, mask, old.clone() if algo.uses_reference else None
    )
    loss.backward()
    with torch.no_grad():
        w -= 0.1 * w.grad
    assert p_target() > before


# --- value loss -----------------------------------------------------------------------------


def test_value_loss_contract(algo):
    batch = make_batch(algo, seed=2)
    if algo.critic == "none":
        with pytest.raises(NotImplementedError):
            algo.value_loss(torch.zeros(2), torch.zeros(2), None)
        return
    mask = batch["response_mask"]
    _, targets = algo.advantages(**batch)
    values = batch["values"].clone().requires_grad_(True)
    old = batch["values"] + 0.01
    loss, metrics = algo.value_loss(values, targets, mask, old_values=old)
    loss.backward()
    assert loss.dim() == 0 and torch.isfinite(loss) and torch.isfinite(values.grad).all()
    assert {"critic/loss", "critic/value_mean", "critic/explained_variance"} <= set(metrics)
    assert all(type(v) is float for v in metrics.values())
    if values.shape == mask.shape:  # token critic: padding never matters
        values2 = with_garbage(batch["values"], mask, float("nan")).requires_grad_(True)
        loss2, metrics2 = algo.value_loss(
            values2, with_garbage(targets, mask, 1e30), mask, with_garbage(old, mask, -1e30)
        )
        loss2.backward()
        assert torch.equal(loss, loss2) and metrics == metrics2
        assert torch.equal(values.grad, values2.grad)


# --- configuration --------------------------------------------------------------------------


def test_every_config_field_has_help(name):
    for f in dataclasses.fields(get_algorithm(name).Config):
        assert isinstance(f.metadata.get("help"), str) and f.metadata["help"].strip(), f.name


def test_every_field_rejects_garbage_naming_the_field(name):
    config_cls = get_algorithm(name).Config
    for f in dataclasses.fields(config_cls):
        with pytest.raises(ConfigError, match=rf"\b{f.name}=") as err:
            get_algorithm(name, **{f.name: "definitely-not-valid"})
        assert "definitely-not-valid" in str(err.value)


def test_every_field_round_trips_its_default(name):
    config_cls = get_algorithm(name).Config
    defaults = {f.name: getattr(config_cls(), f.name) for f in dataclasses.fields(config_cls)}
    assert get_algorithm(name, **defaults).config == config_cls()
    hints = typing.get_type_hints(config_cls)
    for key, value in defaults.items():
        if isinstance(value, float):
            assert math.isfinite(value) and hints[key] in (float, float | None), key


def test_unknown_override_key_is_named(name):
    with pytest.raises(ConfigError, match="no_such_knob.*valid fields"):
        get_algorithm(name, no_such_knob=1)


# --- state carried between steps --------------------------------------------------------------


def _observe(algo: Algorithm, batch: dict, seed: int) -> dict[str, float]:
    mask = batch["response_mask"]
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(mask.shape, generator=g) * 3
    new = old + 0.05 * torch.randn(mask.shape, generator=g)
    keys = batch.get("prompt_keys") or [f"prompt-{int(i)}" for i in batch["group_ids"]]
    return algo.observe(
        prompt_keys=keys,
        rewards=batch["rewards"],
        response_mask=mask,
        old_log_probs=old,
        new_log_probs=new if algo.needs_updated_log_probs else None,
    )


def _round_trip(state: dict) -> dict:
    import io

    buf = io.BytesIO()
    torch.save(state, buf)  # what a checkpoint does, then loads with weights_only
    return torch.load(io.BytesIO(buf.getvalue()), map_location="cpu", weights_only=True)


def test_state_survives_a_checkpoint_and_a_reset_forgets_it(name):
    """Whatever an algorithm carries between steps goes through a weights-only checkpoint into
    a fresh instance, which then computes exactly the same advantages; ``reset_state`` brings
    back a fresh instance's state. Stateless algorithms carry an empty dict."""
    algo = get_algorithm(name)
    fresh_state = algo.state_dict()
    metrics = {}
    for seed in range(3):
        metrics = _observe(algo, make_batch(algo, seed), seed)
    assert all(type(v) is float and k.startswith("train/") for k, v in metrics.items())
    state = _round_trip(algo.state_dict())
    twin = get_algorithm(name)
    twin.load_state_dict(state)
    batch = make_batch(algo, seed=9)
    adv, _ = algo.advantages(**batch)
    adv2, _ = twin.advantages(**batch)
    assert torch.equal(adv, adv2)
    if not fresh_state:  # a pure function of each batch
        assert algo.state_dict() == {} and metrics == {}
        with pytest.raises(ValueError, match="no state"):
            algo.load_state_dict({"anything": 1})
    algo.reset_state()
    assert str(algo.state_dict()) == str(fresh_state)
