"""docs/results.md and docs/leaderboard.md generated from the committed results sets: no measured
number typed by hand.

A results page written by hand drifts from its data (a number copied from a store only its author
held cannot be checked), so the page is built here from ``results/`` alone: one section per suite
folder, each with the suite's own description (the leading comment of its YAML, not a result),
a provenance table read from the shards' manifests, and the tables and one figure of the report
:func:`analysis.write_report` writes from the merged shards, the same report
``sppo-bench report --results results/<suite>`` writes, then the tuning sweeps' tables
(``results/tuning``). docs/leaderboard.md shows the campaign's suites from the same reports: the
starts committed so far, the claims and the leaderboards. Run as::

    python -m analysis.pages [--results results] [--docs docs]   # what `make results-docs` runs

Everything is deterministic (sorted folders, seeded bootstraps, Agg PNGs), so a rerun on the same
machine gives byte-identical files and a test can hold the committed page to its data
(tests/analysis/test_pages.py).
"""

from __future__ import annotations

import argparse
import io
import logging
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.metrics import COMPUTE_ROLLOUT_SAMPLES

from .board_coverage import coverage_lines
from .tuning import tuning_section

__all__ = [
    "CAMPAIGN",
    "JOURNAL",
    "LEADERBOARD_PAGE",
    "PAGE",
    "SUITE_ORDER",
    "SuitePage",
    "declared_starts",
    "generate",
    "main",
    "provenance_rows",
    "render_leaderboard_page",
    "render_page",
    "render_suite",
    "suite_description",
    "suite_folders",
]

logger = logging.getLogger(__name__)

#: The page written into the docs folder, and the journal it links to (once).
PAGE = "results.md"
#: The campaign's page: the leaderboards and their claims, linked from the README.
LEADERBOARD_PAGE = "leaderboard.md"
#: The campaign's suites, in the page's order (benchmarks/conf/suite/<name>.yaml): the two
#: leaderboards and claim (a)'s companion. The page shows each, with the starts committed so far.
CAMPAIGN: tuple[str, ...] = (
    "leaderboard_arith",
    "leaderboard_chain_sum",
    "leaderboard_chain_sum_8192",
)
JOURNAL = "journal.md"
#: Where each suite section's figure goes under the docs folder: accuracy versus rollout samples
#: on the whole task, one panel, small (a regenerated figure is a new blob in git each time).
FIGURES_DIR = "figures"
_FIGURE_DPI = 90
#: Suites first in this order (the claims before the smoke test), any others after, alphabetically.
SUITE_ORDER: tuple[str, ...] = ("claims", "claims_chain_sum", "default")
#: Where each suite's YAML lives: its leading comment block is the section's description.
SUITE_CONF = Path(__file__).resolve().parents[1] / "benchmarks" / "conf" / "suite"
#: The report's tables the page shows after the claims, in order: (file stem, section title).
#: A table the report did not write (no horizon groups, no second algorithm) is left out.
TABLES: tuple[tuple[str, str], ...] = (
    ("leaderboard", "Leaderboard (exploratory)"),
    ("accuracy", "Final accuracy"),
    ("summary", "Suite summary"),
    ("iqm", "IQM and mean"),
    ("improvement", "Probability of improvement"),
    ("horizon", "Final accuracy per horizon"),
)
_CLAIMS_HEADING = "## Claims"
_FILES_LINE = "Files: ["


@dataclass(frozen=True)
class SuitePage:
    """One suite's section of the page and the figure it embeds (PNG bytes, None without eval
    points): returned, not written, so the caller writes every file in one place."""

    folder: str
    markdown: str
    figure: bytes | None
    #: The leaderboard page's part: the claims lines, the leaderboard table with its caption,
    #: the performance profile (PNG bytes) and the starts the shards hold.
    claims: list[str] = field(default_factory=list)
    leaderboard: list[str] = field(default_factory=list)
    profile: bytes | None = None
    starts: tuple[str, ...] = ()


# --- what is on disk -----------------------------------------------------------------------------


