"""The guarded optimizer step: a non-finite loss or gradient norm never reaches the weights."""

from __future__ import annotations

import math

import torch

from benchmarks.training.optim import guarded_step


def _model_and_opt():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def test_a_finite_loss_steps_and_reports_the_clipped_norm():
    model, opt = _model_and_opt()
    before = [p.detach().clone() for p in model.parameters()]
    x = torch.ones(4, 3)
    loss = model(x).pow(2).mean()
    gn, failed = guarded_step(loss, opt, model.parameters(), 1.0, "policy")
    assert failed is None and gn is not None and math.isfinite(gn) and gn > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_non_finite_loss_skips_before_the_backward():
    model, opt = _model_and_opt()
    before = [p.detach().clone() for p in model.parameters()]
    loss = model(torch.ones(2, 3)).sum() * float("nan")
    assert guarded_step(loss, opt, model.parameters(), 1.0, "critic") == (None, "critic loss")
    assert all(p.grad is None for p in model.parameters())  # no backward ran
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_non_finite_gradient_skips_the_step():
    model, opt = _model_and_opt()
    before = [p.detach().clone() for p in model.parameters()]
    # finite loss, infinite gradient: d/dw of sqrt at 0
    loss = (model.weight * 0).abs().sqrt().sum() + model.bias.sum()
    gn, failed = guarded_step(loss, opt, model.parameters(), 1.0, "policy")
    assert (gn, failed) == (None, "policy gradient norm")
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
