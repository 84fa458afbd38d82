"""The verl engine on CPU: our math equals verl's ``core_algos``, the plugin's SPPO pieces, the
registry wrappers, parquet export, the reward function and the metric mapping.

verl trains only on GPUs; everything here runs verl's own functions on CPU (no mocks).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from testkit.paths import REPO, require_module
from testkit.tolerances import fp_tol

require_module("verl")  # the `verl` extra; under CI its absence fails

from verl.trainer.ppo import core_algos  # noqa: E402
from verl.workers.config import FSDPActorConfig  # noqa: E402

from algorithms import get_algorithm  # noqa: E402
from algorithms.common import LOSS_AGG_MODES  # noqa: E402
from benchmarks.verl_engine import plugin  # noqa: E402
from benchmarks.verl_engine.translate import ALGORITHM_ENV, NO_DUAL_CLIP  # noqa: E402

SEEDS = [0, 1, 2]
#: Ours vs verl's functions: the same maths, so compared in float64 (in fp32 the two
#: implementations' summation orders differ by CPU kind). Float64 rounding of these means and
#: discounted sums of <= 108 terms (B * T), sum|terms| <= 30, is <= fp_tol(108, 30, float64) ~
#: 7e-13 in any order (GRPO's 1 / (std + 1e-6), std >= 0.4 here, adds x3). Above that only
#: verl's own epsilon: its masked_mean divides by sum(mask) + 1e-8, a relative 1e-8 / n on means
#: of n >= 1 terms of magnitude <= 5 (<= 5e-8; seen: 1.6e-9 on seq-mean losses, 2.8e-10 on
#: whitened GAE advantages). 1e-7 covers both, far below a wrong group, sign, clip branch or
#: normalisation (>= 1e-2).
TOL = dict(atol=1e-7, rtol=0.0)
#: The plugin's verl-facing pieces compute in fp32 by design (their ``.float()``: rewards in
#: make_estimator and sppo_advantages, value logits in prompt_value_loss): fp32 means of <= 12
#: terms, results of magnitude <= 4 -> fp_tol(12, 4) ~ 5.7e-6 (observed <= 1e-7).
FP32_PLUGIN_TOL = dict(atol=fp_tol(12, scale=4.0), rtol=0.0)


def _batch(seed: int, b: int = 12, t: int = 9, groups: int = 3):
    """Random right-padded batch, in float64 (see TOL): rewards on the last valid token, uids,
    values, log-probs (padding holds random finite garbage, as verl's buffers may)."""
    g = torch.Generator().manual_seed(seed)
    f64 = dict(generator=g, dtype=torch.float64)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).double()  # (B, T)
    rewards = torch.randint(0, 2, (b,), generator=g).double() + 0.1 * torch.randn(b, **f64)
    token_rewards = torch.zeros(b, t, dtype=torch.float64)
    token_rewards[torch.arange(b), lengths - 1] = rewards
    group = torch.randint(0, groups, (b,), generator=g)
    uids = np.array([f"uid-{int(i)}" for i in group], dtype=object)
    values = torch.randn(b, t, **f64)
    logp = -torch.rand(b, t, **f64) * 3
    old = logp + 0.3 * torch.randn(b, t, **f64)
    adv = torch.randn(b, t, **f64) * mask
    return mask, rewards, token_rewards, group, uids, values, logp, old, adv


# --- advantages ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("norm", [True, False])
def test_grpo_equals_verl(seed, norm):
    mask, rewards, token_rewards, group, uids, *_ = _batch(seed)
    ours, _ = get_algorithm("grpo", norm_adv_by_std=norm).advantages(rewards, mask, group)
    theirs, _ = core_algos.compute_grpo_outcome_advantage(
        token_rewards, mask, uids, norm_adv_by_std_in_grpo=norm
    )
    torch.testing.assert_close(ours, theirs, **TOL)


