"""Mutation testing of the algorithms, the trainer's step and the code the suite's numbers pass
through (SCOPE): run mutmut, then score it.

``make mutants`` runs both steps (docs/mutation.md says what the numbers mean;
docs/mutation_survivors.yaml lists every surviving mutant: why it is equivalent, or why it is left
alive):

    python scripts/mutation_report.py run --max-children 2   # fresh mutmut run over SCOPE
    python scripts/mutation_report.py report --check          # score per module, fail on news

``--scope NAME`` (repeatable) on both restricts them to some scopes, e.g. after changing one
module: ``run --scope "verl metrics"`` runs only its mutants, ``report --scope "verl metrics"``
scores and checks only them.

mutmut mutates whole files (``[tool.mutmut] only_mutate``); it cannot restrict itself to some
functions of a file, but ``mutmut run`` takes mutant-name patterns. So every function of
``benchmarks/training/trainer.py`` gets mutants, only those of the step (``train_step``,
``_update`` and what they call in that file) and of the prompt stream are run, and the rest are
counted as out of scope; the same for ``start.py`` and ``warmstart.py`` (only the cache key).

The report reads mutmut's result files (``mutants/**/*.py.meta``) and the mutants listed in
docs/mutation_survivors.yaml (``equivalent`` and ``surviving``: name, scope, change, why). With
``--check`` it fails when a scope misses its target, when a survivor is neither listed as
equivalent nor as a known survivor (a new one: kill it or justify it), or when a listed mutant
was killed or no longer exists (mutant numbers shift when a function changes: relist them), or
when docs/mutation.md's score table does not add up or counts other mutants than the list
(``check_page``). A
malformed entry of the list (a field missing or unknown, a scope that is not one of SCOPE or not
the name's, a name listed twice, a bold **reason** that ``reasons`` does not define) stops both
``report`` and ``report --check`` with one line naming the file and the entry.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MUTANTS = REPO / "mutants"
#: The listed mutants: equivalent ones and known survivors, each with why (``load_listed``).
LISTED = REPO / "docs" / "mutation_survivors.yaml"
PAGE = REPO / "docs" / "mutation.md"
PAGE_HEAD = "| scope | killed | total | equivalent | survived | score | target | run |"
DATA_ENV = "SPPO_BENCH_DATA"  # benchmarks.tasks.datasets.DATA_DIR_ENV (not imported: no deps)

TRAINER = "benchmarks.training.trainer"
CRITIC = "benchmarks.training.critic"
OPTIM = "benchmarks.training.optim"
START = "benchmarks.training.start"
WARMSTART = "benchmarks.training.warmstart"
_S = "\u01c1"  # mutmut's class separator in mangled names: x<S>Class<S>method
#: The trainer's step: train_step, _update and everything they call in trainer.py.
STEP_METHODS = (
    "train_step",
    "_draw_more",
    "_fits",
    "_gen_cost",
    "_rollout",
    "_meter_rollout",
    "_reward",
    "_on_policy",
    "_teacher_forced",
    "_update",
    "_actor_update",
    "_count_skip",
)
#: What the step calls of the critic (training/critic.py), and the value function it runs.
CRITIC_METHODS = ("values", "_values", "flops", "update", "init_head", "prediction_std")
#: mutmut mutant-name patterns (fnmatch) of everything in scope.
SCOPE: dict[str, tuple[str, ...]] = {
    "algorithms": ("algorithms.*",),
    "trainer step": (
        f"{TRAINER}.x_rollout_logprob_mismatch__mutmut_*",
        f"{TRAINER}.x__kept_batch__mutmut_*",
        f"{TRAINER}.x__minibatches__mutmut_*",
        f"{TRAINER}.x__mean_metrics__mutmut_*",
        f"{TRAINER}.x{_S}_Batch{_S}*__mutmut_*",
        *(f"{TRAINER}.x{_S}RLTrainer{_S}{m}__mutmut_*" for m in STEP_METHODS),
        f"{CRITIC}.x_rollout_flops__mutmut_*",
        *(f"{CRITIC}.x{_S}Critic{_S}{m}__mutmut_*" for m in CRITIC_METHODS),
        f"{OPTIM}.x_guarded_step__mutmut_*",
    ),
    #: The training prompts: seeded permutations, and their state across a resume.
    "prompt stream": (f"{TRAINER}.x{_S}PromptStream{_S}*__mutmut_*",),
    #: What keys the warm-start cache (which start a suite reuses), not the SFT itself.
    "warm-start identity": (
        f"{START}.x{_S}StartRecipe{_S}*__mutmut_*",
        f"{WARMSTART}.x_config_hash__mutmut_*",
        f"{WARMSTART}.x_cache_key__mutmut_*",
    ),
    "tasks": ("benchmarks.tasks.*",),
    "in-training evaluation": ("benchmarks.evaluation.trainer_evals.*",),
    "verl metrics": ("benchmarks.verl_engine.metrics.*",),
    #: The declared claims' estimates, intervals, Holm and verdicts (what the report publishes).
    "protocol": ("analysis.claims.protocol.*",),
}
#: Least share of non-equivalent mutants killed, per scope.
TARGETS = {
    "algorithms": 0.95,
    "trainer step": 0.95,
    "prompt stream": 0.90,
    "warm-start identity": 0.90,
    "tasks": 0.90,
    "in-training evaluation": 0.90,
    "verl metrics": 0.90,
    "protocol": 0.90,
}

# mutmut's exit codes (mutmut.stats.status_by_exit_code), folded into what the score needs.
_KILLED = {1, 3, 37}  # test failure, pytest internal error, type check
_TIMEOUT = {36, -24, 24, 152, 255}
_SURVIVED = {0, 5, 33}  # tests passed; no test ran (5, 33) counts as survived


@dataclass
class Row:
    """Counts of one module (or one scope)."""

    total: int = 0
    killed: int = 0
    timeout: int = 0
    equivalent: int = 0
    survived: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)  # not run, suspicious, segfault

    def add(self, other: Row) -> None:
        self.total += other.total
        self.killed += other.killed
        self.timeout += other.timeout
        self.equivalent += other.equivalent
        self.survived += other.survived
        self.other += other.other

    @property
    def score(self) -> float:
        """Killed (timeouts included) over the non-equivalent mutants."""
        live = self.total - self.equivalent
        return (self.killed + self.timeout) / live if live else 1.0


def scope_of(key: str) -> str | None:
    for scope, patterns in SCOPE.items():
        if any(fnmatch.fnmatchcase(key, p) for p in patterns):
            return scope
    return None


def module_of(key: str) -> str:
    return key.partition(f".x{_S}")[0].partition(".x_")[0]


def load_results() -> dict[str, int | None]:
    """``{mutant name: exit code}`` of every mutant mutmut generated (None: not run)."""
    metas = sorted(MUTANTS.rglob("*.py.meta"))
    if not metas:
        sys.exit(f"no mutmut results under {MUTANTS}: run `make mutants` first")
    out: dict[str, int | None] = {}
    for meta in metas:
        out.update(json.loads(meta.read_text())["exit_code_by_key"])
    return out


#: The fields of a listed mutant, all required (non-empty strings).
FIELDS = ("name", "scope", "change", "why")
#: The lists of LISTED (beside `reasons`, its glossary of the recurring reasons named in bold).
LISTS = ("equivalent", "surviving")
_NAME = re.compile(r"^[\w.\u01c1]+__mutmut_\d+$")
_REASON = re.compile(r"\*\*(.+?)\*\*")


class ListError(ValueError):
    """A malformed LISTED: the message is one line naming the file and the entry."""


@dataclass(frozen=True)
class Listed:
    """The mutants LISTED names: ``{name: why}`` per list, and the recurring reasons."""

    equivalent: dict[str, str]
    surviving: dict[str, str]
    reasons: dict[str, str]

    @property
    def names(self) -> set[str]:
        return set(self.equivalent) | set(self.surviving)


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def load_listed(path: Path | None = None) -> Listed:
    """The equivalent mutants and known survivors of ``path`` (LISTED), checked entry by entry:
    every field of FIELDS present, a non-empty string, and no other; ``scope`` one of SCOPE and
    the one the name's patterns fall in; no name twice (in one list or across both); every bold
    ``**reason**`` of a ``why`` defined under ``reasons``. Raises ListError on the first fault."""
    import yaml  # here, not at the top: the pytest plugin side of this file needs none of it

    path = LISTED if path is None else path
    where = _shown(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ListError(f"{where}: cannot read it ({e.strerror or e})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ListError(f"{where}{at}: not valid YAML ({problem})") from None
    if not isinstance(data, dict):
        raise ListError(f"{where}: a mapping of reasons, {', '.join(LISTS)} expected")
    unknown = sorted(set(data) - {"reasons", *LISTS}, key=str)
    if unknown:
        raise ListError(
            f"{where}: unknown key {unknown[0]!r} (allowed: reasons, {', '.join(LISTS)})"
        )
    reasons = data.get("reasons") or {}
    if not isinstance(reasons, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in reasons.items()
    ):
        raise ListError(f"{where}: reasons: a mapping of reason to a non-empty text expected")
    out: dict[str, dict[str, str]] = {}
    seen: dict[str, str] = {}
    for kind in LISTS:
        entries = data.get(kind)
        if entries is None:
            entries = []
        if not isinstance(entries, list):
            raise ListError(f"{where}: {kind}: a list of entries expected")
        out[kind] = {}
        for i, entry in enumerate(entries):
            at = f"{where}: {kind}[{i}]"
            if not isinstance(entry, dict):
                raise ListError(f"{at}: a mapping of {', '.join(FIELDS)} expected")
            name = entry.get("name")
            if isinstance(name, str):
                at += f" ({name})"
            missing = [f for f in FIELDS if f not in entry]
            if missing:
                raise ListError(f"{at}: missing field {missing[0]!r}")
            extra = sorted(set(entry) - set(FIELDS), key=str)
            if extra:
                raise ListError(f"{at}: unknown field {extra[0]!r} (allowed: {', '.join(FIELDS)})")
            for f in FIELDS:
                if not isinstance(entry[f], str) or not entry[f].strip():
                    raise ListError(f"{at}: field {f!r} is not a non-empty string")
            if not _NAME.match(name):
                raise ListError(f"{at}: not a mutant name (module.function__mutmut_N)")
            scope = entry["scope"]
            if scope not in SCOPE:
                raise ListError(f"{at}: unknown scope {scope!r} (allowed: {', '.join(SCOPE)})")
            falls = scope_of(name)
            if falls != scope:
                inside = "no scope" if falls is None else f"scope {falls!r}"
                raise ListError(f"{at}: scope {scope!r}, but SCOPE puts the name in {inside}")
            if name in seen:
                raise ListError(f"{at}: listed twice (also in {seen[name]})")
            seen[name] = f"{kind}[{i}]"
            for reason in _REASON.findall(entry["why"]):
                if reason not in reasons:
                    raise ListError(f"{at}: reason **{reason}** is not defined under reasons")
            out[kind][name] = entry["why"]
    return Listed(equivalent=out["equivalent"], surviving=out["surviving"], reasons=reasons)


def tally(
    results: dict[str, int | None], equivalent: set[str], scopes: Sequence[str] = tuple(SCOPE)
) -> tuple[dict[str, dict[str, Row]], int]:
    """Rows per scope (of ``scopes``) and module, and the number of out-of-scope mutants."""
    rows: dict[str, dict[str, Row]] = {s: {} for s in scopes}
    out_of_scope = 0
    for key, code in sorted(results.items()):
        scope = scope_of(key)
        if scope is None:
            out_of_scope += 1
            continue
        if scope not in rows:
            continue
        row = rows[scope].setdefault(module_of(key), Row())
        row.total += 1
        if key in equivalent:
            row.equivalent += 1
        elif code in _KILLED:
            row.killed += 1
        elif code in _TIMEOUT:
            row.timeout += 1
        elif code in _SURVIVED:
            row.survived.append(key)
        else:
            row.other.append(key)
    return rows, out_of_scope


def markdown(rows: dict[str, dict[str, Row]], out_of_scope: int) -> str:
    """The score table of docs/mutation.md (killed includes timeouts)."""
    lines = [
        "| scope | module | killed | total | equivalent | survived | score |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for scope, modules in rows.items():
        whole = Row()
        for name, row in sorted(modules.items()):
            whole.add(row)
            lines.append(
                f"| {scope} | `{name}` | {row.killed + row.timeout} | {row.total} | "
                f"{row.equivalent} | {len(row.survived) + len(row.other)} | {row.score:.1%} |"
            )
        lines.append(
            f"| **{scope}** | all | **{whole.killed + whole.timeout}** | **{whole.total}** | "
            f"**{whole.equivalent}** | **{len(whole.survived) + len(whole.other)}** | "
            f"**{whole.score:.1%}** |"
        )
    lines.append("")
    lines.append(
        f"Out of scope (generated in trainer.py, critic.py, start.py, warmstart.py, not run): "
        f"{out_of_scope} mutants."
    )
    return "\n".join(lines)


def mutmut() -> str:
    return str(Path(sys.executable).with_name("mutmut"))


def source_path(key: str) -> Path:
    """The source file of a mutant (relative to the repository, as mutmut names it)."""
    module = module_of(key)
    path = Path(*module.split("."))
    return path / "__init__.py" if (REPO / path).is_dir() else path.with_suffix(".py")


def diff(key: str) -> str:
    """The mutant's unified diff against the original function (what ``mutmut show`` prints)."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    os.chdir(REPO)  # mutmut reads its config and mutants/ relative to the working directory
    return get_diff_for_mutant(key, path=source_path(key))


