"""kill -9 and ``resume=auto`` on the real suite (other faults: tests/suite/test_faults.py).

The kill is real: a ``sppo-bench run`` subprocess sends itself SIGKILL at a step and point drawn
at random (``SPPO_BENCH_FAULTS``, see benchmarks/faults.py); the run is then resumed in this
process (different global RNG history: only what the checkpoint restores can make it match) and
compared with an uninterrupted twin in a separate MLflow store.
"""

from __future__ import annotations

import logging
import os
import random
import subprocess
import sys
from collections import Counter

import pytest

from analysis import metrics as M
from benchmarks.config import compose_config
from benchmarks.faults import FAULTS_ENV
from benchmarks.suite.run import run_suite
from testkit.paths import REPO
from testkit.suites import MICRO

pytestmark = pytest.mark.usefixtures("one_thread")

#: Each resumes another part of the state: the reference (grpo), the prompt critic (sppo), the
#: token critic with its optimizer and mini-batches (ppo), the dynamic-sampling refill stream (dapo).
ALGS = ("grpo", "sppo", "ppo", "dapo")
STEPS = 4  # per algorithm: budget 128 samples / 32 per step
CKPT_EVERY = 1
#: The fixed kill points CI always runs, one process after another: each resume starts from a real
#: checkpoint (the step before the kill) of the run it was killed in, then goes on until the next
#: kill. DAPO's refills spend the budget in fewer steps, hence its earlier kill.
CHAIN = (("grpo", 3, "step"), ("ppo", 3, "step"), ("dapo", 2, "step"))


def _with(overrides: list[str], **changes: str) -> list[str]:
    """``overrides`` with some keys replaced (Hydra rejects a key given twice)."""
    keys = {k.replace("__", "."): v for k, v in changes.items()}
    out = [o for o in overrides if o.split("=", 1)[0] not in keys]
    return out + [f"{k}={v}" for k, v in keys.items()]


