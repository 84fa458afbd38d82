"""`sppo-bench report` on the session's micro suite: every file report.md links exists, the files
are logged to the suite's parent run, and the tables cover the four algorithms. Then the pieces
the report adds over the accuracy curves (calibration, horizon, training curves) on small frames
with known answers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from mlflow.tracking import MlflowClient

from analysis import (
    calibration_bins,
    expected_calibration_error,
    horizon_table,
    load_calibration,
    load_runs,
    plot_accuracy_vs_horizon,
    plot_calibration,
    plot_training_curves,
    resolve_tracking_uri,
)
from benchmarks.cli import main

FOUR = {"sppo", "ppo", "grpo", "dapo"}


def _report(micro_suite, tmp_path: Path, *selector: str) -> tuple[Path, str]:
    result, _ = micro_suite
    out = tmp_path / "report"
    rc = main(["report", *selector, "--out", str(out), "--tracking-uri", result.tracking_uri])
    assert rc == 0
    return out, result.parent_run_id


@pytest.fixture(scope="module")
def by_run_id(micro_suite, tmp_path_factory) -> tuple[Path, str]:
    """The report of the micro suite's parent run, written once for the tests that read it."""
    result, _ = micro_suite
    return _report(
        micro_suite, tmp_path_factory.mktemp("by_run_id"), "--run-id", result.parent_run_id
    )


def test_report_writes_every_file_it_lists_and_logs_them(micro_suite, by_run_id) -> None:
    result, _ = micro_suite
    out, parent = by_run_id
    text = (out / "report.md").read_text()
    links = set(re.findall(r"\]\(([^)\s]+)\)", text))
    for name in links:
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    written = {p.name for p in out.iterdir()}
    assert written == links | {"report.md"}  # nothing written that the report does not list
    # The default suite's figures: accuracy on every compute axis, dynamics, calibration, memory.
    for fig in (
        "accuracy_vs_flops",
        "accuracy_vs_rollout_tokens",
        "accuracy_vs_rollout_samples",
        "accuracy_vs_wall_s",
        "training_curves",
        "calibration",
        "memory",
    ):
        assert {f"{fig}.png", f"{fig}.pdf"} <= links, fig
        assert (out / f"{fig}.png").stat().st_size > 10_000, fig
    assert "accuracy_vs_horizon.png" not in links  # one horizon: no horizon figure

    for table in ("accuracy", "summary", "memory", "throughput", "iqm", "compute_to_target"):
        frame = pd.read_csv(out / f"{table}.csv")
        assert set(frame["algorithm"]) == FOUR, table
    assert set(pd.read_csv(out / "calibration.csv")["algorithm"]) == {"sppo"}

    client = MlflowClient(tracking_uri=result.tracking_uri)
    logged = {Path(a.path).name for a in client.list_artifacts(parent, "report")}
    assert logged == written


def test_report_by_experiment_logs_to_the_newest_suite_run(micro_suite, tmp_path: Path) -> None:
    result, _ = micro_suite
    # The micro suite's parent is the only (so the newest) suite run of its experiment.
    out, parent = _report(micro_suite, tmp_path, "--experiment", result.experiment)
    client = MlflowClient(tracking_uri=result.tracking_uri)
    local = client.download_artifacts(parent, "report/report.md", str(tmp_path / "dl"))
    assert Path(local).read_text() == (out / "report.md").read_text()
    assert Path(local).read_text().startswith(f"# sppo-bench: {result.experiment}")


def test_report_unknown_experiment_fails_cleanly(micro_suite, tmp_path: Path, capsys) -> None:
    result, _ = micro_suite
    rc = main(["report", "--experiment", "no-such", "--tracking-uri", result.tracking_uri])
    assert rc == 2 and "no-such" in capsys.readouterr().err