@pytest.mark.parametrize("seed", SEEDS)
def test_rloo_equals_verl_and_the_wrapper_too(seed):
    mask, rewards, token_rewards, group, uids, *_ = _batch(seed)
    ours, _ = get_algorithm("rloo").advantages(rewards, mask, group)
    theirs, _ = core_algos.compute_rloo_outcome_advantage(token_rewards, mask, uids)
    torch.testing.assert_close(ours, theirs, **TOL)
    # the registry wrapper verl would call for a user algorithm (uids -> group ids)
    wrapped, returns = plugin.make_estimator("rloo")(token_rewards, mask, index=uids)
    torch.testing.assert_close(wrapped, theirs, **FP32_PLUGIN_TOL)  # the wrapper works in fp32
    torch.testing.assert_close(returns, wrapped)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (0.99, 0.95)])
def test_gae_equals_verl(seed, gamma, lam):
    mask, rewards, token_rewards, _, _, values, *_ = _batch(seed)
    alg = get_algorithm("ppo", gamma=gamma, lam=lam)
    ours, our_returns = alg.advantages(rewards, mask, None, values=values)
    theirs, their_returns = core_algos.compute_gae_advantage_return(
        token_rewards, values, mask, gamma, lam
    )
    valid = mask.bool()
    torch.testing.assert_close(ours[valid], theirs[valid], **TOL)
    torch.testing.assert_close(our_returns[valid], their_returns[valid], **TOL)


@pytest.mark.parametrize("seed", SEEDS)
def test_remax_equals_verl(seed):
    mask, rewards, token_rewards, *_ = _batch(seed)
    g = torch.Generator().manual_seed(seed + 9)
    baseline = torch.rand(rewards.shape, generator=g, dtype=torch.float64)
    ours, _ = get_algorithm("remax").advantages(rewards, mask, None, baseline_rewards=baseline)
    theirs, _ = core_algos.compute_remax_outcome_advantage(token_rewards, baseline, mask)
    torch.testing.assert_close(ours, theirs * mask, **TOL)


# --- policy loss -----------------------------------------------------------------------------