REL = _with(
    MICRO,
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
        if key.startswith((M.COMPUTE_WALL_S, M.MEMORY_PEAK_BYTES, M.MEMORY_PEAK_TENSOR_BYTES)):
            continue
        out[key] = sorted(
            (m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)
        )
    return out


def _items(client, run) -> dict[str, dict]:
    """A run's per-item eval scores (``eval_items/``), by file."""
    import json

    out = {}
    for f in client.list_artifacts(run.info.run_id, M.EVAL_ITEMS_DIR):
        with open(client.download_artifacts(run.info.run_id, f.path)) as fh:
            out[f.path] = json.load(fh)
    assert sorted(out) == [M.eval_items_file("arith", f) for f in (0.0, 0.5, 1.0)]
    return out


def _kill_points(twin) -> list[tuple[str, int, str]]:
    """Every place a kill can land: after any step the twin ran, or around any checkpoint."""
    client, twins = _children(twin)
    points = []
    for a in ALGS:
        n = len(_history(client, twins[a])[M.TRAIN_SCORE_MEAN])
        points += [(a, k, "step") for k in range(1, n + 1)]
        for k in range(CKPT_EVERY, n + 1, CKPT_EVERY):
            points += [(a, k, "save"), (a, k, "saved")]
    return points


#: Which random kill points to try: one in CI; e.g. SPPO_BENCH_KILL_SEEDS=1,2,3,4 for more.
KILL_SEEDS = [int(x) for x in os.environ.get("SPPO_BENCH_KILL_SEEDS", "9").split(",")]


@pytest.mark.slow  # a killed suite resumed and its uninterrupted twin: ~2.5 min
@pytest.mark.parametrize("seed", KILL_SEEDS)
def test_kill_9_then_resume_equals_uninterrupted_twin(root, twin, seed):
    alg, step, where = random.Random(seed).choice(_kill_points(twin))
    store = _store(root, f"killed-{seed}")
    proc = _run_killed(store, f"kill@{alg}:{step}:{where}")
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
    _assert_equals_twin(resumed, twin, why)
    by_alg = {r.algorithm: r for r in resumed.runs}
    for r in twin.runs:
        assert by_alg[r.algorithm].final_accuracy == r.final_accuracy
    assert not any((resumed.output_dir / "checkpoints").rglob("*.pt"))  # removed once FINISHED


def _run_killed(store: list[str], fault: str, *extra: str) -> subprocess.CompletedProcess:
    """``sppo-bench run`` in a subprocess that SIGKILLs itself at ``fault``."""
    env = {**os.environ, FAULTS_ENV: fault, "PYTHONPATH": str(REPO), "SPPO_BENCH_LOG": "INFO"}
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.cli", "run", *REL, *store, *extra],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _assert_equals_twin(resumed, twin, why: str) -> None:
    """Every resumed run is FINISHED with exactly its twin's metric points, each logged once."""
    client, after = _children(resumed)
    tclient, twins = _children(twin)
    assert set(after) == set(ALGS), why
    for a in ALGS:
        assert after[a].info.status == "FINISHED", f"{why}: {a}"
        h, t = _history(client, after[a]), _history(tclient, twins[a])
        steps = [s for s, _ in h[M.TRAIN_SCORE_MEAN]]
        twin_steps = [s for s, _ in t[M.TRAIN_SCORE_MEAN]]
        assert twin_steps == list(range(1, len(twin_steps) + 1)), f"{a}: twin steps {twin_steps}"
        assert steps == twin_steps, f"{why}: {a} steps {steps}"  # no gap, no duplicate
        counts = Counter((k, s) for k, pts in h.items() for s, _ in pts)
        assert counts == Counter((k, s) for k, pts in t.items() for s, _ in pts), f"{why}: {a}"
        assert h == t, f"{why}: {a} differs from its uninterrupted twin"  # bit for bit
        # one item file per eval, none lost or doubled, each as the twin's
        assert _items(client, after[a]) == _items(tclient, twins[a]), f"{why}: {a} eval items"


@pytest.mark.slow
def test_a_chain_of_kills_resumes_grpo_ppo_and_dapo_from_their_checkpoints(root, twin, caplog):
    """Killed in grpo, then (resumed) in ppo, then (resumed) in dapo: every resume loads the
    checkpoint of the step before the kill in the run it continues (the reference, the token
    critic and its optimizer, the refill stream), and the suite ends bit for bit equal to its
    twin."""
    store = _store(root, "chain")
    resumed_from: list[str] = []
    for i, (alg, step, where) in enumerate(CHAIN):
        proc = _run_killed(store, f"kill@{alg}:{step}:{where}", *(["resume=auto"] if i else []))
        assert proc.returncode == -9, f"kill in {alg}: expected SIGKILL\n{proc.stderr[-3000:]}"
        resumed_from += [ln for ln in proc.stderr.splitlines() if "resumed from" in ln]
    with caplog.at_level(logging.INFO, logger="benchmarks.training.checkpoint"):
        resumed = run_suite(compose_config([*REL, *store, "resume=auto"]), progress=False)
    resumed_from += [r.getMessage() for r in caplog.records if "resumed from" in r.getMessage()]
    # Each killed run was continued from the checkpoint of the step before its kill, not
    # started again; no other run was resumed.
    assert len(resumed_from) == len(CHAIN), resumed_from
    for (alg, step, _), message in zip(CHAIN, resumed_from, strict=True):
        who = message.split(": resumed")[0]
        assert who.endswith(f"{alg} seed 0"), f"expected {alg} resumed: {resumed_from}"
        assert message.endswith(f"at step {step - 1}"), f"{alg}: {message}"
    _assert_equals_twin(resumed, twin, "kill chain grpo:3 -> ppo:3 -> dapo:2")
    assert not any((resumed.output_dir / "checkpoints").rglob("*.pt"))  # removed once FINISHED


@pytest.mark.slow  # reads the uninterrupted twin suite (module fixture, ~40 s) and resumes: ~1 min
def test_resume_auto_finds_only_unfinished_invocations_of_the_same_config(root, twin):
    from benchmarks.suite.plan import validate
    from benchmarks.training.checkpoint import config_hash, find_resumable

    client, _ = _children(twin)
    exp = client.get_experiment_by_name("sppo-bench-default").experiment_id
    # The suite hashes its resolved config (``precision: auto`` resolved for this machine).
    chash = config_hash(
        validate(compose_config([*REL, *_store(root, "twin"), "resume=auto"])).resolved
    )
    assert client.get_run(twin.parent_run_id).data.tags["sppo_bench.config_hash"] == chash
    assert find_resumable(client, exp, chash) is None  # the twin FINISHED: start afresh
    client.update_run(twin.parent_run_id, status="FAILED")
    try:
        assert find_resumable(client, exp, chash).info.run_id == twin.parent_run_id
        other = config_hash(validate(compose_config([*REL, "seed=1"])).resolved)
        assert find_resumable(client, exp, other) is None
    finally:
        client.update_run(twin.parent_run_id, status="FINISHED")


@pytest.mark.slow  # reads the uninterrupted twin suite (module fixture, ~40 s) and resumes: ~1 min
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
    _assert_equals_twin(resumed, twin, "a worker killed in grpo at step 2 (mid-save)")
