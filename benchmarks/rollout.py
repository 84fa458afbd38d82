"""Rollout engines: turn prompts into sampled responses with their sampling-time log-probs.

One interface (`RolloutEngine`) with a `torch` engine here: a batched sampler over the HF model's
KV cache, colocated with the trainer, so weight sync is free. Prompts are left-padded and
responses right-padded, the layout every log-prob and value computation below assumes:
``[pad.. prompt | response ..pad]`` with ``P`` prompt columns and ``T`` response columns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F

__all__ = [
    "past_first_eos",
    "Rollout",
    "bucketed_logprobs",
    "by_length",
    "RolloutEngine",
    "TorchEngine",
    "encode_prompts",
    "response_logprobs",
    "draw_uniforms",
    "sample_tokens",
    "sequence_inputs",
    "token_logprobs",
]


@dataclass
class Rollout:
    """A batch of B sampled sequences. Masks are float (1 = real token)."""

    prompt_ids: torch.Tensor  # (B, P) left-padded
    prompt_mask: torch.Tensor  # (B, P)
    response_ids: torch.Tensor  # (B, T) right-padded, EOS included when emitted
    response_mask: torch.Tensor  # (B, T)
    log_probs: torch.Tensor  # (B, T) log-prob of each sampled token at sampling time
    texts: list[str]  # decoded responses without EOS/padding

    @property
    def lengths(self) -> torch.Tensor:
        """Response lengths in tokens, (B,)."""
        return self.response_mask.sum(-1).long()

    def select(self, idx: torch.Tensor) -> Rollout:
        keep = idx.tolist()
        return Rollout(
            self.prompt_ids[idx],
            self.prompt_mask[idx],
            self.response_ids[idx],
            self.response_mask[idx],
            self.log_probs[idx],
            [self.texts[i] for i in keep],
        )

    @staticmethod
    def cat(parts: Sequence[Rollout], pad_id: int) -> Rollout:
        """Concatenate batches with different P and T (re-padding prompts left, responses right)."""
        P = max(r.prompt_ids.shape[1] for r in parts)
        T = max(r.response_ids.shape[1] for r in parts)

        def lpad(x: torch.Tensor, n: int, v: float) -> torch.Tensor:
            return F.pad(x, (n - x.shape[1], 0), value=v)

        def rpad(x: torch.Tensor, n: int, v: float) -> torch.Tensor:
            return F.pad(x, (0, n - x.shape[1]), value=v)

        return Rollout(
            torch.cat([lpad(r.prompt_ids, P, pad_id) for r in parts]),
            torch.cat([lpad(r.prompt_mask, P, 0.0) for r in parts]),
            torch.cat([rpad(r.response_ids, T, pad_id) for r in parts]),
            torch.cat([rpad(r.response_mask, T, 0.0) for r in parts]),
            torch.cat([rpad(r.log_probs, T, 0.0) for r in parts]),
            [t for r in parts for t in r.texts],
        )


class RolloutEngine(Protocol):
    """What the trainer needs from an inference engine."""

    def generate(
        self,
        prompts: Sequence[str],
        *,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int,
    ) -> Rollout: ...

    def sync_weights(self) -> None:
        """Make the engine sample from the trainer's current policy weights."""


