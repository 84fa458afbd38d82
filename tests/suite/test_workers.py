"""A suite in worker processes (``jobs``) logs exactly what the one-process suite logs."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from algorithms import ConfigError
from analysis import metrics as M
from benchmarks.config import compose_config
from benchmarks.suite.jobs import WORKER_BYTES, available_memory, resolve_jobs, usable_cpus
from benchmarks.suite.plan import validate
from benchmarks.suite.run import run_suite
from benchmarks.suite.workers import parallel_blocker
from testkit.parity import histories, identity
from testkit.paths import REPO
from testkit.suites import MICRO


@pytest.mark.slow  # two spawned workers: ~40-60 s on 2 loaded cores
def test_two_workers_reproduce_the_one_process_suite(micro_suite, tmp_path, caplog):
    """Same config, its own store and an empty warm-start cache: the warm start is trained in a
    worker, the four runs are split over two processes, and every number matches."""
    serial, _ = micro_suite
    cfg = compose_config(
        [
            *MICRO,
            "jobs=2",
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
        for key in (M.COMPUTE_ROLLOUT_SAMPLES, M.COMPUTE_ROLLOUT_TOKENS, M.COMPUTE_FLOPS):
            assert a.metrics[key] == b.metrics[key], key
    assert par.warmstart["0"]["val_accuracy"] == serial.warmstart["0"]["val_accuracy"]
    assert par.warmstart["0"]["cached"] is False  # trained in a worker, not read from a cache
    # Every deterministic metric's every point (all but wall time and memory), bit for bit.
    hp, hs = histories(par, tmp_path / "par.json"), histories(serial, tmp_path / "serial.json")
    assert sorted(hp) == sorted(hs) == sorted(f"{r.algorithm}-s{r.seed}" for r in serial.runs)
    for run in hs:
        assert sorted(hp[run]) == sorted(hs[run]), run
        assert len(hp[run]) > 20, run  # train/, critic/, compute/, eval/, grader/ histories
        for key in hs[run]:
            assert hp[run][key] == hs[run][key], (run, key)
    # Every param, tag and table artifact, but those that name the store, paths and run ids.
    ip, iserial = identity(par, tmp_path / "par"), identity(serial, tmp_path / "serial")
    assert ip.keys() == iserial.keys()
    for run in iserial:
        for part in ("status", "name", "params", "tags", "tables"):
            assert ip[run][part] == iserial[run][part], (run, part)
    assert iserial["sppo-s0"]["tables"].keys() == {
        "critic_calibration.json",
        "eval_samples/arith_start.json",
        "eval_samples/arith_final.json",
        *(f"eval_items/arith_f{f:.6f}.json" for f in (0.0, 0.5, 1.0)),  # one per eval
    }
    par_params = MlflowClient(par.tracking_uri).get_run(par.runs[0].run_id).data.params
    assert (par_params["jobs"], par_params["tracking.uri"]) == ("2", par.tracking_uri)
    assert par.plot is not None and par.plot.exists()
    # the workers' log records reach this process's handlers
    worker_records = [r for r in caplog.records if r.processName != "MainProcess"]
    assert any(r.name == "benchmarks.training.warmstart" for r in worker_records)


def test_jobs_field_is_validated():
    for bad in ("0", "two", "-1", "1.5"):
        cfg = compose_config([*MICRO, f"jobs={bad}"])
        with pytest.raises(ConfigError, match=r"jobs=.*allowed 'auto' or an integer >= 1"):
            validate(cfg)
    assert resolve_jobs("auto", 1) == 1
    assert resolve_jobs("auto", 12, available=3 * WORKER_BYTES // 2) == 1  # memory for one
    assert resolve_jobs("auto", 12, available=64 * WORKER_BYTES) == min(usable_cpus(), 12)
    assert available_memory() > 0  # read from this machine's kernel
    assert 1 <= resolve_jobs("auto", 64) <= 64
    assert resolve_jobs(8, 3) == 3  # never more processes than runs
    assert resolve_jobs("2", 12) == 2


def test_what_keeps_a_suite_in_one_process():
    plan = validate(compose_config(MICRO))
    algs = plan.algorithms
    assert parallel_blocker(plan, on_eval=False) is None
    assert "sweep" in parallel_blocker(plan, on_eval=True)
    real = validate(compose_config([*MICRO, "model=hf", "model.name_or_path=some/model"]))
    assert "checkpoint" in parallel_blocker(real, on_eval=False)
    gpu = validate(compose_config([*MICRO, "engine.device=cuda"]))
    assert "engine.device" in parallel_blocker(gpu, on_eval=False)

    class Local(type(algs["grpo"])):  # a class a spawned worker cannot import
        pass

    local = Local.__new__(Local)
    local.__dict__.update(algs["grpo"].__dict__)
    why = parallel_blocker(replace(plan, algorithms={**algs, "local": local}), on_eval=False)
    assert why is not None and "local" in why


def _children(pid: int) -> list[int]:
    """Live child processes of ``pid``, read from /proc (Linux, as CI)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


