"""Which rollout engine a run samples from: ``engine.rollout``, the torch engine or vLLM.

The choice is validated by :func:`check_rollout_config` before any compute (a missing vLLM or a
bad vLLM setting fails at start, not after the first training step), and turned by
:func:`make_engine_factory` into the trainer's ``policy -> RolloutEngine`` factory, so the
trainer builds each engine around its own policy module without knowing which kind it is.
"""

from __future__ import annotations

from typing import Any

from benchmarks.engines.vllm_engine import VllmEngine, settings_from_config, vllm_available

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
    engine_cfg: Any,
    tokenizer: Any,
    *,
    model_path: str | None = None,
    seed: int = 0,
    precision: str = "fp32",
) -> Any:
    """The trainer's ``engine_factory`` for ``engine.rollout``: ``policy -> RolloutEngine``;
    the torch engine's matmuls run in the resolved ``precision`` (vLLM keeps its own dtype)."""
    from benchmarks.engines.torch_engine import TorchEngine

    check_rollout_config(engine_cfg)
    batch_size = int(engine_cfg.get("rollout_batch_size", 512))
    if str(engine_cfg.get("rollout", "torch")) == "torch":
        return lambda m: TorchEngine(m, tokenizer, batch_size=batch_size, precision=precision)
    settings = settings_from_config(engine_cfg)
    return lambda m: VllmEngine(
        m, tokenizer, settings=settings, model_path=model_path, batch_size=batch_size, seed=seed
    )
