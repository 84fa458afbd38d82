"""Sweeps: real Optuna storage, real MLflow SQLite store, real micro runs, all in a temp dir.

Each trial is a micro run (2 optimizer steps of 32 samples, 3 evaluations of 64 problems) from a
warm start shared by the whole module, so the file stays well under two minutes on 2 cores.
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient

from analysis import metrics as M
from analysis.tuning import read_tuning, tuning_table
from sweeps import (
    TAG_STUDY,
    TAG_TRIAL,
    TAG_TRIAL_STATE,
    SpecError,
    check_spec,
    load_spec,
    objective_value,
    parse_spec,
    run_sweep,
)
from sweeps.cli import main as sweep_main
from sweeps.export import export_tuning
from sweeps.spec_check import task_eval_name
from sweeps.summary import BestTrial, SweepResult, render_markdown
from testkit.paths import require_data
from testkit.suites import MICRO

BUDGET = ["budget.limit=64", "budget.eval_fractions=[0.0,0.5,1.0]"]
LR = {"type": "float", "low": 3e-5, "high": 3e-4, "log": True}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    """One warm-start cache for every sweep of this module (the warm start is trained once)."""
    return tmp_path_factory.mktemp("sweep_cache")


@pytest.fixture
def base(tmp_path, cache_dir) -> list[str]:
    """Micro-run overrides writing only under temp directories."""
    return [
        *MICRO,
        f"cache_dir={cache_dir}",
        f"output_dir={tmp_path / 'out'}",
        "task.eval_size=64",
        "threads=1",
    ]


def _spec(base: list[str], **changes) -> dict:
    spec = {
        "algorithms": ["sppo"],
        "trials": 2,
        "base_overrides": base,
        "budget": BUDGET,
        "search_space": {"algorithm.{alg}.actor_lr": dict(LR)},
        "objective": {"metric": "eval/arith/accuracy", "direction": "maximize"},
        "sampler": "random",
        "pruner": "none",
        "seed": 0,
    }
    spec.update(copy.deepcopy(changes))
    return spec


def _stores(tmp_path: Path) -> dict[str, str]:
    return {
        "storage": f"sqlite:///{tmp_path / 'optuna.db'}",
        "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
    }


def _children(client: MlflowClient, result) -> list:
    exp = client.get_experiment_by_name(result.experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    return [r for r in runs if r.data.tags.get("mlflow.parentRunId") == result.parent_run_id]


def _values_are_the_runs_accuracies(
    stores: dict[str, str], experiment: str, studies: list[str]
) -> list[list[float]]:
    """Each trial's objective (read from the Optuna storage) is its MLflow child run's last
    logged eval/arith/accuracy, and each value it reported for pruning is the accuracy logged
    at that evaluation (index 0 is the shared warm start, never reported). Returns, per
    COMPLETE trial, its run's accuracy history."""
    client = MlflowClient(stores["tracking_uri"])
    key = M.eval_metric("arith", "accuracy")
    exp = client.get_experiment_by_name(experiment)
    complete = []
    for name in studies:
        for t in optuna.load_study(study_name=name, storage=stores["storage"]).trials:
            if t.state.name not in ("COMPLETE", "PRUNED"):
                continue
            (run,) = client.search_runs(
                [exp.experiment_id],
                filter_string=f"tags.{TAG_STUDY} = '{name}' AND tags.{TAG_TRIAL} = '{t.number}'",
            )
            if t.state.name == "COMPLETE":
                assert t.user_attrs["mlflow_run_id"] == run.info.run_id
            points = sorted(
                (m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)
            )
            accs = [v for _, v in points]
            # a pruned run stops inside the evaluation it was pruned at: that one is not logged
            logged = {i: v for i, v in t.intermediate_values.items() if i < len(accs)}
            assert logged == {i: accs[i] for i in logged}, t.number
            assert len(logged) >= len(t.intermediate_values) - (t.state.name == "PRUNED")
            if t.state.name == "COMPLETE":
                assert sorted(t.intermediate_values) == list(range(1, len(accs)))
                assert t.value == accs[-1], (t.number, t.value, accs)
                complete.append(accs)
    return complete