def _actor_config(low: float, high: float, c: float | None, mode: str) -> FSDPActorConfig:
    return FSDPActorConfig(
        strategy="fsdp",
        ppo_mini_batch_size=4,
        rollout_n=1,
        use_dynamic_bsz=True,
        clip_ratio_low=low,
        clip_ratio_high=high,
        clip_ratio_c=NO_DUAL_CLIP if c is None else c,
        loss_agg_mode=mode,
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize(
    ("low", "high", "c"), [(0.2, 0.2, None), (0.2, 0.2, 3.0), (0.2, 0.28, None), (0.1, 0.3, 2.0)]
)
def test_clipped_policy_loss_equals_verl_vanilla(seed, mode, low, high, c):
    """Dual-clip, clip-higher, every aggregation mode; no dual-clip = verl with c = 1e9."""
    mask, *_, logp, old, adv = _batch(seed)
    logp = logp * 2  # ratios far outside the clip range, so every branch is exercised
    alg = get_algorithm(
        "dapo", clip_ratio_low=low, clip_ratio_high=high, clip_ratio_c=c, loss_agg_mode=mode
    )
    loss, metrics = alg.policy_loss(logp, old, adv, mask)
    cfg = _actor_config(low, high, c, mode)
    theirs, their_metrics = core_algos.compute_policy_loss_vanilla(
        old, logp, adv, mask, loss_agg_mode=mode, config=cfg
    )
    torch.testing.assert_close(loss, theirs, **TOL)
    # Fractions of <= 108 tokens and a float64 mean: 1e-6 is loose on rounding (<= 1e-7, see
    # TOL) yet far below one token counted wrong (1 / 108 ~ 9e-3)
    assert metrics["train/clip_frac"] == pytest.approx(their_metrics["actor/pg_clipfrac"], abs=1e-6)
    assert metrics["train/approx_kl"] == pytest.approx(their_metrics["actor/ppo_kl"], abs=1e-6)
    if c is not None:
        assert metrics["train/dual_clip_frac"] == pytest.approx(
            their_metrics["actor/pg_clipfrac_lower"], abs=1e-6
        )


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_policy_loss_wrapper_matches_verl_global_normalisation(mode, monkeypatch):
    """A registry policy loss through the wrapper equals verl's vanilla loss under data-parallel
    normalisation (dp_size, global token and sequence counts), micro-batch by micro-batch."""
    mask, *_, logp, old, adv = _batch(5)
    params = dict(clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0, loss_agg_mode=mode)
    monkeypatch.setenv(ALGORITHM_ENV, json.dumps({"name": "dapo", "params": params}))
    plugin.configured_algorithm.cache_clear()
    cfg = _actor_config(0.2, 0.28, 3.0, mode)
    cfg.global_batch_info.update(dp_size=2, batch_num_tokens=123, global_batch_size=29)
    try:
        ours, _ = plugin.make_policy_loss("dapo")(old, logp, adv, mask, mode, cfg)
    finally:
        plugin.configured_algorithm.cache_clear()
    theirs, _ = core_algos.compute_policy_loss_vanilla(
        old, logp, adv, mask, loss_agg_mode=mode, config=cfg
    )
    torch.testing.assert_close(ours, theirs, **TOL)


# --- SPPO inside verl ------------------------------------------------------------------------


def test_sppo_advantage_reads_the_prompt_value_at_position_zero():
    mask, rewards, token_rewards, _, _, values, *_ = _batch(3)
    adv, returns, metrics = plugin.sppo_advantages(
        get_algorithm("sppo"), token_rewards, values, mask
    )
    expected = (rewards - torch.sigmoid(values[:, 0]))[:, None] * mask
    torch.testing.assert_close(adv, expected, **FP32_PLUGIN_TOL)  # computed in fp32
    torch.testing.assert_close(returns[:, 0], rewards, **FP32_PLUGIN_TOL)
    assert set(metrics) >= {"critic/loss", "critic/value_mean", "critic/calibration_error"}


def _nested(rows):
    return torch.nested.as_nested_tensor([torch.as_tensor(r) for r in rows], layout=torch.jagged)


def test_prompt_value_loss_is_bce_at_the_last_prompt_token():
    """verl's critic output over prompt+response, sliced as verl slices it: position 0 of the
    response view is the last prompt token; the loss is the BCE there, whatever the rest."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu

    prompt_lens, resp_lens = [3, 5, 2], [4, 1, 3]
    targets = torch.tensor([1.0, 0.0, 1.0])
    logits = torch.tensor([0.7, -1.2, 2.0])
    outputs = []
    for p, r, v in zip(prompt_lens, resp_lens, logits, strict=True):
        out = torch.randn(p + r) * 5  # garbage everywhere ...
        out[p - 1] = v  # ... except at the last prompt token
        outputs.append(out)
    data = TensorDict(
        {
            "prompts": _nested([torch.ones(p, dtype=torch.long) for p in prompt_lens]),
            "responses": _nested([torch.ones(r, dtype=torch.long) for r in resp_lens]),
            "response_mask": _nested([torch.ones(r) for r in resp_lens]),
            "returns": _nested(
                [torch.full((r,), float(t)) for r, t in zip(resp_lens, targets, strict=True)]
            ),
        },
        batch_size=3,
    )
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=None, global_batch_size=None)
    loss, metrics = plugin.prompt_value_loss(None, {"values": _nested(outputs)}, data)
    expected = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets)
    torch.testing.assert_close(loss, expected, **FP32_PLUGIN_TOL)  # the plugin works in fp32
    # global normalisation: this rank's sequences over the global batch, times dp_size
    tu.assign_non_tensor(data, dp_size=2, global_batch_size=12)
    loss2, _ = plugin.prompt_value_loss(None, {"values": _nested(outputs)}, data)
    torch.testing.assert_close(loss2, expected * 3 / 12 * 2, **FP32_PLUGIN_TOL)


# --- the plugin through verl's entry-point loading -------------------------------------------


@pytest.mark.slow  # import verl in a subprocess: ~15 s
def test_plugin_loads_through_the_verl_plugins_entry_point(tmp_path):
    """A fresh interpreter where the only route in is the ``verl.plugins`` entry point (a
    dist-info on sys.path declaring it, as ``pip install`` writes): ``import verl`` registers
    the estimators, the user's plugin algorithms (``SPPO_BENCH_PLUGINS``) and the SPPO trainer
    hook; with TransferQueue installed, the trainer itself."""
    dist = tmp_path / "sppo_bench_ep-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sppo-bench-ep\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(
        "[verl.plugins]\nsppo_bench = benchmarks.verl_engine.plugin\n"
    )
    probe = textwrap.dedent(
        """
        import importlib.util, json, sys
        assert "benchmarks.verl_engine.plugin" not in sys.modules
        import verl
        from verl.trainer.ppo import core_algos
        out = {
            "loaded": "benchmarks.verl_engine.plugin" in sys.modules,
            "estimators": sorted(k for k in core_algos.ADV_ESTIMATOR_REGISTRY if k.startswith("sppo")),
            "hook": any(type(f).__name__ == "_AfterImport" for f in sys.meta_path),
            "trainer": None,
        }
        if importlib.util.find_spec("transfer_queue") is not None:
            from verl.trainer.ppo.v1 import get_trainer_cls
            out["trainer"] = get_trainer_cls("sppo").__mro__[1].__name__
        print(json.dumps(out))
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO), os.environ.get("PYTHONPATH", "")]),
        "SPPO_BENCH_PLUGINS": "examples.dr_grpo",
        "VERL_USE_EXTERNAL_PLUGINS": "auto",
    }
    env.pop("VERL_USE_EXTERNAL_MODULES", None)
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["loaded"] and out["hook"]
    assert "sppo_bench.sppo" in out["estimators"]
    assert "sppo_bench.dr_grpo_example" in out["estimators"]  # the user's, through the wrapper
    assert "sppo_bench.dr_grpo" not in out["estimators"]  # built in: verl's own GRPO estimator
    if importlib.util.find_spec("transfer_queue") is not None:
        assert out["trainer"] == "PPOTrainerSync"


