"""Sweeps on a real Ray cluster (two nodes on this machine) against a real PostgreSQL server
(started in a temporary directory): Optuna's storage and MLflow's store both in PostgreSQL,
trials as Ray tasks, and several ``--resume`` processes sharing one storage."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient

from analysis import metrics as M
from sweeps import TAG_STUDY, TAG_TRIAL, parse_spec, run_sweep
from sweeps.cli import main as sweep_main
from testkit.paths import REPO
from testkit.services import create_database, free_port, postgres_server, ray_cluster
from testkit.suites import MICRO

pytestmark = pytest.mark.slow  # Ray clusters and a PostgreSQL server: left out of make test-fast

BUDGET = ["budget.limit=64", "budget.eval_fractions=[0.0,0.5,1.0]"]
LR = {"type": "float", "low": 3e-5, "high": 3e-4, "log": True}


@pytest.fixture(scope="module")
def pg():
    """A PostgreSQL server for this module; each test makes its own databases on it."""
    with postgres_server() as uri:
        yield uri


@pytest.fixture(scope="module")
def cluster():
    with ray_cluster(nodes=2, cpus=1) as c:
        yield c


def _spec(tmp_path: Path, cache: Path, trials: int) -> dict:
    return {
        "algorithms": ["sppo"],
        "trials": trials,
        "base_overrides": [
            *MICRO,
            f"cache_dir={cache}",
            f"output_dir={tmp_path / 'out'}",
            "task.eval_size=64",
            "threads=1",
        ],
        "budget": BUDGET,
        "search_space": {"algorithm.{alg}.actor_lr": dict(LR)},
        "objective": {"metric": "eval/arith/accuracy", "direction": "maximize"},
        "sampler": "random",
        "pruner": "none",
        "seed": 0,
    }


def _mlflow_database(pg: str, name: str, experiment: str, artifacts: Path) -> str:
    """A new MLflow database on the server ``pg`` whose experiment ``experiment`` keeps its
    artifacts in ``artifacts`` (a database store's default is ``./mlruns`` of the working
    directory, here the repository)."""
    from benchmarks.telemetry.tracking import prepare_store

    uri = create_database(pg, name)
    MlflowClient(uri).create_experiment(experiment, artifact_location=artifacts.as_uri())
    prepare_store(uri, experiment)  # tags it as the suite would
    return uri


def _complete_values_are_final_accuracies(storage: str, tracking: str, study: str) -> int:
    """Every COMPLETE trial's value (in Optuna's storage) is its MLflow child run's last logged
    accuracy (in MLflow's store); returns how many trials were checked."""
    client = MlflowClient(tracking)
    key = M.eval_metric("arith", "accuracy")
    exp = client.get_experiment_by_name(f"sppo-bench-sweep-{study}")
    n = 0
    for t in optuna.load_study(study_name=study, storage=storage).trials:
        assert t.state.name == "COMPLETE", (t.number, t.state, t.user_attrs.get("error"))
        (run,) = client.search_runs(
            [exp.experiment_id],
            filter_string=f"tags.{TAG_STUDY} = '{study}' AND tags.{TAG_TRIAL} = '{t.number}'",
        )
        assert t.user_attrs["mlflow_run_id"] == run.info.run_id
        history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        assert t.value == history[-1][1], (t.number, t.value, history)
        n += 1
    return n


def test_an_unreachable_storage_fails_in_seconds_naming_it(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    import yaml

    spec.write_text(yaml.safe_dump(_spec(tmp_path, tmp_path / "cache", 1)))
    storage = f"postgresql://postgres@127.0.0.1:{free_port()}/optuna"
    t0 = time.perf_counter()
    code = sweep_main(
        [str(spec), "--storage", storage, "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"--storage={storage.replace('postgresql://', 'postgresql+psycopg://')}" in err
    assert "cannot connect" in err
    assert time.perf_counter() - t0 < 30
    assert not (tmp_path / "m.db").exists()  # nothing was created


def test_an_unreachable_ray_address_fails_the_sweep_in_seconds(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    import yaml

    spec.write_text(yaml.safe_dump(_spec(tmp_path, tmp_path / "cache", 1)))
    address = f"127.0.0.1:{free_port()}"
    t0 = time.perf_counter()
    code = sweep_main(
        [
            str(spec),
            "--storage",
            f"sqlite:///{tmp_path / 'o.db'}",
            "--tracking-uri",
            f"sqlite:///{tmp_path / 'm.db'}",
            "--ray-address",
            address,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"--ray-address={address}: no Ray head node answers" in err
    assert time.perf_counter() - t0 < 30
    assert not (tmp_path / "o.db").exists() and not (tmp_path / "m.db").exists()


@pytest.mark.slow  # a 2-node cluster, a PostgreSQL server and 4 micro trials: ~1 min on 2 cores
def test_a_sweep_on_ray_with_two_workers_on_postgresql(pg, cluster, tmp_path, caplog):
    """Four trials, two in flight as Ray tasks; Optuna's storage and MLflow's store are two
    databases of one PostgreSQL server. Each trial's value is its child run's final accuracy,
    read across the two stores."""
    storage = create_database(pg, "optuna_ray")
    tracking = _mlflow_database(pg, "mlflow_ray", "sppo-bench-sweep-pgray", tmp_path / "art")
    spec = parse_spec(_spec(tmp_path, tmp_path / "cache", 4), name="pgray")
    mlruns_before = (REPO / "mlruns").exists()  # another test's leak is not this sweep's
    with caplog.at_level(logging.INFO):
        result = run_sweep(
            spec,
            workers=2,
            storage=storage.replace("+psycopg", ""),  # as a user writes it
            tracking_uri=tracking,
            ray_address=cluster.address,
        )
    assert any("joined the Ray cluster" in r.getMessage() for r in caplog.records)
    assert _complete_values_are_final_accuracies(storage, tracking, "pgray") == 4
    client = MlflowClient(tracking)
    parent = client.get_run(result.parent_run_id)
    assert parent.info.status == "FINISHED"
    assert [b.complete for b in result.best] == [4]
    assert (tmp_path / "art").is_dir()
    assert mlruns_before or not (REPO / "mlruns").exists()


@pytest.mark.slow  # two sweep processes of micro trials: ~1 min on 2 cores
def test_several_resume_processes_share_one_postgresql_storage(pg, tmp_path):
    """A sweep runs one trial; then two ``sweep --resume --trials 5`` processes start at once
    against the same PostgreSQL storage (as on two machines). Neither marks the other's running
    trials FAIL, a process whose study is full runs nothing more, and the study ends with the
    five trials asked for (a sixth only if both took the last slot at the same instant), every
    one COMPLETE with its child run's final accuracy as its value."""
    import yaml

    storage = create_database(pg, "optuna_res")
    tracking = _mlflow_database(pg, "mlflow_res", "sppo-bench-sweep-share", tmp_path / "art")
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(_spec(tmp_path, tmp_path / "cache", 1)))
    args = [str(spec), "--storage", storage, "--tracking-uri", tracking, "--study-name", "share"]
    assert sweep_main([*args, "--trials", "1"]) == 0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SWEEP, *args, "--trials", "5", "--resume"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=400)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(logs)
    trials = optuna.load_study(study_name="share", storage=storage).trials
    assert len(trials) in (5, 6), [t.state.name for t in trials]
    assert _complete_values_are_final_accuracies(storage, tracking, "share") == len(trials)
    assert not any("marked FAIL" in text for text in logs), logs
    for text in logs:  # what each process found to do and did (shown with -s)
        for line in text.splitlines():
            if any(w in line for w in ("trials to run", "trial ", "runs none")):
                print(line[:200])


#: ``sppo-bench sweep`` in a fresh process, importing this checkout, logging at INFO.
SWEEP = "import sys; from benchmarks.cli import main; sys.exit(main(['sweep', *sys.argv[1:]]))"
