"""A second oracle for three losses: TRL 1.16's ``GRPOTrainer._compute_loss`` with
``loss_type`` ``cispo``, ``dr_grpo`` and ``dapo`` (the first is verl's oracle in
tests/verl_engine/test_verl_algorithms.py). TRL computes the loss inside its trainer, so the
method runs on a stand-in for the trainer that hands it our log-probs instead of a model's; the
loss lines themselves are TRL's, untouched. Compared in float64, value and gradient.

What each TRL loss means in our terms: ``cispo`` clips the weight at ``epsilon_high`` from
above only (our ``clip_ratio_high = epsilon_high - 1``, no lower bound) and averages over tokens;
``dapo`` is the two-sided clip (no dual-clip) averaged over tokens; ``dr_grpo`` sums over tokens
and divides by ``B * max_completion_length``, our ``seq-mean-token-sum`` over that constant.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from algorithms import get_algorithm
from testkit.paths import require_module

require_module("trl")  # the `bench` extra; under CI its absence fails

from trl import GRPOTrainer  # noqa: E402

ATOL = 1e-6
B, T = 9, 7
#: The worst |ours - TRL| seen per (loss_type, quantity), for the closing note.
WORST: dict[tuple[str, str], float] = {}


def _trl_loss(loss_type: str, logp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor,
              mask: torch.Tensor, eps_low: float, eps_high: float) -> torch.Tensor:  # fmt: skip
    """TRL's ``_compute_loss`` on a stand-in trainer: one process, no accumulation, no KL, no
    entropy terms, token-level importance sampling."""
    accelerator = SimpleNamespace(
        num_processes=1,
        sync_gradients=True,
        gather=lambda x: x,
        gather_for_metrics=lambda x: x,
        reduce=lambda x, reduction="sum": x,
    )
    trainer = SimpleNamespace(
        loss_type=loss_type,
        epsilon_low=eps_low,
        epsilon_high=eps_high,
        beta=0.0,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level="token",
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        aux_loss_enabled=False,
        _entropy_bonus_enabled=False,
        current_gradient_accumulation_steps=1,
        max_completion_length=T,
        model=SimpleNamespace(training=True),
        accelerator=accelerator,
        args=SimpleNamespace(delta=None, steps_per_generation=1, use_bias_correction_kl=False),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp), None),
    )
    inputs = {
        "prompt_ids": torch.zeros(B, 1, dtype=torch.long),
        "prompt_mask": torch.ones(B, 1, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "num_items_in_batch": mask.sum(),
    }
    return GRPOTrainer._compute_loss(trainer, None, inputs)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("spread", [1e-4, 0.3, 2.0])
@pytest.mark.parametrize("loss_type", ["cispo", "dr_grpo", "dapo"])
def test_loss_and_gradient_equal_trl(loss_type, spread, seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).double()
    old = (-torch.rand(B, T, generator=g, dtype=torch.float64) * 3) * mask
    new = old + spread * torch.randn(B, T, generator=g, dtype=torch.float64) * mask
    adv = torch.randn(B, generator=g, dtype=torch.float64)  # one per response, as TRL's
    if loss_type == "cispo":
        eps_high = 5.0  # TRL's CISPO clips the weight at epsilon_high itself
        alg = get_algorithm("cispo", clip_ratio_high=eps_high - 1.0)
        eps_low, scale = 0.0, 1.0  # unused by TRL's cispo
    elif loss_type == "dapo":
        alg = get_algorithm("dapo", overlong_penalty=False)
        eps_low, eps_high, scale = alg.config.clip_ratio_low, alg.config.clip_ratio_high, 1.0
    else:
        alg = get_algorithm("dr_grpo")
        eps_low, eps_high, scale = alg.config.clip_ratio_low, alg.config.clip_ratio_high, 1.0 / T
    ours_lp = new.clone().requires_grad_(True)
    loss, _ = alg.policy_loss(ours_lp, old, adv[:, None] * mask, mask)
    (loss * scale).backward()
    theirs_lp = new.clone().requires_grad_(True)
    theirs = _trl_loss(loss_type, theirs_lp, old, adv, mask, eps_low, eps_high)
    theirs.backward()
    valid = mask > 0
    errors = {
        "loss": abs(loss.item() * scale - theirs.item()),
        "grad": float((ours_lp.grad - theirs_lp.grad)[valid].abs().max()),
    }
    for what, err in errors.items():
        WORST[(loss_type, what)] = max(WORST.get((loss_type, what), 0.0), err)
        assert err <= ATOL, (what, err)
    assert float(theirs_lp.grad.abs().max()) > 0  # a loss with a gradient was compared
