"""Shared constants and small helpers of the analysis package (private).

Names that the harness does not define in :mod:`analysis.metrics` but the analysis needs (the
leaf names of eval metrics, the paper's dataset order) live here, once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

from analysis.metrics import (
    COMPUTE_FLOPS,
    COMPUTE_PROMPTS,
    COMPUTE_ROLLOUT_SAMPLES,
    COMPUTE_ROLLOUT_TOKENS,
    COMPUTE_WALL_S,
    CRITIC_EXPLAINED_VAR,
    MEMORY_PEAK_BYTES,
    TRAIN_ENTROPY,
    TRAIN_REWARD_MEAN,
    TRAIN_SCORE_MEAN,
)

#: Leaf names of ``eval/<dataset>/<metric>`` (not in analysis.metrics).
ACCURACY = "accuracy"
#: The standard error of a metric is logged as ``<metric>_se``.
SE_SUFFIX = "_se"
#: Column of :func:`analysis.eval_points` holding ``eval/budget_fraction``.
BUDGET_FRACTION = "budget_fraction"
#: MLflow's own tag linking a nested run to its parent.
MLFLOW_PARENT_TAG = "mlflow.parentRunId"
#: Tag the harness sets on every ``arith`` run (and on each point of a ``task.horizon`` grid):
#: the number of reasoning steps per problem. Not in analysis.metrics, which names it nowhere.
HORIZON_TAG = "horizon"
#: Eval dataset names of a horizon grid: ``arith_h<h>`` (``suite=horizon``).
_HORIZON_DATASET = re.compile(r"^(?P<task>[A-Za-z0-9]+)_h(?P<h>[0-9]+)$")

#: The reference algorithm of the suite: ratios and improvement probabilities are relative to it.
REFERENCE = "sppo"

#: The paper's Table 1 column order (dataset ids as the harness logs them) and display labels.
TABLE1_DATASETS: tuple[str, ...] = ("aime24", "aime25", "amc23", "math500", "minerva")
DATASET_LABELS: dict[str, str] = {
    "aime24": "AIME24",
    "aime25": "AIME25",
    "amc23": "AMC23",
    "math500": "MATH500",
    "minerva": "Minerva",
    "olympiadbench": "OlympiadBench",
    "gsm8k": "GSM8K",
    "arith": "Arith",
}
AVERAGE = "Average"

#: Algorithms in the order they are listed in tables and legends; others follow alphabetically.
ALGORITHM_ORDER: tuple[str, ...] = ("sppo", "ppo", "grpo", "dapo", "rloo", "remax")
_ALGORITHM_COLORS: dict[str, str] = {
    "sppo": "#d62728",
    "ppo": "#1f77b4",
    "grpo": "#2ca02c",
    "dapo": "#9467bd",
    "rloo": "#8c564b",
    "remax": "#e377c2",
}
_SPARE_COLORS = ("#ff7f0e", "#17becf", "#bcbd22", "#7f7f7f", "#393b79", "#637939", "#843c39")

#: Human axis labels (with units) for the compute counters.
AXIS_LABELS: dict[str, str] = {
    COMPUTE_FLOPS: "compute (FLOPs)",
    COMPUTE_ROLLOUT_TOKENS: "rollout tokens",
    COMPUTE_ROLLOUT_SAMPLES: "rollout samples",
    COMPUTE_PROMPTS: "prompts",
    COMPUTE_WALL_S: "wall-clock time (s)",
    MEMORY_PEAK_BYTES: "peak memory (bytes)",
    "step": "optimizer step",
}

#: Panel titles and axis labels (with units) of the metrics drawn by `plot_training_curves`.
METRIC_LABELS: dict[str, tuple[str, str]] = {
    TRAIN_SCORE_MEAN: ("Training success rate", "fraction of sampled responses correct"),
    TRAIN_REWARD_MEAN: ("Training reward", "mean shaped reward per response"),
    TRAIN_ENTROPY: ("Policy entropy", "entropy (nats / token)"),
    CRITIC_EXPLAINED_VAR: ("Critic explained variance", "explained variance of returns"),
}

#: Columns of a run's identity, copied from tags into every loaded row.
RUN_COLUMNS: tuple[str, ...] = (
    "run_id",
    "run_name",
    "parent_run_id",
    "experiment_id",
    "algorithm",
    "seed",
    "task",
    "model",
    "engine",
    "budget_kind",
    "budget_limit",
    "role",
    "status",
    "horizon",
)


def order_algorithms(names: Iterable[str]) -> list[str]:
    """Known algorithms in paper order first (SPPO leads), then the rest alphabetically."""
    names = list(dict.fromkeys(str(n) for n in names))
    known = [a for a in ALGORITHM_ORDER if a in names]
    return known + sorted(n for n in names if n not in ALGORITHM_ORDER)


def order_datasets(names: Iterable[str]) -> list[str]:
    """Datasets in the paper's Table 1 order when present, then the rest alphabetically."""
    names = list(dict.fromkeys(str(n) for n in names))
    known = [d for d in TABLE1_DATASETS if d in names]
    return known + sorted(n for n in names if n not in TABLE1_DATASETS)


def dataset_horizon(name: str) -> int | None:
    """Horizon encoded in a horizon-grid dataset name (``arith_h4`` -> 4), else None."""
    m = _HORIZON_DATASET.match(str(name))
    return int(m.group("h")) if m else None


def dataset_label(name: str) -> str:
    """Display label of a dataset id (``math500`` -> ``MATH500``, ``arith_h4`` -> ``Arith,
    horizon 4``)."""
    m = _HORIZON_DATASET.match(str(name))
    if m and m.group("task") in DATASET_LABELS:
        return f"{DATASET_LABELS[m.group('task')]}, horizon {int(m.group('h'))}"
    return DATASET_LABELS.get(name, name)


def metric_label(name: str) -> tuple[str, str]:
    """(panel title, axis label) of a training metric (``train/entropy`` -> ``("Policy
    entropy", "entropy (nats / token)")``); the metric name twice when it has none."""
    return METRIC_LABELS.get(name, (name, name))


def axis_label(column: str) -> str:
    """Display label of a compute column, with its unit."""
    return AXIS_LABELS.get(column, column)


def algorithm_colors(names: Iterable[str]) -> dict[str, str]:
    """A stable colour per algorithm, so every figure of a report agrees on who is who."""
    colors: dict[str, str] = {}
    spare = iter(_SPARE_COLORS * 4)
    for name in order_algorithms(names):
        colors[name] = _ALGORITHM_COLORS.get(name) or next(spare)
    return colors


def local_artifact_dir(artifact_uri: str) -> Path | None:
    """The directory of a run's artifacts when the artifact store is local (a ``file://`` URI or
    a plain path, as a SQLite store's ``mlartifacts/``), else None: they must be downloaded."""
    parsed = urlparse(artifact_uri)
    if parsed.scheme == "file":
        return Path(url2pathname(parsed.path))
    if parsed.scheme == "":
        return Path(artifact_uri)
    return None
