"""The one executor (``benchmarks/suite/executor.py``) on its own: real spawned pools and a real
local Ray cluster, tasks that chain, fail, die and return two objects. The suite's and the
sweeps' own tests cover it as they use it (``test_workers.py``, ``test_cluster.py``,
``tests/sweeps``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.suite.executor import Pool, RayCluster, Task, TaskLost, drive
from testkit import executor_tasks as T
from testkit.paths import REPO


def _collect(executor, tasks, **kw) -> dict:
    out: dict = {}

    def on_done(task, value, others):
        out[task.label] = value
        return []

    drive(executor, tasks, on_done, **kw)
    return out


def test_a_pool_runs_each_task_and_the_tasks_its_results_ask_for(tmp_path):
    marker = tmp_path / "set_up"
    seen: list = []

    def on_done(task, value, others):
        seen.append((task.label, value))
        if task.label[0] == "square":  # each square is then added to 1, as a second task
            return [Task(T.add, (value, 1), ("add", task.label[1]))]
        return []

    with Pool(2, T.set_up, (str(marker),)) as pool:
        drive(pool, [Task(T.square, (x,), ("square", x)) for x in range(5)], on_done)
        ids = _collect(pool, [Task(T.whoami, (x,), x) for x in range(6)])
    assert sorted(seen) == sorted(
        [(("square", x), x * x) for x in range(5)] + [(("add", x), x * x + 1) for x in range(5)]
    )
    pids = {pid for _, pid, _ in ids.values()}
    assert all(count == 1 for _, _, count in ids.values())  # set up once, in each worker
    assert pids <= {int(p) for p in marker.read_text().split()} and os.getpid() not in pids
    assert sorted(ids) == list(range(6)) and all(ids[x][0] == x for x in ids)


def test_a_tasks_error_ends_the_loop_as_itself_unless_on_error_takes_it(tmp_path):
    with Pool(2) as pool:
        with pytest.raises(ValueError, match="planted"):
            _collect(pool, [Task(T.fail, ("planted",), "f"), Task(T.square, (3,), "s")])
        errors: list = []
        out = _collect(
            pool,
            [Task(T.fail, ("planted",), "f"), Task(T.square, (3,), "s")],
            on_error=lambda task, e: errors.append((task.label, str(e))),
        )
    assert out == {"s": 9} and errors == [("f", "planted")]


def test_a_dead_worker_is_a_lost_task_not_a_broken_pool_traceback():
    with Pool(1) as pool, pytest.raises(TaskLost, match="died without reporting"):
        _collect(pool, [Task(T.die, (), "d")])
    lost: list = []
    with Pool(1) as pool:  # taken by on_error: every task the broken pool held is lost
        out = _collect(
            pool,
            [Task(T.die, (), "d"), Task(T.square, (2,), "s")],
            on_error=lambda task, e: lost.append((task.label, type(e).__name__)),
        )
    assert out == {} and sorted(lost) == [("d", "TaskLost"), ("s", "TaskLost")]


def test_in_flight_bounds_the_tasks_submitted_at_once(tmp_path):
    spans = tmp_path / "spans"
    with Pool(2) as pool:
        _collect(pool, [Task(T.span, (str(spans), 0.3), i) for i in range(3)], in_flight=1)
    times = sorted(tuple(map(float, line.split())) for line in spans.read_text().splitlines())
    assert len(times) == 3
    assert all(b[0] >= a[1] for a, b in zip(times, times[1:], strict=False))  # none overlap


def test_a_pool_task_returns_one_object():
    with Pool(1) as pool, pytest.raises(ValueError, match="returns one object, not 2"):
        _collect(pool, [Task(T.pair, (1,), "p", returns=2)])


@pytest.mark.slow  # a Ray cluster: ~20 s to start
def test_ray_sets_each_worker_up_once_and_passes_a_second_result_on(tmp_path, monkeypatch):
    """Two results of a task: the loop reads the last; the first goes, as an object reference,
    into the task it asks for next. The set-up runs once per worker, before its first task."""
    from testkit.services import ray_cluster

    # The cluster's workers import the test tasks as the driver does.
    monkeypatch.setenv("PYTHONPATH", str(REPO / "tests" / "support"))
    marker = tmp_path / "set_up"
    seen: dict = {}

    def on_done(task, value, others):
        seen[task.label] = value
        if task.label[0] == "pair":
            return [Task(T.add, (others[0], 100), ("add", task.label[1]))]
        return []

    with ray_cluster(nodes=1, cpus=2) as c:
        cluster = RayCluster(c.address, num_cpus=1, max_retries=0)
        with cluster:
            cluster.set_up(T.set_up, str(marker))
            drive(cluster, [Task(T.pair, (x,), ("pair", x), returns=2) for x in range(3)], on_done)
            ids = _collect(cluster, [Task(T.whoami, (x,), x) for x in range(4)], in_flight=2)
            with pytest.raises(ValueError, match="planted"):
                _collect(cluster, [Task(T.fail, ("planted",), "f")])
    assert seen == {
        **{("pair", x): x + 1 for x in range(3)},
        **{("add", x): x + 100 for x in range(3)},
    }
    assert all(count == 1 for _, _, count in ids.values())
    pids = {pid for _, pid, _ in ids.values()}
    assert pids <= {int(p) for p in Path(marker).read_text().split()}
