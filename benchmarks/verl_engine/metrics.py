"""verl metric names -> the suite's metric schema (:mod:`analysis.metrics`).

verl logs per-step values under its own names (``val-core/<dataset>/acc/mean@k``, which its
MLflow adapter stores as ``mean_at_k``; ``actor/...``, ``critic/...``, ``response_length/mean``,
``perf/time_per_step``, ...). After a verl run ends, :func:`map_verl_run` reads its histories and
logs the suite's names into the same run, so ``analysis`` (accuracy versus rollout samples,
tokens and wall-clock; training dynamics) reads verl runs like native ones, and the MLflow UI
shows both. The mapping itself, :func:`map_history`, is a pure function.

Counters are cumulative, as the native meter's, and reconstructed from per-step values:

* ``compute/prompts``: prompts per step (``data.train_batch_size``) times steps;
* ``compute/rollout_samples``: every sample generated, as the native meter counts them:
  prompts x n per step, ReMax's greedy baseline (one more per prompt), plus DAPO's discarded
  samples (``training/filter_groups/evicted_samples``) when verl reports them;
* ``compute/rollout_tokens``: ``response_length/mean`` x the trained samples of the step (the
  trained batch; DAPO's discarded responses and ReMax's greedy ones are not in verl's mean, so
  their tokens are a lower bound);
* ``compute/wall_s``: sum of ``perf/time_per_step`` (``timing_s/step``);
* ``memory/rss_peak_bytes``: running maximum of any ``.../perf/max_memory_allocated_gb``.

Not mapped: ``compute/flops`` (verl reports MFU, not FLOPs). Evaluation: ``eval/<dataset>/accuracy``
is verl's ``mean@k`` at the largest k it logs (greedy accuracy with the default ``engine.val_n=1``;
avg@k at ``engine.val_temperature`` otherwise, then also logged as ``avg_at_<k>``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from analysis import metrics as M

__all__ = ["DIRECT", "map_history", "map_verl_run"]

History = Mapping[str, Sequence[tuple[int, float]]]

#: verl name -> suite name, copied per step (the first verl name present wins).
DIRECT: dict[str, tuple[str, ...]] = {
    M.TRAIN_SCORE_MEAN: ("critic/score/mean",),
    M.TRAIN_REWARD_MEAN: ("critic/rewards/mean",),
    M.TRAIN_RESPONSE_LENGTH: ("response_length/mean",),
    M.TRAIN_ENTROPY: ("actor/entropy",),
    M.TRAIN_CLIP_FRAC: ("actor/pg_clipfrac",),
    M.TRAIN_KL: ("actor/kl_loss", "actor/ppo_kl"),
    M.TRAIN_GRAD_NORM: ("actor/grad_norm",),
    M.TRAIN_POLICY_LOSS: ("actor/pg_loss",),
    M.CRITIC_LOSS: ("critic/vf_loss",),
    M.CRITIC_VALUE_MEAN: ("critic/values/mean",),
    M.CRITIC_EXPLAINED_VAR: ("critic/vf_explained_var",),
    M.CRITIC_GRAD_NORM: ("critic/grad_norm",),
}
_VAL = re.compile(r"^val-core/(?P<ds>[^/]+)/acc/mean(?:@|_at_)(?P<k>[0-9]+)$")
_PEAK = re.compile(r"(^|/)perf/max_memory_allocated_gb$")
_EVICTED = "training/filter_groups/evicted_samples"
_STEP_TIME = ("perf/time_per_step", "timing_s/step")


def _series(history: History, *names: str) -> dict[int, float]:
    for name in names:
        if name in history:
            return {int(s): float(v) for s, v in history[name]}
    return {}


def map_history(
    history: History,
    *,
    prompts_per_step: int,
    samples_per_prompt: int,
    total_steps: int,
    greedy_baseline: bool = False,
    native_present: Sequence[str] = (),
) -> dict[str, list[tuple[int, float]]]:
    """Map a verl run's metric histories (``{name: [(step, value), ...]}``) onto the suite's
    schema (see the module docstring). ``greedy_baseline``: each step also decoded one greedy
    response per prompt (ReMax). Names in ``native_present`` (already logged by the run, e.g.
    SPPO's own ``critic/*`` from the plugin) are not overwritten."""
    out: dict[str, list[tuple[int, float]]] = {}
    for native, verl_names in DIRECT.items():
        if native in native_present:
            continue
        series = _series(history, *verl_names)
        if series:
            out[native] = sorted(series.items())

    train_steps = sorted(
        set(_series(history, "response_length/mean")) | set(_series(history, *_STEP_TIME))
    )
    length = _series(history, "response_length/mean")
    step_time = _series(history, *_STEP_TIME)
    evicted = _series(history, _EVICTED)
    peaks: dict[int, float] = {}
    for name, points in history.items():
        if _PEAK.search(name):
            for s, v in points:
                peaks[int(s)] = max(peaks.get(int(s), 0.0), float(v) * 2**30)
    samples_per_step = prompts_per_step * samples_per_prompt
    generated_per_step = samples_per_step + (prompts_per_step if greedy_baseline else 0)
    counters = {
        M.COMPUTE_PROMPTS: [(0, 0.0)],
        M.COMPUTE_ROLLOUT_SAMPLES: [(0, 0.0)],
        M.COMPUTE_ROLLOUT_TOKENS: [(0, 0.0)],
        M.COMPUTE_WALL_S: [(0, 0.0)],
        M.MEMORY_PEAK_BYTES: [(0, 0.0)],
    }
    prompts = samples = tokens = wall = peak = 0.0
    for s in (s for s in train_steps if s > 0):
        prompts += prompts_per_step
        samples += generated_per_step + evicted.get(s, 0.0)
        tokens += length.get(s, 0.0) * samples_per_step
        wall += step_time.get(s, 0.0)
        peak = max(peak, peaks.get(s, 0.0))
        counters[M.COMPUTE_PROMPTS].append((s, prompts))
        counters[M.COMPUTE_ROLLOUT_SAMPLES].append((s, samples))
        counters[M.COMPUTE_ROLLOUT_TOKENS].append((s, tokens))
        counters[M.COMPUTE_WALL_S].append((s, wall))
        counters[M.MEMORY_PEAK_BYTES].append((s, peak))
    out.update(counters)

    eval_steps: set[int] = set()
    best_k: dict[str, int] = {}
    for name in history:
        m = _VAL.match(name)
        if m:
            best_k[m["ds"]] = max(best_k.get(m["ds"], 0), int(m["k"]))
    for name, points in history.items():
        m = _VAL.match(name)
        if not m or int(m["k"]) != best_k[m["ds"]]:
            continue
        k = int(m["k"])
        series = sorted((int(s), float(v)) for s, v in points)
        out[M.eval_metric(m["ds"], "accuracy")] = series
        if k > 1:
            out[M.eval_metric(m["ds"], f"avg_at_{k}")] = series
        eval_steps.update(s for s, _ in series)
    if eval_steps:
        out[M.EVAL_BUDGET_FRACTION] = [
            (s, min(1.0, s / max(1, total_steps))) for s in sorted(eval_steps)
        ]
    return out


def map_verl_run(
    client,  # MlflowClient
    run_id: str,
    *,
    prompts_per_step: int,
    samples_per_prompt: int,
    total_steps: int,
    greedy_baseline: bool = False,
) -> dict[str, list[tuple[int, float]]]:
    """Read a finished verl run's histories, log the mapped metrics into it, return them
    (``greedy_baseline`` as in :func:`map_history`)."""
    import time

    from mlflow.entities import Metric

    run = client.get_run(run_id)
    history = {
        key: [(m.step, m.value) for m in client.get_metric_history(run_id, key)]
        for key in run.data.metrics
    }
    mapped = map_history(
        history,
        prompts_per_step=prompts_per_step,
        samples_per_prompt=samples_per_prompt,
        total_steps=total_steps,
        greedy_baseline=greedy_baseline,
        native_present=list(history),
    )
    ts = int(time.time() * 1000)
    batch = [Metric(k, v, ts, s) for k, points in mapped.items() for s, v in points]
    for i in range(0, len(batch), 1000):
        client.log_batch(run_id, metrics=batch[i : i + 1000], synchronous=True)
    return mapped
