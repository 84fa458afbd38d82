"""Metric and tag names: the schema shared by the harness (writer) and `analysis` (reader).

Every name an MLflow run carries is defined here once, so a renamed metric breaks an import
instead of silently producing an empty plot. docs/design.md §4 is the source of this schema.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

__all__ = [
    "COMPUTE_AXES",
    "COMPUTE_FLOPS",
    "COMPUTE_PROMPTS",
    "COMPUTE_ROLLOUT_SAMPLES",
    "COMPUTE_ROLLOUT_TOKENS",
    "COMPUTE_WALL_S",
    "LEGACY_MEMORY_PEAK_BYTES",
    "MEMORY_PEAK_BYTES",
    "MEMORY_PEAK_TENSOR_BYTES",
    "MEMORY_RSS_PEAK_BYTES",
    "EVAL_ITEMS_DIR",
    "START_DIFFICULTY_KEYS",
    "TAG_ALGORITHM",
    "TAG_BUDGET_KIND",
    "TAG_COMMAND",
    "TAG_CONFIG_HASH",
    "TAG_ENGINE",
    "TAG_GIT_COMMIT",
    "TAG_MACHINE",
    "TAG_MODEL",
    "TAG_ROLE",
    "TAG_SEED",
    "TAG_START",
    "TAG_TASK",
    "TAG_VERSION",
    "avg_at_name",
    "eval_items_file",
    "eval_metric",
    "flops_phase",
    "parse_eval_metric",
    "pass_at_name",
    "pass_ks",
    "peak_tensor_phase",
    "wall_phase",
]


# --- compute meter: cumulative counters, logged with every step -----------------------------
COMPUTE_ROLLOUT_TOKENS = "compute/rollout_tokens"
COMPUTE_ROLLOUT_SAMPLES = "compute/rollout_samples"
COMPUTE_PROMPTS = "compute/prompts"
COMPUTE_FLOPS = "compute/flops"
COMPUTE_WALL_S = "compute/wall_s"
#: Peak resident set of the process on CPU (the interpreter included), the allocator's peak on a
#: GPU. Named ``memory/peak_bytes`` before the per-component accounting: readers of old runs fall
#: back to :data:`LEGACY_MEMORY_PEAK_BYTES`.
MEMORY_RSS_PEAK_BYTES = "memory/rss_peak_bytes"
#: The name code imports for "the run's peak memory"; the same metric as the resident set's.
MEMORY_PEAK_BYTES = MEMORY_RSS_PEAK_BYTES
LEGACY_MEMORY_PEAK_BYTES = "memory/peak_bytes"
#: Largest live tensor bytes of any phase on the sampled step (``trainer.memory_profile_step``):
#: activations and temporaries, and the gradients a backward allocates in its phase. A
#: measurement, not a count: identical runs were seen to differ by a few hundred bytes.
MEMORY_PEAK_TENSOR_BYTES = "memory/peak_tensor_bytes"
#: The x-axes an accuracy-versus-compute plot may use.
COMPUTE_AXES = (COMPUTE_FLOPS, COMPUTE_ROLLOUT_TOKENS, COMPUTE_ROLLOUT_SAMPLES, COMPUTE_WALL_S)
#: Phases the FLOP and wall-clock counters are split into.
PHASES = ("rollout", "reward", "logprob", "reference", "critic", "update", "eval")

# --- the start's difficulty, per seed on the suite's parent run: start/s<seed>/<key> ---------
#: mid_fraction: share of held-out prompts with a success rate in [0.1, 0.9] at the training
#: temperature; never/always: solved by no sample / every sample (benchmarks.evaluation.difficulty).
START_DIFFICULTY_KEYS = ("mean", "std", "mid_fraction", "never_fraction", "always_fraction")


def flops_phase(phase: str) -> str:
    """Cumulative analytic FLOPs of one phase, e.g. ``compute/flops/rollout``."""
    return f"{COMPUTE_FLOPS}/{phase}"


def peak_tensor_phase(phase: str) -> str:
    """Peak live tensor bytes of one phase on the sampled step, e.g.
    ``memory/peak_tensor_bytes/update``."""
    return f"{MEMORY_PEAK_TENSOR_BYTES}/{phase}"


def wall_phase(phase: str) -> str:
    """Cumulative wall seconds of one phase, e.g. ``compute/wall_s/update``."""
    return f"{COMPUTE_WALL_S}/{phase}"


# --- training --------------------------------------------------------------------------------
TRAIN_REWARD_MEAN = "train/reward_mean"
TRAIN_SCORE_MEAN = "train/score_mean"  # reward before shaping (accuracy of the samples)
TRAIN_RESPONSE_LENGTH = "train/response_length"
TRAIN_ENTROPY = "train/entropy"
TRAIN_CLIP_FRAC = "train/clip_frac"
TRAIN_KL = "train/kl"
TRAIN_GRAD_NORM = "train/grad_norm"
TRAIN_POLICY_LOSS = "train/policy_loss"
TRAIN_KEPT_FRACTION = "train/kept_fraction"  # DAPO dynamic sampling
TRAIN_GEN_BATCHES = "train/gen_batches"
TRAIN_SKIPPED_STEPS = "train/skipped_steps"
TRAIN_STEP = "train/step"
#: |rollout engine's log-prob - trainer's recomputed log-prob| per response token, mean and max
#: over a step's batch: the sampler/trainer mismatch (vLLM kernels, dtypes, stale weights).
TRAIN_ROLLOUT_LOGPROB_DIFF_MEAN = "train/rollout_logprob_abs_diff"
TRAIN_ROLLOUT_LOGPROB_DIFF_MAX = "train/rollout_logprob_abs_diff_max"

CRITIC_VALUE_MEAN = "critic/value_mean"
CRITIC_LOSS = "critic/loss"
CRITIC_EXPLAINED_VAR = "critic/explained_variance"
CRITIC_CALIBRATION = "critic/calibration_error"  # prompt critics: |mean p - mean R|
CRITIC_GRAD_NORM = "critic/grad_norm"
# Held-out calibration, logged at every evaluation point (benchmarks.evaluation.calibration).
#: Prompt critic: Pearson of sigmoid(v(x)) with the empirical success rate (paper Fig. 7: 0.642).
CRITIC_CALIBRATION_PEARSON = "critic/calibration_pearson"
CRITIC_CALIBRATION_ECE = "critic/calibration_ece"
CRITIC_CALIBRATION_BRIER = "critic/calibration_brier"
#: Token critic: explained variance of held-out returns, and Pearson of the value at the first
#: response token with the empirical success rate.
CRITIC_HELDOUT_EXPLAINED_VAR = "critic/heldout_explained_variance"
CRITIC_FIRST_VALUE_PEARSON = "critic/first_value_pearson"
#: The paper's reference (Fig. 7): Pearson of the prompt critic with empirical success.
PAPER_CALIBRATION_PEARSON = 0.642
#: Diagnostics of whether a critic learns at all: how far its head moved from its initial
#: weights (L2 and largest entry), and the spread of its predictions over the step's batch.
CRITIC_HEAD_DELTA_NORM = "critic/head_delta_norm"
CRITIC_HEAD_DELTA_MAX = "critic/head_delta_max"
CRITIC_VALUE_STD = "critic/value_std"

GRADER_TIMEOUTS = "grader/timeouts"
GRADER_ERRORS = "grader/errors"

# --- evaluation ------------------------------------------------------------------------------
EVAL_PREFIX = "eval"
#: Fraction of the budget at which an eval was taken (0.0 = start, 1.0 = end).
EVAL_BUDGET_FRACTION = "eval/budget_fraction"


def eval_metric(dataset: str, metric: str) -> str:
    """Name of an evaluation metric: ``eval/<dataset>/<metric>``, e.g. ``eval/arith/accuracy``."""
    return f"{EVAL_PREFIX}/{dataset}/{metric}"


#: Artifact folder of the per-item correctness a run logs at every eval, one JSON file per eval
#: (:func:`eval_items_file`): ``{"dataset", "step", "budget_fraction", "scores", "groups"}``,
#: where ``scores[i]`` is the greedy score of held-out problem ``i`` (the item's id is its index
#: in the task's held-out problems, the same for every run of a config) and ``groups`` maps each
#: eval group (``arith_h4``) to its items' ids.
EVAL_ITEMS_DIR = "eval_items"


def eval_items_file(dataset: str, fraction: float) -> str:
    """Artifact path of one eval's item scores: ``eval_items/<dataset>_f<fraction>.json``. Named by
    the budget fraction (never two evals of a run at one fraction), so an eval recomputed after a
    resume overwrites its own file: no duplicate, no loss."""
    return f"{EVAL_ITEMS_DIR}/{dataset}_f{fraction:.6f}.json"


def parse_eval_metric(name: str) -> tuple[str, str] | None:
    """Inverse of :func:`eval_metric`; ``None`` for names that are not eval metrics."""
    parts = name.split("/")
    if len(parts) != 3 or parts[0] != EVAL_PREFIX:
        return None
    return parts[1], parts[2]


# --- tags ------------------------------------------------------------------------------------
TAG_ROLE = "sppo_bench.role"  # "suite" (parent) | "run" (child) | "sweep" | "trial"
TAG_ALGORITHM = "algorithm"
TAG_SEED = "seed"
#: The warm start a run begins from (``s<start seed>``; the checkpoint's name for a real model):
#: runs with one value share their start, the unit a verdict replicates over.
TAG_START = "sppo_bench.start"
TAG_TASK = "task"
TAG_MODEL = "model"
TAG_ENGINE = "engine"
TAG_BUDGET_KIND = "budget_kind"
TAG_BUDGET_LIMIT = "budget_limit"
TAG_GIT_COMMIT = "git_commit"
TAG_VERSION = "sppo_bench_version"
#: On a suite's parent run: the command line that started it, and the machine it ran on (JSON:
#: CPU model and usable cores), which a results set's manifest reports beside its numbers.
TAG_COMMAND = "sppo_bench.command"
#: On a suite's parent run: the SHA-256 of its resolved config (how resume finds it).
TAG_CONFIG_HASH = "sppo_bench.config_hash"
TAG_MACHINE = "sppo_bench.machine"


def pass_ks(k: int) -> list[int]:
    """The ``j`` of the pass@j metrics logged for ``k`` samples: 1, 2, 4, ... and ``k`` itself.

    >>> pass_ks(16), pass_ks(6)
    ([1, 2, 4, 8, 16], [1, 2, 4, 6])
    """
    if k < 1:
        return []
    return sorted({2**i for i in range(k.bit_length()) if 2**i <= k} | {k})


def avg_at_name(k: int) -> str:
    """Metric leaf of avg@k: ``avg_at_16`` (MLflow allows no ``@`` in metric names)."""
    return f"avg_at_{k}"


def pass_at_name(k: int) -> str:
    """Metric leaf of pass@k: ``pass_at_16``."""
    return f"pass_at_{k}"