def _logged_calibration(micro_suite, tmp_path: Path) -> tuple[str, list[dict]]:
    """The sppo run's id and its ``critic_calibration.json`` rows, parsed here from MLflow's
    table layout (``{"columns": [...], "data": [[...], ...]}``), not through analysis."""
    result, _ = micro_suite
    client = MlflowClient(tracking_uri=result.tracking_uri)
    (run,) = [r for r in result.runs if r.algorithm == "sppo"]
    path = client.download_artifacts(run.run_id, "critic_calibration.json", str(tmp_path / "cal"))
    blob = json.loads(Path(path).read_text())
    return run.run_id, [dict(zip(blob["columns"], row, strict=True)) for row in blob["data"]]


def _calibration_by_hand(rows: list[dict], bins: int = 10) -> dict[str, float]:
    """The report's calibration row from the logged predictions and success rates: the
    prompt-weighted mean over equal-width bins [b/bins, (b+1)/bins) (the last one closed) of
    |mean predicted - mean empirical|, the means, the bins that hold a prompt."""
    gaps, used = 0.0, 0
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        inside = [
            r for r in rows if lo <= r["predicted"] and (r["predicted"] < hi or b == bins - 1)
        ]
        if inside:
            used += 1
            mean_p = sum(r["predicted"] for r in inside) / len(inside)
            mean_e = sum(r["empirical"] for r in inside) / len(inside)
            gaps += len(inside) * abs(mean_p - mean_e)
    return {
        "prompts": len(rows),
        "ece": gaps / len(rows),
        "mean_predicted": sum(r["predicted"] for r in rows) / len(rows),
        "mean_empirical": sum(r["empirical"] for r in rows) / len(rows),
        "bins_used": used,
    }


def test_report_calibration_table_from_the_logged_predictions(
    micro_suite, by_run_id, tmp_path: Path
) -> None:
    """calibration.csv is what the logged per-prompt table gives when summarised by hand.
    (The micro suite's barely trained critic may put every prompt in one bin; the binning
    itself is checked on known answers by test_calibration_bins_and_ece_by_hand.)"""
    _, cfg = micro_suite
    _, rows = _logged_calibration(micro_suite, tmp_path)
    k = cfg.trainer.calibration_samples
    assert len(rows) == min(cfg.trainer.calibration_prompts, cfg.task.eval_size)
    for r in rows:  # an empirical rate is a count of k samples; a prediction is a sigmoid
        assert r["k"] == k and (r["empirical"] * k).is_integer() and 0 < r["predicted"] < 1
    (table,) = pd.read_csv(by_run_id[0] / "calibration.csv").to_dict("records")
    want = _calibration_by_hand(rows)
    assert (table["algorithm"], table["runs"]) == ("sppo", 1)
    assert (table["prompts"], table["bins_used"]) == (want["prompts"], want["bins_used"])
    # Means of n <= 200 values in [0, 1] summed in two orders (numpy's pairwise sums, Python's
    # left to right), then a CSV round trip whose parser may return a neighbouring float: a
    # few n * eps64 (~2e-13), orders below what a dropped row or swapped column moves them by.
    tol = 4 * len(rows) * np.finfo(np.float64).eps
    for key in ("ece", "mean_predicted", "mean_empirical"):
        assert table[key] == pytest.approx(want[key], abs=tol, rel=0), key


def test_load_calibration_from_the_store(micro_suite, tmp_path: Path) -> None:
    result, cfg = micro_suite
    run_id, rows = _logged_calibration(micro_suite, tmp_path)
    df = load_runs(parent_run_id=result.parent_run_id, tracking_uri=result.tracking_uri)
    cal = load_calibration(df)  # the store comes from df.attrs
    assert set(cal["algorithm"]) == {"sppo"} and set(cal["run_id"]) == {run_id}
    # exactly the logged rows, in order, with the run's identity
    assert cal[["prompt", "predicted", "empirical", "k"]].to_dict("records") == rows
    assert (cal["seed"] == 0).all() and (cal["task"] == "arith").all()
    assert (cal["horizon"] == cfg.task.horizon).all()
    by_id = load_calibration(df["run_id"].unique(), result.tracking_uri)
    assert by_id[["prompt", "predicted", "empirical"]].equals(
        cal[["prompt", "predicted", "empirical"]]
    )
    assert set(by_id["algorithm"]) == {"sppo"}  # identity read from the run's tags


# --- the pieces, on frames with known answers -----------------------------------------------