def changed_lines(key: str) -> list[str]:
    """The ``-``/``+`` lines of the mutant's diff, stripped."""
    return [
        line[0] + " " + line[1:].strip()
        for line in diff(key).splitlines()
        if line[:1] in "-+" and not line.startswith(("---", "+++"))
    ]


#: Under a mutant, a test whose call uses this many times the CPU time it took in mutmut's stats
#: run (at least HANG_FLOOR_S; its fixtures' setup, which mutmut does not time, at least
#: HANG_SETUP_S) is taken for a hang and fails, so the mutant counts as killed, as a timeout does.
#: Without it a mutant that loops (a `while` that never ends, a list that grows for ever) runs
#: until mutmut's own CPU limit: 30 times the time of every test that reaches the function, half
#: an hour for the trainer's or the arith task's. CPU time, so a loaded machine does not trip it.
HANG_FACTOR = 10.0
HANG_FLOOR_S = 20.0
HANG_SETUP_S = 60.0
#: A test blocked in a wait (a pipe no one writes to) burns no CPU: past this many seconds of
#: wall time (HANG_WALL_FACTOR times its duration, at least HANG_WALL_S, for a loaded machine)
#: the process sends itself SIGXCPU, the signal of mutmut's CPU limit, so it counts as a timeout.
HANG_WALL_FACTOR = 10.0
HANG_WALL_S = 60.0


