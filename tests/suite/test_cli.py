"""The command line: config errors fail before any compute, naming the key and what is allowed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.cli import main


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["trainer.nonsense=1"], ["trainer.nonsense"]),
        (["algorithm=[sppo,nosuch]"], ["algorithm=nosuch", "no such option", "sppo", "grpo"]),
        (["budget=nosuch"], ["budget=nosuch", "no such option", "samples", "flops"]),
        (["budget.limit=-5"], ["budget.limit=-5 ", "> 0"]),
        (["budget.kind=joules"], ["budget.kind", "joules", "rollout_tokens"]),
        (["algorithm.grpo.params.group_size=1"], ["group_size", ">= 2"]),
        (["algorithm.grpo.critic_lr=1e-4"], ["algorithm.grpo.critic_lr", "null"]),
        (["algorithm.sppo.params.clip_ratio_low=2.0"], ["clip_ratio_low"]),
        (["algorithm.sppo.params.nosuch=1"], ["nosuch", "clip_ratio_low"]),
        (["trainer.samples_per_step=60"], ["samples_per_step=60", "grpo", "8"]),
        (["task.horizon=0"], ["task.horizon=0", "[1, 16]"]),
        (["seeds=0"], ["seeds=0", ">= 1"]),
        (["trainer.top_p=0"], ["trainer.top_p", "(0, 1]"]),
        (["task=gsm8k"], ["gsm8k", "model.name_or_path"]),
        (["plugins=[no_such_module_xyz]"], ["plugins", "no_such_module_xyz"]),
    ],
)
def test_bad_config_fails_before_any_work(overrides, expected, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(["run", *overrides, f"cache_dir={tmp_path / 'cache'}"])
    err = capsys.readouterr().err
    assert code == 2, err
    for piece in expected:
        assert piece in err, (piece, err)
    # Nothing was started: no MLflow store, no warm start, no outputs.
    assert not (tmp_path / "mlflow.db").exists()
    assert not (tmp_path / "cache").exists()
    assert not (tmp_path / "outputs").exists()


def test_unknown_command(capsys):
    assert main(["frobnicate"]) == 2
    assert "run, eval, algorithms, report, export, import, power, sweep" in capsys.readouterr().err


def test_algorithms_lists_every_field_with_help(capsys):
    assert main(["algorithms"]) == 0
    out = capsys.readouterr().out
    for name in ("sppo", "ppo", "grpo", "dapo", "rloo", "remax"):
        assert f"{name} (critic:" in out
    assert "clip_ratio_c" in out and "overlong_buffer" in out
    # the shared trainer settings too, without the per-algorithm learning rates
    trainer = out[out.index("trainer (shared by every algorithm") :]
    assert "samples_per_step" in trainer and "critic_head_init" in trainer
    assert "actor_lr" not in trainer


def test_console_script_is_installed():
    exe = Path(sys.executable).parent / "sppo-bench"
    res = subprocess.run(
        [str(exe), "frobnicate"], capture_output=True, text=True, env={**os.environ}, timeout=120
    )
    assert res.returncode == 2 and "unknown command" in res.stderr


def test_the_sweep_commands_come_from_their_entry_points(capsys):
    """`sweep` and `export --sweep` reach sweeps/ through the installed `sppo_bench.commands`
    entry points (benchmarks/ never imports sweeps/): a bad spec answers from the sweep's own
    parser, as the console script would."""
    from importlib.metadata import entry_points

    from benchmarks.cli import COMMANDS_GROUP

    names = {ep.name: ep.value for ep in entry_points(group=COMMANDS_GROUP)}
    assert names == {"sweep": "sweeps.cli:main", "export-sweep": "sweeps.cli:export_main"}
    assert main(["sweep", "no_such_spec"]) == 2
    assert "no_such_spec" in capsys.readouterr().err


def test_sweep_overrides_may_follow_the_options():
    from sweeps.cli import _parser

    a = _parser().parse_intermixed_args(
        ["lr_per_algorithm", "--trials", "8", "--workers", "2", "budget.limit=256", "seeds=1"]
    )
    assert (a.spec, a.trials, a.workers) == ("lr_per_algorithm", 8, 2)
    assert a.overrides == ["budget.limit=256", "seeds=1"]


@pytest.mark.slow  # a default suite run in a subprocess: ~2 min on 2 loaded cores
def test_the_default_suite_imports_no_optional_engine(tmp_path):
    """`make run` installs only the core dependencies: the default path (a suite to its report)
    must not import verl, TRL, lm-eval or vLLM."""
    script = (
        "import sys\n"
        "from benchmarks.cli import main\n"
        "rc = main(sys.argv[1:])\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'verl', 'trl', 'lm_eval', 'vllm'})\n"
        "print('HEAVY', heavy)\n"
        "sys.exit(rc)\n"
    )
    micro = [
        "warmstart.phases=[{steps:5,direct_fraction:0.0}]",
        "warmstart.val_size=16",
        "task.eval_size=16",
        "seeds=1",
        "trainer.samples_per_step=16",
        "budget.limit=32",
        "algorithm.dapo.params.group_size=4",
        "algorithm.grpo.params.group_size=4",
        "trainer.calibration_prompts=4",
        "jobs=1",
    ]
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            "run",
            *micro,
            f"tracking.uri=sqlite:///{tmp_path / 'm.db'}",
            f"cache_dir={tmp_path / 'cache'}",
            f"output_dir={tmp_path / 'out'}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "HEAVY []" in res.stdout, res.stdout[-2000:]
    assert (tmp_path / "out" / "report" / "report.md").is_file()  # the report ran too


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_run_help_prints_the_usage_instead_of_a_parse_error(flag, capsys):
    assert main(["run", flag]) == 0
    out, err = capsys.readouterr()
    assert "sppo-bench run [hydra overrides...]" in out and not err
