"""What a newcomer sees in the MLflow UI: the micro suite's store served by a real `mlflow server`
on 127.0.0.1 (the `server` fixture of tests/telemetry/test_mlflow_ui.py), the runs page the suite prints
(``#/experiments/<id>/runs``) rendered by Debian's headless Chromium, read back from its DOM
(``--dump-dom`` after a virtual-time budget, so the page's scripts have run).

MLflow 3.17 nests the child runs under their parent's row, folded until its expander is
clicked, so that page lists the parent (and counts all runs); sorted by name (one URL
parameter, ``orderByKey``) it lists every run flat, which is how the children's names are read.
Without Chromium the test is skipped, or fails when ``CI`` is set (.ci/run installs it).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from benchmarks.telemetry.tracking import (
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    prepare_store,
    ui_runs_url,
)

pytestmark = pytest.mark.slow  # a headless browser on the MLflow UI: left out of make test-fast

#: Whole test budget for rendering one page: dumps with a growing virtual-time budget.
RENDER_DEADLINE_S = 75.0
VIRTUAL_TIME_MS = (5_000, 10_000, 20_000, 40_000)


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        why = "Debian's chromium is not installed (apt-get install -y chromium)"
        if os.environ.get("CI"):
            pytest.fail(f"{why}; CI must run this test (.ci/run installs it)")
        pytest.skip(f"{why}; with CI set this is a failure")
    return exe


class _RunLinks(HTMLParser):
    """``<a href="#/experiments/<id>/runs/<run id>">name</a>``: the run-name cells of the table."""

    def __init__(self, exp_id: str) -> None:
        super().__init__()
        self.pattern = re.compile(rf"#/experiments/{re.escape(exp_id)}/runs/([0-9a-f]{{32}})$")
        self.runs: dict[str, str] = {}
        self._open: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            m = self.pattern.search(dict(attrs).get("href") or "")
            if m:
                self._open, self._text = m.group(1), []

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.runs[self._open] = "".join(self._text).strip()
            self._open = None


def _matching_runs(dom: str) -> int | None:
    """The table footer's run count (``<strong>5</strong> matching runs``)."""
    m = re.search(r"<strong>(\d+)</strong>\s*matching runs", dom)
    return int(m.group(1)) if m else None


def _dump(exe: str, url: str, budget_ms: int, profile: Path, timeout_s: float) -> str:
    """One headless Chromium load of ``url``: the DOM after ``budget_ms`` of virtual time."""
    profile.mkdir(parents=True, exist_ok=True)
    cmd = [
        exe,
        "--headless",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        f"--user-data-dir={profile}",
        f"--virtual-time-budget={budget_ms}",
        "--window-size=1600,1000",
        "--dump-dom",
        url,
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # its renderer and GPU processes go with it on a timeout
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return ""
    return out


def _render(exe: str, url: str, tmp_path: Path, done) -> str:
    """Dump ``url`` with a growing virtual-time budget until ``done(dom)``; the last DOM."""
    deadline = time.monotonic() + RENDER_DEADLINE_S
    dom = ""
    for i, budget in enumerate(VIRTUAL_TIME_MS):
        left = deadline - time.monotonic()
        if left <= 1:
            break
        dom = _dump(exe, url, budget, tmp_path / f"profile{i}", timeout_s=left)
        if done(dom):
            break
    return dom


@pytest.fixture(scope="module")
def store(server):  # noqa: F811 - the fixture imported above
    """(server base URL, suite result, experiment id, parent run name, children: id -> name),
    the names as MLflow has them."""
    from mlflow.tracking import MlflowClient

    base, result = server
    client = MlflowClient(result.tracking_uri)
    exp_id = client.get_experiment_by_name(result.experiment).experiment_id
    parent = client.get_run(result.parent_run_id).info.run_name
    kids = client.search_runs(
        [exp_id], filter_string=f"tags.mlflow.parentRunId = '{result.parent_run_id}'"
    )
    children = {r.info.run_id: r.info.run_name for r in kids}
    assert len(children) == len(result.runs) == 4
    return base, result, exp_id, parent, children


def test_experiment_is_a_training_experiment(store):
    from mlflow.tracking import MlflowClient

    _, result, exp_id, _, _ = store
    assert result.experiment_id == exp_id
    exp = MlflowClient(result.tracking_uri).get_experiment(exp_id)
    assert exp.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND == "custom_model_development"


def test_prepare_store_tags_an_existing_experiment_once(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    old = client.create_experiment("old", artifact_location=(tmp_path / "a").as_uri())
    assert EXPERIMENT_KIND_TAG not in client.get_experiment(old).tags
    assert prepare_store(uri, "old") == old == prepare_store(uri, "old")
    assert client.get_experiment(old).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    client.set_experiment_tag(old, EXPERIMENT_KIND_TAG, "genai_development")  # a user's choice
    prepare_store(uri, "old")
    assert client.get_experiment(old).tags[EXPERIMENT_KIND_TAG] == "genai_development"


def test_suite_prints_the_runs_page(micro_suite, capsys):
    from benchmarks.cli import _print_result

    result, _ = micro_suite
    _print_result(result)
    out = capsys.readouterr().out
    url = f"http://127.0.0.1:5000/#/experiments/{result.experiment_id}/runs"
    assert f"runs:    {url}\n" in out


def test_runs_page_lists_the_suite_and_its_child_runs(store, tmp_path):
    exe = _chromium()
    base, result, exp_id, parent, children = store
    expected = {result.parent_run_id: parent, **children}

    def links(dom: str) -> dict[str, str]:
        p = _RunLinks(exp_id)
        p.feed(dom)
        return p.runs

    # The page the suite prints: the parent run, its children folded under it, all counted.
    url = ui_runs_url(result.tracking_uri, exp_id, base=base)
    dom = _render(exe, url, tmp_path / "default", lambda d: result.parent_run_id in links(d))
    shown = links(dom)
    assert shown.get(result.parent_run_id) == parent == "suite-default", (url, shown)
    assert _matching_runs(dom) == len(expected), (url, shown)

    # Sorted by name the runs are listed flat: exactly the suite's runs, each with its name.
    flat = f"{url}?orderByKey=attributes.run_name&orderByAsc=true"
    dom = _render(exe, flat, tmp_path / "flat", lambda d: set(links(d)) >= set(expected))
    shown = links(dom)
    assert shown == expected, (flat, shown)
    assert sorted(children.values()) == ["dapo-s0", "grpo-s0", "ppo-s0", "sppo-s0"]
    assert "sppo-s1" not in shown.values() and ">sppo-s1<" not in dom  # seeds=1: no seed 1
