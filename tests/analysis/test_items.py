"""Per-item correctness: every eval of a real (micro) suite logs its items, and the loader reads
them into the item table the verdicts resample, consistent with the logged accuracies."""

from __future__ import annotations

import numpy as np
import pytest

from analysis import eval_points, load_items, load_runs
from analysis import metrics as M

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def loaded(micro_suite):
    result, cfg = micro_suite
    df = load_runs(f"sppo-bench-{cfg.suite.name}", tracking_uri=result.tracking_uri)
    return df, load_items(df)


def test_every_eval_of_every_run_logged_its_items(micro_suite, loaded):
    from mlflow.tracking import MlflowClient

    result, cfg = micro_suite
    client = MlflowClient(result.tracking_uri)
    fractions = list(cfg.budget.eval_fractions)
    for run in result.runs:
        files = [f.path for f in client.list_artifacts(run.run_id, M.EVAL_ITEMS_DIR)]
        assert files == [M.eval_items_file("arith", f) for f in fractions], run.algorithm


def test_the_item_table_reproduces_every_logged_accuracy(loaded):
    df, items = loaded
    points = eval_points(df)
    assert len(items) and not items["correct"].isna().any()
    means = items.groupby(["run_id", "dataset", "budget_fraction"])["correct"].mean()
    logged = points.set_index(["run_id", "dataset", "budget_fraction"])["accuracy"]
    assert set(means.index) == set(logged.index)
    # the same scores averaged in another order: float64 rounding only
    np.testing.assert_allclose(means.sort_index(), logged.sort_index(), rtol=0, atol=1e-12)


def test_items_carry_their_start_seed_compute_and_horizon(micro_suite, loaded):
    result, cfg = micro_suite
    _, items = loaded
    # MICRO: one seed, each seed its own warm start
    assert set(items["start"]) == {f"s{cfg.seed}"}
    assert set(items["seed"]) == {cfg.seed}
    # the same item ids for every run, at every eval
    ids = items.groupby(["run_id", "dataset", "budget_fraction"])["item"].apply(tuple)
    assert ids.groupby(level="dataset").nunique().eq(1).all()
    for ds, h in items.groupby("dataset")["horizon"].unique().items():  # arith_h<h> groups
        if ds != "arith":
            assert list(h) == [float(ds.removeprefix("arith_h"))], ds
    assert items.loc[items["dataset"] == "arith", "horizon"].isna().all()
    start = items[items["budget_fraction"] == 0.0]
    assert (start["compute"] == 0).all()
    end = items[items["budget_fraction"] == 1.0].groupby("run_id")["compute"].first()
    assert (end > 0).all() and (end <= cfg.budget.limit).all()