def test_calibration_bins_and_ece_by_hand() -> None:
    cal = pd.DataFrame(
        {"predicted": [0.05, 0.15, 0.12, 0.95, 0.91], "empirical": [0.0, 0.25, 0.5, 1.0, 0.75]}
    )
    bins = calibration_bins(cal, bins=10)
    assert bins["n"].tolist() == [1, 2, 2]
    assert bins["predicted"].tolist() == pytest.approx([0.05, 0.135, 0.93])
    assert bins["empirical"].tolist() == pytest.approx([0.0, 0.375, 0.875])
    # |0.05-0| * 1 + |0.135-0.375| * 2 + |0.93-0.875| * 2, over 5 prompts
    ece = expected_calibration_error(cal["predicted"], cal["empirical"], bins=10)
    assert ece == pytest.approx((0.05 + 2 * 0.24 + 2 * 0.055) / 5)
    assert expected_calibration_error([0.0, 1.0], [0.0, 1.0]) == 0.0  # edges land in end bins
    cal = cal.assign(algorithm="sppo", k=8, run_id="r", horizon=np.nan)
    ax = plot_calibration(cal, Figure().subplots())
    assert any("ECE 0.128" in t.get_text() for t in ax.get_legend().get_texts())


def _horizon_points(seeds: int) -> pd.DataFrame:
    """Final accuracy = 0.5 / h + 0.01 * (seed - mean seed), start 0.1, per algorithm offset."""
    rows = []
    for algo, bonus in (("sppo", 0.1), ("ppo", 0.0)):
        for h in (1, 2, 4):
            for s in range(seeds):
                for step, frac in ((0, 0.0), (10, 1.0)):
                    acc = 0.1 if frac == 0 else 0.5 / h + bonus + 0.01 * (s - (seeds - 1) / 2)
                    rows.append(
                        {
                            "run_id": f"{algo}-{h}-{s}",
                            "algorithm": algo,
                            "seed": s,
                            "dataset": f"arith_h{h}",
                            "step": step,
                            "budget_fraction": frac,
                            "accuracy": acc,
                            "accuracy_se": 0.02,
                        }
                    )
    return pd.DataFrame(rows)


def test_horizon_table_means_and_intervals() -> None:
    table = horizon_table(_horizon_points(3), reps=500).set_index(["algorithm", "horizon"])
    assert table.loc[("sppo", 2), "mean"] == pytest.approx(0.35)
    assert table.loc[("ppo", 4), "mean"] == pytest.approx(0.125)
    assert (table["lo"] <= table["mean"]).all() and (table["mean"] <= table["hi"]).all()
    assert table["start"].tolist() == pytest.approx([0.1] * 6)
    assert (table["n_runs"] == 3).all()
    one = horizon_table(_horizon_points(1)).set_index(["algorithm", "horizon"])
    assert one.loc[("ppo", 1), "hi"] - one.loc[("ppo", 1), "mean"] == pytest.approx(
        1.96 * 0.02, rel=1e-3
    )
    ax = plot_accuracy_vs_horizon(_horizon_points(3), Figure().subplots(), reps=200)
    assert ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()][:2] == ["sppo (n=3)", "ppo (n=3)"]


def test_horizon_from_the_tag_when_the_dataset_does_not_name_it() -> None:
    pts = _horizon_points(1)
    pts = pts.assign(horizon=pts["dataset"].str[-1].astype(int), dataset="arith")
    table = horizon_table(pts)
    assert sorted(table["horizon"].unique()) == [1, 2, 4]
    with pytest.raises(ValueError, match="suite=horizon"):
        plot_accuracy_vs_horizon(pts.drop(columns="horizon"), Figure().subplots())


