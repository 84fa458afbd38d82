"""verl's metric histories on the suite's schema (``benchmarks/verl_engine/metrics.py``): every
sample a verl run generates is charged, DAPO's discarded ones included, and each mapped series is
the verl series it comes from. No verl needed: the histories are written by hand, as verl's
MLflow logger names them."""

from __future__ import annotations

import pytest

from analysis import metrics as M
from benchmarks.verl_engine.metrics import map_history, map_verl_run

P, N = 4, 8  # prompts per step, samples per prompt
EVICTED = "training/filter_groups/evicted_samples"


def _dapo_history() -> dict[str, list[tuple[int, float]]]:
    """Four steps of a DAPO run whose filter discarded 16 samples at step 2 and 40 at step 4,
    evaluated before training (step 0) and at steps 2 and 4, with mean@1 and mean@4 logged."""
    return {
        "response_length/mean": [(1, 10.0), (2, 12.0), (3, 11.0), (4, 9.5)],
        "perf/time_per_step": [(1, 2.0), (2, 3.0), (3, 2.5), (4, 4.0)],
        EVICTED: [(2, 16.0), (4, 40.0)],
        "actor/pg_loss": [(1, 0.5), (2, 0.25), (3, 0.125), (4, 0.0625)],
        "actor/kl_loss": [(1, 0.01), (3, 0.02)],
        "actor/ppo_kl": [(1, 9.0), (2, 9.0)],
        "critic/score/mean": [(2, 0.5), (1, 0.25)],
        "actor/perf/max_memory_allocated_gb": [(1, 1.0), (2, 0.5), (3, 2.0), (4, 1.5)],
        "critic/perf/max_memory_allocated_gb": [(1, 0.5), (2, 1.25), (4, 3.0)],
        "val-core/chain_sum/acc/mean@1": [(0, 0.1), (2, 0.3), (4, 0.4)],
        "val-core/chain_sum/acc/mean_at_4": [(0, 0.2), (2, 0.35), (4, 0.5)],
        "val-core/other/acc/mean@1": [(4, 0.75)],
    }


def _map(history, **kw):
    return map_history(history, prompts_per_step=P, samples_per_prompt=N, total_steps=4, **kw)


def test_every_sample_a_dapo_run_generates_is_charged():
    """The cumulative count at each step is every sample generated up to it: the trained
    P x N per step and the samples the filter discarded."""
    out = _map(_dapo_history())
    generated = {1: 32, 2: 32 + 16, 3: 32, 4: 32 + 40}
    running, expected = 0.0, [(0, 0.0)]
    for step, n in generated.items():
        running += n
        expected.append((step, running))
    assert out[M.COMPUTE_ROLLOUT_SAMPLES] == expected
    assert out[M.COMPUTE_ROLLOUT_SAMPLES][-1] == (4, 184.0)
    assert out[M.COMPUTE_PROMPTS] == [(0, 0.0), (1, 4.0), (2, 8.0), (3, 12.0), (4, 16.0)]


def test_the_other_counters_are_cumulative_per_step():
    out = _map(_dapo_history())
    # Tokens of the trained batch: mean length x P x N (the discarded ones are not in verl's mean).
    assert out[M.COMPUTE_ROLLOUT_TOKENS] == [
        (0, 0.0),
        (1, 320.0),
        (2, 320.0 + 384.0),
        (3, 704.0 + 352.0),
        (4, 1056.0 + 304.0),
    ]
    assert out[M.COMPUTE_WALL_S] == [(0, 0.0), (1, 2.0), (2, 5.0), (3, 7.5), (4, 11.5)]
    # The running maximum over every worker group's peak, in bytes.
    gib = 2.0**30
    assert out[M.MEMORY_PEAK_BYTES] == [
        (0, 0.0),
        (1, 1.0 * gib),
        (2, 1.25 * gib),
        (3, 2.0 * gib),
        (4, 3.0 * gib),
    ]