@pytest.mark.slow  # two spawned workers: ~40-60 s on 2 loaded cores
def test_parallel_sweep_two_workers_with_a_failing_trial(tmp_path, base, caplog):
    """4 trials over 2 algorithms (equal effort) on 2 workers; one trial's point cannot run
    (mini_batches=3 does not divide 32 samples): it is FAIL with its error, the rest complete.
    The warm start is built once, in the main process, before the workers start."""
    spec = parse_spec(
        _spec(
            base,
            algorithms=["sppo", "grpo"],
            trials=4,
            search_space={
                "algorithm.{alg}.actor_lr": LR,
                "trainer.mini_batches": {"type": "categorical", "choices": [1, 3]},
            },
            enqueue=[
                {"algorithm": "sppo", "trainer.mini_batches": 3},
                {"algorithm": "sppo", "trainer.mini_batches": 1},
                {"algorithm": "grpo", "trainer.mini_batches": 1},
                {"algorithm": "grpo", "trainer.mini_batches": 1},
            ],
        ),
        name="par",
    )
    stores = _stores(tmp_path)
    with caplog.at_level("WARNING", logger="sweeps.execution"):
        result = run_sweep(spec, workers=2, **stores)
    assert "could not build the warm start" not in caplog.text

    assert result.studies == ["par-sppo", "par-grpo"]
    trials = [
        t
        for name in result.studies
        for t in optuna.load_study(study_name=name, storage=stores["storage"]).trials
    ]
    states = sorted(t.state.name for t in trials)
    assert states == ["COMPLETE", "COMPLETE", "COMPLETE", "FAIL"]
    failed = next(t for t in trials if t.state.name == "FAIL")
    assert "mini_batches=3" in failed.user_attrs["error"]

    client = MlflowClient(stores["tracking_uri"])
    parent = client.get_run(result.parent_run_id)
    assert parent.data.tags[M.TAG_ROLE] == "sweep" and parent.info.status == "FINISHED"
    children = _children(client, result)
    assert len(children) == 4
    by_state = sorted(r.data.tags[TAG_TRIAL_STATE] for r in children)
    assert by_state == states
    for r in children:
        alg = r.data.tags[M.TAG_ALGORITHM]
        assert f"optuna.algorithm.{alg}.actor_lr" in r.data.params
        assert "optuna.trainer.mini_batches" in r.data.params

    table = result.summary_md.read_text()
    assert "| sppo | 0." in table and "| grpo | 0." in table
    # one failed, one complete sppo trial: the counts right-aligned by analysis.to_markdown
    assert "| :--- | :--- | :--- | ---: | ---: | ---: | ---: | :--- |" in table
    assert "| 1 | 1 | 0 | 1 |" in table
    assert {b.algorithm: (b.complete, b.failed) for b in result.best} == {
        "sppo": (1, 1),
        "grpo": (2, 0),
    }
    artifacts = {a.path for a in client.list_artifacts(result.parent_run_id, "sweep")}
    assert {"sweep/sweep_summary.md", "sweep/sweep_summary.json"} <= artifacts
    complete = _values_are_the_runs_accuracies(stores, result.experiment, result.studies)
    assert len(complete) == 3
    # Training moved some trial's accuracy off the warm start's (2 of 3 here), so a value taken
    # from any evaluation but the last could not pass.
    assert any(accs[-1] != accs[0] for accs in complete), complete


