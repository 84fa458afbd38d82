"""The per-token sampling step every decoder shares, and the teacher-forced log-probs.

The rollout engine decodes through two loops: HF's own KV cache (any causal LM,
``TorchEngine._hf_loop``) and the static-cache Llama decoder (``fastdecode.LlamaDecoder``).
Both take one step per token through :func:`next_token`: tempering, the nucleus filter, the
inverse-CDF draw from uniforms pre-drawn for the whole batch (:func:`draw_uniforms`), greedy at
temperature 0, and the sampled token's log-prob. Because they share that step, the two loops
draw the same tokens from the same seed up to the float rounding of their logits, and the
sampling-time log-probs mean the same thing as the teacher-forced ones (:func:`token_logprobs`),
which the trainer compares them with.
"""

from __future__ import annotations

import torch

__all__ = ["draw_uniforms", "next_token", "sample_tokens", "token_logprobs", "top_p_filter"]


def top_p_filter(logp: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask tokens outside the smallest set whose probability reaches ``top_p``; renormalise."""
    sorted_lp, order = logp.sort(dim=-1, descending=True)
    cum = sorted_lp.exp().cumsum(-1)
    drop_sorted = (cum - sorted_lp.exp()) >= top_p  # keep the token that crosses top_p
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return torch.log_softmax(logp.masked_fill(drop, float("-inf")), dim=-1)


def draw_uniforms(
    gen: torch.Generator, steps: int, rows: int, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """The uniforms a batch's sampling consumes, one per (step, row), drawn at once on the CPU.

    A row's draws depend on the seed and its index only, never on which other rows finished (and
    were dropped from the batch), and the per-token draw needs no host round trip on a GPU."""
    return torch.rand(steps, rows, generator=gen).to(device)


def sample_tokens(sample_lp: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One draw per row from ``softmax(sample_lp)`` by inverse CDF with the row's uniform ``u``:
    the first token whose cumulative probability exceeds ``u`` times the total.

    A token of probability 0 (outside top-p) is never drawn: its cumulative sum equals its
    predecessor's. ``torch.multinomial`` on the CPU spent ~0.3 ms per decode step on a
    256-row batch drawing exponentials for every (row, token); this is a cumulative sum and a
    binary search."""
    cdf = sample_lp.exp().cumsum(-1)
    total = cdf[:, -1:]
    idx = torch.searchsorted(cdf, u.unsqueeze(-1) * total, right=True)
    # u * total may round up to the total: then the last token of probability > 0
    last = (cdf < total).sum(-1, keepdim=True)
    return torch.minimum(idx, last).squeeze(-1)


def next_token(
    logits: torch.Tensor, u: torch.Tensor | None, *, temperature: float, top_p: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode step for a batch: the next token of each row and its log-prob.

    ``logits`` (B, V), any float dtype (computed in fp32); ``u`` (B,), this step's uniform per
    row (a row of :func:`draw_uniforms`), unused and may be None at ``temperature == 0``.
    Returns ``(tokens, logp)``, (B,) long and (B,) fp32.

    The logits are scaled by ``1 / temperature`` (skipped at 1), then ``temperature == 0`` takes
    the argmax; otherwise the token is drawn by :func:`sample_tokens` from the distribution
    truncated by :func:`top_p_filter` (when ``top_p < 1``). ``logp`` is the token's log-prob under
    the tempered distribution *before* the nucleus truncation, as the teacher-forced passes
    recompute it."""
    logits = logits.float()
    inv_t = 1.0 / max(temperature, 1e-6)
    logp = torch.log_softmax(logits * inv_t if inv_t != 1.0 else logits, dim=-1)
    if temperature == 0:
        tokens = logp.argmax(-1)
    else:
        sample_lp = logp if top_p >= 1.0 else top_p_filter(logp, top_p)
        tokens = sample_tokens(sample_lp, u)
    return tokens, logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def token_logprobs(
    logits: torch.Tensor,  # (B, T, V): position t predicts response token t
    response_ids: torch.Tensor,  # (B, T)
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Each response token's log-prob at ``temperature`` (in fp32), and optionally the
    entropy of each position's distribution, (B, T) each: the tail of every teacher-forced
    pass (HF's forward in ``teacher_forced``, the shared-prompt one in ``fastdecode``)."""
    logp_all = torch.log_softmax(logits.float() / max(temperature, 1e-6), dim=-1)
    logp = logp_all.gather(-1, response_ids.unsqueeze(-1)).squeeze(-1)
    ent = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
    return logp, ent
