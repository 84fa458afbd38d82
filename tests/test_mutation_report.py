"""The report side of ``make mutants`` (``scripts/mutation_report.py report --check``): the list of
equivalent mutants and known survivors (docs/mutation_survivors.yaml) is read and checked entry by
entry, and the check fails on a survivor the list does not name, on a listed mutant that was killed
or no longer exists, and stops with one line on a malformed entry.

No mutmut run here: the results are synthetic ``{mutant name: exit code}`` maps, written where
the report reads them (``mutants/**/*.py.meta``) for the end-to-end cases.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "mutation_report.py"
_spec = importlib.util.spec_from_file_location("mutation_report_under_test", SCRIPT)
mr = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = mr  # dataclasses look their module up there
_spec.loader.exec_module(mr)

MOD = "benchmarks.verl_engine.metrics"  # the "verl metrics" scope: every function of the module
EQ = f"{MOD}.x_map_history__mutmut_1"
SURV = f"{MOD}.x_map_history__mutmut_2"
OTHER = "analysis.claims.protocol.x_holm__mutmut_1"  # the "protocol" scope

GOOD = f"""\
reasons:
  falsy: None replaces False, and the argument is only tested for truth.
equivalent:
  - name: {EQ}
    scope: verl metrics
    change: 'x = None'
    why: '**falsy**'
surviving:
  - name: {SURV}
    scope: verl metrics
    change: 'timeout=3.0'
    why: >-
      a timeout only a slow machine
      tells apart
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "survivors.yaml"
    path.write_text(text)
    return path


def _killed(n: int) -> dict[str, int | None]:
    return {f"{MOD}.x_map_history__mutmut_{i}": 1 for i in range(10, 10 + n)}


def test_the_repository_list_is_well_formed():
    listed = mr.load_listed()
    assert listed.equivalent and listed.surviving
    assert not set(listed.equivalent) & set(listed.surviving)
    assert all(mr.scope_of(name) is not None for name in listed.names)


def test_the_repository_page_counts_the_listed_mutants():
    # docs/mutation.md's table showed 58 equivalent algorithms and 46 tasks survivors as if all
    # listed (57 and 44 are): a measured count the list does not hold reads "N (M listed)".
    assert mr.check_page(mr.load_listed()) == []


def _page(tmp_path, verl="| verl metrics | 20 | 22 | 1 | 1 | 95.2% | 90% | B |", drop=()):
    """A docs/mutation.md whose score table has GOOD's counts: a row per scope, ``verl``'s."""
    rows = [f"| {s} | 0 | 0 | 0 | 0 | 100.0% | 90% | A |" for s in mr.SCOPE if s not in drop]
    rows = [verl if row.startswith("| verl metrics |") else row for row in rows]
    path = tmp_path / "mutation.md"
    path.write_text("\n".join(["## Scores", "", mr.PAGE_HEAD, "|---|", *rows, "", "- **A**"]))
    return path


def test_the_page_table_must_add_up_and_count_the_listed_mutants(tmp_path, monkeypatch):
    monkeypatch.setattr(mr, "LISTED", _write(tmp_path, GOOD))
    listed, where = mr.load_listed(), tmp_path / "mutation.md"
    assert mr.check_page(listed, _page(tmp_path)) == []
    ok = "| verl metrics | 20 | 23 | 2 (1 listed) | 1 | 95.2% | 90% | B |"
    assert mr.check_page(listed, _page(tmp_path, ok)) == []
    two = "| verl metrics | 20 | 23 | 2 | 1 | 95.2% | 90% | B |"
    assert mr.check_page(listed, _page(tmp_path, two)) == [
        f"{where}: verl metrics: equivalent 2, but survivors.yaml lists 1"
    ]
    sums = "| verl metrics | 20 | 23 | 1 | 1 (1 listed) | 95.2% | 90% | B |"
    assert mr.check_page(listed, _page(tmp_path, sums)) == [
        f"{where}: verl metrics: 20 + 1 + 1 of 23, 95.2%"
    ]
    assert mr.check_page(listed, _page(tmp_path, drop=("tasks",))) == [
        f"{where}: no score row for scope 'tasks'"
    ]
    assert "unreadable score row" in mr.check_page(listed, _page(tmp_path, ok[:-4]))[0]


def test_a_list_is_read_with_every_entry_and_its_reason(tmp_path):
    listed = mr.load_listed(_write(tmp_path, GOOD))
    assert listed.equivalent == {EQ: "**falsy**"}
    assert listed.surviving == {SURV: "a timeout only a slow machine tells apart"}
    assert listed.names == {EQ, SURV}
    assert listed.reasons == {
        "falsy": "None replaces False, and the argument is only tested for truth."
    }


def _problems(tmp_path, results, scopes=("verl metrics",), partial=False):
    listed = mr.load_listed(_write(tmp_path, GOOD))
    rows, _ = mr.tally(results, set(listed.equivalent), list(scopes))
    return rows, mr.check(results, listed, rows, partial=partial)


def test_listed_survivors_pass_and_the_equivalent_one_is_not_scored(tmp_path, monkeypatch):
    monkeypatch.setattr(mr, "LISTED", tmp_path / "survivors.yaml")
    results = {EQ: 0, SURV: 0, **_killed(20)}
    rows, problems = _problems(tmp_path, results)
    assert problems == []
    row = rows["verl metrics"][MOD]
    assert (row.total, row.equivalent, row.killed, row.survived) == (22, 1, 20, [SURV])
    assert row.score == pytest.approx(20 / 21)


def test_an_unlisted_survivor_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(mr, "LISTED", tmp_path / "survivors.yaml")
    new = f"{MOD}.x_map_history__mutmut_3"
    _, problems = _problems(tmp_path, {EQ: 0, SURV: 0, new: 0, **_killed(30)})
    assert problems == [f"{new}: survived and not listed in {tmp_path / 'survivors.yaml'}"]