def suite_folders(results: Path) -> list[Path]:
    """The suite folders under ``results`` (those holding a manifest somewhere below), in the
    page's order: :data:`SUITE_ORDER` first, then the others alphabetically."""
    from .results import MANIFEST

    found = sorted(p for p in results.iterdir() if p.is_dir() and any(p.rglob(MANIFEST)))
    rank = {name: i for i, name in enumerate(SUITE_ORDER)}
    return sorted(found, key=lambda p: (rank.get(p.name, len(rank)), p.name))


def suite_description(suite: str, conf: Path = SUITE_CONF) -> str:
    """The leading comment block of ``<conf>/<suite>.yaml`` as one paragraph ("" without that
    file): the suite's own description, written where its settings are, so the page cannot
    restate it differently.

    The Hydra ``@package`` directive is skipped; a line that is a ``sppo-bench`` command is set
    in backticks, and ``<`` outside backticks is escaped (``arith_h<h>`` would read as HTML).
    """
    path = conf / f"{suite}.yaml"
    if not path.is_file():
        return ""
    words: list[str] = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line[1:].strip()
        if not text or text.startswith("@package"):
            continue
        words.append(f"`{text}`" if text.startswith("sppo-bench ") else text)
    return _escape_html(" ".join(" ".join(words).split()))


def _described(suite: str, conf: Path) -> str:
    text = suite_description(suite, conf)
    where = f"`benchmarks/conf/suite/{suite}.yaml`"
    return f"*From {where}:* {text}" if text else f"*No description: {where} does not exist.*"


def _escape_html(text: str) -> str:
    parts = text.split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(parts))


def provenance_rows(manifests: Sequence[dict[str, Any]], folders: Sequence[str]) -> list[str]:
    """The provenance table of a suite: one row per shard, read from its manifest (what ran, on
    which commit and machine, by which command), in the order the shards were read."""
    rows = [
        "| shard | starts | seeds | runs finished/total | date | commit | machine | command |",
        "| :--- | :--- | :--- | ---: | :--- | :--- | :--- | :--- |",
    ]
    for folder, m in zip(folders, manifests, strict=True):
        cells = [
            f"`{folder}`",
            ", ".join(str(s) for s in m.get("starts", [])) or "–",
            ", ".join(str(s) for s in m.get("seeds", [])) or "–",
            f"{m.get('finished_runs', '–')}/{m.get('runs', '–')}",
            str(m.get("date") or "–"),
            ", ".join(str(c)[:7] for c in m.get("commits", [])) or "–",
            _machine(m),
            f"`{m.get('command', 'unknown')}`",
        ]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return rows


def _machine(manifest: dict[str, Any]) -> str:
    machine = manifest.get("machine") or {}
    source = manifest.get("machine_source") or "not recorded"
    if not machine:
        return f"unknown ({source})"
    cpu = machine.get("cpu") or "unknown CPU"
    cores = machine.get("cores")
    return f"{cpu}, {cores} cores ({source})" if cores else f"{cpu} ({source})"


# --- one suite -----------------------------------------------------------------------------------


