"""Faults a run must survive or report: NaN losses (skipped, then a clean failure while the
suite goes on), a full disk or an unwritable store (reported at start), graders that hang or
raise (counted, the step completes). Faults are injected for real (``SPPO_BENCH_FAULTS``, the
grader's debug actions), never mocked."""

from __future__ import annotations

import copy
import math

import pytest

from algorithms import get_algorithm
from analysis import metrics as M
from benchmarks.cli import main as cli_main
from benchmarks.engines.torch_engine import TorchEngine
from benchmarks.faults import FAULTS_ENV
from benchmarks.tasks.arith import ArithTask
from benchmarks.tasks.grading import DEBUG_ENV, Grader
from benchmarks.telemetry.meter import Budget
from benchmarks.telemetry.tracking import NullTracker
from benchmarks.training.config import TrainerConfig
from benchmarks.training.modeling import ModelSpec, build_tiny_llama
from benchmarks.training.trainer import RLTrainer
from testkit.suites import MICRO

pytestmark = pytest.mark.usefixtures("one_thread")

STEPS = 4
#: The micro suite without its warm start (the faults do not need a model that can add).
FAST = [
    *(o for o in MICRO if not o.startswith(("warmstart.", "algorithm.dapo", "budget.limit"))),
    "warmstart.enabled=false",
    f"budget.limit={32 * STEPS}",
    "task.eval_size=32",
    "task.max_new_tokens=8",  # an untrained model never stops early
]


def _store(root) -> list[str]:
    return [
        f"tracking.uri=sqlite:///{root / 'mlflow.db'}",
        f"output_dir={root / 'out'}",
        f"cache_dir={root / 'cache'}",
    ]


def _children(client, parent_id):
    exp = client.get_experiment_by_name("sppo-bench-default")
    runs = client.search_runs(
        [exp.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}'"
    )
    return {r.data.tags[M.TAG_ALGORITHM]: r for r in runs}


@pytest.mark.slow  # runs until k NaN steps: ~50 s
def test_nan_loss_is_skipped_and_k_nan_steps_fail_cleanly(tmp_path, monkeypatch, capsys):
    """One NaN step (grpo): skipped, counted, the run finishes. NaN from step 1 on (sppo): the run
    fails after max_consecutive_skips, FAILED with the reason, and the suite goes on (ppo)."""
    monkeypatch.setenv(FAULTS_ENV, "nan_loss@grpo:2,nan_loss@sppo:0-99")
    store = _store(tmp_path)
    rc = cli_main(
        [
            "run",
            *FAST,
            *store,
            "algorithm=[grpo,sppo,ppo]",
            "trainer.max_consecutive_skips=3",
            "algorithm.ppo.params.critic_warmup_steps=0",
            "algorithm.sppo.critic.warmup_steps=0",  # a warm-up step has no policy loss
        ]
    )
    assert rc == 1  # a failed run makes the exit status non-zero
    out = capsys.readouterr().out
    assert "FAILED" in out
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store[0].split("=", 1)[1])
    exp = client.get_experiment_by_name("sppo-bench-default")
    (parent,) = client.search_runs([exp.experiment_id], "tags.`sppo_bench.role` = 'suite'")
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["suite/failed_runs"] == 1
    runs = _children(client, parent.info.run_id)
    grpo, sppo, ppo = runs["grpo"], runs["sppo"], runs["ppo"]

    assert grpo.info.status == "FINISHED"
    skipped = sorted(
        (m.step, m.value)
        for m in client.get_metric_history(grpo.info.run_id, M.TRAIN_SKIPPED_STEPS)
    )
    # The update computed at trainer step 2 is logged at step 3.
    assert skipped == [(s, 0.0 if s < 3 else 1.0) for s in range(1, STEPS + 1)]

    assert sppo.info.status == "FAILED"
    assert sppo.data.tags["error"] == (
        "FloatingPointError: sppo: 3 consecutive steps with non-finite policy loss (last at step 2)"
    )
    assert ppo.info.status == "FINISHED"  # the suite went on to the next algorithm
    assert math.isfinite(ppo.data.metrics[M.eval_metric("arith", "accuracy")])


def test_full_disk_and_unwritable_store_fail_at_start(tmp_path, capsys):
    store = _store(tmp_path)
    cache = tmp_path / "cache"
    rc = cli_main(["run", *FAST, *store, "min_free_disk_gb=1e9"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "sppo-bench: cannot start: output_dir=" in err and "GB free" in err
    assert "min_free_disk_gb=1e+09" in err
    assert not (tmp_path / "mlflow.db").exists()  # no store, no warm start: no compute
    assert not (cache / "warmstart").exists()

    rc = cli_main(["run", *FAST, "tracking.uri=sqlite:////proc/sppo-bench/mlflow.db", *store[1:]])
    err = capsys.readouterr().err
    assert rc == 2
    assert "tracking.uri=sqlite:////proc/sppo-bench/mlflow.db: directory /proc/sppo-bench" in err
    assert "not writable" in err


@pytest.mark.slow  # a grader pool that hangs and raises: ~12 s
def test_hanging_and_raising_grader_are_counted_and_the_step_completes(tok, monkeypatch):
    """A real math-verify worker pool: one response hangs its worker (killed and replaced), one
    raises; the training step completes and both show in the step's grader counters."""

    from benchmarks.tasks.grading import Grader

    debug = "__sppo_grader_debug__:"

    class FaultyGraderTask(ArithTask):
        def __init__(self, grader: Grader) -> None:
            super().__init__(horizon=1, eval_size=4)
            self.grader = grader

        def grade(self, responses, problems):
            bad = [debug + "hang", debug + "raise", *responses[2:]]
            return self.grader.grade(bad, [p.answer for p in problems])

    monkeypatch.setenv(DEBUG_ENV, "1")
    spec = ModelSpec(
        hidden_size=32, num_layers=1, num_heads=4, intermediate_size=64, max_position_embeddings=64
    )
    start = build_tiny_llama(spec, len(tok), seed=0)
    tracker = NullTracker()
    with Grader("math_verify", timeout_s=0.5, kill_grace_s=0.25, workers=1) as grader:
        trainer = RLTrainer(
            algorithm=get_algorithm("grpo", group_size=4),
            policy=copy.deepcopy(start),
            tokenizer=tok,
            task=FaultyGraderTask(grader),
            engine_factory=lambda m: TorchEngine(m, tok),
            budget=Budget(kind="samples", limit=16, eval_fractions=(1.0,)),
            config=TrainerConfig(samples_per_step=16, max_new_tokens=6),
            seed=0,
            prompt_seed=0,
            tracker=tracker,
            reference=copy.deepcopy(start).eval().requires_grad_(False),
        )
        trainer.train()
    train = [m for _, m in tracker.history if M.TRAIN_SCORE_MEAN in m]
    assert trainer.step == 1 and len(train) == 1
    assert (train[0][M.GRADER_TIMEOUTS], train[0][M.GRADER_ERRORS]) == (1.0, 1.0)
    assert math.isfinite(train[0][M.TRAIN_SCORE_MEAN])
    final = trainer.evals[-1][1]
    assert (final.timeouts, final.errors, final.n) == (1, 1, 4)
