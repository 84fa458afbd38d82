"""``sppo-bench memory``: the analytic projection's arithmetic and its command line."""

from __future__ import annotations

import pytest

from benchmarks.cli import main
from benchmarks.telemetry.memory_projection import (
    ARCHS,
    PAPER_PEAK_VRAM,
    Arch,
    ProjectionSettings,
    Scenario,
    default_scenarios,
    load_settings,
    project,
)

GB = 1e9


def test_parameter_counts_are_the_published_models():
    # Qwen2.5-1.5B: 1,543,714,304 parameters (tied embeddings); Qwen2.5-7B: 7,615,616,512.
    assert ARCHS["qwen2.5-1.5b"].params() == 1_543_714_304
    assert ARCHS["qwen2.5-7b"].params() == 7_615_616_512
    # A critic has a scalar head instead of the LM head (untied in the 7B: one vocab x hidden less).
    a = ARCHS["qwen2.5-7b"]
    assert a.params(lm_head=False) == a.params() - a.vocab * a.hidden + a.hidden + 1


def test_components_by_hand():
    tiny = Arch(
        "t-1", hidden=8, layers=2, heads=2, kv_heads=1, intermediate=16, vocab=10, tied=True
    )
    n = tiny.params()
    # embeddings 80; per layer: q, o 64 each, k, v 32 each, biases 8 + 2 * 4, MLP 384, norms 16
    assert n == 80 + 2 * (64 + 64 + 32 + 32 + 16 + 384 + 16) + 8
    s = ProjectionSettings(
        gpus=2,
        gpu_gb=1.0,
        micro_batch=1,
        prompt_len=3,
        response_len=5,
        samples_per_step=4,
        rollout_pool_fraction=1.0,
    )
    r = project(Scenario("sppo", "sppo", tiny, tiny, "prompt", False), s)
    policy = r["components"]["policy"]
    assert policy == {"params": n / 2 * 2, "grads": n / 2 * 2, "optimizer": n / 2 * 8}
    nc = tiny.params(lm_head=False)
    assert r["components"]["critic"]["optimizer"] == nc / 2 * 8
    assert r["static"] == (n + nc) / 2 * 12
    # checkpointing: every layer's input (8 tokens x hidden x 2 B) plus one layer recomputed, plus
    # fp32 logits and their gradient; the prompt critic sees the 3 prompt tokens, no logits.
    layer = lambda t: t * (6 * 8 + 2 * 4 + 4 * 16) * 2  # noqa: E731
    assert r["policy_activations"] == 2 * 8 * 8 * 2 + layer(8) + 8 * 10 * 4 * 2
    assert r["critic_activations"] == 2 * 3 * 8 * 2 + layer(3)
    kv = 4 / 2 * 8 * 2 * 2 * 4 * 2  # sequences per GPU x tokens x layers x (k, v) x kv_dim x 2 B
    assert r["rollout"] == n * 2 + kv
    assert r["peak"] == r["static"] + max(r["activations"], r["rollout"])
    assert r["fraction"] == r["peak"] / GB
    off = project(
        Scenario("ppo", "ppo", tiny, tiny, "token", False),
        ProjectionSettings(**{**s.__dict__, "checkpointing": False}),
    )
    assert off["critic_activations"] == 2 * layer(8)  # the token critic: the whole sequence


def test_the_small_critic_and_the_reference():
    s = ProjectionSettings()
    rows = {(sc.label, sc.policy.short): project(sc, s) for sc in default_scenarios()}
    assert set(PAPER_PEAK_VRAM) == {label for label, size in rows if size == "7b"}
    big, small = rows[("sppo", "7b")], rows[("sppo+1.5b critic", "7b")]
    assert small["peak"] < big["peak"]
    assert "reference" in rows[("grpo", "7b")]["components"]
    assert "critic" not in rows[("grpo", "7b")]["components"]
    # A prompt critic's activations are its prompt's: far below the token critic's.
    assert (
        rows[("sppo", "7b")]["critic_activations"] < rows[("ppo", "7b")]["critic_activations"] / 5
    )


def test_settings_errors_name_the_key(tmp_path):
    with pytest.raises(ValueError, match="unknown setting 'gpu'.*allowed"):
        load_settings(None, ["gpu=4"])
    with pytest.raises(ValueError, match="rollout_pool_fraction=1.5 must be in"):
        load_settings(None, ["rollout_pool_fraction=1.5"])
    with pytest.raises(ValueError, match="gpus=0 must be >= 1"):
        load_settings(None, ["gpus=0"])
    f = tmp_path / "m.yaml"
    f.write_text("memory:\n  gpus: 4\n  checkpointing: false\n")
    s = load_settings(str(f), ["micro_batch=2"])
    assert (s.gpus, s.checkpointing, s.micro_batch) == (4, False, 2)


def test_command_prints_the_table_beside_the_paper(capsys):
    assert main(["memory", "--set", "gpus=8"]) == 0
    out = capsys.readouterr().out
    assert "91.5%" in out and "78.7%" in out and "85.7%" in out and "89.8%" in out
    assert "Assumptions" in out and "bf16" in out and "checkpointing" in out
    assert main(["memory", "--set", "nope=1"]) == 2
    assert "unknown setting 'nope'" in capsys.readouterr().err
