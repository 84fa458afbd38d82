"""A suite as tasks of a real Ray cluster (``jobs=ray``): two nodes on this machine, the same
numbers as the one-process suite, a node removed while its runs train, and the start-up checks
that fail in seconds naming the field."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from benchmarks.config import compose_config
from benchmarks.suite.run import run_suite
from benchmarks.training import checkpoint as ckpt
from testkit.parity import histories, identity
from testkit.paths import REPO
from testkit.services import free_port, ray_cluster, remove_node
from testkit.suites import MICRO

pytestmark = pytest.mark.slow  # Ray clusters: left out of make test-fast

#: Ray notices a dead node after this many missed health checks of this period (defaults: 5 of
#: 3 s), so a test's removed node is retried elsewhere within seconds.
FAST_FAILURE_DETECTION = {"health_check_period_ms": 500, "health_check_failure_threshold": 3}


@pytest.fixture(scope="module")
def cluster():
    """Two nodes of one CPU each (the head is one of them), for this module's tests."""
    with ray_cluster(nodes=2, cpus=1) as c:
        yield c


def _cmd(argv: list[str]) -> tuple[int, str, float]:
    """``sppo-bench`` in a fresh process: exit status, stderr, seconds."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from benchmarks.cli import main; sys.exit(main())",
            *argv,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RAY_ADDRESS": ""},
    )
    return proc.returncode, proc.stderr, time.perf_counter() - t0


def test_ray_fields_are_validated():
    from algorithms import ConfigError
    from benchmarks.suite.plan import validate

    for bad in ("nohost", "10.0.0.5:port", "10.0.0.5:0", ":6379"):
        with pytest.raises(ConfigError, match=r"^ray\.address=.*allowed 'auto'"):
            validate(compose_config([*MICRO, f"ray.address={bad}"]))
    with pytest.raises(ConfigError, match=r"^ray\.max_retries=-1 must be >= 0"):
        validate(compose_config([*MICRO, "ray.max_retries=-1"]))
    plan = validate(compose_config([*MICRO, "jobs=ray", "ray.address=10.0.0.5:6379"]))
    assert (plan.jobs, plan.ray.address, plan.ray.max_retries) == ("ray", "10.0.0.5:6379", 3)
    with pytest.raises(ConfigError, match=r"jobs='rays'.*or 'ray'"):
        validate(compose_config([*MICRO, "jobs=rays"]))


def test_an_unreachable_ray_address_fails_in_seconds_naming_it(tmp_path):
    """Nobody listens on the port: the run stops at start (status 2), before any compute, with
    ``ray.address`` in its message; ``ray.init`` alone would retry for a minute or more."""
    address = f"127.0.0.1:{free_port()}"
    code, err, wall = _cmd(
        [
            "run",
            *MICRO,
            "jobs=ray",
            f"ray.address={address}",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
            f"cache_dir={tmp_path / 'cache'}",
            f"output_dir={tmp_path / 'out'}",
        ]
    )
    assert code == 2, err
    assert f"sppo-bench: cannot start: ray.address={address}: no Ray head node answers" in err
    assert wall < 60, wall  # the probe's 5 s plus the imports of a loaded machine
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]  # no warm start


def test_an_unreachable_tracking_database_fails_in_seconds_naming_it(tmp_path):
    uri = f"postgresql://postgres@127.0.0.1:{free_port()}/mlflow"
    code, err, wall = _cmd(
        [
            "run",
            *MICRO,
            f"tracking.uri={uri}",
            f"cache_dir={tmp_path / 'cache'}",
            f"output_dir={tmp_path / 'out'}",
        ]
    )
    assert code == 2, err
    assert "sppo-bench: cannot start: tracking.uri=postgresql" in err
    assert "cannot connect" in err and "127.0.0.1" in err
    assert wall < 60, wall
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_a_missing_postgresql_driver_names_the_extra(monkeypatch):
    import importlib.util

    from benchmarks.telemetry.store import PreflightError, check_tracking_uri, database_uri

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name.startswith("psycopg") else real(name, *a),
    )
    with pytest.raises(PreflightError, match=r"pip install 'sppo-bench\[cluster\]'"):
        check_tracking_uri("postgresql://u@127.0.0.1:5432/db")
    assert database_uri("postgresql://u@h/db") == "postgresql://u@h/db"
    monkeypatch.undo()
    assert database_uri("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"  # psycopg 3
    assert database_uri("sqlite:///x.db") == "sqlite:///x.db"


@pytest.mark.slow  # a 2-node cluster and four runs on its 2 CPUs: ~1 min on 2 loaded cores
def test_a_ray_cluster_reproduces_the_one_process_suite(micro_suite, cluster, tmp_path, caplog):
    """The micro suite as Ray tasks on two nodes, from an empty warm-start cache: the warm start
    is built in a task and reaches the runs through the object store; every number matches
    the one-process suite's, and the tasks' log records reach this process's handlers."""
    serial, _ = micro_suite
    cfg = compose_config(
        [
            *MICRO,
            "jobs=ray",
            f"ray.address={cluster.address}",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
            f"cache_dir={tmp_path / 'cache'}",
            f"output_dir={tmp_path / 'out'}",
        ]
    )
    with caplog.at_level(logging.INFO):
        par = run_suite(cfg, progress=False)
    assert [(r.algorithm, r.seed) for r in par.runs] == [(r.algorithm, r.seed) for r in serial.runs]
    for a, b in zip(par.runs, serial.runs, strict=True):
        assert a.status == b.status == "FINISHED"
        assert (a.steps, a.start_accuracy, a.final_accuracy) == (
            b.steps,
            b.start_accuracy,
            b.final_accuracy,
        )
    assert par.warmstart["0"]["val_accuracy"] == serial.warmstart["0"]["val_accuracy"]
    assert par.warmstart["0"]["cached"] is False  # trained in a task, not read from a cache
    hp, hs = histories(par, tmp_path / "par.json"), histories(serial, tmp_path / "serial.json")
    assert sorted(hp) == sorted(hs) == sorted(f"{r.algorithm}-s{r.seed}" for r in serial.runs)
    for run in hs:
        assert sorted(hp[run]) == sorted(hs[run]), run
        assert len(hp[run]) > 20, run
        for key in hs[run]:
            assert hp[run][key] == hs[run][key], (run, key)
    ip, iserial = identity(par, tmp_path / "par"), identity(serial, tmp_path / "serial")
    assert ip.keys() == iserial.keys()
    for run in iserial:
        for part in ("status", "name", "params", "tags", "tables"):
            assert ip[run][part] == iserial[run][part], (run, part)
    params = MlflowClient(par.tracking_uri).get_run(par.runs[0].run_id).data.params
    assert (params["jobs"], params["ray.address"]) == ("ray", cluster.address)
    remote = [r for r in caplog.records if r.process != os.getpid()]
    assert any(r.name == "benchmarks.training.warmstart" for r in remote)


