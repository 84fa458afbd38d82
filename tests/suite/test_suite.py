"""The default suite end to end at a micro budget, on a real temporary MLflow store."""

from __future__ import annotations

from pathlib import Path

from mlflow.tracking import MlflowClient

from benchmarks.telemetry import metrics as M


def _children(result):
    client = MlflowClient(result.tracking_uri)
    exp = client.get_experiment_by_name(result.experiment)
    runs = client.search_runs(
        [exp.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{result.parent_run_id}'"
    )
    return client, runs


def test_four_child_runs_finish(micro_suite):
    result, _ = micro_suite
    client, runs = _children(result)
    assert sorted(r.data.tags[M.TAG_ALGORITHM] for r in runs) == ["dapo", "grpo", "ppo", "sppo"]
    assert all(r.info.status == "FINISHED" for r in runs)
    parent = client.get_run(result.parent_run_id)
    assert parent.data.tags[M.TAG_ROLE] == "suite"
    for r in runs:
        assert r.data.tags[M.TAG_ROLE] == "run"
        assert r.data.tags[M.TAG_BUDGET_KIND] == "samples"
        assert r.data.params["budget.limit"] == "256"
        assert r.data.params["algorithm.name"] == r.data.tags[M.TAG_ALGORITHM]


def test_evals_at_the_same_budget_fractions(micro_suite):
    result, cfg = micro_suite
    client, runs = _children(result)
    acc = M.eval_metric("arith", "accuracy")
    fractions = {}
    starts = {}
    for r in runs:
        hist = sorted(
            client.get_metric_history(r.info.run_id, M.EVAL_BUDGET_FRACTION), key=lambda m: m.step
        )
        fractions[r.data.tags[M.TAG_ALGORITHM]] = [m.value for m in hist]
        accs = sorted(client.get_metric_history(r.info.run_id, acc), key=lambda m: m.step)
        assert [m.step for m in accs] == [m.step for m in hist]
        starts[r.data.tags[M.TAG_ALGORITHM]] = accs[0].value
        se = client.get_metric_history(r.info.run_id, M.eval_metric("arith", "accuracy_se"))
        assert len(se) == len(hist) and all(0 < m.value < 0.1 for m in se)
    assert all(v == list(cfg.budget.eval_fractions) for v in fractions.values()), fractions
    # Same warm start, same greedy decoding: every algorithm starts at the same accuracy.
    assert len(set(starts.values())) == 1, starts


def test_compute_counters_monotone_and_within_budget(micro_suite):
    result, cfg = micro_suite
    client, runs = _children(result)
    for r in runs:
        for key in (
            M.COMPUTE_ROLLOUT_SAMPLES,
            M.COMPUTE_ROLLOUT_TOKENS,
            M.COMPUTE_FLOPS,
            M.COMPUTE_PROMPTS,
        ):
            hist = sorted(
                client.get_metric_history(r.info.run_id, key), key=lambda m: (m.step, m.timestamp)
            )
            values = [m.value for m in hist]
            assert values == sorted(values), (r.data.tags[M.TAG_ALGORITHM], key)
        samples = max(
            m.value for m in client.get_metric_history(r.info.run_id, M.COMPUTE_ROLLOUT_SAMPLES)
        )
        assert samples <= cfg.budget.limit
        # Samples per step divide the limit, so every algorithm spends all of it.
        assert samples == cfg.budget.limit


def test_each_metric_is_logged_once_per_step(micro_suite):
    """Two values at one step draw a vertical jump in MLflow's charts: every (key, step) once."""
    result, _ = micro_suite
    client, runs = _children(result)
    for r in runs:
        keys = [k for k in r.data.metrics if k.startswith(("compute/", "eval/", "train/"))]
        assert M.COMPUTE_FLOPS in keys and M.wall_phase("eval") in keys
        for key in keys:
            steps = [m.step for m in client.get_metric_history(r.info.run_id, key)]
            assert len(steps) == len(set(steps)), (r.data.tags[M.TAG_ALGORITHM], key, steps)


def test_table_artifacts_and_plot(micro_suite):
    result, _ = micro_suite
    client, runs = _children(result)
    for r in runs:
        names = {a.path for a in client.list_artifacts(r.info.run_id, "eval_samples")}
        assert names == {"eval_samples/arith_start.json", "eval_samples/arith_final.json"}
        # Artifacts live beside the database, not in the working directory.
        db = Path(result.tracking_uri.removeprefix("sqlite:///"))
        assert r.info.artifact_uri.startswith((db.parent / "mlartifacts").as_uri())
    assert result.plot is not None and result.plot.exists() and result.plot.stat().st_size > 10_000
    parent_files = {a.path for a in client.list_artifacts(result.parent_run_id)}
    assert "config.yaml" in parent_files and "figures" in parent_files


def test_sampled_eval_at_checkpoints(tmp_path):
    """``trainer.eval_k`` adds avg@k / pass@k at budget checkpoints through `sppo-bench eval`'s code."""
    from benchmarks.config import compose_config
    from benchmarks.suite.run import run_suite
    from testkit.suites import MICRO

    cfg = compose_config(
        [
            *MICRO,
            "algorithm=[grpo]",
            "trainer.eval_k=4",
            "trainer.eval_k_every_checkpoint=true",
            "trainer.eval_k_problems=20",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
            f"cache_dir={tmp_path / 'cache'}",
            f"output_dir={tmp_path / 'out'}",
        ]
    )
    result = run_suite(cfg, progress=False)
    run = result.runs[0]
    assert run.status == "FINISHED", run.error
    client = MlflowClient(result.tracking_uri)
    avg = client.get_metric_history(run.run_id, "eval/arith/avg_at_4")
    pass_k = client.get_metric_history(run.run_id, "eval/arith/pass_at_4")
    assert len(avg) == len(cfg.budget.eval_fractions) == len(pass_k)
    assert all(0.0 <= a.value <= p.value <= 1.0 for a, p in zip(avg, pass_k, strict=True))