@pytest.mark.slow  # two sweep invocations of micro trials: ~50 s
def test_resume_ends_with_exactly_the_requested_trials(tmp_path, base, monkeypatch):
    """Run 1 trial, leave one queued grid point RUNNING as a killed sweep would, then --resume to
    3 in all: the interrupted trial is marked FAIL, counts as no trial, and its point runs again,
    so a sweep killed at a session's end loses no point of its grid. (The left trial is seconds
    old: no new-trial grace here, or it would count as another process's.)"""
    monkeypatch.setattr("sweeps.storage.NEW_TRIAL_S", 0.0)
    spec_path = tmp_path / "resume.yaml"
    spec_path.write_text(yaml.safe_dump(_spec(base)))
    stores = _stores(tmp_path)
    args = [
        str(spec_path),
        "--storage",
        stores["storage"],
        "--tracking-uri",
        stores["tracking_uri"],
        "--study-name",
        "res",
    ]
    assert sweep_main([*args, "--trials", "1"]) == 0
    study = optuna.load_study(study_name="res", storage=stores["storage"])
    study.enqueue_trial({"algorithm.sppo.actor_lr": 5e-5})
    study.ask()  # the queued point, taken by a sweep that was killed before it finished
    assert sweep_main([*args, "--trials", "3"]) == 2  # the study exists: resuming is explicit
    assert sweep_main([*args, "--trials", "3", "--resume"]) == 0

    trials = optuna.load_study(study_name="res", storage=stores["storage"]).trials
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "COMPLETE", "COMPLETE"]
    assert trials[1].user_attrs["error"].startswith("interrupted")
    assert trials[2].params["algorithm.sppo.actor_lr"] == 5e-5  # the lost point, run again
    client = MlflowClient(stores["tracking_uri"])
    exp = client.get_experiment_by_name("sppo-bench-sweep-res")
    runs = client.search_runs([exp.experiment_id])
    sweeps = [r for r in runs if r.data.tags.get(M.TAG_ROLE) == "sweep"]
    assert len(sweeps) == 1  # the resumed sweep continues its parent run
    assert len(runs) == 1 + 4  # every trial has a run: the interrupted one a placeholder
    assert len(_values_are_the_runs_accuracies(stores, exp.name, ["res"])) == 3
    path = client.download_artifacts(
        sweeps[0].info.run_id, "sweep/sweep_summary.json", str(tmp_path)
    )
    best = json.loads(Path(path).read_text())["best"]
    assert [(b["complete"], b["failed"]) for b in best] == [(3, 0)]  # interrupted is no failure

    # Exported as the results page's tuning table: three points, the interrupted one left out,
    # the selected point the best value.
    out = export_tuning(str(spec_path), stores["storage"], tmp_path / "tuning", study_name="res")
    data = read_tuning(out)
    table = tuning_table(data)
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    top = max(complete, key=lambda t: t.value)
    assert table[2].startswith("| sppo | 3 / 3 | ")
    assert table[2].endswith(f"| actor_lr={top.params['algorithm.sppo.actor_lr']:.4g} |")
    assert table[2].count("actor_lr=") == 4  # three points and the selected one


@pytest.mark.slow  # a sweep resumed on a wider grid: ~30 s
def test_resume_runs_only_the_points_a_spec_adds_to_its_grid(tmp_path, base, caplog):
    """A queued grid extended downward in the spec (its range widened, one more point, one more
    trial) and resumed runs the new point alone: the two old points are neither queued again nor
    rerun. Optuna's importances then have no parameter with one range in every trial, and the
    summary says so rather than printing nothing. The log names the trial's point where it
    starts and ends: a trial number alone follows the order trials ran, not the grid's."""
    grid = [{"algorithm.sppo.actor_lr": 1e-4}, {"algorithm.sppo.actor_lr": 2e-4}]
    stores = _stores(tmp_path)
    run_sweep(parse_spec(_spec(base, trials=2, enqueue=grid), name="grid"), **stores)
    wider = [*grid, {"algorithm.sppo.actor_lr": 1e-5}]
    space = {"algorithm.{alg}.actor_lr": {**LR, "low": 1e-5}}
    spec = parse_spec(_spec(base, trials=3, enqueue=wider, search_space=space), name="grid")
    with caplog.at_level(logging.INFO):
        result = run_sweep(spec, resume=True, **stores)

    assert result.trials_run == 1
    assert "grid trial 2 (sppo) starts: ['algorithm.sppo.actor_lr=1e-05']" in caplog.text
    assert "grid trial 2 (sppo, algorithm.sppo.actor_lr=1e-05): COMPLETE" in caplog.text
    trials = optuna.load_study(study_name="grid", storage=stores["storage"]).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    assert [t.params["algorithm.sppo.actor_lr"] for t in trials] == [1e-4, 2e-4, 1e-5]
    assert all(t.user_attrs["enqueued"] for t in trials)
    assert result.importances == {"grid": "no parameter has the same range in every complete trial"}


@pytest.mark.slow  # micro trials until one is pruned: ~30 s
def test_median_pruner_stops_a_collapsing_learning_rate(tmp_path, base):
    """Two good learning rates complete; actor lr 1e-2 collapses the policy after one step and is
    pruned before spending its full budget. (No critic warm-up: the actor moves from step 0.)"""
    spec = parse_spec(
        _spec(
            [*base, "algorithm.sppo.critic.warmup_steps=0"],
            trials=3,
            search_space={"algorithm.{alg}.actor_lr": {**LR, "high": 1e-2}},
            pruner={"type": "median", "n_startup_trials": 2},
            enqueue=[
                {"algorithm.sppo.actor_lr": 1e-4},
                {"algorithm.sppo.actor_lr": 3e-5},
                {"algorithm.sppo.actor_lr": 1e-2},
            ],
        ),
        name="prune",
    )
    stores = _stores(tmp_path)
    result = run_sweep(spec, **stores)

    trials = optuna.load_study(study_name="prune", storage=stores["storage"]).trials
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE", "PRUNED"]
    assert len(trials[2].intermediate_values) < len(trials[0].intermediate_values) == 2
    client = MlflowClient(stores["tracking_uri"])
    pruned = next(r for r in _children(client, result) if r.data.tags[TAG_TRIAL_STATE] == "PRUNED")
    assert pruned.info.status == "KILLED"
    assert pruned.data.metrics[M.COMPUTE_ROLLOUT_SAMPLES] < 64  # stopped before the budget's end
    assert result.best[0].number in (0, 1)
    assert len(_values_are_the_runs_accuracies(stores, result.experiment, result.studies)) == 2