def test_wall_time_falls_back_to_timing_and_steps_come_from_either_series():
    history = {
        "timing_s/step": [(1, 1.0), (2, 2.0)],
        "response_length/mean": [(3, 5.0)],
        "actor/perf/max_memory_allocated_gb": [(2, 0.0)],
    }
    out = _map(history)
    assert out[M.COMPUTE_WALL_S] == [(0, 0.0), (1, 1.0), (2, 3.0), (3, 3.0)]
    # No peak reported above 0: none is made up.
    assert out[M.MEMORY_PEAK_BYTES] == [(0, 0.0), (1, 0.0), (2, 0.0), (3, 0.0)]
    assert out[M.COMPUTE_ROLLOUT_SAMPLES] == [(0, 0.0), (1, 32.0), (2, 64.0), (3, 96.0)]
    assert out[M.COMPUTE_ROLLOUT_TOKENS][-1] == (3, 160.0)
    # A step 0 point (verl's validation before training) is no training step.
    out = _map({"perf/time_per_step": [(0, 7.0), (1, 1.0)]})
    assert out[M.COMPUTE_WALL_S] == [(0, 0.0), (1, 1.0)]
    assert out[M.COMPUTE_ROLLOUT_SAMPLES] == [(0, 0.0), (1, 32.0)]


def test_direct_series_are_copied_sorted_first_name_first_and_never_over_native_ones():
    out = _map(_dapo_history())
    assert out[M.TRAIN_POLICY_LOSS] == [(1, 0.5), (2, 0.25), (3, 0.125), (4, 0.0625)]
    assert out[M.TRAIN_KL] == [(1, 0.01), (3, 0.02)]  # kl_loss before ppo_kl
    assert out[M.TRAIN_SCORE_MEAN] == [(1, 0.25), (2, 0.5)]  # sorted by step
    assert M.TRAIN_ENTROPY not in out and M.CRITIC_LOSS not in out  # nothing to copy
    kept = _map(_dapo_history(), native_present=[M.TRAIN_SCORE_MEAN])
    assert kept[M.TRAIN_KL] == out[M.TRAIN_KL]
    assert set(kept) == set(out) - {M.TRAIN_SCORE_MEAN}  # only the native one is left alone


def test_evaluation_is_the_largest_k_per_dataset_at_its_budget_fraction():
    out = _map(_dapo_history())
    acc = [(0, 0.2), (2, 0.35), (4, 0.5)]
    assert out[M.eval_metric("chain_sum", "accuracy")] == acc  # mean@4, not mean@1
    assert out[M.eval_metric("chain_sum", "avg_at_4")] == acc
    assert out[M.eval_metric("other", "accuracy")] == [(4, 0.75)]
    assert M.eval_metric("other", "avg_at_1") not in out  # k = 1 is greedy accuracy
    assert out[M.EVAL_BUDGET_FRACTION] == [(0, 0.0), (2, 0.5), (4, 1.0)]
    # Past the planned steps the fraction stays at 1; no evaluation, no fraction.
    late = map_history(
        {"val-core/a/acc/mean@1": [(3, 0.5)]},
        prompts_per_step=P,
        samples_per_prompt=N,
        total_steps=2,
    )
    assert late[M.EVAL_BUDGET_FRACTION] == [(3, 1.0)]
    assert M.EVAL_BUDGET_FRACTION not in _map({"val-core/a/acc/max@1": [(1, 0.5)]})


def test_the_largest_k_wins_in_any_order_and_k_2_is_an_average():
    out = map_history(
        {
            "val-core/b/acc/mean@4": [(1, 0.5)],
            "val-core/b/acc/mean@2": [(1, 0.25)],
            "val-core/c/acc/mean_at_2": [(1, 0.75)],
        },
        prompts_per_step=P,
        samples_per_prompt=N,
        total_steps=1,  # one step: its evaluation is at the whole budget
    )
    assert out[M.eval_metric("b", "accuracy")] == [(1, 0.5)]
    assert out[M.eval_metric("b", "avg_at_4")] == [(1, 0.5)]
    assert M.eval_metric("b", "avg_at_2") not in out
    assert out[M.eval_metric("c", "avg_at_2")] == [(1, 0.75)]
    assert out[M.EVAL_BUDGET_FRACTION] == [(1, 1.0)]


