"""Which rollout engine a run samples from (``engine.rollout``: the torch engine or vLLM), checked
at start and built per run.
"""

from __future__ import annotations

import logging
from typing import Any

from benchmarks.engines.vllm_engine import VllmEngine, settings_from_config, vllm_available

log = logging.getLogger(__name__)

__all__ = ["ROLLOUTS", "check_rollout_config", "make_engine_factory"]


# --- selection from the `engine` config node ----------------------------------------------------

#: Values of ``engine.rollout``.
ROLLOUTS = ("torch", "vllm")
_INSTALL_HINT = (
    "install vLLM: `pip install 'sppo-bench[gpu]'` on a GPU machine, or on a CPU machine "
    "`make install-vllm` (a second venv, .venv-vllm; see the README)"
)


def check_rollout_config(engine_cfg: Any) -> None:
    """Validate ``engine.rollout`` (and the vLLM settings when it is ``vllm``) before any compute."""
    from algorithms import ConfigError

    rollout = str(engine_cfg.get("rollout", "torch"))
    if rollout not in ROLLOUTS:
        raise ConfigError(f"engine.rollout={rollout!r}: allowed: {list(ROLLOUTS)}")
    if rollout == "vllm":
        settings_from_config(engine_cfg)
        if not vllm_available():
            raise ConfigError(f"engine.rollout=vllm: vllm is not installed; {_INSTALL_HINT}")


def make_engine_factory(
    engine_cfg: Any, tokenizer: Any, *, model_path: str | None = None, seed: int = 0
) -> Any:
    """The trainer's ``engine_factory`` for ``engine.rollout``: ``policy -> RolloutEngine``."""
    from benchmarks.engines.torch_engine import TorchEngine

    check_rollout_config(engine_cfg)
    batch_size = int(engine_cfg.get("rollout_batch_size", 512))
    if str(engine_cfg.get("rollout", "torch")) == "torch":
        return lambda m: TorchEngine(m, tokenizer, batch_size=batch_size)
    settings = settings_from_config(engine_cfg)
    return lambda m: VllmEngine(
        m, tokenizer, settings=settings, model_path=model_path, batch_size=batch_size, seed=seed
    )
