"""Resolve override sets in verl's own Hydra config tree, without a GPU.

``python -m verl.trainer.main_ppo --cfg job <overrides>`` composes one config per interpreter
(about 10 s each, mostly importing verl and Ray). :func:`resolve_in_verl` composes many in one
child interpreter with Hydra's compose API on the same config directory
(``verl/trainer/config/ppo_trainer.yaml``), resolves interpolations, and optionally runs verl's
own ``validate_config`` (batch-size divisibility, micro-batch settings, actor config checks),
which ``--cfg job`` skips. Used by ``sppo-bench run engine=verl dry_run=true`` and the tests.

Run as a module it reads ``{"overrides": [[...], ...], "validate": bool}`` as JSON on stdin and
writes ``[{"config": {...}, "error": str | null}, ...]`` as JSON on stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["resolve_in_verl"]


def resolve_in_verl(
    override_sets: Sequence[Sequence[str]],
    *,
    validate: bool = True,
    python: str | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 600.0,
) -> list[dict[str, Any]]:
    """Compose each override set in verl's config (in one child interpreter).

    Returns:
        One ``{"config": resolved dict or None, "error": message or None}`` per set, in order.

    Raises:
        RuntimeError: the child interpreter failed before composing anything (e.g. verl is not
            installed in ``python``).
    """
    payload = json.dumps({"overrides": [list(o) for o in override_sets], "validate": validate})
    proc = subprocess.run(
        [python or sys.executable, "-m", "benchmarks.verl_engine.resolve"],
        input=payload,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, **(env or {})},
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"resolving the verl config failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _compose_all(override_sets: list[list[str]], validate: bool) -> list[dict[str, Any]]:
    import warnings

    import verl
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    out: list[dict[str, Any]] = []
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        for overrides in override_sets:
            try:
                cfg = compose("ppo_trainer", overrides=overrides)
                resolved = OmegaConf.to_container(cfg, resolve=True)
            except Exception as e:  # report per set; the caller decides
                out.append({"config": None, "error": f"{type(e).__name__}: {e}"})
                continue
            error = None
            if validate:
                from verl.trainer.ppo.utils import need_critic, need_reference_policy
                from verl.utils.config import validate_config

                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        validate_config(
                            config=cfg,
                            use_reference_policy=need_reference_policy(cfg),
                            use_critic=need_critic(cfg),
                        )
                except Exception as e:  # e.g. a model path verl cannot load here
                    error = f"{type(e).__name__}: {e}"
            out.append({"config": resolved, "error": error})
    return out


def _main() -> None:
    request = json.loads(sys.stdin.read())
    results = _compose_all(request["overrides"], bool(request.get("validate", True)))
    sys.stdout.write("\n" + json.dumps(results, default=str) + "\n")


if __name__ == "__main__":
    _main()
