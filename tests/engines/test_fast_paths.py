"""The performance paths keep the maths: the static-cache decoder samples what HF's cache path
samples, skipping the old-log-prob pass on-policy leaves loss and gradients unchanged, and
asynchronous MLflow logging loses no metric."""

from __future__ import annotations

import copy

import pytest
import torch

from analysis import metrics as M
from benchmarks.engines import fastdecode
from benchmarks.engines.teacher_forced import response_logprobs
from benchmarks.engines.torch_engine import TorchEngine
from benchmarks.telemetry.meter import Budget
from benchmarks.training.modeling import ModelSpec, build_tiny_llama
from testkit.tolerances import (
    F64_SAME_MATH,
    assert_close_to_scale,
    hf_rmsnorm_in_model_dtype,
    logprob_atol,
)
from testkit.trainers import PROMPTS, FirstDigitTask, make_trainer
from testkit.trainers import ROLLOUT_SPEC as SPEC

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model(tok):
    return build_tiny_llama(SPEC, len(tok), seed=1)


# --- static-cache decoder ----------------------------------------------------------------------


def test_tiny_llama_takes_the_fast_path_and_other_models_do_not(model, tok):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    assert TorchEngine(model, tok)._fast is not None
    assert TorchEngine(model, tok, fast=False)._fast is None
    qwen = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    )
    assert not fastdecode.supports(qwen)  # q/k/v biases: HF's own path
    assert not fastdecode.supports(copy.deepcopy(model).to(torch.bfloat16))  # fp32 only
    ro = TorchEngine(qwen, tok).generate(PROMPTS, temperature=1.0, max_new_tokens=4, seed=0)
    assert ro.response_ids.shape[0] == len(PROMPTS)


def test_greedy_equals_hf_cache_path_with_padding(model, tok):
    prompts = PROMPTS * 5
    fast = TorchEngine(model, tok).generate(prompts, temperature=0.0, max_new_tokens=14, seed=0)
    ref = TorchEngine(model, tok, fast=False).generate(
        prompts, temperature=0.0, max_new_tokens=14, seed=0
    )
    assert (fast.prompt_mask == 0).any()  # left padding really present
    assert torch.equal(fast.response_ids, ref.response_ids)
    assert fast.texts == ref.texts
    # fp32 log-probs of two forward paths: rounding of the model's widest sums
    torch.testing.assert_close(fast.log_probs, ref.log_probs, atol=logprob_atol(model), rtol=0)


def test_sampling_draws_match_hf_cache_path(model, tok):
    """Both paths draw from the same distributions with the same generator calls: identical
    samples, log-probs equal to rounding (rows that finish are dropped by the fast path only)."""
    kw = dict(temperature=1.5, top_p=0.9, max_new_tokens=16, seed=4)
    fast = TorchEngine(model, tok).generate(PROMPTS * 4, **kw)
    ref = TorchEngine(model, tok, fast=False).generate(PROMPTS * 4, **kw)
    assert fast.lengths.min() < 8 < fast.lengths.max()  # rows ended (and were dropped) early
    assert torch.equal(fast.response_ids, ref.response_ids)
    # fp32 log-probs of two forward paths: rounding of the model's widest sums
    torch.testing.assert_close(fast.log_probs, ref.log_probs, atol=logprob_atol(model), rtol=0)


def test_grouped_query_attention_matches_hf_cache_path(tok):
    """Fewer kv heads than q heads: the decoder's per-head row reordering of q and k (for its
    complex RoPE) and its grouped attention keep HF's draws and log-probs."""
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        gqa = LlamaForCausalLM(
            LlamaConfig(
                vocab_size=len(tok),
                hidden_size=64,
                intermediate_size=128,
                num_hidden_layers=2,
                num_attention_heads=8,
                num_key_value_heads=2,
                max_position_embeddings=64,
                pad_token_id=0,
                eos_token_id=1,
                bos_token_id=None,
            )
        )
    assert fastdecode.supports(gqa)
    for kw in (
        dict(temperature=0.0, max_new_tokens=16, seed=0),
        dict(temperature=1.5, top_p=0.9, max_new_tokens=16, seed=4),
    ):
        fast = TorchEngine(gqa, tok).generate(PROMPTS * 4, **kw)
        ref = TorchEngine(gqa, tok, fast=False).generate(PROMPTS * 4, **kw)
        assert torch.equal(fast.response_ids, ref.response_ids)
        # fp32 log-probs of two forward paths: rounding of the model's widest sums
        torch.testing.assert_close(fast.log_probs, ref.log_probs, atol=logprob_atol(gqa), rtol=0)