TRAINER_PROBE = textwrap.dedent(
    """
    import ray, torch
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
    import transfer_queue as tq
    tq.init()
    try:
        import verl
        from tensordict import TensorDict
        from verl.trainer.ppo.v1 import get_trainer_cls
        from algorithms import get_algorithm
        trainer = object.__new__(get_trainer_cls("sppo"))  # only the advantage step is probed
        trainer.algorithm = get_algorithm("sppo")
        nested = lambda rows: torch.nested.as_nested_tensor(rows, layout=torch.jagged)
        lens, rewards = [3, 1, 4], [1.0, 0.0, 1.0]
        scores = [torch.zeros(n) for n in lens]
        for s, n, r in zip(scores, lens, rewards):
            s[n - 1] = r
        values = [torch.randn(n) for n in lens]
        keys = ["a", "b", "c"]
        meta = tq.kv_batch_put(keys=keys, partition_id="train", fields=TensorDict(
            {"response_mask": nested([torch.ones(n, dtype=torch.long) for n in lens]),
             "rm_scores": nested(scores), "values": nested(values)}, batch_size=3))
        metrics = {}
        trainer._compute_advantage(meta, metrics)
        got = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["advantages", "returns"])
        for i, n in enumerate(lens):
            expected = (rewards[i] - torch.sigmoid(values[i][0])).expand(n)
            assert torch.allclose(got["advantages"][i], expected), (i, got["advantages"][i])
            assert torch.allclose(got["returns"][i], torch.full((n,), rewards[i]))
        assert "critic/value_mean" in metrics
        print("SPPO-TRAINER-OK")
    finally:
        tq.close()
        ray.shutdown()
    """
)


@pytest.mark.slow
def test_sppo_trainer_advantage_step_on_a_real_transfer_queue():
    """The plugin trainer's advantage step through verl's TransferQueue (a local Ray cluster):
    per-response advantages R - sigmoid(v at the last prompt token) and returns R."""
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "benchmarks.verl_engine.plugin"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", TRAINER_PROBE],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert "SPPO-TRAINER-OK" in proc.stdout, proc.stderr[-3000:]
