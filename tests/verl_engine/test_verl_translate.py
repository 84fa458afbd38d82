"""Translated overrides resolve in verl's own Hydra config, and what verl resolves is ours.

One ``sppo-bench run engine=verl --dry-run`` over every algorithm (the built-ins plus a user
algorithm, ``examples.dr_grpo``, registered as ``dr_grpo_example``) composes all of them in verl's config tree and runs verl's
``validate_config`` in one child interpreter; ``python -m verl.trainer.main_ppo --cfg job`` runs
once (for sppo, the plugin algorithm) in parallel. Both are module-scoped: verl takes seconds
to import.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys

import pytest
import yaml

from testkit.paths import REPO, require_module

require_module("verl")  # the `verl` extra; under CI its absence fails

from benchmarks.verl_engine.translate import NO_DUAL_CLIP, SPPO_TRAINER_MODE  # noqa: E402

pytestmark = pytest.mark.slow  # verl's config built and a dry run printed (module fixtures): ~40 s

# rloo takes grpo's route (a built-in estimator; its math is checked in test_verl_engine.py);
# spo is refused before launch (tests/verl_engine/test_verl_adapter.py)
ALGORITHMS = [
    "sppo",
    "ppo",
    "grpo",
    "dapo",
    "remax",
    "grpo2",
    "dr_grpo",
    "gspo",
    "cispo",
    "gmpo",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "dr_grpo_example",
]
USER = "dr_grpo_example"  # the user algorithm (examples/dr_grpo.py), through the wrappers
LR = {
    "sppo": 2e-6,
    "ppo": 3e-6,
    "grpo": 4e-6,
    "dapo": 5e-6,
    "remax": 7e-6,
    "grpo2": 1e-6,
    "dr_grpo": 1.5e-6,
    "gspo": 2.5e-6,
    "cispo": 3.5e-6,
    "gmpo": 4.5e-6,
    "reinforce_pp": 5.5e-6,
    "reinforce_pp_baseline": 6.5e-6,
}
CRITIC_LR = {"sppo": 5e-6, "ppo": 1e-5}


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    from benchmarks.tasks.arith import ArithTask
    from benchmarks.training.modeling import ModelSpec, build_char_tokenizer, build_tiny_llama

    tok = build_char_tokenizer(ArithTask.alphabet)
    model = build_tiny_llama(
        ModelSpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64), len(tok), seed=0
    )
    path = tmp_path_factory.mktemp("tiny_ckpt")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def suite_overrides(tiny_checkpoint, tmp_path_factory):
    conf = tmp_path_factory.mktemp("conf")
    (conf / "algorithm").mkdir()
    (conf / "algorithm" / f"{USER}.yaml").write_text(
        f"# @package algorithm.{USER}\nactor_lr: 8.0e-06\ncritic_lr: null\nparams: {{}}\n"
    )
    return [
        f"hydra.searchpath=[file://{conf}]",
        "plugins=[examples.dr_grpo]",
        "engine=verl",
        "model=hf",
        f"model.name_or_path={tiny_checkpoint}",
        "task=arith",  # generated: no dataset to load (the math export is tested elsewhere)
        f"algorithm=[{','.join(ALGORITHMS)}]",
        "seeds=1",
        "trainer.samples_per_step=80",  # a multiple of every n (1, 5, 8)
        "engine.n_gpus_per_node=4",
        "trainer.temperature=0.6",
        "budget.limit=800",
        *(f"algorithm.{a}.actor_lr={lr}" for a, lr in LR.items()),
        *(f"algorithm.{a}.critic_lr={lr}" for a, lr in CRITIC_LR.items()),
        f"output_dir={tmp_path_factory.mktemp('out')}",
    ]


@pytest.fixture(scope="module")
def cfg_job(tiny_checkpoint, suite_overrides):
    """Start ``main_ppo --cfg job`` for sppo now; the dry run proceeds meanwhile."""
    from benchmarks.config import compose_config
    from benchmarks.suite.plan import validate
    from benchmarks.verl_engine.launch import plans

    keep = [
        o
        for o in suite_overrides
        if not o.startswith(("hydra.", "plugins=", "algorithm")) or o.startswith("algorithm.sppo.")
    ]
    cfg = compose_config([*keep, "algorithm=[sppo]"])
    ((_, _, plan),) = plans(validate(cfg))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        plan.command(sys.executable) + ["--cfg", "job"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    yield proc
    if proc.poll() is None:
        proc.kill()


@pytest.fixture(scope="module")
def dry_run(cfg_job, suite_overrides):
    """``sppo-bench run engine=verl ... --dry-run``: (exit code, stdout, the suite's algorithms)."""
    from algorithms.base import _restore_registry
    from benchmarks.cli import main
    from benchmarks.config import compose_config
    from benchmarks.suite.plan import validate

    out = io.StringIO()
    cwd = os.getcwd()
    old_offline = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"  # the tiny checkpoint is local; never wait on the hub
    os.chdir(REPO)
    try:
        with _restore_registry(), contextlib.redirect_stdout(out):
            code = main(["run", *suite_overrides, "--dry-run"])
            algorithms = validate(compose_config(suite_overrides)).algorithms
    finally:
        os.chdir(cwd)
        sys.modules.pop("examples.dr_grpo", None)
        if old_offline is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old_offline
    return code, out.getvalue(), algorithms


@pytest.fixture(scope="module")
def resolved(dry_run):
    code, text, _ = dry_run
    parts = re.split(r"^# --- (\S+): (verl command|resolved verl config) ---\n", text, flags=re.M)
    commands, configs = {}, {}
    for run, kind, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        name = run.rsplit("-s", 1)[0]
        if kind == "verl command":
            commands[name] = body
        else:
            configs[name] = yaml.safe_load(body.split("\n# ", 1)[0])
    return code, commands, configs


def test_dry_run_prints_every_command_and_verl_accepts_every_config(resolved, dry_run):
    code, commands, configs = resolved
    assert code == 0, dry_run[1][-3000:]
    assert sorted(commands) == sorted(ALGORITHMS) == sorted(configs)
    for cmd in commands.values():
        assert "-m verl.trainer.main_ppo" in cmd and "SPPO_BENCH_VERL_ALGORITHM=" in cmd
    assert "0 rejected by verl's validation" in dry_run[1]


def test_main_ppo_cfg_job_accepts_the_sppo_overrides(cfg_job):
    stdout, stderr = cfg_job.communicate(timeout=300)
    assert cfg_job.returncode == 0, stderr[-3000:]
    job = yaml.safe_load(stdout)
    assert job["trainer"]["v1"]["trainer_mode"] == SPPO_TRAINER_MODE
    assert job["critic"]["enable"] is True


@pytest.mark.parametrize("name", ALGORITHMS)
def test_resolved_values_are_the_registry_values(resolved, dry_run, name):
    """Every value verl resolves is the suite's algorithm config (its YAML over the registry
    defaults, e.g. the CPU suite's DAPO group of 8)."""
    _, _, configs = resolved
    c = configs[name]
    alg = dry_run[2][name] if name != USER else None
    actor = c["actor_rollout_ref"]["actor"]
    rollout = c["actor_rollout_ref"]["rollout"]
    if alg is None:  # the user algorithm: its registry defaults, through the wrappers
        assert c["algorithm"]["adv_estimator"] == f"sppo_bench.{USER}"
        assert actor["loss_agg_mode"] == "seq-mean-token-sum"
        assert actor["optim"]["lr"] == pytest.approx(8e-6)
        assert rollout["n"] == 8 and c["critic"]["enable"] is False
        return
    cfg = alg.config
    assert actor["optim"]["lr"] == pytest.approx(LR[name])
    assert actor["clip_ratio_low"] == cfg.clip_ratio_low
    assert actor["clip_ratio_high"] == cfg.clip_ratio_high
    assert actor["clip_ratio_c"] == (cfg.clip_ratio_c if cfg.clip_ratio_c else NO_DUAL_CLIP)
    assert actor["loss_agg_mode"] == cfg.loss_agg_mode
    assert actor["ppo_epochs"] == cfg.ppo_epochs
    assert actor["use_kl_loss"] == (cfg.kl_loss_coef > 0)
    if cfg.kl_loss_coef > 0:
        assert actor["kl_loss_coef"] == cfg.kl_loss_coef
        assert actor["kl_loss_type"] == {"k1": "kl", "k3": "low_var_kl"}[cfg.kl_penalty]
    assert rollout["n"] == alg.samples_per_prompt
    assert rollout["temperature"] == 0.6
    assert c["data"]["train_batch_size"] == 80 // alg.samples_per_prompt
    # 800 samples / 80 per step; ReMax's step also decodes a greedy response per prompt (160).
    assert c["trainer"]["total_training_steps"] == (5 if name == "remax" else 10)
    assert c["trainer"]["n_gpus_per_node"] == 4
    assert c["trainer"]["logger"] == ["console"]  # dry run: no MLflow run exists
    assert c["reward"]["custom_reward_function"]["path"] == "pkg://benchmarks.verl_engine.reward"
    critic = alg.critic != "none"
    assert c["critic"]["enable"] is critic
    if critic:
        assert c["critic"]["optim"]["lr"] == pytest.approx(CRITIC_LR[name])
    expected_estimator = {
        "sppo": "sppo_bench.sppo",
        "ppo": "gae",
        "grpo": "grpo",
        "dapo": "grpo",
        "rloo": "rloo",
        "remax": "remax",
        "grpo2": "grpo",
        "dr_grpo": "grpo",
        "gspo": "grpo",
        "cispo": "grpo",
        "gmpo": "grpo",
        "reinforce_pp": "reinforce_plus_plus",
        "reinforce_pp_baseline": "reinforce_plus_plus_baseline",
    }[name]
    assert c["algorithm"]["adv_estimator"] == expected_estimator
    loss_mode = {"gspo": "gspo", "cispo": "cispo", "gmpo": "geo_mean"}.get(name, "vanilla")
    assert actor["policy_loss"]["loss_mode"] == loss_mode
    if expected_estimator == "grpo":
        assert c["algorithm"]["norm_adv_by_std_in_grpo"] is cfg.norm_adv_by_std
    if name.startswith("reinforce_pp"):
        assert c["algorithm"]["use_kl_in_reward"] is True
        assert c["algorithm"]["kl_penalty"] == "kl"  # k1
        assert c["algorithm"]["kl_ctrl"]["kl_coef"] == cfg.kl_coef
        assert c["algorithm"]["gamma"] == getattr(cfg, "gamma", 1.0)
    if name == "sppo":
        assert c["trainer"]["v1"]["trainer_mode"] == SPPO_TRAINER_MODE
    if name == "ppo":
        assert (c["algorithm"]["gamma"], c["algorithm"]["lam"]) == (cfg.gamma, cfg.lam)
        assert c["critic"]["cliprange_value"] == cfg.cliprange_value
        assert c["trainer"]["critic_warmup"] == 0  # the CPU suite's YAML sets 0
    if name == "dapo":
        assert c["algorithm"]["filter_groups"]["enable"] is True
        assert c["algorithm"]["filter_groups"]["metric"] == "acc"
        assert c["reward"]["reward_manager"]["name"] == "dapo"
        buf = c["reward"]["reward_kwargs"]["overlong_buffer_cfg"]
        assert buf["enable"] is True and buf["penalty_factor"] == cfg.overlong_penalty_factor
    if name == "remax":
        assert c["trainer"]["use_v1"] is False
