"""kill -9 and ``resume=auto`` on the real suite (other faults: tests/suite/test_faults.py).

The kill is real: a ``sppo-bench run`` subprocess sends itself SIGKILL at a step and point drawn
at random (``SPPO_BENCH_FAULTS``, see benchmarks/faults.py); the run is then resumed in this
process (different global RNG history: only what the checkpoint restores can make it match) and
compared with an uninterrupted twin in a separate MLflow store.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import Counter

import pytest

from benchmarks.config import compose_config
from benchmarks.faults import FAULTS_ENV
from benchmarks.suite.run import run_suite
from benchmarks.telemetry import metrics as M
from testkit.paths import REPO
from testkit.suites import MICRO

pytestmark = pytest.mark.usefixtures("one_thread")

ALGS = ("grpo", "sppo")
STEPS = 4  # per algorithm: budget 128 samples / 32 per step
CKPT_EVERY = 2


def _with(overrides: list[str], **changes: str) -> list[str]:
    """``overrides`` with some keys replaced (Hydra rejects a key given twice)."""
    keys = {k.replace("__", "."): v for k, v in changes.items()}
    out = [o for o in overrides if o.split("=", 1)[0] not in keys]
    return out + [f"{k}={v}" for k, v in keys.items()]


REL = _with(
    [o for o in MICRO if not o.startswith("algorithm.dapo")],  # (that one would add dapo)
    budget__limit=str(32 * STEPS),
    task__eval_size="32",
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


#: Which random kill points to try: one in CI; e.g. SPPO_BENCH_KILL_SEEDS=1,2,3,4 for more.
KILL_SEEDS = [int(x) for x in os.environ.get("SPPO_BENCH_KILL_SEEDS", "9").split(",")]


@pytest.mark.parametrize("seed", KILL_SEEDS)
def test_kill_9_then_resume_equals_uninterrupted_twin(root, twin, seed):
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
    why = f"kill at {alg} step {step} ({where}); SPPO_BENCH_KILL_SEEDS={seed}"
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

    from benchmarks.training.checkpoint import config_hash, find_resumable

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


def test_a_worker_killed_mid_run_then_resume_equals_the_twin(root, twin):
    """With ``jobs=2`` the kill hits one worker (grpo at step 2, while saving its checkpoint):
    the suite stops, the other worker's run is cut wherever it was, and ``resume=auto`` (in one
    process) completes both runs to exactly the uninterrupted twin's numbers."""
    store = _store(root, "killed-worker")
    env = {**os.environ, FAULTS_ENV: "kill@grpo:2:save", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.cli", "run", *REL, *store, "jobs=2"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1
    assert "run failed: a worker process died" in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    uri = store[0].split("=", 1)[1]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("sppo-bench-default")
    (parent,) = client.search_runs([exp.experiment_id], "tags.`sppo_bench.role` = 'suite'")
    assert parent.info.status != "FINISHED"

    resumed = run_suite(compose_config([*REL, *store, "resume=auto"]), progress=False)

    assert resumed.parent_run_id == parent.info.run_id
    client, after = _children(resumed)
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"
    tclient, twins = _children(twin)
    for a in ALGS:
        assert after[a].info.status == "FINISHED"
        h, t = _history(client, after[a]), _history(tclient, twins[a])
        assert [s for s, _ in h[M.TRAIN_SCORE_MEAN]] == list(range(1, STEPS + 1)), a
        assert h == t, f"{a} differs from its uninterrupted twin"