def test_training_curves_mean_over_seeds() -> None:
    rows = []
    for algo in ("sppo", "grpo"):
        for s in range(2):
            for step in range(1, 5):
                base = {"run_id": f"{algo}{s}", "algorithm": algo, "step": step}
                rows.append({**base, "metric": "train/score_mean", "value": step / 10 + s / 100})
                rows.append({**base, "metric": "compute/rollout_samples", "value": 32.0 * step})
                if algo == "sppo":
                    rows.append({**base, "metric": "critic/explained_variance", "value": 0.5})
    fig = plot_training_curves(pd.DataFrame(rows), fig=Figure(), reps=200)
    score, ev = fig.axes  # train/entropy was not logged: no panel for it
    line = score.get_lines()[0]
    assert line.get_label() == "sppo (n=2)"
    assert line.get_xdata().tolist() == [32.0, 64.0, 96.0, 128.0]
    assert line.get_ydata() == pytest.approx([0.105, 0.205, 0.305, 0.405])
    assert [ln.get_label() for ln in ev.get_lines()] == ["sppo (n=2)"]


def test_resolve_tracking_uri_finds_the_store_in_a_parent(tmp_path: Path) -> None:
    (tmp_path / "mlflow.db").write_bytes(b"")
    (tmp_path / "notebooks").mkdir()
    found = resolve_tracking_uri("sqlite:///mlflow.db", start=tmp_path / "notebooks")
    assert found == f"sqlite:///{(tmp_path / 'mlflow.db').as_posix()}"
    assert resolve_tracking_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    with pytest.raises(FileNotFoundError, match="SPPO_BENCH_TRACKING_URI"):
        resolve_tracking_uri("sqlite:///missing.db", start=tmp_path)


# --- the claims section: declared claims, gates, Holm, the one-start label ------------------


def _suite_items(n_starts: int, n_seeds: int, seed: int = 0) -> pd.DataFrame:
    """A simulated claims suite (analysis.simulate) with sppo, ppo and grpo on four groups:
    sppo against ppo and grpo against ppo drawn from one design, ppo's rows kept once."""
    from analysis.simulate import Design, simulate_items

    design = Design(n_starts=n_starts, n_seeds=n_seeds, horizons=(1, 2, 4, 8), items=40, evals=4)
    one = simulate_items(design, seed=seed, a="sppo", b="ppo")
    two = simulate_items(design, seed=seed + 1, a="grpo", b="ppo")
    items = pd.concat([one, two[two["algorithm"] == "grpo"]], ignore_index=True)
    return items.assign(run_id=lambda d: d["start"] + "-" + d["seed"].astype(str) + d["algorithm"])


def _tidy_of(items: pd.DataFrame) -> pd.DataFrame:
    """The tidy frame the runs of an item table would have logged: each eval's accuracy per
    dataset, its budget fraction and compute."""
    acc = (
        items.groupby(["run_id", "algorithm", "seed", "dataset", "budget_fraction"])
        .agg(accuracy=("correct", "mean"), compute=("compute", "first"))
        .reset_index()
    )
    acc["step"] = (acc["budget_fraction"] * 100).round().astype(int)
    rows = []
    for r in acc.itertuples(index=False):
        base = {"run_id": r.run_id, "algorithm": r.algorithm, "seed": r.seed, "step": r.step}
        rows += [
            {**base, "metric": f"eval/{r.dataset}/accuracy", "value": r.accuracy},
            {**base, "metric": "eval/budget_fraction", "value": r.budget_fraction},
            {**base, "metric": "compute/rollout_samples", "value": r.compute},
        ]
    df = pd.DataFrame(rows).drop_duplicates(["run_id", "metric", "step"])
    return df.assign(task="arith", model="tiny")


def _claims(rollouts: str = "area", **gates):
    """The two headline claims as shipped (the horizon slope and the area, non-inferiority with
    margins), or with ``rollouts="ratio"`` claim (b) on the compute ratio."""
    from analysis.claims.spec import parse_claims

    common = {"groups": "all", "family": {"name": "headline", "size": 4}, "gates": gates}
    second = (
        {"estimand": "area_difference", "direction": "a >= b", "margin": 0.02}
        if rollouts == "area"
        else {"estimand": "compute_ratio", "direction": "a needs less compute"}
    )
    return parse_claims(
        [
            {"name": "horizon", "estimand": "horizon_slope", "a": "sppo", "b": "ppo",
             "direction": "a >= b", "margin": 0.01, **common},
            {"name": "rollouts", "a": "sppo", "b": "grpo", **second, **common},
        ]
    )  # fmt: skip


