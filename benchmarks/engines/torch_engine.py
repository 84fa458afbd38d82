"""The torch rollout engine: sampling from the trainer's own policy module, in this process.

:class:`TorchEngine` implements :class:`~benchmarks.engines.rollout.RolloutEngine` with nothing
but torch: it holds the very module the trainer updates, so weight sync is free and a CPU run
needs no inference server. Llama models decode through the static-cache decoder
(:class:`~benchmarks.engines.fastdecode.LlamaDecoder`, several times faster at the suite's
sizes); any other causal LM, or ``fast=False``, through HF's own KV cache (``_hf_loop``). Both
loops take every token through :func:`~benchmarks.engines.sampling.next_token` with uniforms
drawn from the call's ``seed``, so they sample alike.

The rollout comes back as ``[pad.. prompt | response ..pad]``: prompts left-padded (``P``
columns), responses right-padded (``T`` columns) with EOS included and pad / log-prob 0 after
it, the layout every teacher-forced log-prob and value computation assumes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from benchmarks.engines.rollout import Rollout, encode_prompts, past_first_eos
from benchmarks.engines.sampling import draw_uniforms, next_token

__all__ = ["TorchEngine"]


class TorchEngine:
    """Batched KV-cache sampling with the trainer's own policy module (CPU or one GPU)."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        *,
        batch_size: int = 512,
        fast: bool = True,
        precision: str = "fp32",
    ) -> None:
        from benchmarks.engines.fastdecode import LlamaDecoder, supports

        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        #: The resolved precision of the matmuls (``fp32`` or ``bf16``), the trainer's own.
        self.precision = precision
        # Llama models sample through the lean static-cache decoder; others through HF's cache.
        self._fast = LlamaDecoder(model, precision) if fast and supports(model) else None

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
            bf16 = self.precision == "bf16"  # HF's forward under CPU autocast, logits to fp32
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
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
            nxt, lp = next_token(
                logits, None if us is None else us[t], temperature=temperature, top_p=top_p
            )
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
