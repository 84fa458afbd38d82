"""Fault injection on the real suite: kill -9 and resume=auto, NaN losses, a full disk or an
unwritable store at start, and graders that hang or raise.

The kill is real: a ``sppo-bench run`` subprocess sends itself SIGKILL at a step and point drawn
at random (``SPPO_BENCH_FAULTS``, see benchmarks/faults.py); the run is then resumed in this
process (different global RNG history: only what the checkpoint restores can make it match) and
compared with an uninterrupted twin in a separate MLflow store.
"""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from collections import Counter

import pytest
from conftest import MICRO, REPO

from benchmarks import metrics as M
from benchmarks.cli import compose_config
from benchmarks.cli import main as cli_main
from benchmarks.faults import FAULTS_ENV
from benchmarks.suite import run_suite

pytestmark = pytest.mark.usefixtures("one_thread")

ALGS = ("grpo", "sppo")
STEPS = 6  # per algorithm: budget 192 samples / 32 per step
CKPT_EVERY = 2


def _with(overrides: list[str], **changes: str) -> list[str]:
    """``overrides`` with some keys replaced (Hydra rejects a key given twice)."""
    keys = {k.replace("__", "."): v for k, v in changes.items()}
    out = [o for o in overrides if o.split("=", 1)[0] not in keys]
    return out + [f"{k}={v}" for k, v in keys.items()]


REL = _with(
    [o for o in MICRO if not o.startswith("algorithm.dapo")],  # (that one would add dapo)
    budget__limit=str(32 * STEPS),
    task__eval_size="64",
    algorithm=f"[{','.join(ALGS)}]",
    trainer__checkpoint_every=str(CKPT_EVERY),
)


def _store(root, name: str) -> list[str]:
    return [
        f"tracking.uri=sqlite:///{root / name / 'mlflow.db'}",
        f"output_dir={root / name / 'out'}",
        f"cache_dir={root / 'cache'}",  # one warm start for every store of the module
    ]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("reliability")


@pytest.fixture(scope="module")
def twin(root):
    """The uninterrupted run (it also fills the shared warm-start cache)."""
    result = run_suite(compose_config([*REL, *_store(root, "twin")]), progress=False)
    assert [r.status for r in result.runs] == ["FINISHED"] * len(ALGS)
    return result


def _children(result_or_uri, parent_id=None):
    from mlflow.tracking import MlflowClient

    uri = getattr(result_or_uri, "tracking_uri", result_or_uri)
    parent_id = parent_id or result_or_uri.parent_run_id
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("sppo-bench-default")
    runs = client.search_runs(
        [exp.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}'"
    )
    return client, {r.data.tags[M.TAG_ALGORITHM]: r for r in runs}


def _history(client, run) -> dict[str, list[tuple[int, float]]]:
    """Every deterministic metric's points as sorted (step, value) pairs (wall time and memory
    differ between any two runs)."""
    out = {}
    for key in run.data.metrics:
        if key.startswith((M.COMPUTE_WALL_S, M.MEMORY_PEAK_BYTES)):
            continue
        out[key] = sorted(
            (m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)
        )
    return out


def _kill_points() -> list[tuple[str, int, str]]:
    points = [(a, k, "step") for a in ALGS for k in range(1, STEPS + 1)]
    for a in ALGS:
        for k in range(CKPT_EVERY, STEPS + 1, CKPT_EVERY):
            points += [(a, k, "save"), (a, k, "saved")]
    return points