def test_dropping_finished_rows_changes_no_draw(model, tok, monkeypatch):
    kw = dict(temperature=1.5, top_p=1.0, max_new_tokens=16, seed=5)
    dropped = TorchEngine(model, tok).generate(PROMPTS * 6, **kw)
    monkeypatch.setattr(fastdecode, "CHECK_EVERY", 10**6)
    kept = TorchEngine(model, tok).generate(PROMPTS * 6, **kw)
    assert dropped.lengths.min() < 8 < dropped.lengths.max()
    assert torch.equal(dropped.response_ids, kept.response_ids)
    # Fewer rows change the decoder's matmul shapes, so its fp32 summation order
    torch.testing.assert_close(dropped.log_probs, kept.log_probs, atol=logprob_atol(model), rtol=0)


def test_rows_ending_early_are_dropped_and_padded(model, tok):
    """Rows that emit EOS early are padded after it and the others keep decoding."""
    ro = TorchEngine(model, tok).generate(PROMPTS * 8, temperature=1.5, max_new_tokens=20, seed=3)
    lengths = ro.lengths.tolist()
    assert min(lengths) < 8 and max(lengths) > 12  # rows really ended at different steps
    for b, n in enumerate(lengths):
        assert (ro.response_ids[b, n:] == tok.pad_token_id).all()
        assert (ro.log_probs[b, n:] == 0).all()
    lp, _ = response_logprobs(
        model, ro.prompt_ids, ro.prompt_mask, ro.response_ids, ro.response_mask, 1.5
    )
    valid = ro.response_mask.bool()
    # fp32 decoder vs HF's teacher-forced forward: rounding of the model's widest sums
    torch.testing.assert_close(
        ro.log_probs[valid], lp.detach()[valid], atol=logprob_atol(model), rtol=0
    )


def test_weights_are_read_at_every_call(model, tok):
    """The engine holds no copy of the weights: an update is sampled from at the next call."""
    m = copy.deepcopy(model)
    eng = TorchEngine(m, tok)
    kw = dict(temperature=1.0, max_new_tokens=8, seed=0)
    before = eng.generate(PROMPTS, **kw)
    with torch.no_grad():
        for p in m.model.layers[0].mlp.parameters():
            p.mul_(3.0)
        m.model.layers[1].self_attn.q_proj.weight.mul_(-2.0)
    after = eng.generate(PROMPTS, **kw)
    ref = TorchEngine(m, tok, fast=False).generate(PROMPTS, **kw)
    assert torch.equal(after.response_ids, ref.response_ids)
    # fp32 log-probs of two forward paths (~3e-5), far below the > 1e-3 of the update below
    torch.testing.assert_close(after.log_probs, ref.log_probs, atol=logprob_atol(m), rtol=0)
    assert (after.log_probs - before.log_probs).abs().max() > 1e-3


# --- on-policy: no old-log-prob pass -----------------------------------------------------------


