"""RL algorithms for sppo-bench: a registry of pure tensor functions plus typed configs.

Importing the package registers the built-ins (sppo, ppo, grpo, dapo, rloo, remax); third-party
packages add theirs through the ``sppo_bench.algorithms`` entry-point group. See
:mod:`algorithms.base` for the interface and ``examples/dr_grpo.py`` for a worked example.
"""

from __future__ import annotations

from algorithms import dapo, grpo, ppo, remax, rloo, sppo  # noqa: F401  (register built-ins)
from algorithms.base import (
    ENTRY_POINT_GROUP,
    Algorithm,
    AlgorithmConfig,
    ConfigError,
    CriticKind,
    GroupConfig,
    UnknownAlgorithmError,
    algorithm_class,
    config_field,
    get_algorithm,
    list_algorithms,
    register_algorithm,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "Algorithm",
    "AlgorithmConfig",
    "ConfigError",
    "CriticKind",
    "GroupConfig",
    "UnknownAlgorithmError",
    "algorithm_class",
    "config_field",
    "get_algorithm",
    "list_algorithms",
    "register_algorithm",
]
