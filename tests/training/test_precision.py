"""``precision: auto | fp32 | bf16``: checked before any compute, resolved once per suite, and in
bf16 only the models' matmuls change: log-probs, values, advantages, losses and every masked
mean's count stay fp32; the engine samples with the trainer's bf16 numbers.

(Resume in bf16: tests/training/test_trainer_state.py; workers in bf16: tests/suite/test_workers.py.)
"""

from __future__ import annotations

import copy

import pytest
import torch

from algorithms import ConfigError, get_algorithm
from analysis import metrics as M
from benchmarks.config import compose_config
from benchmarks.engines.fastdecode import LlamaDecoder, prefix_logprobs
from benchmarks.engines.rollout import encode_prompts
from benchmarks.engines.teacher_forced import response_logprobs
from benchmarks.engines.torch_engine import TorchEngine
from benchmarks.suite.plan import validate
from benchmarks.telemetry.meter import Budget
from benchmarks.training import precision as precision_module
from benchmarks.training.modeling import build_tiny_llama
from benchmarks.training.precision import autocast, resolve_precision
from testkit.trainers import PROMPTS, ROLLOUT_SPEC, SPEC, SPS, FirstDigitTask, make_trainer

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model(tok):
    return build_tiny_llama(ROLLOUT_SPEC, len(tok), seed=0)


@pytest.mark.parametrize("bad", ["fp16", "BF16", "float32"])
def test_a_bad_precision_names_the_key_and_its_values(bad):
    cfg = compose_config([f"precision={bad}"])
    with pytest.raises(ConfigError, match=r"precision=.*allowed: auto, fp32, bf16"):
        validate(cfg)


@pytest.mark.parametrize("value", ["auto", "fp32", "bf16"])
def test_the_plan_holds_the_resolved_precision_and_logs_it(value):
    assert validate(compose_config([])).precision == "fp32"  # the default, auto
    plan = validate(compose_config([f"precision={value}"]))
    assert plan.precision == resolve_precision(value) in ("fp32", "bf16")
    # the run params and the config hash read ``resolved``: the machine's choice, never auto
    assert plan.resolved["precision"] == plan.precision
    assert plan.start_recipe.precision == plan.precision


def test_auto_is_fp32_until_bf16_is_allowed_and_then_only_with_native_bf16(monkeypatch):
    # bf16 changed the default suite's conclusions: auto is fp32 on every CPU
    for flags in (["avx2", "fma"], ["avx512f", "avx512_bf16"], ["amx_bf16"]):
        assert resolve_precision("auto", flags=flags) == "fp32"
    monkeypatch.setattr(precision_module, "AUTO_BF16", True)
    assert resolve_precision("auto", flags=["avx2", "fma"]) == "fp32"
    assert resolve_precision("auto", flags=["avx512f", "avx512_bf16"]) == "bf16"
    assert resolve_precision("auto", flags=["amx_bf16"]) == "bf16"
    assert resolve_precision("bf16", flags=[]) == resolve_precision("bf16") == "bf16"


def test_a_bf16_count_would_round_257_to_256():
    # why every masked mean's count stays fp32 (the mask is never cast by autocast)
    assert float(torch.tensor(257.0).to(torch.bfloat16)) == 256.0


def _spy(alg, calls):
    """Wrap ``alg``'s advantage, policy-loss and value-loss functions to record the dtypes they
    see and whether an autocast is active around them."""
    for name in ("advantages", "policy_loss", "value_loss"):
        if name == "value_loss" and alg.critic == "none":
            continue
        original = getattr(alg, name)

        def wrapped(*args, _original=original, _name=name, **kwargs):
            out = _original(*args, **kwargs)
            tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
            loss = out[0] if isinstance(out, tuple) else out
            calls.append(
                (
                    _name,
                    torch.is_autocast_enabled("cpu"),
                    {t.dtype for t in tensors if t.is_floating_point()},
                    loss.dtype if isinstance(loss, torch.Tensor) else None,
                )
            )
            return out

        setattr(alg, name, wrapped)