@pytest.mark.parametrize("name", ["grpo", "sppo"])
def test_on_policy_skip_keeps_loss_and_gradients(name, tok):
    start = build_tiny_llama(
        ModelSpec(
            hidden_size=32,
            num_layers=1,
            num_heads=4,
            intermediate_size=64,
            max_position_embeddings=64,
        ),
        len(tok),
        seed=0,
    )
    task = FirstDigitTask(horizon=1, eval_size=16)
    budget = Budget("samples", 10**6, eval_fractions=(1.0,))
    one, two = (make_trainer(name, start, tok, task, budget, seed=3) for _ in range(2))
    two.skip_old_logprob = False
    assert one._on_policy() and not two._on_policy()
    s1, s2 = one.train_step(), two.train_step()
    # A one-machine claim, not a rounding budget: the separate old-log-prob pass runs the same
    # kernels on the same shapes as the update's forward (which only permutes rows), so its
    # log-probs equal the update's own to the bit, the ratio is exactly 1 in both trainers and
    # loss and gradients agree to the bit (as observed); a wrong old log-prob moves them >> 1e-5.
    assert s1[M.TRAIN_POLICY_LOSS] == pytest.approx(s2[M.TRAIN_POLICY_LOSS], abs=1e-7)
    for k in (M.TRAIN_GRAD_NORM, M.TRAIN_ENTROPY):
        assert s1[k] == pytest.approx(s2[k], rel=1e-6, abs=1e-7)
    grads = [
        (p.grad, q.grad)
        for p, q in zip(one.policy.parameters(), two.policy.parameters(), strict=True)
    ]
    assert any(g1 is not None and g1.abs().sum() > 0 for g1, _ in grads)
    for g1, g2 in grads:
        torch.testing.assert_close(g1, g2, atol=1e-7, rtol=1e-5)
    # The skipped pass costs neither time nor FLOPs.
    assert one.meter.flops["logprob"] == 0 and two.meter.flops["logprob"] > 0
    assert one.meter.wall["logprob"] == 0


def test_off_policy_updates_keep_the_old_log_prob_pass(tok):
    start = build_tiny_llama(SPEC, len(tok), seed=0)
    task = FirstDigitTask(horizon=1, eval_size=16)
    budget = Budget("samples", 10**6, eval_fractions=(1.0,))
    assert not make_trainer("grpo", start, tok, task, budget, mini_batches=2)._on_policy()
    ppo = make_trainer("ppo", start, tok, task, budget)
    assert ppo.alg.kl_in_reward or ppo.alg.ppo_epochs > 1 or ppo._on_policy()


# --- asynchronous MLflow logging ---------------------------------------------------------------


@pytest.mark.slow  # a whole run with async metrics: ~14 s
def test_async_metrics_are_all_stored_when_the_run_ends(tmp_path):
    from mlflow.tracking import MlflowClient

    from benchmarks.telemetry.tracking import MlflowTracker, prepare_store

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    exp = prepare_store(uri, "async")
    client = MlflowClient(uri)
    with MlflowTracker.start(client, exp, run_name="r", tags={}) as tr:
        assert not tr.synchronous
        for step in range(25):
            tr.log_metrics({"a": float(step), "b": 2.0 * step}, step=step)
        run_id = tr.run_id
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    for key, scale in (("a", 1.0), ("b", 2.0)):
        hist = sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)
        assert [m.step for m in hist] == list(range(25))
        assert [m.value for m in hist] == [scale * s for s in range(25)]


# --- length buckets ----------------------------------------------------------------------------