def test_a_listed_mutant_that_was_killed_or_is_gone_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(mr, "LISTED", tmp_path / "survivors.yaml")
    where = tmp_path / "survivors.yaml"
    _, problems = _problems(tmp_path, {EQ: 0, SURV: 1, **_killed(20)})
    assert problems == [f"{SURV}: listed in {where} but killed (exit 1)"]
    _, problems = _problems(tmp_path, {SURV: 0, **_killed(20)})
    assert problems == [f"{EQ}: listed in {where} but no such mutant (renumbered?)"]


def test_a_partial_run_checks_only_the_listed_mutants_of_its_scopes(tmp_path, monkeypatch):
    monkeypatch.setattr(mr, "LISTED", tmp_path / "survivors.yaml")
    results = {OTHER: 1, **_killed(5)}  # the verl metrics' listed mutants were not generated
    _, problems = _problems(tmp_path, results, scopes=("protocol",), partial=True)
    assert problems == []
    _, problems = _problems(tmp_path, results, scopes=("protocol",), partial=False)
    assert len(problems) == 2 and all("no such mutant" in p for p in problems)


def test_a_scope_below_its_target_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(mr, "LISTED", tmp_path / "survivors.yaml")
    unlisted = {f"{MOD}.x_map_verl_run__mutmut_{i}": 0 for i in range(1, 4)}
    _, problems = _problems(tmp_path, {EQ: 0, SURV: 0, **unlisted, **_killed(10)})
    assert "verl metrics: 71.4% killed, target 90%" in problems


def _report(tmp_path, monkeypatch, listed_text, results, *args):
    """``report --check`` end to end, on results written as mutmut writes them."""
    meta = tmp_path / "mutants" / "benchmarks" / "verl_engine" / "metrics.py.meta"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"exit_code_by_key": results}))
    monkeypatch.setattr(mr, "MUTANTS", tmp_path / "mutants")
    monkeypatch.setattr(mr, "LISTED", _write(tmp_path, listed_text))
    monkeypatch.setattr(mr, "PAGE", _page(tmp_path))
    return mr.main(["report", "--check", *args])


def test_report_check_passes_on_a_listed_run_and_fails_on_news(tmp_path, monkeypatch, capsys):
    results = {EQ: 0, SURV: 0, **_killed(20)}
    assert _report(tmp_path, monkeypatch, GOOD, results) == 0
    out, err = capsys.readouterr()
    assert f"| verl metrics | `{MOD}` | 20 | 22 | 1 | 1 | 95.2% |" in out
    assert err == ""

    new = f"{MOD}.x_map_history__mutmut_4"
    (tmp_path / "mutants").rename(tmp_path / "old")
    assert _report(tmp_path, monkeypatch, GOOD, {**results, new: 0}) == 1
    err = capsys.readouterr().err
    assert err == f"mutation: {new}: survived and not listed in {tmp_path / 'survivors.yaml'}\n"


def _entry(name=EQ, scope="verl metrics", why="'**falsy**'", extra=""):
    return f"  - name: {name}\n    scope: {scope}\n    change: x = None\n    why: {why}\n{extra}"


HEAD = "reasons:\n  falsy: tested for truth only\nequivalent:\n"
MALFORMED = {
    "missing field": (
        HEAD + _entry() + f"  - name: {SURV}\n    scope: verl metrics\n    change: x = 1\n",
        f"equivalent[1] ({SURV}): missing field 'why'",
    ),
    "unknown scope": (
        HEAD + _entry(scope="verl"),
        f"equivalent[0] ({EQ}): unknown scope 'verl' (allowed: {', '.join(mr.SCOPE)})",
    ),
    "scope not the name's": (
        HEAD + _entry(scope="protocol"),
        f"equivalent[0] ({EQ}): scope 'protocol', but SCOPE puts the name in scope 'verl metrics'",
    ),
    "duplicate name": (
        HEAD + _entry() + f"surviving:\n{_entry(why='slow')}",
        f"surviving[0] ({EQ}): listed twice (also in equivalent[0])",
    ),
    "unknown field": (
        HEAD + _entry(extra="    reason: typo\n"),
        f"equivalent[0] ({EQ}): unknown field 'reason' (allowed: name, scope, change, why)",
    ),
    "undefined reason": (
        HEAD + _entry(why="'**zip**'"),
        f"equivalent[0] ({EQ}): reason **zip** is not defined under reasons",
    ),
    "empty field": (
        HEAD + _entry(why="''"),
        f"equivalent[0] ({EQ}): field 'why' is not a non-empty string",
    ),
    "not a mutant name": (
        HEAD + _entry(name=f"{MOD}.x_map_history"),
        f"equivalent[0] ({MOD}.x_map_history): not a mutant name (module.function__mutmut_N)",
    ),
    "bad yaml": (HEAD + "  - name: [unclosed\n", "not valid YAML"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_entry_stops_the_report_with_one_line(tmp_path, monkeypatch, case):
    text, message = MALFORMED[case]
    path = _write(tmp_path, text)
    with pytest.raises(mr.ListError) as err:
        mr.load_listed(path)
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(f"{path}: ") or line.startswith(f"{path}:")
    assert message in line
    # report --check stops on it before reading any result (there is no mutants/ here)
    monkeypatch.setattr(mr, "LISTED", path)
    monkeypatch.setattr(mr, "MUTANTS", tmp_path / "mutants")
    with pytest.raises(SystemExit) as stop:
        mr.main(["report", "--check"])
    assert stop.value.code == f"mutation: {line}"
