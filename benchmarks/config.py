"""Composing the Hydra config tree ``benchmarks/conf`` from code (CLI, tests, sweeps, notebooks).

The tree's ``trainer`` node starts from :class:`~benchmarks.training.config.TrainerConfig`'s
field defaults, registered in Hydra's ConfigStore as ``sppo_bench_trainer_defaults`` (config.yaml's
defaults list takes it before its own values), so each default is declared once, beside its help
and bounds; the YAML files only override it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["CONF_DIR", "TRAINER_DEFAULTS", "compose_config"]

CONF_DIR = Path(__file__).parent / "conf"
#: The ConfigStore entry holding the ``trainer`` node's defaults (named in config.yaml).
TRAINER_DEFAULTS = "sppo_bench_trainer_defaults"


def _register_trainer_defaults() -> None:
    from hydra.core.config_store import ConfigStore

    from benchmarks.training.config import trainer_defaults

    ConfigStore.instance().store(name=TRAINER_DEFAULTS, node={"trainer": trainer_defaults()})


def _register_resolvers() -> None:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("arith_max_tokens"):
        # "a+b=c;" is 6 characters per step, then "#d" and EOS, plus slack for wrong formats.
        # A list of horizons (mixed difficulty) needs the longest one's budget.
        OmegaConf.register_new_resolver("arith_max_tokens", lambda h: 6 * _longest(h) + 6)


def _longest(horizon: Any) -> int:
    """The longest of ``task.horizon``'s horizons. A horizon that is not a whole number gives 0:
    the task's own check (``build_task``, before any compute) then names ``task.horizon`` and
    what it allows, which an error raised here, inside OmegaConf's resolution, could not."""
    try:
        if isinstance(horizon, int | float | str):  # one horizon
            return int(horizon)
        return max(int(h) for h in horizon)
    except (TypeError, ValueError):
        return 0


_PARAMS = re.compile(r"^algorithm\.[A-Za-z0-9_]+\.params\.[A-Za-z0-9_.]+=")


def _params_override(o: str) -> str:
    """``algorithm.<name>.params.<field>=v`` -> ``++...``: an algorithm YAML lists only the
    fields it changes from the paper's defaults, so the rest are not in the composed config yet;
    the algorithm's own dataclass validates the name and value (naming the field if wrong)."""
    return f"++{o}" if _PARAMS.match(o) else o


def _expand(o: str) -> list[str]:
    """``task.config={...}`` -> delete, then add: the dataset's settings are replaced whole, not
    merged into the default dataset's (chain_sum's fields would reject letter_counting's, and
    would reach it if they did not). ``task.config.<field>=v`` still changes one field."""
    if o.startswith("task.config="):
        return ["~task.config", "+" + o]
    return [_params_override(o)]


def _no_config(e: Exception) -> str | None:
    """``task.config={...}`` on a task without dataset settings fails in the deletion above."""
    if "Could not delete" not in str(e) or "task.config" not in str(e):
        return None
    return (
        "task.config: only task=reasoning_gym takes a dataset's settings there; "
        "other tasks set their own keys (e.g. task.horizon for arith)"
    )


def _missing_option(e: Exception) -> str | None:
    """Hydra's 'Could not load group/option' lists search paths, not the options: add them."""
    m = re.search(r"Could not (?:load|find) '([A-Za-z_]+)/([^']+)'", str(e))
    if not m or not (CONF_DIR / m.group(1)).is_dir():
        return None
    options = sorted(p.stem for p in (CONF_DIR / m.group(1)).glob("*.yaml"))
    return f"{m.group(1)}={m.group(2)}: no such option; available in '{m.group(1)}': {options}"


def _null_node_form(key: str) -> str | None:
    """What a node that is null by default takes when given whole, as the module that reads it
    declares it (imported here only on this error path)."""
    if key == "warmstart.target":
        from benchmarks.training.warmstart import TARGET_FORM

        return f"{TARGET_FORM}, e.g. {key}={{accuracy:0.6,every:50,max_steps:1500}}"
    if key == "trainer.critic_model":
        from benchmarks.training.critic_model import CRITIC_MODEL_FORM

        return f"{CRITIC_MODEL_FORM}, e.g. {key}={{hidden_size:64,intermediate_size:256}}"
    return None


def _unknown_key(e: Exception, overrides: Sequence[str], compose: Any) -> str | None:
    """Hydra's 'Key ... is not in struct' names the key, not the keys allowed there: add them
    (read from the config composed without the offending override), or, where the parent is
    null or a plain value, the form the parent takes when given whole."""
    msg = f"{e} {e.__cause__ or ''}"
    m = re.search(r"full_key: ([A-Za-z0-9_.]+)", msg)
    if "not in struct" not in msg or not m:
        return None
    key = m.group(1)
    given = next((o for o in overrides if o.split("=", 1)[0].lstrip("+~") == key), key)
    if (CONF_DIR / key).is_dir():  # e.g. algorithm=[]: a config group needs an option
        options = sorted(p.stem for p in (CONF_DIR / key).glob("*.yaml"))
        return f"{given}: select at least one option of '{key}' from {options}"
    rest = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != key]
    parent, _, leaf = key.rpartition(".")
    try:
        node = compose("config", overrides=[x for o in rest for x in _expand(o)])
        for part in filter(None, parent.split(".")):
            node = node[part]
        if node is None:  # e.g. warmstart.target: null (off) has no fields to set one by one
            form = _null_node_form(parent)
            whole = (
                f"as {form}"
                if form
                else (
                    f"e.g. {parent}={{{leaf}:...}} with the fields benchmarks/conf/config.yaml "
                    "documents for it"
                )
            )
            return (
                f"{given}: '{parent}' is null (off) in this config, so it has no field {leaf!r} "
                f"to set; give it whole {whole}"
            )
        if not hasattr(node, "keys"):  # e.g. engine.rollout: a value, not a node of fields
            return (
                f"{given}: '{parent}' is a value ({node!r}), not a node with fields; set it "
                f"whole, e.g. {parent}=<value> (benchmarks/conf documents what it allows)"
            )
        allowed = sorted(node.keys())
    except Exception:  # noqa: BLE001 - the hint is best effort; Hydra's own error is re-raised
        return None
    return f"{given}: unknown key {leaf!r} in '{parent or '<root>'}'; allowed: {allowed}"


def compose_config(overrides: Sequence[str] = ()) -> Any:
    """Compose ``config.yaml`` with Hydra overrides and resolve every interpolation."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    _register_resolvers()
    _register_trainer_defaults()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        try:
            cfg = compose("config", overrides=[x for o in overrides for x in _expand(o)])
        except HydraException as e:
            hint = _missing_option(e) or _unknown_key(e, overrides, compose) or _no_config(e)
            if hint is None:
                raise
            raise type(e)(hint) from None
    OmegaConf.resolve(cfg)
    return cfg
