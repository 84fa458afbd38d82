"""The headroom checks: each threshold decides on its own side, failed runs do not count, and an
unmeasured start difficulty never passes."""

from __future__ import annotations

import math

import pytest

from benchmarks.suite.headroom import THRESHOLDS, headroom
from benchmarks.suite.run_one import RunSummary


def _run(alg: str, start: float, final: float, status: str = "FINISHED") -> RunSummary:
    return RunSummary(alg, 0, "r", status, start_accuracy=start, final_accuracy=final)


def _by_name(checks):
    return {c.name: c for c in checks}


def test_values_are_the_means_the_docstring_names():
    runs = [
        _run("a", 0.2, 0.5),
        _run("a", 0.4, 0.9),
        _run("b", 0.3, 0.6),
        _run("c", 0.0, 1.0, "FAILED"),
    ]
    ws = {"0": {"difficulty": {"mid_fraction": 0.5}}, "1": {"difficulty": {"mid_fraction": 0.3}}}
    c = _by_name(headroom(runs, ws))
    assert c["start_accuracy"].value == pytest.approx((0.2 + 0.4 + 0.3) / 3, abs=1e-15)
    assert c["best_final_accuracy"].value == pytest.approx(0.7, abs=1e-15)  # a: (0.5 + 0.9) / 2
    assert c["best_gain"].value == pytest.approx(0.4, abs=1e-15)  # a: (0.3 + 0.5) / 2
    assert c["start_mid_fraction"].value == pytest.approx(0.4, abs=1e-15)
    assert all(x.holds for x in c.values())  # the FAILED run's 1.0 is not counted


@pytest.mark.parametrize(
    ("name", "runs", "mid"),
    [
        ("start_accuracy", [_run("a", 0.6, 0.9)], 0.5),
        ("best_final_accuracy", [_run("a", 0.2, 0.95)], 0.5),  # 0.95 itself saturates
        ("best_gain", [_run("a", 0.3, 0.44)], 0.5),
        ("start_mid_fraction", [_run("a", 0.3, 0.6)], 0.29),
    ],
)
def test_each_check_fails_past_its_threshold(name, runs, mid):
    c = _by_name(headroom(runs, {"0": {"difficulty": {"mid_fraction": mid}}}))
    assert not c[name].holds and "FAIL" in c[name].line()
    assert all(x.holds for n, x in c.items() if n != name)
    assert c[name].threshold == THRESHOLDS[name][0]


def test_no_difficulty_measured_never_passes():
    c = _by_name(headroom([_run("a", 0.3, 0.6)], {"0": {"steps": 10}}))
    assert math.isnan(c["start_mid_fraction"].value) and not c["start_mid_fraction"].holds