BAD_SPECS = [
    ({"search_space": {"algorithm.{alg}.actor_rl": LR}}, "search_space.algorithm.{alg}.actor_rl"),
    ({"search_space": {"trainer.no_such_key": LR}}, "search_space.trainer.no_such_key"),
    (
        {"search_space": {"algorithm.{alg}.params.clip_ratio_x": LR}},
        "search_space.algorithm.{alg}.params.clip_ratio_x",
    ),
    (
        {"search_space": {"algorithm.{alg}.actor_lr": {**LR, "low": 1e-2}}},
        "search_space.algorithm.{alg}.actor_lr.low=0.01 must be <= 0.0003",
    ),
    (
        {"search_space": {"algorithm.{alg}.actor_lr": {**LR, "low": 0.0}}},
        "search_space.algorithm.{alg}.actor_lr.low=0.0 must be > 0 (a log-scale range)",
    ),
    ({"objective": {"metric": "loss"}}, "objective.metric='loss'"),
    ({"objective": {"metric": "eval/gsm8k/accuracy"}}, "objective.metric='eval/gsm8k/accuracy'"),
    ({"sampler": "bogus"}, "sampler='bogus' is invalid: must be one of 'tpe', 'cmaes'"),
    ({"pruner": "bogus"}, "pruner='bogus' is invalid: must be one of 'median', 'hyperband'"),
    (
        {"sampler": {"type": "tpe", "n_startup": 3}},
        "sampler.n_startup='n_startup' is invalid: must be one of 'consider_endpoints'",
    ),
    ({"algorithms": ["sppo", "grpo"], "trials": 3}, "trials=3"),
    (
        {"algorithms": ["sppo", "grpo"], "search_space": {"algorithm.{alg}.critic_lr": LR}},
        "fails the suite's validation for grpo",
    ),
    ({"starts": 0}, "starts=0 must be >= 1"),
    ({"starts": 2, "pruner": "median"}, "pruner='median': starts=2"),
    (
        {"admissible": {"grpo": {"critic/x": 0.1}}},
        "admissible.grpo='grpo' is invalid: must be one of 'sppo'",
    ),
    (
        {"admissible": {"sppo": {"critic/x": "high"}}},
        "admissible.sppo.critic/x='high' is invalid: expected float, got str (or 'critic_gate')",
    ),
    ({"admissible": {"sppo": {"loss": 0.1}}}, "admissible.sppo='loss': not a metric name"),
    # a critic has one statistic and one threshold: the claims' critic gate, never a number
    (
        {"admissible": {"sppo": {"critic/heldout_explained_variance": 0.1}}},
        "admissible.sppo.critic/heldout_explained_variance=0.1: a critic is screened by the "
        "claims' critic gate, one statistic and one threshold for every critic: write "
        "{critic/first_value_pearson: critic_gate}",
    ),
    (
        {"admissible": {"sppo": {"critic/calibration_pearson": 0.3}}},
        "write {critic/calibration_pearson: critic_gate}",
    ),
    (
        {"admissible": {"sppo": {"compute/rollout_samples": "critic_gate"}}},
        "admissible.sppo.compute/rollout_samples='critic_gate': the critic gate reads a "
        "prompt-level Pearson; allowed: ['critic/calibration_pearson', 'critic/first_value_pearson']",
    ),
]


@pytest.mark.parametrize(("changes", "message"), BAD_SPECS)
def test_bad_spec_fails_before_any_trial_naming_the_field(tmp_path, base, changes, message):
    with pytest.raises(SpecError) as e:
        run_sweep(parse_spec(_spec(base, **changes)), **_stores(tmp_path))
    assert message in str(e.value)
    assert not (tmp_path / "optuna.db").exists() and not (tmp_path / "mlflow.db").exists()


