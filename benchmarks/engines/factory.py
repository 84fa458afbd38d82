"""Which rollout engine a run samples from: ``engine.rollout``, the torch engine or vLLM.

The choice is validated by :func:`check_rollout_config` before any compute (a missing vLLM or a
bad vLLM setting fails at start, not after the first training step), and turned by
:func:`make_engine_factory` into the trainer's ``policy -> RolloutEngine`` factory, so the
trainer builds each engine around its own policy module without knowing which kind it is.
"""

from __future__ import annotations

from typing import Any

from benchmarks.engines.vllm_engine import (
    VllmEngine,
    VllmSettings,
    settings_from_config,
    vllm_available,
)

__all__ = ["ROLLOUTS", "check_rollout_config", "make_engine_factory"]


#: Values of ``engine.rollout``.
ROLLOUTS = ("torch", "vllm")
_INSTALL_HINT = (
    "install vLLM: `pip install 'sppo-bench[gpu]'` on a GPU machine, or on a CPU machine "
    "`make install-vllm` (a second venv, .venv-vllm; see the README)"
)


def check_rollout_config(engine_cfg: Any) -> None:
    """Validate ``engine.rollout`` (and, for ``vllm``, the vLLM settings) before any compute."""
    from algorithms import ConfigError

    rollout = str(engine_cfg.get("rollout", "torch"))
    if rollout not in ROLLOUTS:
        raise ConfigError(f"engine.rollout={rollout!r}: allowed: {list(ROLLOUTS)}")
    if rollout == "vllm":
        settings_from_config(engine_cfg)
        if not vllm_available():
            raise ConfigError(f"engine.rollout=vllm: vllm is not installed; {_INSTALL_HINT}")


def make_engine_factory(
    tokenizer: Any,
    *,
    rollout: str = "torch",
    batch_size: int = 512,
    vllm: VllmSettings | None = None,
    model_path: str | None = None,
    seed: int = 0,
    precision: str = "fp32",
) -> Any:
    """The trainer's ``engine_factory`` for ``engine.rollout``: ``policy -> RolloutEngine``;
    the torch engine decodes ``batch_size`` sequences together, its matmuls in the resolved
    ``precision``; vLLM starts with ``vllm`` (its checked settings) and keeps its own dtype."""
    from benchmarks.engines.torch_engine import TorchEngine

    if rollout == "torch":
        return lambda m: TorchEngine(m, tokenizer, batch_size=batch_size, precision=precision)
    if rollout != "vllm" or vllm is None:
        raise ValueError(
            f"rollout={rollout!r} with vllm={vllm!r}: allowed torch, or vllm with settings"
        )
    settings = vllm
    return lambda m: VllmEngine(
        m, tokenizer, settings=settings, model_path=model_path, batch_size=batch_size, seed=seed
    )
