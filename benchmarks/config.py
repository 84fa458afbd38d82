"""Composing the Hydra config tree ``benchmarks/conf`` from code (CLI, tests, sweeps, notebooks)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["CONF_DIR", "compose_config"]

CONF_DIR = Path(__file__).parent / "conf"


def _register_resolvers() -> None:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("arith_max_tokens"):
        # "a+b=c;" is 6 characters per step, then "#d" and EOS, plus slack for wrong formats.
        OmegaConf.register_new_resolver("arith_max_tokens", lambda h: 6 * int(h) + 6)


_PARAMS = re.compile(r"^algorithm\.[A-Za-z0-9_]+\.params\.[A-Za-z0-9_.]+=")


def _params_override(o: str) -> str:
    """``algorithm.<name>.params.<field>=v`` -> ``++...``: an algorithm YAML lists only the
    fields it changes from the paper's defaults, so the rest are not in the composed config yet;
    the algorithm's own dataclass validates the name and value (naming the field if wrong)."""
    return f"++{o}" if _PARAMS.match(o) else o


def _missing_option(e: Exception) -> str | None:
    """Hydra's 'Could not load group/option' lists search paths, not the options: add them."""
    m = re.search(r"Could not (?:load|find) '([A-Za-z_]+)/([^']+)'", str(e))
    if not m or not (CONF_DIR / m.group(1)).is_dir():
        return None
    options = sorted(p.stem for p in (CONF_DIR / m.group(1)).glob("*.yaml"))
    return f"{m.group(1)}={m.group(2)}: no such option; available in '{m.group(1)}': {options}"


def compose_config(overrides: Sequence[str] = ()) -> Any:
    """Compose ``config.yaml`` with Hydra overrides and resolve every interpolation."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    _register_resolvers()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        try:
            cfg = compose("config", overrides=[_params_override(o) for o in overrides])
        except HydraException as e:
            hint = _missing_option(e)
            if hint is None:
                raise
            raise type(e)(hint) from e
    OmegaConf.resolve(cfg)
    return cfg