@pytest.mark.slow  # each shipped spec's plan validated in full: ~10 s each, 9 specs
@pytest.mark.parametrize(
    "name",
    [
        "lr_per_algorithm",
        "critic_settings",
        "equal_effort",
        "claims_critic",
        "claims_actor",
        "claims_chain_sum_critic",
        "claims_chain_sum_actor",
        "leaderboard_arith_actor",
        "leaderboard_chain_sum_actor",
    ],
)
def test_shipped_specs_are_valid_against_the_config(name):
    spec = load_spec(name)
    configs = check_spec(spec)
    assert sorted(configs) == sorted(spec.algorithms)


@pytest.mark.parametrize(
    "overrides",
    [
        ["task=arith"],
        ["task=gsm8k"],
        ["task=math"],
        ["suite=claims_chain_sum"],
        ["task=reasoning_gym", "task.eval_name=sums"],
        ["suite=claims"],
    ],
)
def test_the_objective_metric_names_the_eval_set_the_built_task_logs(overrides):
    """A sweep's objective is checked against the task's config before any trial; the name it
    allows must be the one the built task logs its whole eval set under (Reasoning Gym's is its
    dataset's, not the task's: a chain_sum sweep was refused its own metric)."""
    from benchmarks.config import compose_config
    from benchmarks.tasks.build import build_task

    data = (
        [f"task.data_dir={require_data()}"] if overrides[0] in ("task=gsm8k", "task=math") else []
    )
    task = compose_config([*overrides, *data]).task
    assert task_eval_name(task) == build_task(task).eval_name


def test_cli_reports_a_spec_error_with_status_2(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"algorithms": ["sppo"], "trials": 1, "search_space": {}}))
    assert sweep_main([str(path)]) == 2
    assert "search_space" in capsys.readouterr().err


def _summary_tables(md: str) -> list[list[list[str]]]:
    """The Markdown tables of ``md``, each as rows of cells (split on unescaped pipes)."""
    tables: list[list[list[str]]] = []
    previous = ""
    for line in md.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.replace("\\|", "\0").strip("|").split("|")]
            row = [c.replace("\0", "|") for c in cells]
            if not previous.startswith("|"):
                tables.append([])
            tables[-1].append(row)
        previous = line
    return tables


def test_the_summary_tables_show_every_trial_through_the_analysis_writer():
    """The summary's two tables, written by analysis.to_markdown: the best value and trial
    counts per algorithm (``-`` where none completed), and every trial's state, value, starts,
    admissibility and final metrics; a pipe in a parameter stays inside its cell."""
    result = SweepResult(
        name="demo",
        studies=["demo-sppo", "demo-grpo"],
        storage="sqlite:///demo.db",
        tracking_uri="file:/tmp/mlruns",
        experiment="demo",
        parent_run_id="p",
        output_dir=Path("out"),
        metric="eval/arith/accuracy",
        direction="maximize",
        best=[
            BestTrial("sppo", "demo-sppo", 0.61234, 3, {"actor_lr": 1e-4}, "r3", 1, 0, 1, 1),
            BestTrial("grpo", "demo-grpo", None, None, {}, None, 0, 1, 1),
        ],
        states={"COMPLETE": 1, "FAIL": 2, "PRUNED": 1},
        trials=[
            {
                "algorithm": "sppo",
                "number": 3,
                "state": "COMPLETE",
                "value": 0.61234,
                "values_per_start": [0.7, 0.52468],
                "admissible": True,
                "finals": {"critic_gate": 0.41234, "rollout_samples": None},
                "finals_per_start": {"critic_gate": {"s0": 0.41234, "s1": 0.45}},
                "params": {"actor_lr": 1e-4, "kind": "a|b"},
            },
            {
                "algorithm": "grpo",
                "number": 0,
                "state": "FAIL",
                "value": None,
                "values_per_start": None,
                "admissible": None,
                "finals": {},
                "finals_per_start": {},
                "params": {"actor_lr": 3e-4},
            },
        ],
        importances={"demo-sppo": "needs at least 2 complete trials, has 1"},
    )
    md = render_markdown(result)
    best, trials = _summary_tables(md)
    assert best == [
        ["algorithm", "best", "trial", "complete", "admissible", "pruned", "failed", "parameters"],
        [":---", ":---", ":---", "---:", "---:", "---:", "---:", ":---"],
        ["sppo", "0.6123", "3", "1", "1", "0", "1", "actor_lr=0.0001"],
        ["grpo", "-", "-", "0", "0", "1", "1", "-"],
    ]
    assert trials[:2] == [
        ["algorithm", "trial", "state", "value", "per start", "admissible", "final metrics"]
        + ["parameters"],
        [":---"] * 8,
    ]
    assert trials[2:] == [
        ["sppo", "3", "COMPLETE", "0.6123", "0.700 / 0.525", "yes"]
        + ["critic_gate=0.412 (s0 0.412 / s1 0.450), rollout_samples=-"]
        + ["actor_lr=0.0001, kind=a|b"],
        ["grpo", "0", "FAIL", "-", "-", "-", "-", "actor_lr=0.0003"],
    ]
    assert "Trials by state: COMPLETE 1, FAIL 2, PRUNED 1" in md
    assert "- `demo-sppo`: needs at least 2 complete trials, has 1" in md
    result.trials = []
    assert "## Every trial" not in render_markdown(result)
    assert len(_summary_tables(render_markdown(result))) == 1


