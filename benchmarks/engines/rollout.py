"""The contract between the trainer and whatever samples for it.

:class:`RolloutEngine` is what the trainer (and the sampled evaluation) calls; the torch engine
and vLLM both implement it and return a :class:`Rollout`: prompts left-padded, responses
right-padded with EOS included, and each sampled token's log-prob at sampling time, which the
trainer compares with its own teacher-forced recomputation. :func:`encode_prompts` and
:func:`past_first_eos` fix that layout once for every engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F

__all__ = ["Rollout", "RolloutEngine", "encode_prompts", "past_first_eos"]


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
        """The rows ``idx`` (a 1-D index tensor), in that order."""
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


def encode_prompts(tokenizer: Any, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompt ids and float mask, (B, P), padded on the tokenizer's padding side, which must be
    the left (the engines' layout); no special tokens are added: the text is the whole prompt."""
    enc = tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
    return enc["input_ids"], enc["attention_mask"].float()


def past_first_eos(ids: torch.Tensor, eos_id: int) -> torch.Tensor:
    """Positions after each row's first EOS, (B, T) bool: a response is real up to and
    including its first EOS."""
    is_eos = (ids == eos_id).long()
    return (is_eos.cumsum(-1) - is_eos) > 0
