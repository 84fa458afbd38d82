"""Results sets: a suite's runs as compressed Parquet tables plus a manifest, in the repository.

A results set is what a suite measured, written so that anyone can redo the analysis without the
MLflow store it came from: the report, the claims' verdicts, the pages under ``docs/`` and the
notebooks all read the same frames from it as from the store (:func:`analysis.load_runs`,
:func:`analysis.load_items`, :func:`analysis.load_calibration`), so a page can never drift from
its data. Layout of one set (a folder)::

    manifest.json      schema version, suite, commit(s), machine, command, hashes, starts, tables
    runs.parquet       one row per run (suite parents too): identity, status, start, config hash,
                       wall time, FLOPs and peak memory at the end
    params.parquet     every run's params (the flattened resolved config): run_id, key, value
    tags.parquet       every run's tags: run_id, key, value
    metrics.parquet    every metric history point: run_id, metric, step, value, timestamp
    evals.parquet      every eval point with its metrics and compute counters (eval_points)
    items.parquet      every eval's per-item scores (the item table the verdicts resample)
    calibration.parquet  the prompt critics' per-prompt calibration tables
    artifacts.parquet  the runs' small artifacts (per-item JSON, calibration JSON, config.yaml),
                       byte for byte, so that an import recreates the runs whole

Several sets of one suite are shards, merged by start id (:func:`read_results`): a campaign grows
by adding shards run on other days, machines or clusters. Shards may differ only in the starts
and seeds they hold (:data:`SHARD_FIELDS`) and in how they were executed (:data:`EXECUTION_FIELDS`);
any other difference in the resolved config is refused, naming the field and both values.

Every failure to read a set raises :class:`ResultsError` naming the file and the field, and a set
is written to a temporary folder renamed into place only when whole.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.metrics import (
    COMPUTE_FLOPS,
    COMPUTE_WALL_S,
    EVAL_ITEMS_DIR,
    MEMORY_PEAK_BYTES,
    TAG_COMMAND,
    TAG_CONFIG_HASH,
    TAG_GIT_COMMIT,
    TAG_MACHINE,
    TAG_ROLE,
    TAG_START,
)

from ._common import MLFLOW_PARENT_TAG, RUN_COLUMNS, local_artifact_dir
from .calibration import CALIBRATION_ARTIFACT, load_calibration
from .claims.spec import CLAIMS_PARAM, Claim, claims_from_param
from .load import (
    CONTAINER_ROLES,
    eval_points,
    load_items,
    run_frame,
    select_runs,
    tidy_frame,
    typed_runs,
)
from .mlflow_store import run_histories

__all__ = [
    "EXECUTION_FIELDS",
    "MANIFEST",
    "SCHEMA_VERSION",
    "SHARD_FIELDS",
    "TABLES",
    "ResultsError",
    "ResultsSet",
    "export_results",
    "find_sets",
    "import_results",
    "read_results",
    "results_from_store",
    "write_results",
]

logger = logging.getLogger(__name__)

#: Bumped whenever a table's columns or meaning change; a reader refuses any other version.
SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
#: The tables of a set, in the order they are written.
TABLES: tuple[str, ...] = (
    "runs",
    "params",
    "tags",
    "metrics",
    "evals",
    "items",
    "calibration",
    "artifacts",
)
#: Config fields in which shards of one suite differ by design: which starts and RL seeds they hold.
SHARD_FIELDS: tuple[str, ...] = ("seed", "seeds")
#: Config fields that say how and where runs executed, never what they computed (the same set the
#: resume check ignores, plus where outputs go): shards may differ in them too.
EXECUTION_FIELDS: tuple[str, ...] = (
    "jobs",
    "resume",
    "ray",
    "tracking",
    "output_dir",
    "cache_dir",
    "min_free_disk_gb",
    "suite.report",
)
#: Artifacts carried byte for byte: small, and what an import needs to make the runs whole.
#: Figures and reports are not: they are regenerated from the tables.
_ARTIFACT_PREFIXES: tuple[str, ...] = (f"{EVAL_ITEMS_DIR}/", CALIBRATION_ARTIFACT, "config.yaml")
#: Tag an import puts on each run it recreates: the run's id in the set. An export of imported
#: runs gives them back these ids, so export -> import -> export gives the same set.
IMPORTED_FROM_TAG = "sppo_bench.imported_from"
#: Columns of the runs table after :data:`RUN_COLUMNS`.
_RUN_EXTRA = ("start", "config_hash", "git_commit", "start_time", "end_time", "wall_s", "flops",
              "peak_bytes")  # fmt: skip
_KV_COLUMNS = ("run_id", "key", "value")
_HISTORY_COLUMNS = ("run_id", "metric", "step", "value", "timestamp")
_ARTIFACT_COLUMNS = ("run_id", "path", "content")
#: Each table's row order (stable sorts: the order the loaders give is kept within a key), so
#: that a set's tables do not depend on the store's run ids or the order it returned runs in.
_ORDER: dict[str, list[str]] = {
    "runs": ["role", "algorithm", "seed", "run_id"],
    "params": ["run_id", "key"],
    "tags": ["run_id", "key"],
    "metrics": ["run_id", "metric", "step", "timestamp"],
    "evals": ["run_id", "dataset", "step"],
    "items": ["run_id", "dataset", "budget_fraction"],
    "calibration": ["run_id"],
    "artifacts": ["run_id", "path"],
}
#: Parquet settings: zstd compresses the float histories about 3x better than snappy here.
_PARQUET = {"engine": "pyarrow", "compression": "zstd", "index": False}


class ResultsError(ValueError):
    """A results set that cannot be read, merged or written; the message names the file and the
    field, so a user knows which shard to look at."""


@dataclass(frozen=True)
class ResultsSet:
    """One results set, or several shards of one suite merged by start id.

    The frames are the tables of :data:`TABLES`; ``manifests`` holds one manifest per shard, in
    the order read. ``tidy()``, ``items`` and ``calibration`` are what :func:`analysis.write_report`
    takes, so a report needs no store.
    """

    manifests: tuple[dict[str, Any], ...]
    runs: pd.DataFrame
    params: pd.DataFrame
    tags: pd.DataFrame
    metrics: pd.DataFrame
    evals: pd.DataFrame
    items: pd.DataFrame
    calibration: pd.DataFrame
    artifacts: pd.DataFrame
    sources: tuple[Path, ...] = field(default=())

    @property
    def suite(self) -> str:
        return str(self.manifests[0]["suite"])

    @property
    def starts(self) -> list[str]:
        return sorted({s for m in self.manifests for s in m["starts"]})

    def tidy(self) -> pd.DataFrame:
        """The tidy frame of the training runs, equal to :func:`analysis.load_runs` on the store
        (container runs, the suite parents, left out)."""
        return tidy_frame(self.metrics, _training(self.runs))

    def claims(self) -> list[Claim] | None:
        """The claims the runs declared (their ``claims`` param); None when none was logged."""
        train = self.runs.loc[~self.runs["role"].isin(CONTAINER_ROLES), "run_id"]
        values = self.params[
            self.params["run_id"].isin(train) & (self.params["key"] == CLAIMS_PARAM)
        ]["value"]
        return claims_from_param(values.iloc[0]) if len(values) else None


# --- from a store ----------------------------------------------------------------------------


def results_from_store(
    *,
    tracking_uri: str,
    experiment: str | None = None,
    parent_run_ids: Sequence[str] = (),
    command: str | None = None,
    machine: dict[str, Any] | None = None,
) -> ResultsSet:
    """Read a suite's runs from any MLflow store (SQLite, a server, PostgreSQL) into a set.

    Args:
        tracking_uri: the store.
        experiment: every run of this experiment (name or id), when no parent is named.
        parent_run_ids: suite invocations (parent runs): each with its child runs.
        command: the command that made the runs, for the manifest; default: the suite parent's
            ``sppo_bench.command`` tag, else ``"unknown"``.
        machine: the machine the runs ran on, for a store whose suite did not record it (the
            parent's ``sppo_bench.machine`` tag wins); else the manifest says it is unknown.

    Raises:
        ResultsError: no such experiment or run, or no run finished.
    """
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    where = f"experiment {experiment!r}" if experiment else f"runs {list(parent_run_ids)}"
    if not parent_run_ids and experiment is None:
        raise ResultsError("export: name an experiment or a suite's parent run id")
    try:
        runs = select_runs(client, experiment=experiment, parent_run_ids=parent_run_ids)
    except MlflowException as err:
        raise ResultsError(f"{tracking_uri}: {where}: {err.message}") from err
    except ValueError as err:  # no such experiment: the message lists those there are
        raise ResultsError(f"{tracking_uri}: {err}") from err
    train = [r for r in runs if r.data.tags.get(TAG_ROLE) not in CONTAINER_ROLES]
    if not any(r.info.status == "FINISHED" for r in train):
        raise ResultsError(
            f"{tracking_uri}: {where} has no finished run (status of its {len(train)} training "
            f"runs: {sorted({r.info.status for r in train})}); nothing to export"
        )

    meta = run_frame(runs)
    history = run_histories(client, runs)
    tidy = tidy_frame(history, _training(meta))
    tidy.attrs["tracking_uri"] = tracking_uri
    items = load_items(tidy, tracking_uri)
    calibration = load_calibration(tidy, tracking_uri)
    params = _kv({r.info.run_id: r.data.params for r in runs})
    tags = _kv({r.info.run_id: r.data.tags for r in runs})
    artifacts = _artifacts(client, train)
    run_table = _runs_table(meta, runs, items, history)
    sources = {r.info.run_id: r.data.tags.get(IMPORTED_FROM_TAG) for r in runs}
    if any(sources.values()):
        params, tags, artifacts, run_table, history, items, calibration = _restore_ids(
            sources, params, tags, artifacts, run_table, history, items, calibration
        )
        tidy = tidy_frame(history, _training(run_table))
    experiments = sorted({client.get_experiment(r.info.experiment_id).name for r in runs})
    manifest = _manifest(
        run_table, params, tags, command, machine, tracking_uri, ", ".join(experiments)
    )
    tables = {
        "runs": run_table,
        "params": params,
        "tags": tags,
        "metrics": history,
        "evals": eval_points(tidy),
        "items": items,
        "calibration": calibration,
        "artifacts": artifacts,
    }
    return ResultsSet(
        manifests=(manifest,), **{k: _sorted(v, _ORDER[k]) for k, v in tables.items()}
    )


def export_results(out: str | Path, **kwargs: Any) -> Path:
    """Write a suite's runs from a store as a results set in ``out`` (see
    :func:`results_from_store` for the arguments); returns the folder."""
    return write_results(results_from_store(**kwargs), out)


def _restore_ids(sources: dict[str, str | None], *tables: pd.DataFrame) -> list[pd.DataFrame]:
    """Give imported runs back the ids they had in the set they came from (their
    :data:`IMPORTED_FROM_TAG`), in every table, and drop that tag."""
    ids = {new: old or new for new, old in sources.items()}
    if len(set(ids.values())) < len(ids):
        raise ResultsError(
            "the selection holds the same imported run twice (a results set imported twice into "
            "one experiment): export one import's runs by their parent run id"
        )
    out = []
    for table in tables:
        table = table.copy()
        for column in ("run_id", "parent_run_id"):
            if column in table.columns:
                table[column] = table[column].map(lambda r: ids.get(r, r))
        if "key" in table.columns and "value" in table.columns:
            table = table[table["key"] != IMPORTED_FROM_TAG]
            parent = table["key"] == MLFLOW_PARENT_TAG
            table.loc[parent, "value"] = table.loc[parent, "value"].map(lambda r: ids.get(r, r))
        out.append(table)
    return out


def _training(runs: pd.DataFrame) -> pd.DataFrame:
    """The training runs' identity columns, typed as :func:`analysis.load_runs` types them (the
    suite parents, with no seed, would otherwise keep the seeds as strings)."""
    meta = runs.loc[~runs["role"].isin(CONTAINER_ROLES), list(RUN_COLUMNS)]
    return typed_runs(meta.reset_index(drop=True))


def _kv(values: dict[str, dict[str, str]]) -> pd.DataFrame:
    rows = [(r, k, str(v)) for r, kv in values.items() for k, v in kv.items()]
    return pd.DataFrame(rows, columns=list(_KV_COLUMNS))


def _sorted(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    return df.sort_values(by, kind="stable").reset_index(drop=True)


def _artifacts(client: Any, runs: Iterable[Any]) -> pd.DataFrame:
    """The small artifacts of each run (:data:`_ARTIFACT_PREFIXES`), as bytes: read in place
    from a local artifact store, else downloaded."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in runs:
            run_id = run.info.run_id
            root = local_artifact_dir(run.info.artifact_uri)
            for path in _artifact_paths(client, run_id):
                local = (
                    root / path
                    if root is not None
                    else Path(client.download_artifacts(run_id, path, dst_path=tmp))
                )
                rows.append((run_id, path, local.read_bytes()))
    return pd.DataFrame(rows, columns=list(_ARTIFACT_COLUMNS))