def _claims_text(text: str) -> str:
    return text.split("## Claims", 1)[1].split("\n## ", 1)[0]


def test_one_shared_start_gives_conditional_intervals_and_no_verdict(tmp_path: Path) -> None:
    from analysis import write_report
    from analysis.claims.protocol import DOES_NOT_HOLD, NOT_RESOLVED, SUPERIOR
    from analysis.claims.table import NO_VERDICT

    items = _suite_items(n_starts=1, n_seeds=3)
    text = write_report(
        _tidy_of(items), tmp_path / "r", claims=_claims(), items=items, reps=200, fit_reps=2
    ).read_text()
    assert re.findall(r"^## (.+)$", text, flags=re.M)[0] == "Claims"
    section = _claims_text(text)
    bullets = [ln for ln in section.splitlines() if ln.startswith("- **")]
    assert len(bullets) == 2
    for b in bullets:
        assert "conditional on one start over 1 start × 3 seeds" in b
        assert f"**{NO_VERDICT}**" in b
        assert f"**{SUPERIOR}**" not in b and f"**{DOES_NOT_HOLD}**" not in b
        assert f"**{NOT_RESOLVED}**" not in b
        result = b.split("): ", 1)[1]  # after the claim's own statement
        assert " fewer" not in result and " more " not in result
    table = pd.read_csv(tmp_path / "r" / "claims.csv")
    assert set(table["verdict"]) == {NO_VERDICT} and table["conditional"].all()
    assert (table["n_starts"] == 1).all()
    assert "conditional on one start" in (tmp_path / "r" / "claims.md").read_text()
    assert "Everything after the claims is exploratory" in text


def test_holm_levels_shown_match_holm_over_the_declared_family(tmp_path: Path) -> None:
    from analysis import write_report
    from analysis.claims.protocol import holm

    items = _suite_items(n_starts=5, n_seeds=1, seed=3)
    write_report(
        _tidy_of(items), tmp_path / "r", claims=_claims(), items=items, reps=200, fit_reps=2
    )
    table = pd.read_csv(tmp_path / "r" / "claims.csv")
    assert not table["conditional"].any() and (table["n_starts"] == 5).all()
    # two of the family's four members are here; the other two count as p = 1
    rows = holm(table["p_value"].tolist(), 0.05, family_size=4)
    np.testing.assert_allclose(table["alpha_adj"], [r.alpha_adj for r in rows], rtol=0)
    np.testing.assert_allclose(table["p_adj"], [r.p_adj for r in rows], rtol=0)
    # by hand: the smaller p is tested at 0.05 / 4, the larger at 0.05 / 3
    small = table["p_value"].idxmin()
    assert table.loc[small, "alpha_adj"] == pytest.approx(0.0125)
    assert table.loc[1 - small, "alpha_adj"] == pytest.approx(0.05 / 3)
    shown = (tmp_path / "r" / "claims.md").read_text()
    for a in table["alpha_adj"]:
        assert f"α = {a:.4g}" in shown
    # the adjusted interval is wider than the nominal one
    assert (table["lo_adj"] < table["lo"]).all() and (table["hi_adj"] >= table["hi"]).all()