def test_objective_value_final_accuracy_and_auc():
    evals = [(0.0, 0.2), (0.5, 0.4), (1.0, 0.3)]
    assert objective_value("eval/arith/accuracy", evals) == 0.3
    # trapezoids: 0.5 * (0.2 + 0.4) / 2 + 0.5 * (0.4 + 0.3) / 2 = 0.325, over a span of 1
    assert objective_value("auc", evals) == pytest.approx(0.325)
    assert objective_value("auc", [(0.5, 0.4), (1.0, 0.2)]) == pytest.approx(0.3)


@pytest.mark.slow  # four micro runs, each seed with its own warm start: ~1 min on 2 cores
def test_a_trial_over_two_starts_scores_their_mean_and_only_admissible_trials_are_best(
    tmp_path, base
):
    """``starts: 2``: each trial runs seeds 0 and 1, each from its own warm start; its value is
    the mean of the two runs' final accuracies. ``admissible``: a trial whose runs' final metric
    misses the minimum is complete and listed, but never the best, and the sampler sees it as
    infeasible. The minimums are set so that one trial passes and one cannot."""
    spec = parse_spec(
        _spec(
            base,
            starts=2,
            trials=2,
            sampler="tpe",
            admissible={"sppo": {M.COMPUTE_ROLLOUT_SAMPLES: 64}},
            enqueue=[{"algorithm.sppo.actor_lr": 1e-4}, {"algorithm.sppo.actor_lr": 2e-4}],
        )
    )
    stores = _stores(tmp_path)
    result = run_sweep(spec, **stores)
    client = MlflowClient(stores["tracking_uri"])
    key = M.eval_metric("arith", "accuracy")
    (study,) = result.studies
    trials = optuna.load_study(study_name=study, storage=stores["storage"]).trials
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    for t in trials:
        runs = [client.get_run(rid) for rid in t.user_attrs["mlflow_run_ids"]]
        assert sorted(r.data.tags[M.TAG_SEED] for r in runs) == ["0", "1"]
        starts = {r.data.tags["sppo_bench.start"] for r in runs}
        assert len(starts) == 2  # each seed its own warm start
        finals = [r.data.metrics[key] for r in sorted(runs, key=lambda r: r.data.tags[M.TAG_SEED])]
        assert t.user_attrs["values_per_start"] == pytest.approx(finals, abs=0)
        assert t.value == pytest.approx(sum(finals) / 2, rel=1e-12)
        # every run charges its whole budget: 64 samples >= 64, so both trials are admissible
        assert t.user_attrs["admissible"] is True
        assert t.constraints == {M.COMPUTE_ROLLOUT_SAMPLES: 0.0}  # feasible: margin <= 0
        assert t.intermediate_values == {}  # several starts: nothing reported, nothing pruned
    (best,) = result.best
    assert best.admissible == 2 and best.value == max(t.value for t in trials)
    assert "| sppo | 0 | COMPLETE |" in result.summary_md.read_text()

    # the same two points with a minimum no run reaches: listed, never best
    strict = parse_spec(
        _spec(
            base,
            starts=2,
            trials=2,
            sampler="tpe",
            admissible={"sppo": {M.COMPUTE_ROLLOUT_SAMPLES: 65}},
            enqueue=[{"algorithm.sppo.actor_lr": 1e-4}, {"algorithm.sppo.actor_lr": 2e-4}],
        )
    )
    out = tmp_path / "strict"
    out.mkdir()
    result = run_sweep(strict, **_stores(out))
    (best,) = result.best
    assert (best.complete, best.admissible, best.value) == (2, 0, None)
    rows = result.trials
    assert [r["admissible"] for r in rows] == [False, False]
    assert all(r["finals"][M.COMPUTE_ROLLOUT_SAMPLES] == 64 for r in rows)


