"""Real services a test starts for itself and stops after: a Ray cluster of several nodes on this
machine, and a PostgreSQL server in a temporary directory on a loopback port.

Without Ray or PostgreSQL's server binaries (Debian's ``postgresql`` package; ``.ci/run``
installs it) a test that needs them is skipped on a laptop and fails under ``CI``
(:func:`testkit.paths.skip_or_fail`).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from testkit.paths import REPO, require_module, skip_or_fail

__all__ = ["create_database", "free_port", "pg_bin", "postgres_server", "ray_cluster"]


def free_port() -> int:
    """A TCP port nothing listens on now, on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def ray_cluster(nodes: int = 2, cpus: int = 1, **head_args: Any) -> Iterator[Any]:
    """A Ray cluster of ``nodes`` nodes of ``cpus`` CPUs each, all on this machine (the head is
    the first; ``head_args`` are more of its settings), without dashboards; shut down after. Its
    workers import this checkout: the driver's working directory is on their path, and it is the
    repository root while the cluster is up."""
    require_module("ray")
    from ray.cluster_utils import Cluster

    cwd = os.getcwd()
    os.chdir(REPO)  # Ray puts the driver's working directory on its workers' sys.path
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": cpus, "include_dashboard": False, **head_args},
    )
    try:
        for _ in range(nodes - 1):
            cluster.add_node(num_cpus=cpus)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
        os.chdir(cwd)


def remove_node(cluster: Any, node: Any) -> None:
    """Remove ``node`` from ``cluster`` as a machine that dies does: every process it started is
    gone when this returns. Ray's ``Cluster.remove_node`` kills the node's raylet, but a worker
    notices that only later (0.7 s on an idle 2-core machine, more under load) and runs on
    meanwhile: a training task could still write a checkpoint to the dead node's disk."""
    import psutil

    started = [p.process.pid for procs in node.all_processes.values() for p in procs]
    descendants = []
    for pid in started:
        with contextlib.suppress(psutil.NoSuchProcess):
            descendants += psutil.Process(pid).children(recursive=True)
    cluster.remove_node(node, allow_graceful=False)
    for proc in descendants:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    _, alive = psutil.wait_procs(descendants, timeout=30)
    assert not alive, f"processes of the removed node still alive: {alive}"


def pg_bin() -> Path | None:
    """The directory of PostgreSQL's server binaries (initdb, pg_ctl), or None."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(dirs[-1]).parent if dirs else None


def _as_server_user(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run it as the ``postgres`` system user."""
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """A fresh PostgreSQL server (``initdb`` in a temporary directory, ``pg_ctl`` on a free
    loopback port, trust authentication); yields the SQLAlchemy URI of its ``postgres``
    database, and stops the server and removes the directory after."""
    bindir = pg_bin()
    if bindir is None:
        skip_or_fail("no PostgreSQL server binaries (pg_ctl); apt-get install postgresql")
    require_module("psycopg")
    root = Path(tempfile.mkdtemp(prefix="sppo-pg-"))  # in /tmp: the server user can reach it
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
    port = free_port()
    run = {"check": True, "capture_output": True, "text": True, "timeout": 120}
    started = False
    try:
        subprocess.run(
            _as_server_user(
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ]  # fmt: skip
            ),
            **run,
        )
        opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(
            _as_server_user(
                [
                    str(bindir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-o",
                    opts,
                    "-l",
                    str(root / "log"),
                    "-w",
                    "-t",
                    "60",
                    "start",
                ]  # fmt: skip
            ),
            **run,
        )
        started = True
        uri = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
        deadline = time.monotonic() + 30
        while True:  # pg_ctl -w waits for the socket; the first connection may still race
            try:
                import psycopg

                psycopg.connect(
                    f"host=127.0.0.1 port={port} user=postgres", connect_timeout=5
                ).close()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        yield uri
    finally:
        if started:
            subprocess.run(
                _as_server_user(
                    [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]
                ),
                check=False,
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(root, ignore_errors=True)


def create_database(uri: str, name: str) -> str:
    """A new database ``name`` on the server of ``uri``; its URI."""
    import psycopg

    rest = uri.split("://", 1)[1]
    hostport = rest.split("@", 1)[1].split("/", 1)[0]
    host, port = hostport.rsplit(":", 1)
    with psycopg.connect(f"host={host} port={port} user=postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{uri.rsplit('/', 1)[0]}/{name}"
