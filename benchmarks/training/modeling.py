"""Models: the tiny character-level Llama of the CPU suite, HF checkpoints, and the critics.

The tokenizer is a real ``PreTrainedTokenizerFast`` (one token per character of the task's
alphabet) so that HF ``generate``, lm-eval and vLLM accept the model like any other checkpoint.
Critics follow verl: a copy of the (warm-started) policy's backbone with a fresh scalar head.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:  # transformers loads lazily: import it where the model is built
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

log = logging.getLogger(__name__)

__all__ = ["ModelSpec", "ValueModel", "build_char_tokenizer", "build_tiny_llama", "torch_threads"]


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run a block with ``n`` intra-op threads and give the caller its own count back after,
    even on error: a warm start or a benchmark may use more threads than the runs around it."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"


def build_char_tokenizer(alphabet: str) -> PreTrainedTokenizerFast:
    """One token per character; ``<pad>``=0, ``<eos>``=1, ``<unk>``=2, then the alphabet."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {PAD: 0, EOS: 1, UNK: 2}
    for ch in dict.fromkeys(alphabet):
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, eos_token=EOS, unk_token=UNK, padding_side="left"
    )


@dataclass(frozen=True)
class ModelSpec:
    """Shape of the tiny random model (ignored when ``name_or_path`` names a real checkpoint)."""

    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 512
    max_position_embeddings: int = 128
    #: Grouped-query attention: key/value heads (None: one per query head).
    num_key_value_heads: int | None = None

    def check(self, min_positions: int = 0) -> None:
        """Raise ``ValueError`` naming the ``model.<field>`` whose value transformers would
        reject (or that would fail mid-run), so it is a configuration error before any work."""
        for name in ("hidden_size", "num_layers", "num_heads", "intermediate_size"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"model.{name}={v!r} must be an integer >= 1")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"model.hidden_size={self.hidden_size} must be a multiple of "
                f"model.num_heads={self.num_heads} (each head gets hidden_size / num_heads "
                f"dimensions), e.g. {self.hidden_size - self.hidden_size % self.num_heads or self.num_heads}"
            )
        if (self.hidden_size // self.num_heads) % 2:
            raise ValueError(
                f"model.hidden_size / model.num_heads = {self.hidden_size // self.num_heads} "
                "must be even (rotary position embeddings rotate pairs of dimensions)"
            )
        kv = self.num_key_value_heads
        if kv is not None and (not isinstance(kv, int) or kv < 1 or self.num_heads % kv):
            raise ValueError(
                f"model.num_key_value_heads={kv!r} must divide model.num_heads={self.num_heads} "
                "(each key/value head serves a group of query heads), or be null"
            )
        if self.max_position_embeddings < min_positions:
            raise ValueError(
                f"model.max_position_embeddings={self.max_position_embeddings} is shorter than the "
                f"longest prompt plus the response limit ({min_positions} tokens: prompt + "
                f"max_new_tokens); set model.max_position_embeddings>={min_positions}"
            )


def build_tiny_llama(spec: ModelSpec, vocab_size: int, seed: int) -> LlamaForCausalLM:
    """A randomly initialised Llama-architecture causal LM (seeded, so every run is identical)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_key_value_heads or spec.num_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg)
    return model


class ValueModel(nn.Module):
    """Critic: a causal-LM backbone plus a scalar head on the last hidden state.

    ``values(...)`` uses verl's alignment: ``values[:, t]`` is read at the position *before*
    response token ``t``, so ``values[:, 0]`` sits on the last prompt token — the only value the
    prompt critic of SPPO uses (a prompt critic therefore needs a forward pass over the prompt only).
    """

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        lm = copy.deepcopy(lm)
        self.backbone = lm.model if hasattr(lm, "model") else lm
        self.head = nn.Linear(lm.config.hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.config = lm.config

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
    ) -> torch.Tensor:
        """Scalar value at every position, shape (B, L)."""
        hidden = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
        ).last_hidden_state
        return self.value_head(hidden)

    def value_head(self, hidden: torch.Tensor) -> torch.Tensor:
        """The scalar head on hidden states (..., d) -> (...), in fp32 under any autocast: a
        value is a regression target and a prompt critic's a logit, read to more than bf16's
        three digits (a d-to-1 product costs nothing)."""
        with torch.autocast("cpu", enabled=False):
            return self.head(hidden.to(self.head.weight.dtype)).squeeze(-1)