def test_length_buckets_give_the_same_logprobs_and_gradients(model, tok, monkeypatch):
    from benchmarks.engines.teacher_forced import bucketed_logprobs

    ro = TorchEngine(model, tok).generate(PROMPTS * 16, temperature=1.5, max_new_tokens=16, seed=2)
    assert ro.lengths.min() < 8 < ro.lengths.max()
    args = (ro.prompt_ids, ro.prompt_mask, ro.response_ids, ro.response_mask, 1.5)
    valid = ro.response_mask.bool()
    # The same maths, so float64 (fp32 gradients of 1000-position sums differ by CPU kind); the
    # shared-prompt path's fp32-only gate is lifted for the float64 copies.
    assert fastdecode.supports(model)
    monkeypatch.setattr(fastdecode, "supports", lambda m: True)
    out = {}
    for k in (1, 3):
        m = copy.deepcopy(model).double()
        lp, ent = bucketed_logprobs(m, *args, with_entropy=True, buckets=k, min_rows=16)
        loss = -(lp * ro.response_mask).sum() + 0.1 * (ent * ro.response_mask).sum()
        loss.backward()
        out[k] = (lp.detach(), ent.detach(), [p.grad for p in m.parameters()])
    (lp1, e1, g1), (lp3, e3, g3) = out[1], out[3]
    # float64, same maths: F64_SAME_MATH of each tensor's scale (fp32 log-softmax tail aside)
    assert_close_to_scale(lp3[valid], lp1[valid], F64_SAME_MATH)
    assert_close_to_scale(e3[valid], e1[valid], F64_SAME_MATH)
    assert (lp3[~valid] == 0).all() and (e3[~valid] == 0).all()
    for a, b in zip(g1, g3, strict=True):
        assert a.dtype == torch.float64
        assert_close_to_scale(b, a, F64_SAME_MATH)  # to the scale: elements near 0 cancel


def test_shared_prompt_forward_gives_hf_logprobs_and_gradients(model, tok, monkeypatch):
    """Each distinct prompt runs once for its group; log-probs, entropies and every gradient
    (including the embedding's, whose padding row HF never updates) match HF's forward. The
    same maths, so compared in float64 (fp32 gradients differ by CPU kind)."""
    from benchmarks.engines.fastdecode import prefix_logprobs

    prompts = [p for p in PROMPTS for _ in range(4)]
    ro = TorchEngine(model, tok).generate(prompts, temperature=1.5, max_new_tokens=12, seed=6)
    assert (ro.prompt_mask == 0).any() and (ro.response_ids == tok.pad_token_id).any()
    valid = ro.response_mask.bool()
    hf_rmsnorm_in_model_dtype(monkeypatch)  # HF's norm would round to fp32 on its side only
    got = {}
    for name in ("hf", "shared"):
        m = copy.deepcopy(model).double()
        if name == "hf":
            lp, ent = response_logprobs(
                m, ro.prompt_ids, ro.prompt_mask, ro.response_ids, ro.response_mask, 1.5, True
            )
        else:
            lp, ent = prefix_logprobs(m, ro.prompt_ids, ro.prompt_mask, ro.response_ids, 1.5, True)
        ((lp + 0.1 * ent) * ro.response_mask).sum().backward()
        got[name] = (lp.detach(), ent.detach(), [p.grad for p in m.parameters()])
    (lp1, e1, g1), (lp2, e2, g2) = got["hf"], got["shared"]
    # float64, same maths: F64_SAME_MATH of each tensor's scale (fp32 RoPE tables and
    # log-softmax tail aside, ~eps64)
    assert_close_to_scale(lp2[valid], lp1[valid], F64_SAME_MATH)
    assert_close_to_scale(e2[valid], e1[valid], F64_SAME_MATH)
    for a, b in zip(g1, g2, strict=True):
        assert a.dtype == torch.float64
        assert_close_to_scale(b, a, F64_SAME_MATH)  # to the scale: elements near 0 cancel


def test_large_workspace_is_not_kept_between_calls(model, tok, monkeypatch):
    """The tiny model's caches are reused across calls; a real model's are freed after each call
    (same samples either way)."""
    kw = dict(temperature=1.0, max_new_tokens=10, seed=2)
    eng = TorchEngine(model, tok)
    kept = eng.generate(PROMPTS * 3, **kw)
    assert eng._fast._ws is not None
    monkeypatch.setattr(fastdecode, "KEEP_WORKSPACE_BYTES", 0)
    freed = eng.generate(PROMPTS * 3, **kw)
    assert eng._fast._ws is None
    assert torch.equal(kept.response_ids, freed.response_ids)
    # One machine, same shapes, same kernels: bit-identical, not a rounding claim
    torch.testing.assert_close(kept.log_probs, freed.log_probs, atol=0, rtol=0)
