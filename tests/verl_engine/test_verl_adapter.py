"""The verl adapter's parts that need no verl: the translation's refusals, the paper recipe's
values, the parquet export, the reward function, the metric mapping, the CLI's refusals and the
declared entry point. They run (and must pass) where the `verl` extra is not installed; what
needs verl itself is in test_verl_engine.py and test_verl_translate.py."""

from __future__ import annotations

import pytest

from testkit.paths import REPO, require_data, skip_or_fail

# --- translation refusals (no verl needed) ---------------------------------------------------


def _suite(*overrides):
    from benchmarks.config import compose_config
    from benchmarks.suite.plan import validate

    cfg = compose_config(
        ["engine=verl", "model=hf", "model.name_or_path=some/model", "seeds=1", *overrides]
    )
    return cfg, validate(cfg)


def _translate(plan, name):
    from benchmarks.verl_engine.translate import translate

    return translate(
        plan,
        name,
        seed=0,
        train_file="t.parquet",
        val_files=["v.parquet"],
        run_name="r",
        output_dir="o",
    )


def _planned(name: str, limit: int) -> tuple[int, int]:
    """(verl steps, samples generated per step) of ``name`` at a ``samples`` budget of
    ``limit`` and 80 samples per step."""
    _, plan = _suite(
        "task=arith", f"algorithm=[{name}]", "trainer.samples_per_step=80", f"budget.limit={limit}"
    )
    assert plan.budget.kind == "samples"
    v = _translate(plan, name).values
    prompts = v["data.train_batch_size"]
    greedy = prompts if v.get("algorithm.adv_estimator") == "remax" else 0
    return v["trainer.total_training_steps"], prompts * v["actor_rollout_ref.rollout.n"] + greedy


@pytest.mark.parametrize(
    ("name", "limit", "steps"),
    [
        ("grpo", 800, 10),  # an exact multiple of the step: the whole budget
        ("grpo", 879, 10),  # 79 samples short of an 11th step: stops short, as the native trainer
        ("grpo", 80, 1),
        # ReMax: 80 prompts with one sampled and one greedy response each, 160 samples a step
        ("remax", 800, 5),
        ("remax", 959, 5),  # 800 of 959: a 6th step would spend 960
    ],
)
def test_a_verl_run_never_spends_more_than_its_budget(name, limit, steps):
    planned, per_step = _planned(name, limit)
    assert planned == steps
    assert steps * per_step <= limit < (steps + 1) * per_step


def test_every_budget_gets_the_most_whole_steps_it_pays_for():
    """For every limit from one step to four: the steps fit the budget and one more would not."""
    import dataclasses

    _, plan = _suite("task=arith", "algorithm=[grpo]", "trainer.samples_per_step=80")
    for limit in range(80, 330, 7):
        budget = dataclasses.replace(plan.budget, limit=float(limit))
        v = _translate(dataclasses.replace(plan, budget=budget), "grpo").values
        steps = v["trainer.total_training_steps"]
        assert steps * 80 <= limit < (steps + 1) * 80, limit


def test_a_budget_below_one_verl_step_is_refused_before_launch():
    from algorithms import ConfigError

    with pytest.raises(ConfigError, match=r"budget\.limit=79 is less than one verl step \(80"):
        _planned("grpo", 79)


@pytest.mark.parametrize(
    ("overrides", "name", "message"),
    [
        (["algorithm=[grpo]", "algorithm.grpo.params.eps=1e-4"], "grpo", "eps"),
        (["algorithm=[ppo]", "algorithm.ppo.params.whiten_advantages=false"], "ppo", "whiten"),
        (["algorithm=[gspo]", "algorithm.gspo.params.eps=1e-4"], "gspo", "eps"),
        # SPO's tracker is state across steps; verl's estimators never see a prompt twice
        (["algorithm=[spo]"], "spo", "per-prompt state from step to step.*engine=torch"),
    ],
)
def test_values_verl_cannot_express_are_refused(overrides, name, message):
    from algorithms import ConfigError

    _, plan = _suite("task=arith", *overrides)
    with pytest.raises(ConfigError, match=message):
        _translate(plan, name)


def test_critic_algorithms_other_than_sppo_and_ppo_are_refused():
    from algorithms import ConfigError, register_algorithm
    from algorithms.base import _restore_registry
    from algorithms.sppo import SPPO

    with _restore_registry():

        @register_algorithm("my_prompt_critic")
        class Mine(SPPO):
            pass

        from dataclasses import replace

        from benchmarks.verl_engine.translate import translate

        _, plan = _suite("algorithm=[sppo]", "task=arith")
        plan = replace(
            plan,
            algorithms={"my_prompt_critic": Mine()},
            trainer={"my_prompt_critic": plan.trainer["sppo"]},
        )
        with pytest.raises(ConfigError, match="critic values"):
            translate(
                plan,
                "my_prompt_critic",
                seed=0,
                train_file="t",
                val_files=["v"],
                run_name="r",
                output_dir="o",
            )