def render_suite(folder: Path, conf: Path = SUITE_CONF) -> SuitePage:
    """One suite folder's section: description, provenance, then the report's claims and
    tables, from a report written to a temporary folder, and a figure of accuracy versus rollout
    samples on the whole task.

    The report is :func:`analysis.write_report` at seed 0 with its default bootstrap replicates,
    so every number equals the one ``sppo-bench report --results`` prints. It draws no compute
    axis and skips the saturating fit's bootstrap, which the page does not show (two thirds of a
    report's cost); the page's own figure is drawn once, small.
    """
    from .load import eval_points
    from .report import write_report
    from .results import read_results

    rs = read_results([folder])
    tidy = rs.tidy()
    shards = [f"{folder.parent.name}/{Path(s).relative_to(folder.parent)}" for s in rs.sources]
    name = folder.name
    lines = [
        f"## Suite `{name}`",
        "",
        _described(rs.suite, conf),
        "",
        f"The full report of this suite, every figure and table: "
        f"`sppo-bench report --results {folder.parent.name}/{name}`.",
        "",
        "### Provenance",
        "",
        *provenance_rows(rs.manifests, shards),
        "",
    ]
    with tempfile.TemporaryDirectory(prefix=f"pages-{name}-") as tmp:
        report = write_report(
            tidy,
            tmp,
            title=f"sppo-bench: {rs.manifests[0].get('experiment') or rs.suite}",
            items=rs.items,
            calibration=rs.calibration,
            claims=rs.claims(),
            seed=0,
            x_axes=[],
            fit_reps=0,
            declared_starts=declared_count(rs.suite, conf),
        )
        text = report.read_text().splitlines()
        claims = _claims(text)
        lines += claims
        board: list[str] = []
        profile_png = Path(tmp) / "performance_profile.png"
        # read as the report wrote it: matplotlib is pinned, so the same data gives the same bytes
        profile = profile_png.read_bytes() if profile_png.is_file() else None
        for stem, title in TABLES:
            path = Path(tmp) / f"{stem}.md"
            if not path.is_file():
                logger.info("%s: the report wrote no %s table", name, stem)
                continue
            caption = _caption(text, stem)
            table = [*([caption, ""] if caption else []), path.read_text().strip(), ""]
            lines += [f"### {title}", "", *table]
            if stem == "leaderboard":
                board = table
    figure = _figure(eval_points(tidy))
    if figure is not None:
        caption = (
            "Accuracy versus rollout samples on the whole task: mean over runs with its 95% "
            "band (bootstrap over runs)"
        )
        lines += [
            "### Accuracy versus rollout samples",
            "",
            f"![{caption}]({FIGURES_DIR}/{_figure_name(name)})",
            "",
            f"*{caption}*",
            "",
        ]
    return SuitePage(
        name,
        "\n".join(lines),
        figure,
        claims=claims,
        leaderboard=board,
        profile=profile,
        starts=tuple(rs.starts),
    )


def _figure(points: Any) -> bytes | None:
    """Accuracy versus rollout samples on the whole task(s), as PNG bytes; None without points.
    The PNG carries no software version, so the same drawing gives the same bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .leaderboard import leaderboard_datasets
    from .plots import plot_panels

    if points.empty or COMPUTE_ROLLOUT_SAMPLES not in points.columns:
        return None
    whole = leaderboard_datasets(points)
    fig = plot_panels(points, COMPUTE_ROLLOUT_SAMPLES, datasets=whole, ncols=2)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=_FIGURE_DPI, metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def _claims(report: list[str]) -> list[str]:
    """The report's Claims section, verbatim but for its heading (one level down, under the
    suite's) and its ``Files:`` lines, which point into the report's temporary folder."""
    if _CLAIMS_HEADING not in report:
        return []
    start = report.index(_CLAIMS_HEADING)
    end = next(
        (i for i in range(start + 1, len(report)) if report[i].startswith("## ")), len(report)
    )
    body = [line for line in report[start + 1 : end] if not line.startswith(_FILES_LINE)]
    out = ["### Claims"]
    for line in body:  # a removed Files line leaves two blank lines: keep one
        if line.strip() or (out and out[-1].strip()):
            out.append(line)
    while out[-1] == "":
        out.pop()
    return [*out, ""]


def _caption(report: list[str], stem: str) -> str | None:
    """The report's caption of table ``stem``: the italic line above the table its Files line
    closes."""
    files = f"{_FILES_LINE}{stem}.csv]"
    for i, line in enumerate(report):
        if line.startswith(files):
            for above in reversed(report[:i]):
                if above.startswith("*") and above.endswith("*") and not above.startswith("**"):
                    return above
            break
    return None


def _anchor(folder: str) -> str:
    """The anchor GitHub gives the heading ``Suite `<folder>```."""
    return re.sub(r"[^\w\- ]", "", f"suite {folder}".lower()).replace(" ", "-")


def _figure_name(folder: str) -> str:
    return f"results_{folder}.png"


# --- the page ------------------------------------------------------------------------------------


def render_page(
    sections: Sequence[SuitePage], results_name: str = "results", tuning: Sequence[str] = ()
) -> str:
    """The whole page: the generated-page header, a list of the suites, their sections, then
    the tuning sweeps' tables (``tuning``: :func:`analysis.tuning.tuning_section`)."""
    header = [
        "# Results",
        "",
        f"Generated by `make results-docs` from {results_name}/ — do not edit; history and "
        f"superseded results: [journal]({JOURNAL}).",
        "",
        f"Every number below is computed from the results sets committed under `{results_name}/` "
        "(Parquet tables and a manifest per shard: [results as data](design.md#results-as-data)),"
        " by the report code `sppo-bench report` runs, seed 0. The full report of one suite, "
        "every figure and table with CSV and LaTeX copies: "
        f"`sppo-bench report --results {results_name}/<suite>`. How a verdict is drawn: "
        "[statistics.md](statistics.md).",
        "",
    ]
    if sections:
        header += [
            "Suites: " + " · ".join(f"[`{s.folder}`](#{_anchor(s.folder)})" for s in sections),
            "",
        ]
    else:
        header += [f"No results set is committed under `{results_name}/` yet.", ""]
    body = [s.markdown.rstrip("\n") + "\n" for s in sections]
    if tuning:
        body.append("\n".join(tuning).rstrip("\n") + "\n")
    return "\n".join(header) + "\n" + "\n".join(body)


