"""MLflow runs -> tidy pandas frames.

`load_runs` is the single entry point from a tracking store into the analysis: one row per
run x step x metric, every run's identity (algorithm, seed, task, ...) copied from its tags, so
every later step is a pandas group-by. Runs are selected with ``MlflowClient.search_runs`` (so
MLflow's filter syntax works unchanged); runs and metric histories are read with SQL when the
store is SQLite, else through the client API (:mod:`analysis.mlflow_store`, the one module that
knows MLflow's tables).

`eval_points` turns the tidy frame into the wide table the plots, fits and tables use: one row per
run x dataset x eval step, with the eval metrics and every compute counter at that step.

`load_items` reads the per-item correctness every eval logged (``eval_items/``) into the item
table the verdicts resample: one row per run x eval x dataset x held-out item, with the warm
start the run began from. `run_params` reads chosen params of runs (their logged config).
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis.metrics import (
    COMPUTE_ROLLOUT_SAMPLES,
    EVAL_BUDGET_FRACTION,
    EVAL_ITEMS_DIR,
    TAG_ALGORITHM,
    TAG_BUDGET_KIND,
    TAG_BUDGET_LIMIT,
    TAG_ENGINE,
    TAG_MODEL,
    TAG_ROLE,
    TAG_SEED,
    TAG_START,
    TAG_TASK,
    parse_eval_metric,
)

from ._common import (
    BUDGET_FRACTION,
    HORIZON_TAG,
    MLFLOW_PARENT_TAG,
    RUN_COLUMNS,
    dataset_horizon,
    local_artifact_dir,
)
from .mlflow_store import (
    Record,
    client_history,
    run_values,
    sqlite_history,
    sqlite_path,
    sqlite_runs,
)

__all__ = [
    "ITEM_TABLE_COLUMNS",
    "TIDY_COLUMNS",
    "eval_points",
    "load_items",
    "load_runs",
    "run_params",
]

logger = logging.getLogger(__name__)

#: Columns of the tidy frame, in order.
TIDY_COLUMNS: tuple[str, ...] = (*RUN_COLUMNS, "step", "metric", "value", "timestamp")
#: Columns of the item table (:func:`load_items`), in order.
ITEM_TABLE_COLUMNS: tuple[str, ...] = (
    "run_id",
    "start",
    "seed",
    "algorithm",
    "dataset",
    "horizon",
    "item",
    "step",
    "budget_fraction",
    "compute",
    "correct",
)
#: Roles of container runs (a suite's or sweep's parent) that carry no training curve.
CONTAINER_ROLES: tuple[str, ...] = ("suite", "sweep")
#: Prefixes of metrics treated as compute counters and joined onto eval points.
_COUNTER_PREFIXES = ("compute/", "memory/")
_PAGE = 10_000


def load_runs(
    experiment: str | Sequence[str] | None = None,
    *,
    parent_run_id: str | None = None,
    filter_string: str | None = None,
    tracking_uri: str | None = None,
    metrics: Sequence[str] | None = None,
    exclude_roles: Sequence[str] = CONTAINER_ROLES,
    use_sql: bool = True,
) -> pd.DataFrame:
    """Load runs and their metric histories as a tidy frame (one row per run x step x metric).

    Args:
        experiment: experiment name or id (or several); default: every active experiment, or the
            parent run's experiment when ``parent_run_id`` is given.
        parent_run_id: keep only the nested runs of this parent (a suite invocation).
        filter_string: an MLflow search filter, e.g. ``"tags.algorithm = 'sppo'"``.
        tracking_uri: default: MLflow's current tracking URI (``MLFLOW_TRACKING_URI`` wins).
        metrics: metric names to load; shell patterns (``"eval/*"``) allowed. Default: all.
        exclude_roles: runs whose ``sppo_bench.role`` tag is one of these are dropped: suite and
            sweep parents hold no curves, only children.
        use_sql: when the store is SQLite, read runs (without a filter_string) and histories
            with SQL directly (fast path); ``False`` forces the client API (the tests check both
            agree).

    Returns:
        Columns :data:`TIDY_COLUMNS`; ``seed`` is an integer when every seed tag is one,
        ``horizon`` (arith runs) a number, ``value`` is NaN where MLflow stored a NaN, duplicate
        (run, metric, step) points keep the latest. ``df.attrs["tracking_uri"]`` records the
        store, so later steps (the calibration tables of :func:`analysis.write_report`) can read
        its artifacts.
    """
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    uri = tracking_uri or _current_tracking_uri()
    experiment_ids = _experiment_ids(client, experiment, parent_run_id)
    meta = history = None
    db_path = sqlite_path(uri) if use_sql else None
    if db_path is not None:
        try:
            if filter_string:  # MLflow's filter grammar: let MLflow select the runs
                records = [
                    _record(r)
                    for r in _search_runs(client, experiment_ids, parent_run_id, filter_string)
                ]
            else:  # plain selection: skip loading every run's params through the ORM
                records = sqlite_runs(db_path, experiment_ids, parent_run_id, _TAG_KEYS)
            meta = _run_frame(records, exclude_roles)
            history = sqlite_history(db_path, meta["run_id"].tolist(), metrics)
        except sqlite3.Error as err:  # schema drift or locked file: the client API still works
            logger.warning("reading %s directly failed (%s); using the client API", uri, err)
            meta = history = None
    if history is None:
        runs = _search_runs(client, experiment_ids, parent_run_id, filter_string)
        runs = [r for r in runs if r.data.tags.get(TAG_ROLE) not in set(exclude_roles)]
        meta = _run_frame([_record(r) for r in runs], exclude_roles)
        history = client_history(client, runs, metrics)
    tidy = tidy_frame(history, meta)
    logger.debug("loaded %d runs, %d rows from %s", len(meta), len(tidy), uri)
    tidy.attrs["tracking_uri"] = uri
    return tidy


def tidy_frame(history: pd.DataFrame, meta: pd.DataFrame | None) -> pd.DataFrame:
    """The tidy frame from raw metric rows (run_id, metric, step, value, timestamp) and one row
    per run (:data:`RUN_COLUMNS`): the latest of duplicate (run, metric, step) points kept.

    Shared by :func:`load_runs` and :mod:`analysis.results`, so a report read from a results
    set sees exactly the frame the store gave.
    """
    if meta is None or meta.empty:
        return pd.DataFrame(columns=list(TIDY_COLUMNS))
    history = history.sort_values(["timestamp"], kind="stable")
    history = history.drop_duplicates(["run_id", "metric", "step"], keep="last")
    tidy = history.merge(meta, on="run_id", how="inner", validate="many_to_one")
    tidy = tidy.sort_values(["run_id", "metric", "step"], kind="stable").reset_index(drop=True)
    return tidy[list(TIDY_COLUMNS)]


def eval_points(df: pd.DataFrame, dataset: str | Sequence[str] | None = None) -> pd.DataFrame:
    """Wide table of evaluation points: one row per run x dataset x eval step.

    Columns: the run identity columns, ``dataset``, ``step``, ``eval_index`` (0, 1, ... within a
    run and dataset), ``budget_fraction``, one column per eval metric leaf (``accuracy``,
    ``accuracy_se``, ``avg@16``, ...) and one per compute/memory counter (``compute/flops``, ...).
    Counters are taken at the eval step, or at the last step before it when a counter was not
    logged at exactly that step, so accuracy can be plotted against any compute axis.
    """
    run_cols = [c for c in RUN_COLUMNS if c in df.columns]
    if df.empty:
        return pd.DataFrame(columns=[*run_cols, "dataset", "step", "eval_index"])
    names = pd.Series(df["metric"].unique())
    parsed = {m: parse_eval_metric(m) for m in names}
    parsed = {m: p for m, p in parsed.items() if p is not None}
    if isinstance(dataset, str):
        dataset = [dataset]
    if dataset is not None:
        parsed = {m: p for m, p in parsed.items() if p[0] in set(dataset)}
    if not parsed:
        return pd.DataFrame(columns=[*run_cols, "dataset", "step", "eval_index"])

    ev = df.loc[df["metric"].isin(list(parsed)), ["run_id", "step", "metric", "value"]]
    ev = ev.assign(
        dataset=ev["metric"].map({m: p[0] for m, p in parsed.items()}),
        leaf=ev["metric"].map({m: p[1] for m, p in parsed.items()}),
    )
    wide = ev.pivot_table(
        index=["run_id", "dataset", "step"], columns="leaf", values="value", aggfunc="last"
    )
    wide.columns.name = None
    wide = wide.reset_index()

    frac = df.loc[df["metric"] == EVAL_BUDGET_FRACTION, ["run_id", "step", "value"]]
    frac = frac.rename(columns={"value": BUDGET_FRACTION})
    wide = wide.merge(frac, on=["run_id", "step"], how="left")

    counter_mask = df["metric"].str.startswith(_COUNTER_PREFIXES)
    if counter_mask.any():
        counters = df.loc[counter_mask].pivot_table(
            index=["run_id", "step"], columns="metric", values="value", aggfunc="last"
        )
        counters.columns.name = None
        counters = counters.reset_index()
        # Backward as-of join: exact step when logged there, else the last counter value before.
        wide = pd.merge_asof(
            wide.sort_values("step", kind="stable"),
            counters.sort_values("step", kind="stable"),
            on="step",
            by="run_id",
            direction="backward",
        )

    meta = df[run_cols].drop_duplicates("run_id")
    wide = wide.merge(meta, on="run_id", how="left")
    wide = wide.sort_values(["run_id", "dataset", "step"], kind="stable").reset_index(drop=True)
    wide["eval_index"] = wide.groupby(["run_id", "dataset"]).cumcount()
    first = [*run_cols, "dataset", "step", "eval_index", BUDGET_FRACTION]
    leaves = sorted(c for c in wide.columns if c not in first and "/" not in c)
    counters_cols = sorted(c for c in wide.columns if "/" in c)
    return wide[first + leaves + counters_cols]


# --- run selection -------------------------------------------------------------------------


def _current_tracking_uri() -> str:
    import mlflow

    return mlflow.get_tracking_uri()


def _experiment_ids(
    client: Any, experiment: str | Sequence[str] | None, parent_run_id: str | None
) -> list[str]:
    if experiment is None and parent_run_id is not None:
        return [client.get_run(parent_run_id).info.experiment_id]
    if experiment is None:
        return [e.experiment_id for e in _all_experiments(client)]
    names = [experiment] if isinstance(experiment, str) else list(experiment)
    return [_experiment_id(client, name) for name in names]


def _search_runs(
    client: Any,
    experiment_ids: Sequence[str],
    parent_run_id: str | None,
    filter_string: str | None,
) -> list[Any]:
    """All matching active runs via the client, following pagination."""
    # MLflow's filter grammar has AND but no parentheses: the clauses are simply conjoined.
    clauses = [filter_string] if filter_string else []
    if parent_run_id is not None:
        clauses.append(f"tags.`{MLFLOW_PARENT_TAG}` = '{parent_run_id}'")
    query = " and ".join(clauses)
    runs: list[Any] = []
    if not experiment_ids:
        return runs
    token = None
    while True:
        page = client.search_runs(
            list(experiment_ids), filter_string=query, max_results=_PAGE, page_token=token
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _all_experiments(client: Any) -> list[Any]:
    out: list[Any] = []
    token = None
    while True:
        page = client.search_experiments(max_results=1000, page_token=token)
        out.extend(page)
        token = page.token
        if not token:
            return out


def _experiment_id(client: Any, name_or_id: str) -> str:
    experiment = client.get_experiment_by_name(name_or_id)
    if experiment is not None:
        return experiment.experiment_id
    try:
        return client.get_experiment(name_or_id).experiment_id
    except Exception as err:  # MlflowException: neither a name nor an id
        raise ValueError(f"no MLflow experiment named or numbered {name_or_id!r}") from err


_TAG_KEYS = (
    MLFLOW_PARENT_TAG,
    TAG_ALGORITHM,
    TAG_SEED,
    TAG_TASK,
    TAG_MODEL,
    TAG_ENGINE,
    TAG_BUDGET_KIND,
    TAG_BUDGET_LIMIT,
    TAG_ROLE,
    HORIZON_TAG,
)


def select_runs(
    client: Any, *, experiment: str | None = None, parent_run_ids: Sequence[str] = ()
) -> list[Any]:
    """MLflow ``Run`` objects of a suite: the named parent runs with their children, else every
    active run of the experiment (name or id), each once.

    Raises:
        ValueError: no such experiment (the message lists the store's experiments).
    """
    if parent_run_ids:
        runs = [client.get_run(p) for p in parent_run_ids]
        for p in list(runs):
            runs += _search_runs(client, [p.info.experiment_id], p.info.run_id, None)
    else:
        try:
            exp_id = _experiment_id(client, str(experiment))
        except ValueError as err:
            names = sorted(e.name for e in _all_experiments(client))
            raise ValueError(f"{err}; experiments: {names}") from err
        runs = _search_runs(client, [exp_id], None, None)
    return list({r.info.run_id: r for r in runs}.values())


def run_frame(runs: Sequence[Any]) -> pd.DataFrame:
    """One row per MLflow ``Run`` (containers included): the identity columns of the tidy frame."""
    return _run_frame([_record(r) for r in runs])


def _record(run: Any) -> Record:
    info = run.info
    return (info.run_id, info.run_name, str(info.experiment_id), info.status, run.data.tags)


def _run_frame(records: Sequence[Record], exclude_roles: Sequence[str] = ()) -> pd.DataFrame:
    """One row per run: identity columns from the run info and tags; container roles dropped."""
    rows = []
    for run_id, run_name, experiment_id, status, tags in records:
        if tags.get(TAG_ROLE) in exclude_roles:
            continue
        rows.append(
            {
                "run_id": run_id,
                "run_name": run_name,
                "parent_run_id": tags.get(MLFLOW_PARENT_TAG),
                "experiment_id": experiment_id,
                "algorithm": tags.get(TAG_ALGORITHM),
                "seed": tags.get(TAG_SEED),
                "task": tags.get(TAG_TASK),
                "model": tags.get(TAG_MODEL),
                "engine": tags.get(TAG_ENGINE),
                "budget_kind": tags.get(TAG_BUDGET_KIND),
                "budget_limit": tags.get(TAG_BUDGET_LIMIT),
                "role": tags.get(TAG_ROLE),
                "status": status,
                "horizon": tags.get(HORIZON_TAG),
            }
        )
    return typed_runs(pd.DataFrame(rows, columns=list(RUN_COLUMNS)))


def typed_runs(meta: pd.DataFrame) -> pd.DataFrame:
    """Run identity columns as the analysis reads them: integer seeds when every seed is one,
    numeric budget limits and horizons."""
    if meta.empty:
        return meta
    meta = meta.copy()
    seeds = pd.to_numeric(meta["seed"], errors="coerce")
    if seeds.notna().all() and (seeds == seeds.round()).all():
        meta["seed"] = seeds.astype("int64")
    meta["budget_limit"] = pd.to_numeric(meta["budget_limit"], errors="coerce")
    meta["horizon"] = pd.to_numeric(meta["horizon"], errors="coerce")
    return meta


# --- per-item correctness ------------------------------------------------------------------


def run_params(
    run_ids: Sequence[str], keys: Sequence[str], tracking_uri: str | None = None
) -> pd.DataFrame:
    """Chosen params of runs (their flattened config): one row per run id, one column per key,
    None where a run did not log it. Read with SQL from a SQLite store, else through the client.
    """
    ids = list(dict.fromkeys(str(r) for r in run_ids))
    found = run_values("params", ids, keys, tracking_uri or _current_tracking_uri())
    rows = {r: {k: found[r].get(k) for k in keys} for r in ids}
    return pd.DataFrame.from_dict(rows, orient="index", columns=list(keys)).rename_axis("run_id")


def _start_ids(df: pd.DataFrame, uri: str) -> dict[str, str]:
    """Per run, the warm start it began from: its ``sppo_bench.start`` tag, else (runs logged
    before the tag) ``s<start seed>`` from its ``warmstart.per_seed`` and ``seed`` params, else
    one start for every such run (unknown starts are taken as shared: no claim of independence
    is made that the store cannot back)."""
    runs = df.drop_duplicates("run_id")
    ids = runs["run_id"].astype(str).tolist()
    params = run_params(ids, ["warmstart.per_seed", "seed", "model.name_or_path"], uri)
    tags = run_values("tags", ids, [TAG_START], uri)
    out = {}
    for run_id, seed in zip(ids, runs["seed"], strict=True):
        tag = tags.get(run_id, {}).get(TAG_START)
        if tag:
            out[run_id] = tag
            continue
        p = params.loc[run_id]
        if p["model.name_or_path"] not in (None, "None"):
            out[run_id] = str(p["model.name_or_path"])
        elif p["warmstart.per_seed"] == "True":
            out[run_id] = f"s{seed}"
        elif p["warmstart.per_seed"] == "False" and p["seed"] is not None:
            out[run_id] = f"s{p['seed']}"
        else:
            out[run_id] = "unknown"
    return out


def _item_files(run_id: str, uri: str) -> list[dict[str, Any]]:
    """The run's ``eval_items/*.json`` artifacts, parsed: straight from disk when the artifact
    store is a local directory (a SQLite store's ``mlartifacts/``), else downloaded."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    local = local_artifact_dir(client.get_run(run_id).info.artifact_uri)
    if local is not None:
        return [json.loads(p.read_text()) for p in sorted((local / EVAL_ITEMS_DIR).glob("*.json"))]
    files = [f.path for f in client.list_artifacts(run_id, EVAL_ITEMS_DIR) if not f.is_dir]
    out = []
    for path in sorted(files):
        with open(client.download_artifacts(run_id, path)) as fh:
            out.append(json.load(fh))
    return out


def _group_horizon(group: str, dataset: str) -> float:
    """Position of an eval group on the horizon axis: ``arith_h4`` -> 4, Reasoning Gym's
    ``chain_sum_num_terms3`` (a group of ``chain_sum``) -> 3; NaN when the name holds none."""
    h = dataset_horizon(group)
    if h is not None:
        return float(h)
    rest = group[len(dataset) + 1 :] if group.startswith(dataset + "_") else ""
    digits = len(rest) - len(rest.rstrip("0123456789"))
    return float(rest[-digits:]) if digits else float("nan")


def load_items(df: pd.DataFrame, tracking_uri: str | None = None) -> pd.DataFrame:
    """The item table: every eval's per-item correctness, one row per run x eval x dataset x
    item (the whole task and each of its eval groups, so an item appears under both).

    Args:
        df: the tidy frame of :func:`load_runs` (its runs are read; its compute counters give
            each eval's compute).
        tracking_uri: default ``df.attrs["tracking_uri"]``.

    Returns:
        Columns :data:`ITEM_TABLE_COLUMNS`: ``start`` (the warm start's id: runs with one value share
        it), ``seed`` (the RL seed), ``algorithm``, ``dataset`` (``arith``, ``arith_h4``),
        ``horizon`` (the group's position on the horizon axis, NaN for the whole task), ``item``
        (its id: the index among the task's held-out problems, as a string), ``step``,
        ``budget_fraction``, ``compute`` (rollout samples consumed at that eval, NaN when not
        logged) and ``correct`` (the greedy score in [0, 1]). Runs that logged no items (stores
        written before they were) contribute no rows.
    """
    uri = tracking_uri or df.attrs.get("tracking_uri") or _current_tracking_uri()
    empty = pd.DataFrame(columns=list(ITEM_TABLE_COLUMNS))
    if df.empty:
        return empty
    runs = df.drop_duplicates("run_id")[["run_id", "seed", "algorithm"]]
    starts = _start_ids(df, uri)
    compute = df.loc[df["metric"] == COMPUTE_ROLLOUT_SAMPLES, ["run_id", "step", "value"]]
    compute = {(r, s): v for r, s, v in compute.itertuples(index=False)}
    frames = []
    for run_id, seed, algorithm in runs.itertuples(index=False):
        for f in _item_files(run_id, uri):
            scores = np.asarray(f["scores"], dtype=float)
            ids = np.arange(scores.size)
            parts = [(f["dataset"], ids, float("nan"))] + [
                (g, np.asarray(idx, dtype=int), _group_horizon(g, f["dataset"]))
                for g, idx in f["groups"].items()
            ]
            for name, idx, horizon in parts:
                frames.append(
                    pd.DataFrame(
                        {
                            "run_id": run_id,
                            "start": starts[run_id],
                            "seed": seed,
                            "algorithm": algorithm,
                            "dataset": name,
                            "horizon": horizon,
                            "item": idx.astype(str),
                            "step": int(f["step"]),
                            "budget_fraction": float(f["budget_fraction"]),
                            "compute": compute.get((run_id, int(f["step"])), np.nan),
                            "correct": scores[idx],
                        }
                    )
                )
    if not frames:
        return empty
    items = pd.concat(frames, ignore_index=True)[list(ITEM_TABLE_COLUMNS)]
    items.attrs["tracking_uri"] = uri
    return items.sort_values(
        ["run_id", "dataset", "budget_fraction"], kind="stable", ignore_index=True
    )
