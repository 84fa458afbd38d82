"""The launch path of ``sppo-bench run engine=verl`` without a GPU.

verl cannot train on CPU, so ``engine.python`` points at a stand-in for the trainer process: it
receives the exact argv of a launch (``-m verl.trainer.main_ppo <overrides>``), composes the
overrides in verl's own Hydra config, and logs through verl's own ``Tracking`` class (the MLflow
backend verl's trainer uses, resuming ``MLFLOW_RUN_ID``) what a short run logs, under verl's
metric names. Everything after the trainer is real: data export, the parent/child runs, the
environment hand-over, the metric mapping, statuses, and what ``analysis`` reads back.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

from testkit.paths import REPO, require_module

require_module("verl")  # the `verl` extra; under CI its absence fails

STANDIN = textwrap.dedent(
    """
    import os, sys
    assert sys.argv[1:3] == ["-m", "verl.trainer.main_ppo"], sys.argv[:3]
    overrides = sys.argv[3:]
    if any(o == "trainer.experiment_name=grpo-s0" for o in overrides):
        sys.exit(3)  # one run fails, as a crashed verl would
    import verl
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from verl.utils.tracking import Tracking

    with initialize_config_dir(os.path.join(os.path.dirname(verl.__file__), "trainer/config"),
                               version_base=None):
        cfg = compose("ppo_trainer", overrides=overrides)
    assert os.environ["MLFLOW_RUN_ID"] == cfg.ray_kwargs.ray_init.runtime_env.env_vars.MLFLOW_RUN_ID
    t = cfg.trainer
    tracker = Tracking(t.project_name, t.experiment_name, list(t.logger),
                       {"trainer": {"total_training_steps": t.total_training_steps}})
    steps = t.total_training_steps
    tracker.log({"val-core/arith/acc/mean@1": 0.25}, step=0)
    for s in range(1, steps + 1):
        tracker.log({"response_length/mean": 5.0, "perf/time_per_step": 1.5,
                     "critic/score/mean": 0.3, "critic/loss": 0.6}, step=s)
    tracker.log({"val-core/arith/acc/mean@1": 0.5}, step=steps)
    tracker.finish()
    """
)


@pytest.mark.slow  # a verl launch logged as child runs: ~25 s
def test_launch_logs_verl_runs_as_children_and_maps_their_metrics(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from analysis import eval_points, load_runs
    from analysis import metrics as M
    from benchmarks.cli import main
    from benchmarks.tasks.arith import ArithTask
    from benchmarks.training.modeling import ModelSpec, build_char_tokenizer, build_tiny_llama

    tok = build_char_tokenizer(ArithTask.alphabet)
    build_tiny_llama(
        ModelSpec(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32), len(tok), seed=0
    ).save_pretrained(tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")
    (tmp_path / "standin.py").write_text(STANDIN)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {tmp_path / "standin.py"} "$@"\n')
    python.chmod(0o755)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = main(
        [
            "run",
            "engine=verl",
            "model=hf",
            f"model.name_or_path={tmp_path / 'ckpt'}",
            "task=arith",
            "task.eval_size=8",
            "algorithm=[sppo,grpo]",
            "seeds=1",
            "trainer.samples_per_step=16",
            "budget.limit=48",
            "budget.eval_fractions=[0.0,1.0]",
            f"engine.python={python}",
            f"tracking.uri={uri}",
            f"output_dir={tmp_path / 'out'}",
        ]
    )
    assert code == 1  # grpo failed
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("sppo-bench-default")
    runs = {
        r.data.tags["algorithm"]: r
        for r in client.search_runs([exp.experiment_id], "tags.`sppo_bench.role` = 'run'")
    }
    parent = client.search_runs([exp.experiment_id], "tags.`sppo_bench.role` = 'suite'")[0]
    assert {r.data.tags["mlflow.parentRunId"] for r in runs.values()} == {parent.info.run_id}
    assert runs["sppo"].info.status == "FINISHED" and runs["grpo"].info.status == "FAILED"
    assert "verl exited 3" in runs["grpo"].data.tags["error"]
    assert runs["sppo"].data.tags[M.TAG_ENGINE] == "verl"
    # verl's own logger wrote into our child run (its config as params, its metric names) ...
    assert "trainer/total_training_steps" in runs["sppo"].data.params
    assert runs["sppo"].data.params["algorithm_resolved.clip_ratio_c"] == "3.0"  # ours too
    # ... and the suite's names were mapped next to them
    pts = eval_points(load_runs(parent_run_id=parent.info.run_id, tracking_uri=uri))
    sppo = pts[pts["algorithm"] == "sppo"]
    assert sppo["accuracy"].tolist() == [0.25, 0.5]
    assert sppo["budget_fraction"].tolist() == [0.0, 1.0]
    assert sppo[M.COMPUTE_ROLLOUT_SAMPLES].tolist() == [0.0, 48.0]  # 3 steps x 16 prompts x 1
    assert sppo[M.COMPUTE_WALL_S].tolist() == [0.0, 4.5]
    assert (tmp_path / "out" / "verl_data" / "train.parquet").is_file()
    assert (tmp_path / "out" / "verl_data" / "arith.parquet").is_file()