@pytest.mark.parametrize("name", ["grpo", "ppo", "sppo"])
def test_bf16_keeps_log_probs_advantages_and_losses_in_fp32(name, tok):
    start = build_tiny_llama(SPEC, len(tok), seed=0)
    task = FirstDigitTask(horizon=1, eval_size=8)
    overrides = {"ppo": {"critic_warmup_steps": 0}}.get(name, {})
    alg = get_algorithm(name, **overrides)
    calls: list = []
    _spy(alg, calls)
    budget = Budget(kind="samples", limit=2 * SPS, eval_fractions=(0.0, 1.0))
    trainer = make_trainer(alg, start, tok, task, budget, precision="bf16")
    stats = trainer.train_step()
    assert {c[0] for c in calls} >= {"advantages", "policy_loss"}
    for what, autocasting, dtypes, loss_dtype in calls:
        assert not autocasting, what  # every loss, mean and count outside the autocast
        assert dtypes <= {torch.float32}, (what, dtypes)
        if what != "advantages":
            assert loss_dtype == torch.float32, what
    assert torch.isfinite(torch.tensor(stats[M.TRAIN_POLICY_LOSS]))


def test_bf16_changes_the_step_and_fp32_is_the_default(tok):
    """The precision is really used (bf16 and fp32 steps differ), and a trainer built without
    it is the fp32 one, bit for bit."""
    start = build_tiny_llama(SPEC, len(tok), seed=0)
    task = FirstDigitTask(horizon=1, eval_size=8)
    budget = Budget(kind="samples", limit=2 * SPS, eval_fractions=(0.0, 1.0))
    runs = {}
    for precision in ("fp32", "bf16", None):
        kw = {} if precision is None else {"precision": precision}
        t = make_trainer("grpo", start, tok, task, budget, **kw)
        t.train_step()
        runs[precision] = [p.detach().clone() for p in t.policy.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(runs["fp32"], runs[None], strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(runs["fp32"], runs["bf16"], strict=True))
    assert all(p.dtype == torch.float32 for p in runs["bf16"])  # fp32 masters


def test_bf16_teacher_forced_log_probs_are_fp32_and_near_fp32(model, tok):
    ids, mask = encode_prompts(tok, PROMPTS)
    rid = torch.randint(3, len(tok), (len(PROMPTS), 7), generator=torch.Generator().manual_seed(0))
    rm = torch.ones_like(rid, dtype=torch.float32)
    with torch.no_grad():
        lp32, _ = prefix_logprobs(model, ids, mask, rid)
        with autocast("bf16"):
            lp16, ent16 = prefix_logprobs(model, ids, mask, rid, with_entropy=True)
            hf16, _ = response_logprobs(model, ids, mask, rid, rm)
    assert lp16.dtype == ent16.dtype == hf16.dtype == torch.float32
    assert not torch.equal(lp16, lp32)  # the matmuls did run in bf16
    # bf16 keeps 8 bits of mantissa: hidden states off by ~2^-8 relative, log-probs of an
    # untrained model (|logits| ~ 1) by a few 1e-2 at most
    assert (lp16 - lp32).abs().max() < 0.1
    assert (hf16 - lp16).abs().max() < 0.1


def test_the_bf16_engine_samples_with_the_trainers_bf16_log_probs(model, tok):
    """Sampling-time log-probs equal the bf16 teacher-forced recomputation up to the rounding of
    two differently ordered bf16 paths (the ratio's denominator is the trainer's own pass)."""
    prompts = PROMPTS * 4
    ro = TorchEngine(model, tok, precision="bf16").generate(
        prompts, temperature=1.0, max_new_tokens=10, seed=0
    )
    with torch.no_grad(), autocast("bf16"):
        tf, _ = prefix_logprobs(model, ro.prompt_ids, ro.prompt_mask, ro.response_ids)
    m = ro.response_mask > 0
    assert ro.log_probs.dtype == torch.float32
    assert (ro.log_probs - tf)[m].abs().max() < 0.1
    # the same seed in fp32 samples from (slightly) different numbers; both are valid rollouts
    ro32 = TorchEngine(model, tok).generate(prompts, temperature=1.0, max_new_tokens=10, seed=0)
    assert not torch.equal(ro32.log_probs, ro.log_probs)


def test_the_bf16_decoder_follows_the_latest_weights(model, tok):
    """The bf16 copies of the weights are made at every call: a changed fp32 weight is sampled
    from at the next one."""
    m = copy.deepcopy(model)
    engine = TorchEngine(m, tok, precision="bf16")
    sampled = dict(temperature=1.0, max_new_tokens=6, seed=0)
    before = engine.generate(PROMPTS, **sampled).log_probs
    again = engine.generate(PROMPTS, **sampled).log_probs
    with torch.no_grad():
        m.model.layers[0].mlp.down_proj.weight.mul_(3.0)
    after = engine.generate(PROMPTS, **sampled).log_probs
    assert torch.equal(before, again) and not torch.equal(before, after)


def test_the_decoder_names_a_bad_precision(model):
    with pytest.raises(ValueError, match="precision='fp16': allowed: fp32, bf16"):
        LlamaDecoder(model, "fp16")