def _artifact_paths(client: Any, run_id: str, folder: str | None = None) -> list[str]:
    out = []
    for info in client.list_artifacts(run_id, folder):
        wanted = any(info.path.startswith(p) or p.startswith(info.path + "/") for p in
                     _ARTIFACT_PREFIXES)  # fmt: skip
        if info.is_dir and wanted:
            out += _artifact_paths(client, run_id, info.path)
        elif not info.is_dir and any(info.path.startswith(p) for p in _ARTIFACT_PREFIXES):
            out.append(info.path)
    return out


def _runs_table(
    meta: pd.DataFrame, runs: Sequence[Any], items: pd.DataFrame, history: pd.DataFrame
) -> pd.DataFrame:
    """RUN_COLUMNS plus each run's start, config hash, commit, times and its last compute."""
    info = {r.info.run_id: r for r in runs}
    starts = items.drop_duplicates("run_id").set_index("run_id")["start"].to_dict()
    last = (
        history[history["metric"].isin([COMPUTE_WALL_S, COMPUTE_FLOPS, MEMORY_PEAK_BYTES])]
        .sort_values(["step", "timestamp"], kind="stable")
        .groupby(["run_id", "metric"])["value"]
        .last()
        .unstack()
    )
    out = meta.copy()
    out["start"] = [
        info[r].data.tags.get(TAG_START) or starts.get(r) for r in out["run_id"]
    ]  # fmt: skip
    # The hash of the resolved config is a tag of the suite parent; a child has its parent's.
    own = {r: info[r].data.tags.get(TAG_CONFIG_HASH) for r in out["run_id"]}
    out["config_hash"] = [
        own[r] or own.get(p) if isinstance(p, str) else own[r]
        for r, p in zip(out["run_id"], out["parent_run_id"], strict=True)
    ]
    out["git_commit"] = [info[r].data.tags.get(TAG_GIT_COMMIT) for r in out["run_id"]]
    out["start_time"] = [info[r].info.start_time for r in out["run_id"]]
    out["end_time"] = [info[r].info.end_time for r in out["run_id"]]
    for column, metric in (("wall_s", COMPUTE_WALL_S), ("flops", COMPUTE_FLOPS),
                           ("peak_bytes", MEMORY_PEAK_BYTES)):  # fmt: skip
        values = last[metric] if metric in last.columns else pd.Series(dtype=float)
        out[column] = out["run_id"].map(values).astype("float64")
    for column in ("start_time", "end_time"):
        out[column] = pd.array(out[column], dtype="Int64")
    return out[[*RUN_COLUMNS, *_RUN_EXTRA]]