def test_an_exact_tie_goes_to_the_point_tried_first_whatever_completed_first(tmp_path, base):
    """Two points tie exactly. The first attempt at the spec's first point failed (a session
    ended) and ran again after the second point completed: the first point still ships, as it
    does when nothing failed."""
    from optuna.distributions import FloatDistribution
    from optuna.trial import TrialState, create_trial

    from sweeps.summary import best_trials

    spec = parse_spec(_spec(base))
    lr = "algorithm.sppo.actor_lr"
    dist = {lr: FloatDistribution(1e-6, 1e-3, log=True)}

    def study(name: str, trials: list[tuple[float, TrialState, float | None]]):
        s = optuna.create_study(storage=_stores(tmp_path)["storage"], study_name=name)
        for rate, state, value in trials:
            s.add_trial(
                create_trial(params={lr: rate}, distributions=dist, state=state, value=value)
            )
        return s

    done, fail = TrialState.COMPLETE, TrialState.FAIL
    cut = study(
        "cut", [(4e-5, fail, None), (8e-5, done, 0.6), (4e-5, done, 0.6), (2e-5, done, 0.5)]
    )
    whole = study("whole", [(4e-5, done, 0.6), (8e-5, done, 0.6)])
    ahead = study("ahead", [(4e-5, fail, None), (8e-5, done, 0.6), (4e-5, done, 0.7)])
    best = {
        b.study: b
        for b in best_trials(
            spec, {n: (s, "sppo") for n, s in [("cut", cut), ("whole", whole), ("ahead", ahead)]}
        )
    }
    assert (best["cut"].number, best["cut"].params) == (2, {"actor_lr": 4e-5})
    assert (best["whole"].number, best["whole"].params) == (0, {"actor_lr": 4e-5})
    assert (best["ahead"].number, best["ahead"].value) == (2, 0.7)  # no tie: the better one
    assert (best["cut"].complete, best["cut"].failed) == (3, 1)


def _screen(tmp_path, base, rule: dict, runs: list) -> optuna.trial.FrozenTrial:
    """The trial ``_check_admissible`` records for ``runs`` ((start, {step: value} or None: the
    metric never logged), one per run) under the ``admissible`` rule ``{"sppo": rule}``: real
    MLflow runs with their start tags, a real Optuna trial."""
    from sweeps.objective import Objective, TrialContext

    spec = parse_spec(_spec(base, starts=2, admissible={"sppo": rule}))
    (metric,) = rule
    stores = _stores(tmp_path)
    client = MlflowClient(stores["tracking_uri"])
    exp = client.create_experiment("admissible")
    ids = []
    for start, history in runs:
        run = client.create_run(exp, tags={M.TAG_START: start})
        for step, value in (history or {}).items():
            client.log_metric(run.info.run_id, metric, value, step=step)
        client.set_terminated(run.info.run_id)
        ids.append(run.info.run_id)
    ctx = TrialContext(spec, stores["storage"], stores["tracking_uri"], exp, "", ())
    study = optuna.create_study(storage=stores["storage"], study_name="admissible")
    trial = study.ask()
    Objective(ctx, "admissible", "sppo")._check_admissible(trial, "sppo", ids)
    study.tell(trial, 0.5)
    (done,) = study.trials
    return done


@pytest.mark.slow  # micro trials per case: ~7 s each
@pytest.mark.parametrize(
    ("runs", "per_start", "weakest", "admissible"),
    [
        # the mean over starts (0.4) passes 0.3; start s1 does not: not admissible
        ([("s0", {8: 0.6}), ("s1", {8: 0.2})], {"s0": 0.6, "s1": 0.2}, 0.2, False),
        # two RL seeds of start s0 average to 0.5 (a start is one unit, as in the gates: its
        # weaker run alone, 0.25, would miss); s1 (0.4) is the weakest start; the final value is
        # read, not an earlier eval's
        (
            [("s0", {8: 0.25}), ("s0", {8: 0.75}), ("s1", {4: 0.0, 8: 0.4})],
            {"s0": 0.5, "s1": 0.4},
            0.4,
            True,
        ),
        # a run that never logged the metric: missed
        ([("s0", {8: 0.9}), ("s1", None)], {}, None, False),
    ],
)
def test_admissibility_reads_the_weakest_start(
    tmp_path, base, runs, per_start, weakest, admissible
):
    """A sweep's trial has two starts: it screens on the weakest (analysis.claims.gates.start_gate
    with no bound; a 95% bound over two starts, t = 6.31, admits almost nothing), each start the
    mean of its runs as the claims' gates read it. Admitting by the mean over starts let a critic
    that learnt on one start and not the other through (the chain_sum PPO critic: held-out
    explained variance 0.239 and -0.013). A metric that is not a critic's: its final value
    against the spec's minimum."""
    metric = M.TRAIN_SCORE_MEAN
    done = _screen(tmp_path, base, {metric: 0.3}, runs)
    assert done.user_attrs["admissible"] is admissible
    assert done.user_attrs[f"final/{metric}"] == weakest
    # every value and mean here is exact in binary floating point (0.25 + 0.75 = 1.0)
    assert done.user_attrs[f"final_per_start/{metric}"] == per_start
    if weakest is None:
        assert done.constraints == {metric: 1.0}  # missing: infeasible
    else:
        assert done.constraints == {metric: pytest.approx(0.3 - weakest, abs=1e-15)}