def encode_prompts(tokenizer, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001
    """Left-padded prompt ids and mask, (B, P)."""
    enc = tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
    return enc["input_ids"], enc["attention_mask"].float()


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


def past_first_eos(ids: torch.Tensor, eos_id: int) -> torch.Tensor:
    """Positions after each row's first EOS, (B, T) bool: a response is real up to and
    including its first EOS."""
    is_eos = (ids == eos_id).long()
    return (is_eos.cumsum(-1) - is_eos) > 0


def response_logprobs(
    model,  # noqa: ANN001 - HF causal LM
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


def token_logprobs(
    logits: torch.Tensor,  # (B, T, V): position t predicts response token t
    response_ids: torch.Tensor,  # (B, T)
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Each response token's log-prob at ``temperature`` (in fp32), and optionally the
    entropy of each position's distribution, (B, T) each: the tail of every teacher-forced
    pass (HF's forward here, the shared-prompt one in ``fastdecode``)."""
    logp_all = torch.log_softmax(logits.float() / max(temperature, 1e-6), dim=-1)
    logp = logp_all.gather(-1, response_ids.unsqueeze(-1)).squeeze(-1)
    ent = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
    return logp, ent


def bucketed_logprobs(
    model,  # noqa: ANN001 - HF causal LM
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
    from benchmarks.fastdecode import prefix_logprobs, supports

    shared = supports(model)  # Llama: distinct prompts run once per group (same log-probs)

    def one(pi, pm, ri, rm):  # noqa: ANN001, ANN202
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


def _top_p_filter(logp: torch.Tensor, top_p: float) -> torch.Tensor:
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


class TorchEngine:
    """Batched KV-cache sampling with the trainer's own policy module (CPU or one GPU)."""

    def __init__(self, model, tokenizer, *, batch_size: int = 512, fast: bool = True) -> None:  # noqa: ANN001
        from benchmarks.fastdecode import LlamaDecoder, supports

        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        # Llama models sample through the lean static-cache decoder; others through HF's cache.
        self._fast = LlamaDecoder(model) if fast and supports(model) else None

    def sync_weights(self) -> None:
        """Colocated: the engine holds the trainer's module itself."""

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[str],
        *,
        temperature: float,
        top_p: float = 1.0,
        max_new_tokens: int,
        seed: int,
    ) -> Rollout:
        """Sample one response per prompt (repeat prompts for n > 1); temperature 0 is greedy."""
        gen = torch.Generator().manual_seed(seed)
        parts = [
            self._generate(
                prompts[i : i + self.batch_size], temperature, top_p, max_new_tokens, gen
            )
            for i in range(0, len(prompts), self.batch_size)
        ]
        return parts[0] if len(parts) == 1 else Rollout.cat(parts, self.tokenizer.pad_token_id)

    def _generate(
        self,
        prompts: Sequence[str],
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        gen: torch.Generator,
    ) -> Rollout:
        model, tok = self.model, self.tokenizer
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        prompt_ids, prompt_mask = encode_prompts(tok, prompts)
        prompt_ids, prompt_mask = prompt_ids.to(device), prompt_mask.to(device)
        eos, pad = tok.eos_token_id, tok.pad_token_id
        if self._fast is not None:
            response_ids, log_probs = self._fast.generate(
                prompt_ids,
                prompt_mask,
                temperature=temperature,
                top_p=top_p,
                max_new_tokens=max_new_tokens,
                eos_id=eos,
                pad_id=pad,
                gen=gen,
            )
        else:
            response_ids, log_probs = self._hf_loop(
                prompt_ids, prompt_mask, temperature, top_p, max_new_tokens, gen
            )
        model.train(was_training)
        return self._finish(prompt_ids, prompt_mask, response_ids, log_probs)

    def _hf_loop(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        gen: torch.Generator,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sampling through HF's own KV cache (any causal LM)."""
        model, tok = self.model, self.tokenizer
        device = prompt_ids.device
        B = prompt_ids.shape[0]
        mask = prompt_mask.long()
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        out = model(
            input_ids=prompt_ids,
            attention_mask=mask,
            position_ids=pos,
            use_cache=True,
            logits_to_keep=1,
        )
        past, logits = out.past_key_values, out.logits[:, -1]
        cur = pos[:, -1]
        eos, pad = tok.eos_token_id, tok.pad_token_id
        done = torch.zeros(B, dtype=torch.bool, device=device)
        us = None if temperature == 0 else draw_uniforms(gen, max_new_tokens, B, device)
        ids, lps = [], []
        for t in range(max_new_tokens):
            logp = torch.log_softmax(logits.float() / max(temperature, 1e-6), dim=-1)
            if temperature == 0:
                nxt = logp.argmax(-1)
            else:
                sample_lp = logp if top_p >= 1.0 else _top_p_filter(logp, top_p)
                nxt = sample_tokens(sample_lp, us[t])
            lp = logp.gather(-1, nxt.unsqueeze(-1)).squeeze(-1)
            nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
            ids.append(nxt)
            lps.append(torch.where(done, torch.zeros_like(lp), lp))
            done = done | (nxt == eos)
            if bool(done.all()):
                break
            mask = torch.cat([mask, (~done).long().unsqueeze(-1) | 1], dim=1)
            cur = cur + 1
            out = model(
                input_ids=nxt.unsqueeze(-1),
                attention_mask=mask,
                position_ids=cur.unsqueeze(-1),
                past_key_values=past,
                use_cache=True,
            )
            past, logits = out.past_key_values, out.logits[:, -1]
        return torch.stack(ids, dim=1), torch.stack(lps, dim=1)  # (B, T) each

    def _finish(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        response_ids: torch.Tensor,
        log_probs: torch.Tensor,
    ) -> Rollout:
        tok = self.tokenizer
        eos, pad = tok.eos_token_id, tok.pad_token_id
        is_eos = response_ids == eos
        response_mask = (~past_first_eos(response_ids, eos)).float()
        # EOS and padding become the pad id before decoding (id 0 is an ordinary character in
        # many real vocabularies, so multiplying by the mask would append "!!!" to every text).
        visible = torch.where(
            is_eos | (response_mask == 0), torch.full_like(response_ids, pad), response_ids
        )
        texts = tok.batch_decode(visible.tolist(), skip_special_tokens=True)
        return Rollout(
            prompt_ids, prompt_mask, response_ids, response_mask, log_probs * response_mask, texts
        )