def test_kill_9_then_resume_equals_uninterrupted_twin(root, twin):
    seed = int(os.environ.get("SPPO_BENCH_KILL_SEED", "9"))
    alg, step, where = random.Random(seed).choice(_kill_points())
    store = _store(root, f"killed-{seed}")
    env = {**os.environ, FAULTS_ENV: f"kill@{alg}:{step}:{where}", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.cli", "run", *REL, *store],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    why = f"kill at {alg} step {step} ({where}); SPPO_BENCH_KILL_SEED={seed}"
    assert proc.returncode == -9, f"{why}: expected SIGKILL\n{proc.stderr[-3000:]}"
    from mlflow.tracking import MlflowClient

    uri = store[0].split("=", 1)[1]
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("sppo-bench-default")
    (parent,) = client.search_runs([exp.experiment_id], "tags.`sppo_bench.role` = 'suite'")
    assert parent.info.status == "RUNNING"  # killed: nobody ended it
    _, before = _children(uri, parent.info.run_id)
    assert before[alg].info.status == "RUNNING"

    resumed = run_suite(compose_config([*REL, *store, "resume=auto"]), progress=False)

    assert resumed.parent_run_id == parent.info.run_id, why  # the same parent run ...
    client, after = _children(resumed)
    assert {a: r.info.run_id for a, r in before.items()} == {
        a: after[a].info.run_id for a in before
    }, why  # ... and the same child runs, none added for a resumed pair
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"
    tclient, twins = _children(twin)
    for a in ALGS:
        assert after[a].info.status == "FINISHED", why
        h, t = _history(client, after[a]), _history(tclient, twins[a])
        steps = [s for s, _ in h[M.TRAIN_SCORE_MEAN]]
        assert steps == list(range(1, STEPS + 1)), f"{why}: {a} steps {steps}"  # no gap, no dup
        counts = Counter((k, s) for k, pts in h.items() for s, _ in pts)
        assert counts == Counter((k, s) for k, pts in t.items() for s, _ in pts), why
        assert h == t, f"{why}: {a} differs from its uninterrupted twin"  # bit for bit
    by_alg = {r.algorithm: r for r in resumed.runs}
    for r in twin.runs:
        assert by_alg[r.algorithm].final_accuracy == r.final_accuracy
    assert not any((resumed.output_dir / "checkpoints").rglob("*.pt"))  # removed once FINISHED


def test_resume_auto_finds_only_unfinished_invocations_of_the_same_config(root, twin):
    from omegaconf import OmegaConf

    from benchmarks.checkpoint import config_hash, find_resumable

    client, _ = _children(twin)
    exp = client.get_experiment_by_name("sppo-bench-default").experiment_id
    cfg = compose_config([*REL, *_store(root, "twin"), "resume=auto"])
    chash = config_hash(OmegaConf.to_container(cfg, resolve=True))
    assert client.get_run(twin.parent_run_id).data.tags["sppo_bench.config_hash"] == chash
    assert find_resumable(client, exp, chash) is None  # the twin FINISHED: start afresh
    client.update_run(twin.parent_run_id, status="FAILED")
    try:
        assert find_resumable(client, exp, chash).info.run_id == twin.parent_run_id
        other = config_hash(OmegaConf.to_container(compose_config([*REL, "seed=1"]), resolve=True))
        assert find_resumable(client, exp, other) is None
    finally:
        client.update_run(twin.parent_run_id, status="FINISHED")


def test_nan_loss_is_skipped_and_k_nan_steps_fail_cleanly(root, twin, monkeypatch, capsys):
    """One NaN step (grpo): skipped, counted, the run finishes. NaN from step 1 on (sppo): the run
    fails after max_consecutive_skips, FAILED with the reason, and the suite goes on (ppo)."""
    monkeypatch.setenv(FAULTS_ENV, "nan_loss@grpo:2,nan_loss@sppo:0-99")
    store = _store(root, "nan")
    rc = cli_main(
        [
            "run",
            *_with(REL, algorithm="[grpo,sppo,ppo]", trainer__max_consecutive_skips="3"),
            *store,
            "algorithm.ppo.params.critic_warmup_steps=0",
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
    _, runs = _children(client.tracking_uri, parent.info.run_id)
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


def test_full_disk_and_unwritable_store_fail_at_start(root, capsys):
    store = _store(root, "preflight")
    cache = root / "preflight" / "fresh-cache"
    rc = cli_main(["run", *REL, *store[:2], f"cache_dir={cache}", "min_free_disk_gb=1e9"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "sppo-bench: cannot start: output_dir=" in err and "GB free" in err
    assert "min_free_disk_gb=1e+09" in err
    assert not (root / "preflight" / "mlflow.db").exists()  # no store, no warm start: no compute
    assert not (cache / "warmstart").exists()

    rc = cli_main(["run", *REL, "tracking.uri=sqlite:////proc/sppo-bench/mlflow.db", *store[1:]])
    err = capsys.readouterr().err
    assert rc == 2
    assert "tracking.uri=sqlite:////proc/sppo-bench/mlflow.db: directory /proc/sppo-bench" in err
    assert "not writable" in err


def test_hanging_and_raising_grader_are_counted_and_the_step_completes(tok, monkeypatch):
    """A real math-verify worker pool: one response hangs its worker (killed and replaced), one
    raises; the training step completes and both show in the step's grader counters."""
    import copy

    from benchmarks.grading import DEBUG_ENV, Grader
    from benchmarks.meter import Budget
    from benchmarks.modeling import ModelSpec, build_tiny_llama
    from benchmarks.rollout import TorchEngine
    from benchmarks.tasks import ArithTask
    from benchmarks.tracking import NullTracker
    from benchmarks.trainer import RLTrainer, TrainerConfig

    from algorithms import get_algorithm

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
