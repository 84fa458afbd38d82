"""The leaderboard's intervals on simulated boards with a known truth: each printed method holds
its level where the method it replaced fell short, and the page prints what the simulation
measured.

400 boards a cell: the Monte Carlo standard error of a coverage near 0.95 is 1.1 points, so a
bound 3 points under the level fails a method that truly reaches it with probability about
0.3%."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from analysis.board_coverage import (
    DESIGNS,
    board_truth,
    coverage,
    coverage_lines,
    coverage_table,
)

SUITES = 400
SLACK = 0.03
BY_NAME = {d.name: d for d in DESIGNS}


@pytest.fixture(scope="module")
def near_ceiling() -> dict:
    return coverage(BY_NAME["arith-like (near the ceiling)"], 10, SUITES, reps=400, seed=3)


@pytest.fixture(scope="module")
def tied() -> dict:
    return coverage(BY_NAME["all tied"], 10, SUITES, reps=400, seed=4)


def test_truth_of_equal_offsets_is_exactly_equal() -> None:
    truth = board_truth(BY_NAME["chain_sum-like"])
    offsets = np.asarray(BY_NAME["chain_sum-like"].offsets)
    assert truth["mean"][1] == truth["mean"][2]  # both -0.2
    assert truth["rank"][0] == 15.0 and truth["rank"][14] == 1.0
    # the three algorithms at 0 share rank 1 + the six above them
    assert truth["rank"][offsets == 0.0].tolist() == [7.0, 7.0, 7.0]
    assert truth["p_improve"][6] == 0.5  # the reference against itself
    assert np.all(np.diff(truth["mean"]) >= 0)


def test_rank_sets_hold_the_true_rank_where_a_bootstrap_of_ranks_does_not(tied) -> None:
    assert tied["rank sets"]["min"] >= 0.95 - SLACK
    # with every algorithm tied each true rank is 1, which resampled ranks rarely reach
    assert tied["rank bootstrap"]["mean"] < 0.8


def test_clopper_pearson_holds_its_level(near_ceiling, tied) -> None:
    for cov in (near_ceiling, tied):
        assert cov["p_improve clopper-pearson"]["min"] >= 0.95 - SLACK


def test_studentized_bootstrap_corrects_the_ceiling_skew(near_ceiling) -> None:
    printed, student, before = (
        near_ceiling[k]["mean"] for k in ("mean printed", "mean t", "mean bootstrap")
    )
    assert printed > student + 0.02 and printed > before + 0.03
    assert printed >= 0.90


def test_symmetric_starts_give_the_level(tied) -> None:
    # all tied is the chain_sum-like design without offsets: normal starts, logit level -0.55
    assert tied["mean printed"]["mean"] >= 0.95 - SLACK
    assert tied["mean t"]["mean"] >= 0.95 - SLACK
    assert tied["iqm bootstrap"]["mean"] >= 0.90 - SLACK


def test_the_page_prints_the_file_the_simulation_writes(tmp_path, monkeypatch) -> None:
    import analysis.board_coverage as bc

    small = (replace(DESIGNS[0], name="tiny"),)
    monkeypatch.setattr(bc, "DESIGNS", small)
    table = coverage_table(starts=(5,), suites=20, reps=50)
    out = tmp_path / "simulation" / "leaderboard_coverage.json"
    out.parent.mkdir()
    out.write_text(json.dumps(table))
    lines = coverage_lines(tmp_path)
    row = next(line for line in lines if line.startswith("| tiny | 5 |"))
    cov = table["cells"][0]["coverage"]["rank sets"]
    assert f"{cov['mean']:.3f} ({cov['min']:.3f})" in row
    assert "20 boards a cell" in " ".join(lines)
    assert coverage_lines(tmp_path / "nowhere") == []