class MutantHang(Exception):
    """A test ran past its CPU allowance under a mutant (``HANG_FACTOR``)."""


_DURATIONS: dict[str, float] = {}


def _durations() -> dict[str, float]:
    """Each test's call duration in mutmut's stats run, read once the file exists (a fresh run
    writes it after this plugin is imported, in the same process its workers fork from)."""
    stats = Path("mutmut-stats.json")  # the working directory is mutants/
    if not _DURATIONS and stats.exists():
        _DURATIONS.update(json.loads(stats.read_text())["duration_by_test"])
    return _DURATIONS


def _on_hang(signum: int, frame: object) -> None:
    raise MutantHang("the test ran past its CPU allowance under a mutant (a hang)")


_WATCHDOG: list[threading.Timer] = []


def _arm(seconds: float, wall: float) -> None:
    """The CPU guard, repeating so that code which swallows one exception is interrupted again,
    and the wall-clock watchdog (a daemon thread), each replacing the one armed before."""
    if "__mutmut_" not in os.environ.get("MUTANT_UNDER_TEST", ""):
        return  # mutmut's stats, clean and forced-fail runs, and every run outside mutmut
    signal.signal(signal.SIGPROF, _on_hang)
    signal.setitimer(signal.ITIMER_PROF, seconds, 1.0)
    _disarm_watchdog()
    timer = threading.Timer(wall, os.kill, (os.getpid(), signal.SIGXCPU))
    timer.daemon = True
    timer.start()
    _WATCHDOG.append(timer)


