"""The worked example ``examples/dr_grpo.py``: a user-written algorithm registers and runs.

The shared contract suite (test_algo_contract.py) also runs on this example; here are the
checks specific to Dr. GRPO, computed by hand. The example registers as ``dr_grpo_example``:
the suite ships the same algorithm built in as ``dr_grpo``, and a name is registered once.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Iterator

import pytest
import torch

from algorithms import ConfigError, algorithm_class, get_algorithm, list_algorithms
from algorithms.base import _restore_registry
from testkit.paths import EXAMPLES

EXAMPLE = EXAMPLES / "dr_grpo.py"
MODULE = "_user_registration_dr_grpo"
NAME = "dr_grpo_example"


def _import_example() -> None:
    """Import the example file as a user would; executing it registers ``dr_grpo_example``."""
    spec = importlib.util.spec_from_file_location(MODULE, EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = module
    spec.loader.exec_module(module)


@pytest.fixture
def dr_grpo() -> Iterator[None]:
    """``dr_grpo_example`` registered for one test, then the registry restored."""
    with _restore_registry():
        try:
            _import_example()
            yield
        finally:
            sys.modules.pop(MODULE, None)


def test_example_is_short_and_registers(dr_grpo):
    assert len(EXAMPLE.read_text().splitlines()) <= 45
    assert NAME in list_algorithms()
    algo = get_algorithm(NAME)
    assert algo.name == NAME and algo.samples_per_prompt == 8 and algo.critic == "none"
    assert algo.config.loss_agg_mode == "seq-mean-token-sum"
    assert not algo.uses_reference
    assert set(algorithm_class(NAME).Config.field_help()) >= {"group_size", "loss_agg_mode"}


def test_registration_is_undone_by_restore_registry():
    with _restore_registry():
        try:
            _import_example()
            assert NAME in list_algorithms()
        finally:
            sys.modules.pop(MODULE, None)
    assert NAME not in list_algorithms()


def test_dr_grpo_advantage_hand(dr_grpo):
    # group 7: R = [1, 0, 0], mean 1/3 -> 2/3, -1/3, -1/3 (no std division); group 3: all 0
    ids = torch.tensor([7, 3, 7, 3, 7, 3])
    r = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    mask = torch.tensor([[1, 1], [1, 1], [1, 0], [1, 1], [1, 1], [0, 0]])
    adv, returns = get_algorithm(NAME, group_size=3).advantages(r, mask, ids)
    expected = torch.tensor([2 / 3, 0.0, -1 / 3, 0.0, -1 / 3, 0.0])[:, None] * mask
    assert torch.allclose(adv, expected) and returns is None


def test_dr_grpo_loss_sums_tokens(dr_grpo):
    # A = -1 on every token, ratio 1 -> per-token loss 1; seq-mean-token-sum: (3 + 1) / 2 = 2
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    logp = torch.full((2, 3), math.log(0.5))
    loss, _ = get_algorithm(NAME).policy_loss(logp, logp, -torch.ones(2, 3), mask)
    assert loss.item() == pytest.approx(2.0)


def test_dr_grpo_validation_is_inherited(dr_grpo):
    with pytest.raises(ConfigError, match="group_size=1 .* >= 2"):
        get_algorithm(NAME, group_size=1)


def test_the_example_computes_what_the_builtin_does(dr_grpo):
    """The README's example and the built-in ``dr_grpo`` are one algorithm: the same advantages
    on groups of two or more and the same loss and gradient. They part only on a group of one
    (the built-in keeps ``A = R``, as GRPO and verl do; the example's mean is the reward itself)."""
    g = torch.Generator().manual_seed(0)
    ids = torch.tensor([4, 9, 4, 9, 4, 9, 9])
    r = torch.randint(0, 2, (7,), generator=g).float()
    mask = torch.arange(5)[None, :] < torch.randint(1, 6, (7,), generator=g)[:, None]
    example, builtin = get_algorithm(NAME), get_algorithm("dr_grpo")
    adv, _ = example.advantages(r, mask, ids)
    assert torch.equal(adv, builtin.advantages(r, mask, ids)[0])
    old = -torch.rand(7, 5, generator=g)
    grads = []
    for algo in (example, builtin):
        logp = old + 0.3 * torch.randn(7, 5, generator=torch.Generator().manual_seed(1))
        logp.requires_grad_(True)
        loss, _ = algo.policy_loss(logp, old, adv, mask)
        loss.backward()
        grads.append((loss.detach(), logp.grad))
    assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])
    one = torch.tensor([1.0])
    assert builtin.advantages(one, torch.ones(1, 2), torch.tensor([0]))[0].tolist() == [[1, 1]]
    assert example.advantages(one, torch.ones(1, 2), torch.tensor([0]))[0].tolist() == [[0, 0]]