@pytest.mark.slow  # a two-worker suite killed mid-run: ~80 s
def test_killing_the_suite_kills_its_workers(tmp_path):
    """``kill -9`` of a suite must not leave workers writing its runs (``resume=auto`` would
    then continue runs that are still being written)."""
    script = tmp_path / "suite.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(REPO / "tests" / "support")!r})
            from testkit.suites import MICRO
            from benchmarks.config import compose_config
            from benchmarks.suite.run import run_suite

            if __name__ == "__main__":
                cfg = compose_config([*MICRO, "jobs=2", "tracking.uri=sqlite:///{tmp_path}/m.db",
                                      "cache_dir={tmp_path}/cache", "output_dir={tmp_path}/out"])
                run_suite(cfg, progress=False)
            """
        )
    )
    proc = subprocess.Popen([sys.executable, str(script)], cwd=REPO)
    try:
        deadline = time.monotonic() + 120
        workers: list[int] = []
        while time.monotonic() < deadline and len(workers) < 2:
            time.sleep(0.5)
            workers = [p for p in _children(proc.pid) if "spawn_main" in _cmdline(p)]
        assert len(workers) == 2, "the suite did not start its two workers"
        time.sleep(3)  # let them get into their initialiser and tasks
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in workers):
            time.sleep(0.2)
        alive = [p for p in workers if Path(f"/proc/{p}/stat").exists() and not _zombie(p)]
        assert alive == [], f"workers {alive} outlived the suite"
    finally:
        if proc.poll() is None:
            proc.kill()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.slow  # spawned workers, one failing: ~30 s
def test_an_error_in_a_worker_reaches_the_user_as_its_message(tmp_path, monkeypatch, capsys):
    """A worker's start-up fails (a plugin that raises only in a spawned process): the user reads
    that exception's message, not ``BrokenProcessPool`` and not a traceback."""
    (tmp_path / "boom_in_worker.py").write_text(
        "import multiprocessing\n"
        "if multiprocessing.parent_process() is not None:\n"
        "    raise ValueError('boom: raised in a worker process')\n"
    )
    monkeypatch.chdir(tmp_path)  # plugins are imported from the working directory
    monkeypatch.syspath_prepend(str(tmp_path))
    from benchmarks.cli import main

    code = main(
        [
            "run",
            *MICRO,
            "jobs=2",
            "algorithm=[grpo,sppo]",  # two runs: two workers
            "plugins=[boom_in_worker]",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
            f"cache_dir={tmp_path / 'cache'}",
            f"output_dir={tmp_path / 'out'}",
        ]
    )
    err = capsys.readouterr().err
    assert code == 1, err
    assert "sppo-bench: run failed: ValueError: boom: raised in a worker process" in err
    assert "BrokenProcessPool" not in err and "Traceback" not in err


@pytest.mark.slow  # a one-process suite and a two-worker one: ~1-2 min on 2 loaded cores
def test_two_workers_reproduce_the_one_process_suite_in_bf16(tmp_path):
    """``precision=bf16`` (forced: emulated on a CPU without it, so this runs everywhere): the
    warm start and every run in workers match the one-process suite bit for bit, as in fp32."""
    results = {}
    for jobs in (1, 2):
        root = tmp_path / f"jobs{jobs}"
        cfg = compose_config(
            [
                *MICRO,
                "precision=bf16",
                "algorithm=[sppo,grpo,dapo]",  # MICRO configures dapo: it is in the suite
                f"jobs={jobs}",
                f"tracking.uri=sqlite:///{root / 'mlflow.db'}",
                f"cache_dir={root / 'cache'}",
                f"output_dir={root / 'out'}",
            ]
        )
        results[jobs] = run_suite(cfg, progress=False)
    one, two = results[1], results[2]
    assert [r.status for r in one.runs] == [r.status for r in two.runs] == ["FINISHED"] * 3
    params = MlflowClient(one.tracking_uri).get_run(one.runs[0].run_id).data.params
    assert params["precision"] == "bf16"
    h1, h2 = histories(one, tmp_path / "one.json"), histories(two, tmp_path / "two.json")
    assert sorted(h1) == sorted(h2) and len(h1) == 3
    for run in h1:
        assert h1[run] == h2[run], run
