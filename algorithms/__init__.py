"""RL algorithms for sppo-bench: a registry of pure tensor functions plus typed configs.

Importing the package registers the built-ins (sppo, ppo, grpo, dapo, rloo, remax, gspo, cispo,
dr_grpo, reinforce_pp, reinforce_pp_baseline, gmpo, spo, grpo2, GRPO with a group of two, and
ppo_inert_critic, PPO under settings whose critic does not learn);
third-party packages add theirs through the ``sppo_bench.algorithms`` entry-point group. See
:mod:`algorithms.base` for the interface and ``examples/dr_grpo.py`` for a worked example.
"""

from __future__ import annotations

from algorithms import (  # noqa: F401  (register built-ins)
    cispo,
    dapo,
    dr_grpo,
    gmpo,
    grpo,
    gspo,
    ppo,
    reinforce_pp,
    remax,
    rloo,
    spo,
    sppo,
)
from algorithms.base import (
    ENTRY_POINT_GROUP,
    Algorithm,
    AlgorithmConfig,
    CriticKind,
    GroupConfig,
    UnknownAlgorithmError,
    algorithm_class,
    get_algorithm,
    list_algorithms,
    register_algorithm,
)
from algorithms.configkit import ConfigError, config_field

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