def _suite_node(suite: str | None, conf: Path) -> dict:
    """``<conf>/<suite>.yaml`` as written ({} where there is none here): read, not composed,
    because a page states what the suite declared before it ran, which is the file."""
    import yaml

    path = conf / f"{suite}.yaml"
    if not suite or not path.is_file():
        return {}
    return yaml.safe_load(path.read_text()) or {}


def declared_starts(suite: str | None, conf: Path = SUITE_CONF) -> list[int]:
    """The start seeds a suite's YAML declares: ``seed`` (the root config's where the suite
    leaves it) onwards, ``seeds`` of them; [] where it declares no ``seeds``."""
    node = _suite_node(suite, conf)
    if "seeds" not in node:
        return []
    first = node.get("seed", _suite_node("config", conf.parent).get("seed", 0))
    return [int(first) + i for i in range(int(node["seeds"]))]


def declared_count(suite: str | None, conf: Path = SUITE_CONF) -> int | None:
    """How many starts a suite's YAML declares, or None where it declares none or has no YAML
    here: what a claim's verdict waits for (an interim read draws none)."""
    return len(declared_starts(suite, conf)) or None


def render_leaderboard_page(
    sections: Sequence[SuitePage],
    results_name: str = "results",
    conf: Path = SUITE_CONF,
    tuned: bool = False,
    results_root: Path | str = "results",
) -> str:
    """The campaign's page: per campaign suite its description, how many of its declared starts
    the committed shards hold, its declared claims' verdict lines and its leaderboard with the
    performance profile. A suite with no shard yet says so; nothing here is typed by hand.
    ``tuned``: the results page has a tuning section to link; ``results_root``: where the
    intervals' coverage file is read (:func:`analysis.board_coverage.coverage_lines`)."""
    tuning = "results.md#tuning-sweeps" if tuned else "results.md"
    by_name = {s.folder: s for s in sections}
    lines = [
        "# Leaderboard",
        "",
        f"Generated by `make results-docs` from {results_name}/ — do not edit. Every registered "
        "algorithm at its tuned setting, at equal compute, over independent starts; the "
        f"tuning behind each setting is in [results.md]({tuning}), how a verdict "
        "is drawn in [statistics.md](statistics.md), the campaign's plan (written before its "
        f"first shard) in the [journal]({JOURNAL}).",
        "",
    ]
    for suite in CAMPAIGN:
        declared = declared_starts(suite, conf)
        page = by_name.get(suite)
        held = sorted(page.starts) if page is not None else []
        lines += [
            f"## `{suite}`",
            "",
            _described(suite, conf),
            "",
            f"Starts committed: {len(held)} of the {len(declared)} declared "
            f"(s{declared[0]}–s{declared[-1]})" + (f": {', '.join(held)}." if held else "."),
            "",
        ]
        if page is None:
            continue
        lines += [*page.claims]
        if page.leaderboard:
            lines += ["### Leaderboard (exploratory)", "", *page.leaderboard]
        if page.profile is not None:
            caption = "Performance profile: the share of starts whose final accuracy is at least τ"
            lines += [
                f"![{caption}]({FIGURES_DIR}/{suite}.png)",
                "",
                f"*{caption}*",
                "",
            ]
        lines += [
            f"Full report: `sppo-bench report --results {results_name}/{suite}`; provenance of "
            f"every shard: [results.md](results.md#{_anchor(suite)}).",
            "",
        ]
    lines += coverage_lines(results_root)
    return "\n".join(lines).rstrip("\n") + "\n"