# --- export and reward -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from omegaconf import OmegaConf

    from benchmarks.verl_engine.export import export_task

    out = tmp_path_factory.mktemp("verl_data")
    math = OmegaConf.create(
        dict(
            name="math",
            train_dataset="math",
            eval_datasets=["math500", "aime24"],
            data_dir=str(require_data()),
            template="chat",
            train_size=6,
            eval_size=4,
        )
    )
    arith = OmegaConf.create(dict(name="arith", horizon=2, eval_size=5, max_problems=2000))
    return {
        "math": (math, *export_task(math, out / "math")),
        "arith": (arith, *export_task(arith, out / "arith")),
    }


@pytest.mark.parametrize("task", ["math", "arith"])
def test_parquet_export_round_trips_every_field(exported, task):
    from benchmarks.verl_engine.export import COLUMNS, eval_splits, read_rows, task_rows

    cfg, train, evals = exported[task]
    rows = task_rows(cfg)
    assert [p.stem for p in evals] == [k for k in rows if k != "train"]
    assert [p.stem for p in evals] == eval_splits(cfg)  # the names the launcher plans
    for path, key in [(train, "train"), *((p, p.stem) for p in evals)]:
        back = read_rows(path)
        assert back == rows[key]  # every field, nested ones included
        assert list(back[0]) == list(COLUMNS)
        assert isinstance(back[0]["prompt"], list) and back[0]["prompt"][-1]["role"] == "user"
        assert back[0]["reward_model"]["ground_truth"]


def test_reward_scores_gold_answers_one_and_wrong_answers_zero(exported):
    from benchmarks.verl_engine.export import read_rows
    from benchmarks.verl_engine.reward import compute_score

    rows = [r for task in ("math", "arith") for p in exported[task][2] for r in read_rows(p)]
    assert {r["extra_info"]["grader"] for r in rows} == {"math_verify", "integer", "arith"}
    for r in rows:
        gold, kind = r["reward_model"]["ground_truth"], r["extra_info"]["grader"]
        right = f"...;#{gold}" if kind == "arith" else f"The answer is \\boxed{{{gold}}}."
        wrong = "...;#x" if kind == "arith" else "The answer is \\boxed{\\text{no idea}}."
        src = r["data_source"]
        assert compute_score(src, right, gold, r["extra_info"])["score"] == 1.0, (src, gold)
        result = compute_score(src, wrong, gold, r["extra_info"])
        assert result["score"] == 0.0 and result["acc"] == 0.0


# --- metric mapping --------------------------------------------------------------------------


