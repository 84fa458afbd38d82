"""Teacher-forced passes: the log-probs (and entropies) of given responses under a model.

The trainer scores every rollout again under the old policy, the reference and (with autograd)
the policy being updated; these passes are most of a step's compute besides sampling. They take
the tempered log-softmax of the same model (:func:`~benchmarks.engines.sampling.token_logprobs`),
so a sampling-time log-prob and its recomputation differ by float rounding only. To cut the
cost, :func:`bucketed_logprobs` groups rows by response length (:func:`by_length`: less padding)
and, for Llama models, runs each distinct prompt once per group
(:func:`~benchmarks.engines.fastdecode.prefix_logprobs`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from benchmarks.engines.sampling import token_logprobs

__all__ = [
    "bucketed_logprobs",
    "by_length",
    "response_logprobs",
    "sequence_inputs",
]


def sequence_inputs(
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Full-sequence ``(input_ids, attention_mask, position_ids)`` for a teacher-forced forward."""
    ids = torch.cat([prompt_ids, response_ids], dim=1)
    mask = torch.cat([prompt_mask, response_mask], dim=1)
    pos = (mask.cumsum(-1) - 1).clamp(min=0).long()
    return ids, mask.long(), pos


def response_logprobs(
    model: torch.nn.Module,  # HF causal LM
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of the response tokens under ``model`` at ``temperature``, (B, T) each.

    Logits at position ``P - 1 + t`` predict response token ``t``; only those ``T`` positions go
    through the LM head.
    """
    ids, mask, pos = sequence_inputs(prompt_ids, prompt_mask, response_ids, response_mask)
    T = response_ids.shape[1]
    logits = model(
        input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=T + 1
    ).logits[:, :-1]  # (B, T, V)
    return token_logprobs(logits, response_ids, temperature, with_entropy)


def bucketed_logprobs(
    model: torch.nn.Module,  # HF causal LM
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    buckets: int = 1,
    min_rows: int = 32,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`response_logprobs` over rows grouped by response length (:func:`by_length`); for
    Llama models each distinct prompt runs once per group (``fastdecode.prefix_logprobs``)."""
    from benchmarks.engines.fastdecode import prefix_logprobs, supports

    shared = supports(model)  # Llama: distinct prompts run once per group (same log-probs)

    def one(
        pi: torch.Tensor, pm: torch.Tensor, ri: torch.Tensor, rm: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if shared:
            return prefix_logprobs(model, pi, pm, ri, temperature, with_entropy)
        return response_logprobs(model, pi, pm, ri, rm, temperature, with_entropy)

    lp, ent = by_length(
        one, prompt_ids, prompt_mask, response_ids, response_mask, buckets, min_rows
    )
    return lp, ent


def by_length(
    fn: Callable[..., tuple[torch.Tensor | None, ...]],
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    buckets: int = 1,
    min_rows: int = 32,
) -> list[torch.Tensor | None]:
    """``fn(prompt_ids, prompt_mask, response_ids, response_mask)``, which returns (rows, T)
    tensors (or None), over rows grouped by response length, each group trimmed to its own
    longest response, so short responses do not pay for the batch's longest one.

    Every row's outputs are computed by the same model on the same tokens; only the padding
    columns a row never attends to are left out, so the result equals the one-batch call up to
    float rounding (positions past a row's response are 0). Autograd flows through every group,
    so a loss on the returned ``(B, T)`` tensors is the same function of the weights as before.
    ``buckets`` groups at most, each of at least ``min_rows`` rows.
    """
    B, T = response_ids.shape
    k = max(1, min(buckets, B // max(1, min_rows)))
    if k == 1:
        return list(fn(prompt_ids, prompt_mask, response_ids, response_mask))
    lengths = response_mask.sum(-1).long()
    order = torch.argsort(lengths, stable=True)
    parts = []
    for idx in order.tensor_split(k):
        t = max(1, int(lengths[idx].max()))
        rm = response_mask[idx, :t]
        outs = fn(prompt_ids[idx], prompt_mask[idx], response_ids[idx, :t], rm)
        parts.append([None if o is None else F.pad(o * rm, (0, T - t)) for o in outs])
    inverse = torch.argsort(order)
    return [None if col[0] is None else torch.cat(col)[inverse] for col in zip(*parts, strict=True)]
