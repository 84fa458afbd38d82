"""The guarded optimizer step the actor and the critic share.

A non-finite loss or gradient norm must not reach the weights: one NaN in AdamW's moments
poisons every later step. So each update is checked twice, before the backward pass (the loss)
and before the step (the clipped gradient norm); a failure skips the step and says what was
non-finite, and the trainer counts consecutive skips (``trainer.max_consecutive_skips``).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["guarded_step"]


def guarded_step(
    loss: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    params: Iterable[torch.nn.Parameter],
    grad_clip: float,
    name: str,
) -> tuple[float | None, str | None]:
    """Backward, clip to ``grad_clip`` and step, unless the loss or the gradient norm is not
    finite. Returns ``(grad_norm, None)`` after a step, ``(None, "<name> loss")`` or
    ``(None, "<name> gradient norm")`` when it skipped one."""
    if not torch.isfinite(loss):
        return None, f"{name} loss"
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(params, grad_clip)
    if not torch.isfinite(gn):
        return None, f"{name} gradient norm"
    optimizer.step()
    return float(gn), None
