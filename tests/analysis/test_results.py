"""Results sets on real runs: the session's micro suite (start s0) and a second micro invocation
from start s1 in the same SQLite store, exported, merged as shards, imported into a fresh store
and exported again. The report read from a set must equal the report read from its store, table
for table; every bad input ends in exit 2 naming the file and the field, with nothing written.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from analysis import load_runs, write_report
from analysis.metrics import TAG_ROLE
from analysis.results import (
    MANIFEST,
    TABLES,
    ResultsError,
    export_results,
    read_results,
    results_from_store,
    write_results,
)
from benchmarks.cli import main
from testkit.suites import MICRO

REPS = 200  # bootstrap replicates of the reports compared here: equality needs no more


@pytest.fixture(scope="module")
def second_start(micro_suite, tmp_path_factory):
    """A second invocation of the micro suite from start seed 1, into a store of its own: the
    shard another machine would have run (and the session's micro store stays as other tests
    expect it: one suite run)."""
    from benchmarks.config import compose_config
    from benchmarks.suite.run import run_suite

    result, _ = micro_suite
    root = tmp_path_factory.mktemp("second_start")
    cfg = compose_config(
        [
            *MICRO,
            "seed=1",
            f"tracking.uri=sqlite:///{root / 'mlflow.db'}",
            f"cache_dir={root / 'cache'}",
            f"output_dir={root / 'out'}",
            "jobs=1",
        ]
    )
    second = run_suite(cfg, progress=False)
    assert all(r.status == "FINISHED" for r in second.runs), [r.error for r in second.runs]
    return second


@pytest.fixture(scope="module")
def shards(micro_suite, second_start, tmp_path_factory) -> tuple[Path, Path]:
    result, _ = micro_suite
    root = tmp_path_factory.mktemp("shards")
    a = export_results(
        root / "s0", tracking_uri=result.tracking_uri, parent_run_ids=[result.parent_run_id]
    )
    b = export_results(
        root / "s1",
        tracking_uri=second_start.tracking_uri,
        parent_run_ids=[second_start.parent_run_id],
    )
    return a, b


def _tables(folder: Path) -> dict[str, str]:
    """Every table a report wrote (CSV), and report.md without its title line."""
    out = {p.name: p.read_text() for p in sorted(folder.glob("*.csv"))}
    out["report.md"] = "\n".join((folder / "report.md").read_text().splitlines()[1:])
    return out


def _report(df: pd.DataFrame, out: Path, **kwargs) -> dict[str, str]:
    write_report(df, out, reps=REPS, fit_reps=5, **kwargs)
    return _tables(out)


def test_the_suite_writes_its_results_set_with_command_and_machine(micro_suite) -> None:
    result, _ = micro_suite
    assert result.results == result.output_dir / "results"
    rs = read_results([result.results])
    manifest = rs.manifests[0]
    assert manifest["machine_source"] == "recorded by the suite"
    assert manifest["machine"]["cores"] >= 1 and manifest["machine"]["cpu"]
    assert manifest["command"] != "unknown"
    assert manifest["starts"] == ["s0"] and manifest["seeds"] == [0]
    assert manifest["finished_runs"] == manifest["runs"] == len(result.runs) == 4
    assert set(rs.runs["role"]) == {"suite", "run"}


def test_report_from_the_export_equals_the_report_from_the_store(micro_suite, shards, tmp_path):
    result, _ = micro_suite
    df = load_runs(parent_run_id=result.parent_run_id, tracking_uri=result.tracking_uri)
    from_store = _report(df, tmp_path / "store")
    rs = read_results([shards[0]])
    from_set = _report(
        rs.tidy(),
        tmp_path / "set",
        items=rs.items,
        calibration=rs.calibration,
        claims=rs.claims(),
    )
    assert from_store.keys() == from_set.keys()
    assert len(from_store) > 8  # the accuracy, summary, memory, IQM ... tables
    for name in from_store:
        assert from_set[name] == from_store[name], name
    pd.testing.assert_frame_equal(rs.tidy(), df.reset_index(drop=True), check_like=False)


def test_shards_merge_by_start_into_what_both_stores_hold(
    micro_suite, second_start, shards, tmp_path
):
    result, _ = micro_suite
    rs = read_results([shards[0].parent])  # the folder of both shards
    assert rs.starts == ["s0", "s1"]
    assert len(rs.manifests) == 2
    # The merged set is the two machines' stores read as one.
    both = pd.concat(
        [
            load_runs(parent_run_id=result.parent_run_id, tracking_uri=result.tracking_uri),
            load_runs(
                parent_run_id=second_start.parent_run_id, tracking_uri=second_start.tracking_uri
            ),
        ]
    )
    both = both.sort_values(["run_id", "metric", "step"], kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(rs.tidy(), both)
    assert set(rs.items["start"]) == {"s0", "s1"}
    out = tmp_path / "merged"
    assert main(["report", "--results", str(shards[0]), str(shards[1]), "--out", str(out)]) == 0
    assert (out / "report.md").is_file() and (out / "accuracy.csv").is_file()
    # Two starts and four algorithms: the report ranks them over starts.
    board = pd.read_csv(out / "leaderboard.csv")
    assert sorted(board["algorithm"]) == ["dapo", "grpo", "ppo", "sppo"]
    assert (board["starts"] == 2).all() and (out / "performance_profile.png").is_file()


def test_export_import_export_gives_equal_tables(shards, tmp_path) -> None:
    uri = f"sqlite:///{tmp_path / 'imported.db'}"
    assert main(["import", str(shards[0]), "--tracking-uri", uri]) == 0
    client = MlflowClient(tracking_uri=uri)
    [exp] = [e for e in client.search_experiments() if e.name != "Default"]
    parents = client.search_runs([exp.experiment_id], f"tags.`{TAG_ROLE}` = 'suite'")
    assert len(parents) == 1
    again = results_from_store(tracking_uri=uri, parent_run_ids=[parents[0].info.run_id])
    first = read_results([shards[0]])
    for name in TABLES:
        a, b = getattr(first, name), getattr(again, name)
        if name in ("runs", "evals"):  # the store-local experiment id is the one column that moves
            a, b = a.drop(columns="experiment_id"), b.drop(columns="experiment_id")
        pd.testing.assert_frame_equal(b, a, obj=name)
    keep = {k: v for k, v in first.manifests[0].items() if k not in ("tables", "source")}
    assert {k: again.manifests[0][k] for k in keep} == keep
    # The imported runs are browsable: children nest under the new parent, artifacts included.
    children = client.search_runs(
        [exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parents[0].info.run_id}'"
    )
    assert len(children) == 4
    assert any(a.path == "eval_items" for a in client.list_artifacts(children[0].info.run_id))


def _rewrite(folder: Path, out: Path, **changes) -> Path:
    """A copy of a set with some tables or manifest fields changed, written as a real set."""
    rs = read_results([folder])
    manifest = {k: v for k, v in rs.manifests[0].items() if k != "tables"}
    manifest.update(changes.pop("manifest", {}))
    return write_results(replace(rs, manifests=(manifest,), **changes), out)


def _refused(capsys, *argv: str) -> str:
    assert main(list(argv)) == 2
    return capsys.readouterr().err


def test_shards_with_a_start_in_common_are_refused(shards, tmp_path, capsys) -> None:
    copy = shutil.copytree(shards[0], tmp_path / "copy")
    err = _refused(
        capsys, "report", "--results", str(shards[0]), str(copy), "--out", str(tmp_path / "r")
    )
    assert "start 's0' is held by two shards" in err and str(copy) in err
    assert not (tmp_path / "r").exists()


def test_shards_of_another_config_are_refused_naming_the_field(shards, tmp_path, capsys) -> None:
    rs = read_results([shards[1]])
    params = rs.params.copy()
    params.loc[params["key"] == "budget.limit", "value"] = "512"
    other = _rewrite(
        shards[1], tmp_path / "s1_512", params=params, manifest={"suite_hash": "another"}
    )
    err = _refused(capsys, "report", "--results", str(shards[0]), str(other))
    assert "config field 'budget.limit': '256' and '512'" in err


def test_shards_of_another_suite_are_refused(shards, tmp_path, capsys) -> None:
    other = _rewrite(shards[1], tmp_path / "claims", manifest={"suite": "claims"})
    err = _refused(capsys, "report", "--results", str(shards[0]), str(other))
    assert "different suites: field 'suite' is 'default' and 'claims'" in err


def test_a_truncated_table_is_refused_naming_the_file(shards, tmp_path, capsys) -> None:
    copy = shutil.copytree(shards[0], tmp_path / "cut")
    path = copy / "metrics.parquet"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    err = _refused(capsys, "report", "--results", str(copy))
    assert str(path) in err and "tables.metrics.sha256" in err


def test_a_corrupt_table_with_a_matching_checksum_is_refused(shards, tmp_path, capsys) -> None:
    copy = shutil.copytree(shards[0], tmp_path / "corrupt")
    path = copy / "items.parquet"
    path.write_bytes(b"PAR1 not a table PAR1")
    manifest = json.loads((copy / MANIFEST).read_text())
    manifest["tables"]["items"]["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (copy / MANIFEST).write_text(json.dumps(manifest))
    err = _refused(capsys, "import", str(copy), "--tracking-uri", f"sqlite:///{tmp_path}/x.db")
    assert str(path) in err and "not a readable Parquet table" in err
    assert not (tmp_path / "x.db").exists()  # refused before any store was touched


def test_another_schema_version_is_refused(shards, tmp_path, capsys) -> None:
    copy = shutil.copytree(shards[0], tmp_path / "v2")
    manifest = json.loads((copy / MANIFEST).read_text())
    manifest["schema_version"] = 2
    (copy / MANIFEST).write_text(json.dumps(manifest))
    err = _refused(capsys, "report", "--results", str(copy))
    assert str(copy / MANIFEST) in err and "'schema_version' is 2" in err


def test_an_empty_folder_is_refused(tmp_path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    err = _refused(capsys, "report", "--results", str(tmp_path / "empty"))
    assert str(tmp_path / "empty") in err and "holds no results set" in err


def test_an_experiment_without_a_finished_run_is_refused_and_nothing_written(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'failed.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("sppo-bench-failed", artifact_location=str(tmp_path / "art"))
    run = client.create_run(exp, tags={TAG_ROLE: "run", "algorithm": "sppo", "seed": "0"})
    client.set_terminated(run.info.run_id, status="FAILED")
    out = tmp_path / "set"
    err = _refused(
        capsys,
        "export",
        "--experiment",
        "sppo-bench-failed",
        "--tracking-uri",
        uri,
        "--out",
        str(out),
    )
    assert "has no finished run" in err and "FAILED" in err
    assert not out.exists() and list(tmp_path.glob(".set.*")) == []


def test_a_set_is_never_written_over_another(shards, tmp_path) -> None:
    rs = read_results([shards[0]])
    with pytest.raises(ResultsError, match="not empty"):
        write_results(rs, shards[1])
    assert read_results([shards[1]]).starts == ["s1"]  # untouched