def test_a_failing_gate_reads_untestable_and_counts_as_p_one(tmp_path: Path) -> None:
    from analysis import write_report
    from analysis.claims.spec import parse_claims

    items = _suite_items(n_starts=5, n_seeds=1, seed=3)
    horizon, rollouts = _claims()
    gated = parse_claims(
        [
            {"name": "horizon", "estimand": "horizon_slope", "a": "sppo", "b": "ppo",
             "direction": "a >= b", "margin": 0.01, "groups": "all",
             "family": {"name": "headline", "size": 4}, "gates": {"start_max": 0.0}},
        ]
    )[0]  # fmt: skip
    text = write_report(
        _tidy_of(items), tmp_path / "r", claims=[gated, rollouts], items=items, fit_reps=2
    ).read_text()
    table = pd.read_csv(tmp_path / "r" / "claims.csv")
    assert table.loc[0, "verdict"].startswith(
        "untestable on this testbed: start accuracy at sim_h1 = "
    )
    assert "(needs <= 0)" in table.loc[0, "verdict"]
    assert "untestable on this testbed: start accuracy at sim_h1" in _claims_text(text)
    # the gated claim is not tested: it counts as p = 1, like the two members not here
    from analysis.claims.protocol import holm

    assert np.isnan(table.loc[0, "lo_adj"]) and table.loc[0, "p_adj"] == 1.0
    rows = holm([float("nan"), table.loc[1, "p_value"]], 0.05, family_size=4)
    assert table.loc[1, "alpha_adj"] == rows[1].alpha_adj == 0.05 / 4  # ranks first
    assert table.loc[1, "p_adj"] == rows[1].p_adj
    assert "p = 1, not rejectable" in (tmp_path / "r" / "claims.md").read_text()
    assert "in family headline's tests: p = 1, not rejectable" in _claims_text(text)


def test_the_report_on_the_micro_suite_store_reads_claims_and_items(micro_suite, by_run_id):
    out, _ = by_run_id
    text = (out / "report.md").read_text()
    section = _claims_text(text)
    # the runs' declared claims (config.yaml's two), from their params
    assert "**horizon** (claim: sppo >= ppo as the horizon grows" in section
    assert (
        "**rollouts** (claim: sppo >= grpo in mean accuracy over the rollout budget (margin 0.02"
        in section
    )
    table = pd.read_csv(out / "claims.csv")
    assert list(table["claim"]) == ["horizon", "rollouts"]
    # one horizon: no slope; one shared start: the ratio is conditional, no verdict
    assert table.loc[0, "verdict"] == "not tested"
    assert "two or more groups with distinct horizons" in table.loc[0, "note"]
    assert table.loc[1, "n_starts"] == 1 and bool(table.loc[1, "conditional"])
    assert "conditional on one start" in section
    # one seed per algorithm: compute to target has no interval, so no "fewer" or "more" claim
    ctt = text.split("## Compute to target", 1)[1].split("\n## ", 1)[0]
    told = [
        ln for ln in ctt.splitlines() if ln.startswith("- ") and ("fewer" in ln or "more" in ln)
    ]
    assert all(
        ln.startswith("- not resolved (no interval: one curve per algorithm)") for ln in told
    )


def test_a_resolved_claim_gets_a_verdict_and_only_then_fewer(tmp_path: Path) -> None:
    """Ten starts where sppo is ahead of its baseline at every horizon, more so the longer, and
    learns on 0.4 of its time scale: both claims are superior under Holm (the area claim with
    the compute ratio beside it, as a description), and on the ratio the sentence says fewer."""
    from analysis.claims.protocol import SUPERIOR
    from analysis.claims.table import claims_table, describe_claims
    from analysis.simulate import Design, simulate_items

    design = Design(
        n_starts=10, horizons=(1, 2, 4, 8), items=40, evals=8, slope=0.4, shift=1.5, speed=0.4
    )
    one = simulate_items(design, seed=5, a="sppo", b="ppo")
    two = simulate_items(design, seed=5, a="sppo", b="grpo")
    items = pd.concat([one, two[two["algorithm"] == "grpo"]], ignore_index=True)
    table = claims_table(_claims(), items)
    assert list(table["verdict"]) == [SUPERIOR, SUPERIOR], table[["claim", "lo_adj", "hi_adj"]]
    assert table.loc[1, "lo_adj"] > 0 and table.loc[1, "ratio"] < 1
    horizon, area = describe_claims(table)
    assert "**superior**" in horizon and "conditional" not in horizon
    assert "(margin 0.01 accuracy per horizon step)" in horizon
    assert "Descriptive, not tested: sppo needs " in area and "(fewer)" not in area
    table = claims_table(_claims(rollouts="ratio"), items)
    assert list(table["verdict"]) == [SUPERIOR, SUPERIOR], table[["claim", "lo_adj", "hi_adj"]]
    assert table.loc[1, "hi_adj"] < 1
    _, rollouts = describe_claims(table)
    assert "(fewer)" in rollouts and "includes 1" not in rollouts