def _store(tmp_path, history):
    """A run on a real MLflow store holding ``history`` (verl's names as its logger stores them:
    mean@k as mean_at_k, MLflow refuses "@"), and its client."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = client.create_run(
        client.create_experiment("verl", artifact_location=(tmp_path / "art").as_uri())
    ).info.run_id
    points = [Metric(k.replace("@", "_at_"), v, 0, s) for k, pts in history.items() for s, v in pts]
    for i in range(0, len(points), 1000):
        client.log_batch(run_id, metrics=points[i : i + 1000])
    return client, run_id


@pytest.mark.slow  # verl runs mapped into MLflow: ~5 s each
@pytest.mark.parametrize(
    ("greedy", "charged"),
    [(False, 184.0), (True, 184.0 + 4 * P)],  # DAPO; as if ReMax's baseline were decoded too
)
def test_map_verl_run_logs_the_mapped_series_into_the_run(tmp_path, greedy, charged):
    """On a real MLflow store: a run holding verl's histories gets the suite's names beside
    them, now-stamped, with every generated sample charged."""
    import time

    history = _dapo_history()
    history["critic/score/mean"] = [(1, 0.25), (2, 0.5)]
    history[M.TRAIN_SCORE_MEAN] = [(1, 0.9)]  # logged natively (SPPO's plugin)
    client, run_id = _store(tmp_path, history)
    before = int(time.time() * 1000)
    mapped = map_verl_run(
        client,
        run_id,
        prompts_per_step=P,
        samples_per_prompt=N,
        total_steps=4,
        greedy_baseline=greedy,
    )
    after = int(time.time() * 1000)
    assert M.TRAIN_SCORE_MEAN not in mapped

    def stored(key):
        return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))

    assert stored(M.COMPUTE_ROLLOUT_SAMPLES)[-1] == (4, charged)
    for key, points in mapped.items():
        assert stored(key) == sorted(points), key
        stamps = {m.timestamp for m in client.get_metric_history(run_id, key)}
        assert all(before <= t <= after for t in stamps), key
    assert stored(M.TRAIN_SCORE_MEAN) == [(1, 0.9)]


@pytest.mark.slow  # a long verl run logged to MLflow: ~7 s
def test_a_long_run_is_logged_whole(tmp_path):
    """More mapped points than one MLflow batch (1000) holds: every one is stored, once."""
    steps = range(1, 301)
    history = {
        "response_length/mean": [(s, 1.0) for s in steps],
        "perf/time_per_step": [(s, 0.5) for s in steps],
    }
    client, run_id = _store(tmp_path, history)
    mapped = map_verl_run(client, run_id, prompts_per_step=P, samples_per_prompt=N, total_steps=300)
    assert sum(len(v) for v in mapped.values()) > 1001
    for key, points in mapped.items():
        logged = client.get_metric_history(run_id, key)
        assert sorted((m.step, m.value) for m in logged) == sorted(points), key
    assert mapped[M.COMPUTE_ROLLOUT_SAMPLES][-1] == (300, 300.0 * P * N)


@pytest.mark.parametrize("evicted", [0.0, 24.0])
def test_charged_samples_are_trained_plus_discarded(evicted):
    out = _map({"response_length/mean": [(1, 1.0)], EVICTED: [(1, evicted)]})
    assert out[M.COMPUTE_ROLLOUT_SAMPLES][-1] == (1, P * N + evicted)


def test_remaxs_greedy_baseline_is_charged_as_the_native_meter_charges_it():
    """verl's ReMax decodes one greedy response per prompt besides the sampled ones: P more
    samples a step, as the native trainer counts them."""
    out = map_history(
        {"response_length/mean": [(1, 4.0), (2, 6.0)]},
        prompts_per_step=P,
        samples_per_prompt=1,
        total_steps=2,
        greedy_baseline=True,
    )
    assert out[M.COMPUTE_ROLLOUT_SAMPLES] == [(0, 0.0), (1, 8.0), (2, 16.0)]
    assert out[M.COMPUTE_ROLLOUT_TOKENS][-1] == (2, 40.0)  # the sampled responses' tokens