@pytest.mark.slow  # micro trials per case: ~7 s each
@pytest.mark.parametrize(
    ("runs", "per_start", "admissible"),
    [
        # each run's late-eval mean (the second half of its evals), not its final value: s1's
        # last two of four evals average 0.5 (its final value is 0.625); s0's two seeds 0.625
        (
            [("s0", {8: 0.5}), ("s0", {8: 0.75}), ("s1", {2: 0.0, 4: 0.25, 6: 0.375, 8: 0.625})],
            {"s0": 0.625, "s1": 0.5},
            True,
        ),
        # the weakest start, not the mean over starts (0.5, which passes): s1's late mean 0.25
        ([("s0", {4: 0.5, 8: 0.75}), ("s1", {4: 0.5, 8: 0.25})], {"s0": 0.75, "s1": 0.25}, False),
        # a final value that passes (0.5) over a late-eval mean that does not (0.625 / 3)
        (
            [("s0", {8: 0.5}), ("s1", {2: 0.0, 4: 0.0, 6: 0.0, 7: 0.125, 8: 0.5})],
            {"s0": 0.5, "s1": 0.625 / 3},
            False,
        ),
        # a run that never logged its critic's Pearson: missed
        ([("s0", {8: 0.9}), ("s1", None)], {}, False),
    ],
)
def test_a_critic_is_screened_by_the_claims_critic_gate(
    tmp_path, base, runs, per_start, admissible
):
    """``critic_gate``: a sweep screens a critic on the statistic the claims gate it on
    (analysis.claims.gates.critic_gate): its prompt-level Pearson, per run the mean of the second
    half of its evals, per start the mean over its runs, against the threshold calibrated on the
    inert critic (CRITIC_PEARSON_MIN), at the trial's weakest start."""
    from analysis.claims.gates import CRITIC_PEARSON_MIN, critic_gate

    metric = M.CRITIC_CALIBRATION_PEARSON
    done = _screen(tmp_path, base, {metric: "critic_gate"}, runs)
    assert done.user_attrs["admissible"] is admissible
    got = done.user_attrs[f"final_per_start/{metric}"]
    assert got == pytest.approx(per_start, abs=1e-15)
    if not per_start:
        assert done.user_attrs[f"final/{metric}"] is None
        assert done.constraints == {metric: 1.0}  # missing: infeasible
        return
    weakest = min(per_start.values())
    assert done.user_attrs[f"final/{metric}"] == pytest.approx(weakest, abs=1e-15)
    assert done.constraints == {metric: pytest.approx(CRITIC_PEARSON_MIN - weakest, abs=1e-15)}
    # the same decision as the claims' own gate function, read at the weakest start
    assert critic_gate(metric, got, confidence=None).passes is admissible


def test_export_of_a_sweep_refuses_bad_input_before_reading(tmp_path, capsys):
    """`sppo-bench export --sweep`: no storage, an unknown spec, or a study the storage lacks
    each exit 2 with the field named, and write nothing."""
    from benchmarks.cli import main as cli_main

    out = tmp_path / "tuning"
    storage = f"sqlite:///{tmp_path / 'empty.db'}"
    assert cli_main(["export", "--sweep", "lr_per_algorithm", "--out", str(out)]) == 2
    assert "--storage" in capsys.readouterr().err
    assert cli_main(["export", "--sweep", "no_such", "--storage", storage, "--out", str(out)]) == 2
    assert "spec" in capsys.readouterr().err
    args = ["export", "--sweep", "lr_per_algorithm", "--storage", storage, "--out", str(out)]
    assert cli_main(args) == 2
    assert "is not in" in capsys.readouterr().err
    assert not out.exists()