def _checkpoints(out: Path) -> list[Path]:
    return sorted(out.glob("checkpoints/*/*/checkpoint.pt"))


@pytest.mark.slow  # its own cluster, a node removed mid-run: ~1.5 min each on 2 loaded cores
@pytest.mark.parametrize("shared", [True, False], ids=["shared_output_dir", "local_output_dir"])
def test_a_node_removed_while_its_runs_train(micro_suite, tmp_path, shared):
    """The micro suite's four runs train one after the other on the one worker node (the head
    has no CPU for tasks). Once a run has saved a checkpoint, that node is removed with its
    processes and objects, and another joins: Ray runs the lost tasks again there (the warm
    start is rebuilt from its lineage), and the interrupted run continues its own MLflow run,
    from its checkpoint where ``output_dir`` is shared, from the start where it was the dead
    node's own (its checkpoints are deleted with it). Either way the suite ends with every run
    once, FINISHED, and every metric history equal to the one-process suite's: no point lost,
    none twice."""
    serial, _ = micro_suite
    with ray_cluster(nodes=1, cpus=0, _system_config=FAST_FAILURE_DETECTION) as cluster:
        doomed = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
        out = tmp_path / "out"
        script = tmp_path / "driver.py"
        script.write_text(
            textwrap.dedent(
                f"""
                import logging, sys
                sys.path[:0] = [{str(REPO)!r}, {str(REPO / "tests" / "support")!r}]
                from testkit.suites import MICRO
                from benchmarks.config import compose_config
                from benchmarks.suite.run import run_suite

                logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
                cfg = compose_config([*MICRO, "jobs=ray", "ray.address={cluster.address}",
                                      "trainer.checkpoint_every=1", "tracking.uri={uri}",
                                      "cache_dir={tmp_path / "cache"}", "output_dir={out}"])
                result = run_suite(cfg, progress=False)
                print("STATUSES", [r.status for r in result.runs])
                """
            )
        )
        driver = subprocess.Popen(
            [sys.executable, str(script)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            deadline = time.monotonic() + 300
            while not _checkpoints(out) and driver.poll() is None:
                assert time.monotonic() < deadline, "no run saved a checkpoint"
                time.sleep(0.1)
            assert driver.poll() is None, driver.stdout.read()
            remove_node(cluster, doomed)  # with every process it ran
            if not shared:  # what an output_dir on the dead node's own disk loses with it
                shutil.rmtree(out / "checkpoints")
            cluster.add_node(num_cpus=1)
            log_text, _ = driver.communicate(timeout=400)
        finally:
            if driver.poll() is None:
                driver.kill()
        assert driver.returncode == 0, log_text
        assert f"STATUSES {['FINISHED'] * len(serial.runs)}" in log_text, log_text
        assert ("resumed from" in log_text) == shared, log_text  # continued its checkpoint
        for line in log_text.splitlines():  # what happened (shown with -s)
            if any(w in line for w in ("warm start", "resumed from", "failed", "died")):
                print(line[:300])
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(serial.experiment)
    parents = client.search_runs([exp.experiment_id], "tags.`sppo_bench.role` = 'suite'")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    children = ckpt.child_runs(client, exp.experiment_id, parents[0].info.run_id)
    every = client.search_runs(
        [exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parents[0].info.run_id}'"
    )
    assert Counter((r.data.tags["algorithm"], r.data.tags["seed"]) for r in every) == Counter(
        {(r.algorithm, str(r.seed)): 1 for r in serial.runs}
    )  # every (algorithm, seed) exactly once
    assert {r.info.status for r in children.values()} == {"FINISHED"}
    hk = histories(
        SimpleNamespace(tracking_uri=uri, experiment=serial.experiment), tmp_path / "killed.json"
    )
    hs = histories(serial, tmp_path / "serial.json")
    assert sorted(hk) == sorted(hs) and len(hk) == 4
    assert hk == hs
    assert _checkpoints(out) == []  # each FINISHED run removed its checkpoint
