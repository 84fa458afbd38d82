"""The hang guard of ``make mutants`` (``scripts/mutation_report.py``, loaded into mutmut's pytest
as a plugin): under a mutant, a test that burns far more CPU than it did unmutated fails, so a
mutant that loops is killed in seconds; outside a mutant run it never fires.

Each case runs a real pytest in a subprocess with the plugin, in a scratch folder holding a
``mutmut-stats.json`` of measured durations, as mutmut's workers do. The allowances are shrunk by
a conftest (the real ones are tens of seconds) so that the test takes a few seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

CONFTEST = """
import os

import mutation_report

mutation_report.HANG_FACTOR = 10.0
mutation_report.HANG_FLOOR_S = 0.2
mutation_report.HANG_SETUP_S = 0.4
mutation_report.HANG_WALL_S = float(os.environ["TEST_HANG_WALL_S"])
"""

TESTS = """
import time

import pytest


def _burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


@pytest.fixture
def slow_fixture():
    _burn(0.8)


def test_loops():
    while True:
        pass


def test_blocked():
    time.sleep(60)  # no CPU: only the wall-clock watchdog ends it


def test_measured_slow():
    _burn(0.3)  # measured at 0.05 s: 10x is 0.5 s of CPU


def test_slower_than_measured():
    _burn(0.8)


def test_slow_fixture(slow_fixture):
    pass
"""


def _pytest(
    tmp_path: Path, mutant: str | None, *tests: str, wall: float = 60.0
) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_cases.py").write_text(TESTS)
    durations = {
        "test_cases.py::test_measured_slow": 0.05,
        "test_cases.py::test_slower_than_measured": 0.05,
    }
    (tmp_path / "mutmut-stats.json").write_text(json.dumps({"duration_by_test": durations}))
    env = {k: v for k, v in os.environ.items() if k != "MUTANT_UNDER_TEST"}
    env["PYTHONPATH"] = os.pathsep.join([str(SCRIPTS), env.get("PYTHONPATH", "")])
    env["TEST_HANG_WALL_S"] = str(wall)
    if mutant is not None:
        env["MUTANT_UNDER_TEST"] = mutant
    cmd = [sys.executable, "-m", "pytest", "-p", "mutation_report", "-p", "no:cacheprovider"]
    cmd += ["-q", "-rf", *(f"test_cases.py::{t}" for t in tests)]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_looping_test_fails_under_a_mutant(tmp_path):
    out = _pytest(tmp_path, "pkg.x_f__mutmut_3", "test_loops")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "MutantHang: the test ran past its CPU allowance under a mutant" in out.stdout


def test_a_test_blocked_in_a_wait_ends_as_a_timeout_under_a_mutant(tmp_path):
    """A wait burns no CPU: the watchdog sends SIGXCPU, which mutmut files as a timeout."""
    out = _pytest(tmp_path, "pkg.x_f__mutmut_3", "test_blocked", wall=1.0)
    assert out.returncode == -signal.SIGXCPU, out.stdout + out.stderr


@pytest.mark.parametrize(
    ("test", "passes"),
    [
        ("test_measured_slow", True),  # within 10x its measured time
        ("test_slower_than_measured", False),  # past it
        ("test_slow_fixture", False),  # a fixture past the setup allowance
    ],
)
def test_the_allowance_is_ten_times_the_measured_cpu_time(tmp_path, test, passes):
    out = _pytest(tmp_path, "pkg.x_f__mutmut_3", test)
    assert (out.returncode == 0) == passes, out.stdout + out.stderr
    assert ("MutantHang" in out.stdout) != passes


@pytest.mark.slow  # the guard's sleep, measured: ~5 s each
@pytest.mark.parametrize("mutant", [None, "", "stats"])
def test_the_guard_sleeps_outside_a_mutant(tmp_path, mutant):
    """mutmut's stats and clean runs (and any run outside mutmut) are unguarded:
    a slow test there is slow, not a hang."""
    tests = ("test_slower_than_measured", "test_slow_fixture")
    out = _pytest(tmp_path, mutant, *tests)
    assert out.returncode == 0, out.stdout + out.stderr