@pytest.mark.slow  # verl runs read back beside native ones: ~7 s
def test_verl_runs_read_like_native_runs(tmp_path):
    """verl's names (as its MLflow adapter stores them) -> the suite's schema -> analysis."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    from analysis import eval_points, load_runs
    from analysis import metrics as M
    from benchmarks.telemetry.tracking import prepare_store
    from benchmarks.verl_engine.metrics import map_verl_run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    exp = prepare_store(uri, "verl-map")
    client = MlflowClient(uri)
    parent = client.create_run(exp, tags={M.TAG_ROLE: "suite"}).info.run_id
    run = client.create_run(
        exp,
        tags={
            M.TAG_ROLE: "run",
            M.TAG_ALGORITHM: "grpo",
            M.TAG_SEED: "0",
            M.TAG_ENGINE: "verl",
            "mlflow.parentRunId": parent,
        },
    ).info.run_id
    verl = []
    for s in (1, 2, 3, 4):
        verl += [
            Metric("response_length/mean", 10.0 * s, 0, s),
            Metric("perf/time_per_step", 2.0, 0, s),
            Metric("critic/score/mean", 0.1 * s, 0, s),
            Metric("actor/pg_clipfrac", 0.05, 0, s),
            Metric("actor/perf/max_memory_allocated_gb", float(s), 0, s),
        ]
    for s, acc in ((0, 0.2), (2, 0.4), (4, 0.5)):
        verl.append(Metric("val-core/math500/acc/mean_at_1", acc, 0, s))
    client.log_batch(run, metrics=verl)
    map_verl_run(client, run, prompts_per_step=4, samples_per_prompt=8, total_steps=4)

    pts = eval_points(load_runs(parent_run_id=parent, tracking_uri=uri))
    assert pts["dataset"].tolist() == ["math500"] * 3
    assert pts["accuracy"].tolist() == [0.2, 0.4, 0.5]
    assert pts["budget_fraction"].tolist() == [0.0, 0.5, 1.0]
    assert pts[M.COMPUTE_ROLLOUT_SAMPLES].tolist() == [0.0, 64.0, 128.0]
    assert pts[M.COMPUTE_ROLLOUT_TOKENS].tolist() == [0.0, 32 * 30.0, 32 * 100.0]
    assert pts[M.COMPUTE_WALL_S].tolist() == [0.0, 4.0, 8.0]
    assert pts[M.MEMORY_PEAK_BYTES].tolist()[-1] == 4 * 2**30
    hist = client.get_metric_history(run, M.TRAIN_CLIP_FRAC)
    assert [m.value for m in hist] == [0.05] * 4


# --- the paper recipe ------------------------------------------------------------------------


def test_paper_recipe_carries_the_papers_settings():
    """suite=paper_1p5b: DeepSeek-R1-Distill-Qwen-1.5B, 4 GPUs, 256 prompts per step in
    mini-batches of 128, actor lr 1e-6, critic lr 5e-6, 8192-token responses at temperature 0.6,
    GRPO n = 8, Avg@16 validation; for all four algorithms."""
    from benchmarks.config import compose_config
    from benchmarks.suite.plan import validate
    from benchmarks.verl_engine.launch import plans

    cfg = compose_config(["suite=paper_1p5b", f"task.data_dir={require_data()}"])
    runs = {name: p.values for _, name, p in plans(validate(cfg))}
    assert sorted(runs) == ["dapo", "grpo", "ppo", "sppo"]
    n = {"sppo": 1, "ppo": 1, "grpo": 8, "dapo": 16}
    for name, v in runs.items():
        assert v["actor_rollout_ref.model.path"] == "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"
        assert v["trainer.n_gpus_per_node"] == 4
        assert v["data.train_batch_size"] == 256
        assert v["actor_rollout_ref.actor.ppo_mini_batch_size"] == 128
        assert v["actor_rollout_ref.actor.optim.lr"] == 1e-6
        assert v["data.max_response_length"] == 8192
        assert v["actor_rollout_ref.rollout.temperature"] == 0.6
        assert v["actor_rollout_ref.rollout.n"] == n[name]
        assert v["actor_rollout_ref.rollout.val_kwargs.n"] == 16
        assert v["actor_rollout_ref.rollout.name"] == "vllm"
        assert len(v["data.val_files"]) == 5
        assert v.get("critic.optim.lr") == (5e-6 if name in ("sppo", "ppo") else None)
    assert runs["ppo"]["trainer.critic_warmup"] == 50
    assert runs["dapo"]["+reward.reward_kwargs.max_resp_len"] == 8192


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["engine=verl"], "model.name_or_path=null"),  # the tiny char model cannot go to verl
        (["--dry-run"], "only engine=verl"),
        (
            ["engine=verl", "model=hf", "model.name_or_path=x", "budget=flops"],
            "total_training_steps",
        ),
    ],
)
def test_cli_refuses_what_verl_cannot_run_before_any_work(overrides, message, capsys):
    from benchmarks.cli import main

    assert main(["run", *overrides]) == 2
    assert message in capsys.readouterr().err


# --- the entry point ----------------------------------------------------------------------


def test_installed_package_declares_the_entry_point():
    """pyproject declares it; once the project is (re)installed, its metadata carries it."""
    import importlib.metadata
    import tomllib

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]
    assert declared["verl.plugins"] == {"sppo_bench": "benchmarks.verl_engine.plugin"}
    eps = [
        ep
        for ep in importlib.metadata.entry_points(group="verl.plugins")
        if ep.value == "benchmarks.verl_engine.plugin"
    ]
    try:
        importlib.metadata.distribution("sppo-bench")
    except importlib.metadata.PackageNotFoundError:
        skip_or_fail("sppo-bench is not installed (pip install -e .)")
    if not eps:
        skip_or_fail(
            "installed sppo-bench metadata predates the entry point: reinstall the project"
        )
    assert eps[0].name == "sppo_bench"


def test_an_algorithm_with_its_own_surrogate_runs_its_loss_on_verl():
    """A registered algorithm that overrides only ``surrogate`` (the seam a new objective uses)
    gets the plugin's policy-loss wrapper, not verl's vanilla loss; one that changes nothing of
    the loss keeps verl's."""
    from dataclasses import replace

    from algorithms import register_algorithm
    from algorithms.base import _restore_registry
    from algorithms.grpo import GRPO
    from benchmarks.verl_engine.translate import has_own_policy_loss, wrapper_name

    with _restore_registry():

        @register_algorithm("my_surrogate")
        class Mine(GRPO):
            def surrogate(self, log_probs, old_log_probs, advantages, response_mask):
                return super().surrogate(log_probs, old_log_probs, 2 * advantages, response_mask)

        @register_algorithm("my_plain")
        class Plain(GRPO):
            pass

        assert has_own_policy_loss(Mine) and not has_own_policy_loss(Plain)
        _, plan = _suite("algorithm=[grpo]", "task=arith")
        for name, alg, expected in (
            ("my_surrogate", Mine(), wrapper_name("my_surrogate")),
            ("my_plain", Plain(), "vanilla"),
        ):
            p = replace(plan, algorithms={name: alg}, trainer={name: plan.trainer["grpo"]})
            overrides = _translate(p, name).overrides
            modes = [o for o in overrides if "policy_loss.loss_mode=" in o]
            assert modes and all(o.endswith(f"={expected}") for o in modes), modes