def generate(
    results: str | Path = "results", docs: str | Path = "docs", *, conf: Path = SUITE_CONF
) -> Path:
    """Write ``<docs>/results.md`` and ``<docs>/figures/results_<suite>.png`` from every suite
    folder under ``results``; figures of suites no longer there are removed, so the folder holds
    exactly what the page embeds.

    Args:
        results: the folder of suite folders (``results/<suite>/<shard>/``).
        docs: the folder the page and its figures go to.
        conf: the suites' YAML folder (their descriptions).

    Returns:
        The page's path.
    """
    results, docs = Path(results), Path(docs)
    folders = suite_folders(results)
    logger.info("rendering %d suites from %s: %s", len(folders), results,
                ", ".join(f.name for f in folders))  # fmt: skip
    started = time.perf_counter()
    sections = [render_suite(f, conf) for f in folders]
    figures = docs / FIGURES_DIR
    figures.mkdir(parents=True, exist_ok=True)
    written = set()
    for s in sections:
        if s.figure is not None:
            path = figures / _figure_name(s.folder)
            path.write_bytes(s.figure)
            written.add(path.name)
    for s in sections:
        if s.folder in CAMPAIGN and s.profile is not None:
            path = figures / f"{s.folder}.png"
            path.write_bytes(s.profile)
            written.add(path.name)
    stale_files = [*figures.glob(_figure_name("*")), *figures.glob("leaderboard_*.png")]
    for stale in sorted(stale_files):
        if stale.name not in written:
            logger.info("removing %s: its suite is no longer under %s", stale, results)
            stale.unlink()
    page = docs / PAGE
    tuning = tuning_section(results)
    page.write_text(render_page(sections, results.name, tuning))
    board = render_leaderboard_page(
        sections, results.name, conf, tuned=bool(tuning), results_root=results
    )
    (docs / LEADERBOARD_PAGE).write_text(board)
    logger.info("wrote %s and %d figures in %.1f s", page, len(written),
                time.perf_counter() - started)  # fmt: skip
    return page


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m analysis.pages``: regenerate the results page; exit 2 on an unreadable set."""
    from .results import ResultsError

    p = argparse.ArgumentParser(
        prog="python -m analysis.pages",
        description="Write docs/results.md and docs/figures/results_<suite>.png from the results "
        "sets under results/ (what `make results-docs` runs).",
    )
    p.add_argument("--results", default="results", help="folder of suite folders")
    p.add_argument("--docs", default="docs", help="folder the page and its figures go to")
    a = p.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not Path(a.results).is_dir():
        sys.stderr.write(f"python -m analysis.pages: {a.results}: no such folder\n")
        return 2
    try:
        page = generate(a.results, a.docs)
    except ResultsError as err:
        sys.stderr.write(f"python -m analysis.pages: {err}\n")
        return 2
    sys.stdout.write(f"{page}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