def _disarm_watchdog() -> None:
    while _WATCHDOG:
        _WATCHDOG.pop().cancel()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """pytest hook (``run``'s mutmut only): the guard over the test's fixtures, armed before
    they are built (a mutant in a fixture's code can loop there)."""
    _arm(HANG_SETUP_S, wall=HANG_WALL_S)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """pytest hook: the guard over the test itself, from its measured duration; a test the
    stats run did not time gets the setup's allowance."""
    known = _durations().get(item.nodeid)
    _arm(
        HANG_SETUP_S if known is None else max(HANG_FLOOR_S, HANG_FACTOR * known),
        wall=max(HANG_WALL_S, HANG_WALL_FACTOR * (known or 0.0)),
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """pytest hook: disarmed before the fixtures are torn down."""
    signal.setitimer(signal.ITIMER_PROF, 0.0)
    _disarm_watchdog()


def pytest_collection_modifyitems(items: list) -> None:
    """pytest hook, active in ``run``'s mutmut only (``-p mutation_report``): cheapest test
    modules first, by the durations mutmut measured, so that a mutant a fast algorithm test kills
    is not first run through the trainer tests (``-x`` stops at the first failure). A module's
    tests keep their order and stay together (module fixtures are built once)."""
    cost: dict[str, float] = {}
    for nodeid, seconds in _durations().items():
        module = nodeid.partition("::")[0]
        cost[module] = cost.get(module, 0.0) + seconds
    items.sort(key=lambda item: cost.get(item.nodeid.partition("::")[0], 0.0))


def _data_env() -> dict[str, str]:
    """``SPPO_BENCH_DATA`` for the copied tests: they run from ``mutants/tests``, where
    ``tests/support/testkit/paths.py`` would look for ``mutants/../shared/data`` and, not finding
    it, skip every test that reads the real datasets (so their mutants would survive). A variable
    already set wins; with no data beside the repository nothing is set."""
    if os.environ.get(DATA_ENV):
        return {}
    data = REPO.parent / "shared" / "data"
    return {DATA_ENV: str(data.resolve())} if data.is_dir() else {}


def cmd_run(args: argparse.Namespace) -> int:
    """A fresh mutmut run over SCOPE, or the scopes named (results of an earlier run are
    discarded)."""
    patterns = [p for s in _scopes(args) for p in SCOPE[s]]
    shutil.rmtree(MUTANTS, ignore_errors=True)
    MUTANTS.mkdir()
    # mutmut puts mutants/ first on sys.path: this file is the test-order plugin there.
    shutil.copy2(__file__, MUTANTS / "mutation_report.py")
    env = {
        **os.environ,
        **_data_env(),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTEST_ADDOPTS": f"{os.environ.get('PYTEST_ADDOPTS', '')} -p mutation_report".strip(),
    }
    cmd = [mutmut(), "run", "--max-children", str(args.max_children), *patterns]
    sys.stdout.write(f"{' '.join(cmd[:4])} <{len(patterns)} scope patterns>\n")
    sys.stdout.flush()
    return subprocess.run(cmd, cwd=REPO, env=env, check=False).returncode


def check(
    results: dict[str, int | None],
    listed: Listed,
    rows: dict[str, dict[str, Row]],
    partial: bool = False,
) -> list[str]:
    """What ``report --check`` fails on, one line each: a scope of ``rows`` below its target, a
    mutant of it not run or crashed, a survivor ``listed`` does not name, and a listed mutant that
    no longer exists or was killed (with ``partial``, only those of the scopes in ``rows``: the
    others were not run)."""
    where = _shown(LISTED)
    problems: list[str] = []
    for scope, modules in rows.items():
        whole = Row()
        for row in modules.values():
            whole.add(row)
        if whole.score < TARGETS[scope]:
            problems.append(f"{scope}: {whole.score:.1%} killed, target {TARGETS[scope]:.0%}")
        for key in whole.other:
            problems.append(f"{key}: {results[key]!r} (not run, suspicious or crashed)")
        for key in whole.survived:
            if key not in listed.names:
                problems.append(f"{key}: survived and not listed in {where}")
    for key in sorted(listed.names):
        if partial and scope_of(key) not in rows:  # a partial run: the others unseen
            continue
        if key not in results:
            problems.append(f"{key}: listed in {where} but no such mutant (renumbered?)")
        elif results[key] not in _SURVIVED:
            problems.append(f"{key}: listed in {where} but killed (exit {results[key]})")
    return problems


_COUNT = re.compile(r"^(\d+)(?: \((\d+) listed\))?$")


def check_page(listed: Listed, path: Path | None = None) -> list[str]:
    """What ``report --check`` fails on in ``path``'s (PAGE's) score table, one line each: a
    scope without its row, a row that does not add up, and an equivalent or survived count other
    than ``listed``'s for the scope (a run that measured another writes ``measured (N listed)``)."""
    path = PAGE if path is None else path
    where, lines = _shown(path), path.read_text().splitlines()
    if PAGE_HEAD not in lines:
        return [f"{where}: no score table ({PAGE_HEAD})"]
    table: dict[str, list[str]] = {}
    for line in lines[lines.index(PAGE_HEAD) + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        table[cells[0]] = cells
    problems = [f"{where}: no score row for scope {s!r}" for s in SCOPE if s not in table]
    for scope, cells in table.items():
        counts = [_COUNT.match(c) for c in cells[1:5]]
        if scope not in SCOPE or len(cells) != 8 or not all(counts):
            problems.append(f"{where}: unreadable score row {' | '.join(cells)!r}")
            continue
        killed, total, eq, surv = (int(m[1]) for m in counts)
        score = f"{Row(total, killed, 0, eq).score:.1%}"
        if killed + eq + surv != total or cells[5] != score:
            problems.append(f"{where}: {scope}: {killed} + {eq} + {surv} of {total}, {cells[5]}")
        for m, column, names in zip(counts[2:], ("equivalent", "survived"), LISTS, strict=True):
            n = sum(scope_of(key) == scope for key in getattr(listed, names))
            if int(m[2] or m[1]) != n:
                problems.append(f"{where}: {scope}: {column} {m[0]}, but {LISTED.name} lists {n}")
    return problems


def cmd_report(args: argparse.Namespace) -> int:
    try:
        listed = load_listed()
    except ListError as e:
        sys.exit(f"mutation: {e}")
    results = load_results()
    rows, out_of_scope = tally(results, set(listed.equivalent), _scopes(args))
    sys.stdout.write(markdown(rows, out_of_scope) + "\n")
    problems = check(results, listed, rows, partial=bool(args.scope)) + check_page(listed)
    if args.diffs:
        for modules in rows.values():
            for row in modules.values():
                for key in row.survived:
                    if key not in listed.names:
                        sys.stdout.write(f"\n# {key}\n" + "\n".join(changed_lines(key)) + "\n")
    for p in problems:
        sys.stderr.write(f"mutation: {p}\n")
    return 1 if (problems and args.check) else 0


def _scopes(args: argparse.Namespace) -> list[str]:
    """The scopes ``--scope`` names (all of SCOPE without it); an unknown one is refused."""
    named = args.scope or list(SCOPE)
    unknown = [s for s in named if s not in SCOPE]
    if unknown:
        sys.exit(f"--scope {unknown[0]!r}: allowed {list(SCOPE)}")
    return named


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="fresh mutmut run over the scope")
    run.add_argument("--max-children", type=int, default=2, help="mutmut worker processes")
    run.add_argument("--scope", action="append", help="only this scope (repeatable)")
    run.set_defaults(fn=cmd_run)
    rep = sub.add_parser("report", help="score per module from mutants/")
    rep.add_argument("--check", action="store_true", help="exit 1 on any problem")
    rep.add_argument("--diffs", action="store_true", help="print unlisted survivors' diffs")
    rep.add_argument("--scope", action="append", help="only this scope (repeatable)")
    rep.set_defaults(fn=cmd_report)
    args = parser.parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    raise SystemExit(main())
