"""RL algorithms for sppo-bench: a registry of pure tensor functions plus typed configs.

The registry holds the built-ins (sppo, ppo, grpo, dapo, rloo, remax, gspo, cispo, dr_grpo,
reinforce_pp, reinforce_pp_baseline, gmpo, spo, grpo2, GRPO with a group of two, and
ppo_inert_critic, PPO under settings whose critic does not learn) from its first lookup on;
third-party packages add theirs through the ``sppo_bench.algorithms`` entry-point group. See
:mod:`algorithms.base` for the interface and ``examples/dr_grpo.py`` for a worked example.

The package's names are imported on first use (PEP 562), so that importing the config kit
(:mod:`algorithms.configkit`) costs no torch: the analysis layer checks its claims with it.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Each exported name and the module it lives in.
_EXPORTS = {
    **dict.fromkeys(
        (
            "ENTRY_POINT_GROUP",
            "Algorithm",
            "AlgorithmConfig",
            "CriticKind",
            "GroupConfig",
            "UnknownAlgorithmError",
            "algorithm_class",
            "get_algorithm",
            "list_algorithms",
            "register_algorithm",
        ),
        "algorithms.base",
    ),
    "ConfigError": "algorithms.configkit",
    "config_field": "algorithms.configkit",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'algorithms' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