def _suite_params(runs: pd.DataFrame, params: pd.DataFrame) -> dict[str, str]:
    """The resolved config the shard check compares: the first training run's params, shard
    and execution fields left out (every run of a suite logs the same config)."""
    train = runs.loc[~runs["role"].isin(CONTAINER_ROLES), "run_id"]
    first = train.iloc[0] if len(train) else runs["run_id"].iloc[0]
    kv = params[params["run_id"] == first]
    return {k: v for k, v in zip(kv["key"], kv["value"], strict=True) if _compared(k)}


def _compared(key: str) -> bool:
    skip = SHARD_FIELDS + EXECUTION_FIELDS
    return not any(key == f or key.startswith(f + ".") for f in skip)


def _suite_hash(config: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def _manifest(
    runs: pd.DataFrame,
    params: pd.DataFrame,
    tags: pd.DataFrame,
    command: str | None,
    machine: dict[str, Any] | None,
    tracking_uri: str,
    experiment: str,
) -> dict[str, Any]:

    parents = runs.loc[runs["role"] == "suite", "run_id"].tolist()

    def parent_tag(key: str) -> str | None:
        found = tags[tags["run_id"].isin(parents) & (tags["key"] == key)]["value"]
        return found.iloc[0] if len(found) else None

    config = _suite_params(runs, params)
    train = runs[~runs["role"].isin(CONTAINER_ROLES)]
    recorded = parent_tag(TAG_MACHINE)
    first = pd.to_numeric(runs["start_time"], errors="coerce").min()
    ran = datetime.fromtimestamp(first / 1000, UTC) if first == first else None
    return {
        "schema_version": SCHEMA_VERSION,
        "suite": config.get("suite.name", "unknown"),
        "experiment": experiment,
        "commits": sorted({c for c in runs["git_commit"].dropna()}),
        "machine": json.loads(recorded) if recorded else machine,
        "machine_source": "recorded by the suite"
        if recorded
        else ("given at export" if machine else "not recorded"),
        "command": command or parent_tag(TAG_COMMAND) or "unknown",
        "date": ran.strftime("%Y-%m-%d") if ran else None,
        "suite_hash": _suite_hash(config),
        "config_hashes": sorted({c for c in train["config_hash"].dropna()}),
        "starts": sorted({str(s) for s in train["start"].dropna()}),
        "seeds": sorted({int(s) for s in pd.to_numeric(train["seed"], errors="coerce").dropna()}),
        "runs": int(len(train)),
        "finished_runs": int((train["status"] == "FINISHED").sum()),
        "algorithms": sorted({str(a) for a in train["algorithm"].dropna()}),
        "source": _redact(tracking_uri),
    }


def _redact(uri: str) -> str:
    """A store's URI without credentials (a PostgreSQL URI may carry a password)."""
    if "@" in uri and "://" in uri:
        scheme, rest = uri.split("://", 1)
        return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
    return uri


# --- writing and reading ------------------------------------------------------------------------


def write_results(rs: ResultsSet, out: str | Path) -> Path:
    """Write one set (one manifest) into ``out``, which must not hold another set.

    The tables are written to a temporary sibling folder, checksummed into the manifest, and the
    folder is renamed into place only when whole: a killed export leaves nothing half written.
    """
    if len(rs.manifests) != 1:
        raise ResultsError(f"{out}: write one set at a time, not {len(rs.manifests)} merged shards")
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ResultsError(f"{out}: not empty; results sets are added, never overwritten")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        files = {}
        for name in TABLES:
            path = tmp / f"{name}.parquet"
            getattr(rs, name).to_parquet(path, **_PARQUET)
            files[name] = {
                "file": path.name,
                "rows": int(len(getattr(rs, name))),
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            }
        manifest = {**rs.manifests[0], "tables": files}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        tmp.chmod(0o755)
        if out.exists():
            out.rmdir()
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    logger.info("results set written to %s (%d runs)", out, rs.manifests[0]["runs"])
    return out


def find_sets(paths: Iterable[str | Path]) -> list[Path]:
    """The set folders under the given paths: a path holding a manifest is one set; any other
    folder stands for the sets below it (``results/claims`` for all its shards)."""
    found: list[Path] = []
    for p in map(Path, paths):
        if not p.is_dir():
            raise ResultsError(f"{p}: no such folder")
        if (p / MANIFEST).is_file():
            found.append(p)
            continue
        below = sorted(m.parent for m in p.rglob(MANIFEST))
        if not below:
            raise ResultsError(f"{p}: holds no results set (no {MANIFEST} in it or below it)")
        found += below
    return found


def _read_one(folder: Path) -> ResultsSet:
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ResultsError(f"{path}: not a readable manifest ({err})") from err
    if not isinstance(manifest, dict):
        raise ResultsError(f"{path}: not a JSON object")
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ResultsError(
            f"{path}: field 'schema_version' is {version!r}; this sppo-bench reads "
            f"{SCHEMA_VERSION} (export the runs again, or use the sppo-bench that wrote it)"
        )
    tables = manifest.get("tables")
    if not isinstance(tables, dict) or set(tables) != set(TABLES):
        raise ResultsError(f"{path}: field 'tables' must list exactly {list(TABLES)}")
    frames = {}
    for name in TABLES:
        file = folder / str(tables[name].get("file", f"{name}.parquet"))
        try:
            data = file.read_bytes()
        except OSError as err:
            raise ResultsError(f"{file}: missing ({err.strerror})") from err
        if hashlib.sha256(data).hexdigest() != tables[name].get("sha256"):
            raise ResultsError(
                f"{file}: its checksum differs from the manifest's field 'tables.{name}.sha256' "
                "(truncated, corrupt or edited by hand)"
            )
        try:
            frames[name] = pd.read_parquet(file, engine="pyarrow")
        except Exception as err:  # pyarrow's ArrowInvalid and OSError: an unreadable file
            raise ResultsError(f"{file}: not a readable Parquet table ({err})") from err
        if len(frames[name]) != tables[name].get("rows"):
            raise ResultsError(f"{file}: {len(frames[name])} rows, the manifest says "
                               f"{tables[name].get('rows')} (field 'tables.{name}.rows')")  # fmt: skip
    return ResultsSet(manifests=(manifest,), sources=(folder,), **frames)


def read_results(paths: Iterable[str | Path]) -> ResultsSet:
    """Read one set or several shards of one suite, merged by start id.

    Raises:
        ResultsError: an unreadable set; shards of different suites or configs (naming the field
            and both values); a start held by two shards.
    """
    sets = [_read_one(p) for p in find_sets(paths)]
    if not sets:
        raise ResultsError("no results set given")
    merged = sets[0]
    held = {s: merged.sources[0] for s in merged.manifests[0]["starts"]}
    for other in sets[1:]:
        _check_compatible(merged, other)
        for start in other.manifests[0]["starts"]:
            if start in held:
                raise ResultsError(
                    f"start {start!r} is held by two shards, {held[start]} and "
                    f"{other.sources[0]}: keep one of them"
                )
            held[start] = other.sources[0]
        merged = replace(
            merged,
            manifests=merged.manifests + other.manifests,
            sources=merged.sources + other.sources,
            **{name: _concat(getattr(merged, name), getattr(other, name)) for name in TABLES},
        )
    return merged


def _concat(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    if b.empty:
        return a
    if a.empty:
        return b
    return pd.concat([a, b], ignore_index=True)


def _check_compatible(merged: ResultsSet, other: ResultsSet) -> None:
    first, second = merged.manifests[0], other.manifests[0]
    where = f"{merged.sources[0]} and {other.sources[0]}"
    if first["suite"] != second["suite"]:
        raise ResultsError(
            f"{where} are shards of different suites: field 'suite' is {first['suite']!r} and "
            f"{second['suite']!r}"
        )
    if first["suite_hash"] == second["suite_hash"]:
        return
    a = _suite_params(merged.runs, merged.params)
    b = _suite_params(other.runs, other.params)
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            raise ResultsError(
                f"{where} differ in config field {key!r}: {a.get(key)!r} and {b.get(key)!r} "
                f"(shards may differ only in {', '.join(SHARD_FIELDS)} and in how they ran)"
            )
    raise ResultsError(f"{where}: field 'suite_hash' differs ({first['suite_hash']} and "
                       f"{second['suite_hash']}) while no config field does: a manifest was "
                       "edited")  # fmt: skip


# --- into a store -------------------------------------------------------------------------------


def import_results(rs: ResultsSet, tracking_uri: str, experiment_id: str) -> dict[str, str]:
    """Recreate a set's runs in an MLflow store: parent and child runs with their params, tags,
    full metric histories (steps and timestamps kept) and artifacts, so the published runs can
    be browsed and compared with one's own in the MLflow UI. The caller creates the experiment
    (``sppo-bench import`` does it as a suite does, so the UI opens it as a training one).

    Returns:
        The new run id of each run of the set.
    """
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp_id = experiment_id
    order = rs.runs.assign(_child=rs.runs["role"].isin(CONTAINER_ROLES).map({True: 0, False: 1}))
    order = order.sort_values(["_child", "start_time"], kind="stable")
    new_ids: dict[str, str] = {}
    tags = {r: g for r, g in rs.tags.groupby("run_id")}
    params = {r: g for r, g in rs.params.groupby("run_id")}
    metrics = {r: g for r, g in rs.metrics.groupby("run_id")}
    artifacts = {r: g for r, g in rs.artifacts.groupby("run_id")}
    empty_kv = pd.DataFrame(columns=list(_KV_COLUMNS))
    for row in order.itertuples(index=False):
        old = row.run_id
        kv = tags.get(old, empty_kv)
        run_tags = {
            k: new_ids.get(v, v) if k == MLFLOW_PARENT_TAG else v
            for k, v in zip(kv["key"], kv["value"], strict=True)
        }
        run_tags[IMPORTED_FROM_TAG] = old
        start = None if pd.isna(row.start_time) else int(row.start_time)
        run = client.create_run(exp_id, start_time=start, tags=run_tags, run_name=row.run_name)
        rid = run.info.run_id
        new_ids[old] = rid
        pv = params.get(old, empty_kv)
        batch = [Param(k, v) for k, v in zip(pv["key"], pv["value"], strict=True)]
        for i in range(0, len(batch), 100):
            client.log_batch(rid, params=batch[i : i + 100])
        hist = metrics.get(old, rs.metrics.iloc[:0])
        points = [
            Metric(m, float(v), int(t), int(s))
            for m, s, v, t in zip(
                hist["metric"], hist["step"], hist["value"], hist["timestamp"], strict=True
            )  # fmt: skip
        ]
        for i in range(0, len(points), 1000):
            client.log_batch(rid, metrics=points[i : i + 1000])
        art = artifacts.get(old)
        if art is not None:
            with tempfile.TemporaryDirectory() as tmp:
                for path, content in zip(art["path"], art["content"], strict=True):
                    local = Path(tmp) / path
                    local.parent.mkdir(parents=True, exist_ok=True)
                    local.write_bytes(content)
                for top in sorted({Path(p).parts[0] for p in art["path"]}):
                    local = Path(tmp) / top
                    if local.is_dir():
                        client.log_artifacts(rid, str(local), top)
                    else:
                        client.log_artifact(rid, str(local))
        end = None if pd.isna(row.end_time) else int(row.end_time)
        client.set_terminated(rid, status=row.status, end_time=end)
    logger.info("imported %d runs into experiment %s of %s", len(new_ids), exp_id,
                _redact(tracking_uri))  # fmt: skip
    return new_ids
