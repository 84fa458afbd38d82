"""The critic's own model (``trainer.critic_model``): the paper's small critic.

The paper trains a 7B policy with a 1.5B critic and reports it as its most memory-frugal
setting: SPPO's critic reads the prompt only, so it need not be as large as the policy. Here the
critic's backbone is, by default, a copy of the policy's start (verl's default too). Set
``trainer.critic_model`` to

* a mapping of tiny-Llama fields (``{hidden_size: 64, intermediate_size: 256}``; fields left
  out are the policy's ``model.*``): a smaller model, warm-started on the same task with the
  same supervised recipe and cached beside the policy's warm start (its own cache key), so the
  critic starts from task knowledge as the policy's copy would; or
* a string, an HF id or directory: a real model for a real policy.

Either must speak the policy's tokenizer: the critic reads the same token ids. That is checked at
start, before any training. This module checks the setting; ``benchmarks/training/start.py``
builds the model. The critic's FLOPs are metered from its own shape (the trainer's
``critic_fm``), and engine=verl maps it onto ``critic.model.path``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from algorithms import ConfigError
from benchmarks.training.modeling import ModelSpec

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["CRITIC_MODEL_FORM", "check_critic_model", "check_same_tokenizer", "critic_spec"]

_KEY = "trainer.critic_model"
#: ``trainer.critic_model`` as a user gives it, for messages.
CRITIC_MODEL_FORM = (
    "an HF id or directory, or a mapping of tiny-Llama fields "
    f"{[f.name for f in dataclasses.fields(ModelSpec)]} (those left out are the policy's)"
)


def check_critic_model(value: Any) -> None:
    """Raise ``ConfigError`` unless ``value`` is null, a non-empty string or a mapping of
    :class:`ModelSpec` fields."""
    if value is None:
        return
    if isinstance(value, str):
        if not value.strip():
            raise ConfigError(f"{_KEY}='': give an HF id or directory, a tiny-Llama spec, or null")
        return
    if isinstance(value, Mapping):
        allowed = [f.name for f in dataclasses.fields(ModelSpec)]
        unknown = sorted(set(value) - set(allowed))
        if unknown:
            raise ConfigError(f"{_KEY}.{unknown[0]}: unknown field; allowed: {allowed}")
        return
    raise ConfigError(f"{_KEY}={value!r}: allowed null (the policy's copy), {CRITIC_MODEL_FORM}")


def critic_spec(
    value: Mapping[str, Any], policy: ModelSpec | None, min_positions: int = 0
) -> ModelSpec:
    """The tiny critic's shape: the policy's spec with ``value``'s fields replaced; checked like
    ``model.*``, its errors naming ``trainer.critic_model.<field>``."""
    if policy is None:
        raise ConfigError(
            f"{_KEY}: a tiny-Llama spec needs the tiny policy (model=tiny); with a real "
            "checkpoint give an HF id or directory"
        )
    spec = dataclasses.replace(policy, **dict(value))
    try:
        spec.check(min_positions)
    except ValueError as e:
        raise ConfigError(str(e).replace("model.", f"{_KEY}.")) from e
    return spec


def check_same_tokenizer(
    critic: PreTrainedTokenizerBase, policy: PreTrainedTokenizerBase, name: str
) -> None:
    """The critic must map every text to the ids the policy does: same vocabulary, same padding
    and end-of-sequence ids."""
    if critic.get_vocab() != policy.get_vocab():
        a, b = critic.get_vocab(), policy.get_vocab()
        diff = sorted(set(a.items()) ^ set(b.items()))[:3]
        raise ConfigError(
            f"{_KEY}={name}: its tokenizer differs from the policy's ({len(a)} vs {len(b)} "
            f"tokens, e.g. {diff}); the critic must share the policy's tokenizer"
        )
    for attr in ("pad_token_id", "eos_token_id"):
        if getattr(critic, attr) != getattr(policy, attr):
            raise ConfigError(
                f"{_KEY}={name}: {attr} {getattr(critic, attr)} != the policy's "
                f"{getattr(policy, attr)}; the critic must share the policy's tokenizer"
            )
