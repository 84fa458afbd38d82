"""Several writers on one SQLite MLflow store and one Optuna storage lose nothing: 4 real
processes, a store held locked by another connection, and the retry past a busy timeout."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from testkit.paths import REPO

WORKERS, RUNS, STEPS, KEYS = 4, 3, 20, 4

# One writer: RUNS MLflow runs of STEPS logged steps each, and one Optuna trial per run.
WORKER = r"""
import sys
import optuna
from mlflow.tracking import MlflowClient
from benchmarks.telemetry.tracking import MlflowTracker, prepare_store
from sweeps.storage import make_storage

uri, storage = sys.argv[1], sys.argv[2]
wid, runs, steps, keys = (int(a) for a in sys.argv[3:7])
optuna.logging.set_verbosity(optuna.logging.WARNING)
exp = prepare_store(uri, "concurrency")
client = MlflowClient(uri)
study = optuna.load_study(study_name="concurrency", storage=make_storage(storage))
for r in range(runs):
    with MlflowTracker.start(
        client, exp, run_name=f"w{wid}-r{r}", tags={"worker": str(wid)}, params={"r": str(r)}
    ) as t:
        for s in range(steps):
            t.log_metrics({f"m{j}": wid * 1000 + s + j / 10 for j in range(keys)}, step=s)
        trial = study.ask()
        trial.suggest_float("x", 0.0, 1.0)
        study.tell(trial, float(wid * runs + r))
"""


@pytest.mark.slow  # four suite processes on one store: ~1.5 min
def test_four_processes_lose_no_run_metric_or_trial(tmp_path):
    import optuna
    from mlflow.tracking import MlflowClient

    from benchmarks.telemetry.tracking import prepare_store
    from sweeps.storage import make_storage

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    exp = prepare_store(uri, "concurrency")  # created once before the workers, as sweeps do
    optuna.create_study(study_name="concurrency", storage=make_storage(storage))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [str(a) for a in (RUNS, STEPS, KEYS)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, uri, storage, str(w), *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for w in range(WORKERS)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * WORKERS, "\n".join(o[-2000:] for o in outs)

    client = MlflowClient(uri)
    runs = client.search_runs([exp], max_results=1000)
    assert len(runs) == WORKERS * RUNS
    assert {r.info.status for r in runs} == {"FINISHED"}
    for r in runs:
        w = int(r.data.tags["worker"])
        for j in range(KEYS):
            hist = client.get_metric_history(r.info.run_id, f"m{j}")
            assert sorted((m.step, m.value) for m in hist) == [
                (s, w * 1000 + s + j / 10) for s in range(STEPS)
            ]
    trials = optuna.load_study(study_name="concurrency", storage=make_storage(storage)).trials
    assert len(trials) == WORKERS * RUNS
    assert {t.state for t in trials} == {optuna.trial.TrialState.COMPLETE}
    assert sorted(t.value for t in trials) == [float(i) for i in range(WORKERS * RUNS)]


def _hold_lock(db, seconds: float) -> threading.Timer:
    """Another connection takes the database's write lock now and releases it after
    ``seconds`` (a sweep worker or a second suite in the middle of a write)."""
    lock = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    lock.execute("BEGIN EXCLUSIVE")

    def release() -> None:
        lock.execute("COMMIT")
        lock.close()

    timer = threading.Timer(seconds, release)
    timer.start()
    return timer


@pytest.mark.slow  # a store lock held for seconds: ~9 s
def test_metrics_wait_out_a_held_lock(tmp_path):
    """A metric logged while another process holds the store's lock lands once, not lost or
    doubled (MLflow's SQLite busy timeout is 20 s; retry_locked covers longer locks)."""
    from mlflow.tracking import MlflowClient

    from benchmarks.telemetry.tracking import MlflowTracker, prepare_store

    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    exp = prepare_store(uri, "locked")
    client = MlflowClient(uri)
    with MlflowTracker.start(client, exp, run_name="r", tags={}) as tracker:
        tracker.log_metrics({"m": 1.0}, step=0)
        timer = _hold_lock(db, 2.0)
        t0 = time.monotonic()
        tracker.log_metrics({"m": 2.0}, step=1)  # queued: MLflow writes metrics asynchronously
        tracker.flush()
        assert time.monotonic() - t0 >= 1.5  # the write really waited for the lock
        timer.join()
    hist = client.get_metric_history(tracker.run_id, "m")
    assert sorted((m.step, m.value) for m in hist) == [(0, 1.0), (1, 2.0)]
    assert client.get_run(tracker.run_id).info.status == "FINISHED"


def test_retry_locked_outlasts_a_lock_beyond_the_busy_timeout(tmp_path, caplog):
    """A real 'database is locked' (busy timeout 0 here, standing for one that ran out) is
    retried with backoff until the lock is gone; the write lands exactly once."""
    from benchmarks.telemetry.tracking import retry_locked

    db = tmp_path / "x.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE t (v INTEGER)")
    timer = _hold_lock(db, 1.0)

    def write() -> None:
        with sqlite3.connect(db, timeout=0) as c:
            c.execute("INSERT INTO t VALUES (1)")

    retry_locked(write, "test write")
    timer.join()
    assert "test write: database is locked, retry 1/" in caplog.text
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT COUNT(*) FROM t").fetchone() == (1,)
    with pytest.raises(ValueError, match="not a lock"):  # other errors: no retry
        retry_locked(lambda: (_ for _ in ()).throw(ValueError("not a lock")), "other")


# One process opening a new store: waits until every process is ready, then prepares the store.
OPENER = r"""
import sys, time
from pathlib import Path
from benchmarks.telemetry.tracking import prepare_store

uri, ready, go = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
ready.touch()
while not go.exists():
    time.sleep(0.005)
print(prepare_store(uri, "together"))
"""


def test_processes_that_open_a_new_store_together_all_start(tmp_path):
    """Two shards started at once against a new SQLite store both ran MLflow's first migration,
    and one failed (``table _alembic_tmp_experiments already exists``; before the lock, 3 of 3
    such rounds failed here). Three stores, three processes each, released at one instant."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    go = tmp_path / "go"
    procs, ready = [], []
    for s in range(3):
        (tmp_path / f"store{s}").mkdir()
        uri = f"sqlite:///{tmp_path / f'store{s}' / 'mlflow.db'}"
        for w in range(3):
            ready.append(tmp_path / f"ready{s}{w}")
            procs.append(
                (
                    s,
                    subprocess.Popen(
                        [sys.executable, "-c", OPENER, uri, str(ready[-1]), str(go)],
                        cwd=REPO,
                        env=env,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        text=True,
                    ),
                )
            )
    deadline = time.monotonic() + 240
    while not all(r.exists() for r in ready) and time.monotonic() < deadline:
        time.sleep(0.05)
    go.touch()
    outs = [(s, p.communicate(timeout=240)[0], p.returncode) for s, p in procs]
    assert [rc for _, _, rc in outs] == [0] * 9, "\n".join(o[-1500:] for _, o, _ in outs)
    for s in range(3):  # one experiment per store, the same id for its three openers
        assert len({o.strip().splitlines()[-1] for t, o, _ in outs if t == s}) == 1
