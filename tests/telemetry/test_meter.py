"""The analytic FLOP model by hand and against torch's FLOP counter; budgets; the compute meter."""

from __future__ import annotations

import math
import time

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from analysis import metrics as M
from benchmarks.telemetry.meter import BUDGET_KINDS, Budget, ComputeMeter, FlopModel

# --- FlopModel by hand ----------------------------------------------------------------------

# One layer, d = 8, kv = 4 (grouped-query: 1 kv head of 4 for 2 query heads of 4), ffn = 16, V = 20.
FM = FlopModel(hidden=8, layers=1, intermediate=16, vocab=20, kv_dim=4)


pytestmark = pytest.mark.usefixtures("one_thread")


def test_linear_params_by_hand():
    # q and o: 2·d² = 2·64 = 128; k and v: 2·d·kv = 2·8·4 = 64; gate, up, down: 3·d·ffn = 384.
    assert FM.linear_params == 128 + 64 + 384 == 576
    two = FlopModel(hidden=8, layers=2, intermediate=16, vocab=20, kv_dim=4)
    assert two.linear_params == 2 * 576


def test_forward_by_hand():
    # 3 new tokens, no cache: causal keys 1 + 2 + 3 = 6.
    lin = 2 * 576 * 3  # 3456
    attn = 4 * 1 * 8 * 6  # scores + weighted sum, 2 FLOPs per MAC each: 192
    head = 2 * 8 * 20 * 3  # logits at every new position: 960
    assert FM.forward(3) == lin + attn + head == 4608
    # Logits at one position only.
    assert FM.forward(3, logits=1) == 3456 + 192 + 2 * 8 * 20 == 3968
    # A critic's scalar head: 2·d per position.
    assert FM.forward(3, head=False) == 3456 + 192 + 2 * 8 * 3 == 3696
    # 2 new tokens after 5 cached ones: keys (5 + 1) + (5 + 2) = 13.
    assert FM.forward(2, past=5) == 2 * 576 * 2 + 4 * 8 * 13 + 2 * 8 * 20 * 2 == 3360
    assert FM.forward(0) == 0 and FM.forward(0, past=9) == 0


def test_generate_by_hand():
    # Prefill 3 prompt tokens with logits at the last one: 3968 (see above).
    prefill = 3968
    # Response token 1 comes from the prefill; token 2 needs one step over token 1 with 3 cached
    # keys (attends to 4): 2·576 + 4·8·4 + 2·8·20 = 1152 + 128 + 320.
    step2 = 1600
    # Token 3: one step with 4 cached (attends to 5): 1152 + 160 + 320.
    step3 = 1632
    assert FM.generate(3, 1) == prefill
    assert FM.generate(3, 2) == prefill + step2 == 5568
    assert FM.generate(3, 3) == prefill + step2 + step3 == 7200
    # An empty response still pays for the prefill that decided it.
    assert FM.generate(3, 0) == prefill


def test_from_config_reads_gqa_and_head_dim():
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        vocab_size=19,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    assert FlopModel.from_config(cfg) == FlopModel(32, 3, 48, 19, 2 * 8)


# --- FlopModel versus torch.utils.flop_counter on a real Llama -------------------------------


def _llama(layers: int, attn: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=19,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        attn_implementation=attn,
    )
    assert cfg._attn_implementation == attn
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval(), FlopModel.from_config(cfg)


def _counted(model, **inputs):
    """(mm FLOPs of the whole model, bmm FLOPs inside the attention modules, model output)."""
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        out = model(**inputs)
    counts = fc.get_flop_counts()
    mm = counts["Global"].get(torch.ops.aten.mm, 0) + counts["Global"].get(torch.ops.aten.addmm, 0)
    attn = sum(v.get(torch.ops.aten.bmm, 0) for k, v in counts.items() if k.endswith(".self_attn"))
    return mm, attn, out


@pytest.mark.parametrize("layers", [1, 2])
def test_linear_and_head_match_flop_counter(layers):
    """Every nn.Linear (q, k, v, o, gate, up, down, LM head) runs as one mm: the counter's mm
    total is exactly FlopModel's linear term plus its LM-head term."""
    model, fm = _llama(layers, "sdpa")
    n = 7
    ids = torch.randint(0, 19, (1, n), generator=torch.Generator().manual_seed(0))
    mm, _, _ = _counted(model, input_ids=ids)
    assert mm == 2 * fm.linear_params * n + 2 * 32 * 19 * n
    # Only 2 logits positions: the LM head term shrinks accordingly.
    mm2, _, _ = _counted(model, input_ids=ids, logits_to_keep=2)
    assert mm2 == 2 * fm.linear_params * n + 2 * 32 * 19 * 2
    # FlopModel.forward = that linear + head part plus the causal attention term.
    causal = 4 * layers * 32 * n * (n + 1) // 2
    assert fm.forward(n) == mm + causal
    assert fm.forward(n, logits=2) == mm2 + causal


def test_attention_term_against_eager_attention():
    """Eager attention's two bmm's (scores, weighted sum) are counted over all n² query-key pairs;
    FlopModel counts only the causal n(n+1)/2. One decode step has no masked keys: exact match."""
    model, fm = _llama(2, "eager")
    n = 6
    ids = torch.randint(0, 19, (1, n), generator=torch.Generator().manual_seed(1))
    mm, attn, out = _counted(model, input_ids=ids, use_cache=True)
    assert attn == 4 * 2 * 32 * n * n  # the counter: non-causal
    assert fm.forward(n) - mm == 4 * 2 * 32 * n * (n + 1) // 2 == attn * (n + 1) // (2 * n)
    # One cached decode step: 1 new token attending to n + 1 keys, logits at that token.
    nxt = torch.tensor([[3]])
    mm1, attn1, _ = _counted(
        model,
        input_ids=nxt,
        past_key_values=out.past_key_values,
        position_ids=torch.tensor([[n]]),
        use_cache=True,
    )
    assert mm1 + attn1 == fm.forward(1, past=n, logits=1)
    assert fm.generate(n, 2) - fm.forward(n, logits=1) == mm1 + attn1


# --- Budget -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(kind="gpu_hours", limit=10), "budget.kind"),
        (dict(kind="samples", limit=0), "budget.limit"),
        (dict(kind="flops", limit=-1.0), "budget.limit"),
        (dict(kind="flops", limit=float("nan")), "budget.limit"),
        (dict(kind="samples", limit=10, eval_fractions=(0.5, 0.25)), "budget.eval_fractions"),
        (dict(kind="samples", limit=10, eval_fractions=(0.0, 1.5)), "budget.eval_fractions"),
        (dict(kind="samples", limit=10, eval_fractions=(-0.1, 1.0)), "budget.eval_fractions"),
    ],
)
def test_budget_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.") + "="):
        Budget(**kwargs)


def test_budget_rejects_repeated_eval_fractions():
    with pytest.raises(ValueError, match=r"budget\.eval_fractions="):
        Budget(kind="samples", limit=10, eval_fractions=(0.0, 0.5, 0.5, 1.0))


def test_budget_valid_kinds_and_fraction():
    for kind in BUDGET_KINDS:
        b = Budget(kind=kind, limit=4, eval_fractions=[0, 0.5, 1])
        assert b.eval_fractions == (0.0, 0.5, 1.0)
    meter = ComputeMeter()
    meter.samples, meter.rollout_tokens = 3, 40
    meter.add_flops("rollout", 100.0)
    meter.add_flops("eval", 1e9)  # evaluation never spends the budget
    assert Budget(kind="samples", limit=4).fraction(meter) == 0.75
    assert Budget(kind="rollout_tokens", limit=80).fraction(meter) == 0.5
    assert Budget(kind="flops", limit=400).spent(meter) == 100.0


# --- ComputeMeter -----------------------------------------------------------------------------

EXPECTED_KEYS = {
    M.COMPUTE_ROLLOUT_TOKENS,
    M.COMPUTE_ROLLOUT_SAMPLES,
    M.COMPUTE_PROMPTS,
    M.COMPUTE_FLOPS,
    M.COMPUTE_WALL_S,
    M.MEMORY_PEAK_BYTES,
    *(f"compute/flops/{p}" for p in M.PHASES),
    *(f"compute/wall_s/{p}" for p in M.PHASES),
}


def test_metrics_keys_and_monotonic_accumulation():
    meter = ComputeMeter()
    meter.memory.start()
    try:
        first = meter.metrics()
        assert set(first) == EXPECTED_KEYS
        assert all(isinstance(v, float) for v in first.values())
        assert first[M.COMPUTE_FLOPS] == 0.0 and first[M.MEMORY_PEAK_BYTES] > 0
        history = [first]
        for i in range(1, 4):
            meter.samples += 16
            meter.rollout_tokens += 16 * i
            meter.prompts += 2
            meter.add_flops("rollout", 1000 * i)
            meter.add_flops("update", 3000)
            meter.add_flops("eval", 7)
            with meter.phase("rollout"):
                time.sleep(0.002)
            with meter.phase("eval"):
                time.sleep(0.002)
            history.append(meter.metrics())
        last = history[-1]
        assert last[M.COMPUTE_ROLLOUT_SAMPLES] == 48
        assert last[M.COMPUTE_ROLLOUT_TOKENS] == 16 * (1 + 2 + 3)
        assert last[M.COMPUTE_PROMPTS] == 6
        assert last["compute/flops/rollout"] == 6000 and last["compute/flops/update"] == 9000
        assert last["compute/flops/eval"] == 21
        assert last[M.COMPUTE_FLOPS] == 15000  # eval excluded
        assert last["compute/wall_s/rollout"] >= 0.006
        assert last[M.COMPUTE_WALL_S] == pytest.approx(
            sum(last[f"compute/wall_s/{p}"] for p in M.PHASES if p != "eval")
        )
        for prev, cur in zip(history, history[1:], strict=False):
            for k in EXPECTED_KEYS:
                assert cur[k] >= prev[k], k
            assert cur[M.COMPUTE_FLOPS] > prev[M.COMPUTE_FLOPS]
    finally:
        meter.memory.stop()


def test_phase_counts_time_even_when_the_body_raises():
    meter = ComputeMeter()
    with pytest.raises(RuntimeError), meter.phase("update"):
        time.sleep(0.002)
        raise RuntimeError("boom")
    assert meter.wall["update"] >= 0.002


def test_phase_counts_its_flops_in_the_same_statement():
    meter = ComputeMeter()
    with meter.phase("reference", flops=12.0):  # known beforehand
        pass
    clock_at_count = []

    def rollout_flops() -> float:  # known afterwards: called once the clock has stopped
        clock_at_count.append(meter.wall["rollout"])
        return 5.0

    with meter.phase("rollout", flops=rollout_flops):
        time.sleep(0.002)
    assert meter.flops["reference"] == 12.0 and meter.flops["rollout"] == 5.0
    assert clock_at_count == [meter.wall["rollout"]] and meter.wall["rollout"] >= 0.002
    with pytest.raises(RuntimeError), meter.phase("update", flops=7.0):
        raise RuntimeError("boom")
    assert meter.flops["update"] == 0.0 and meter.wall["update"] > 0.0  # time yes, FLOPs no


def test_state_dict_round_trip():
    meter = ComputeMeter()
    meter.samples, meter.rollout_tokens, meter.prompts = 32, 321, 4
    meter.add_flops("rollout", 1.5e9)
    meter.add_flops("critic", 2.5e8)
    meter.wall["update"] = 1.25
    state = meter.state_dict()
    other = ComputeMeter()
    other.load_state_dict(state)
    skip = {M.MEMORY_PEAK_BYTES}
    a, b = meter.metrics(), other.metrics()
    assert {k: v for k, v in a.items() if k not in skip} == {
        k: v for k, v in b.items() if k not in skip
    }
    # The saved state is a snapshot: later accumulation changes neither copy.
    meter.add_flops("rollout", 1.0)
    other.add_flops("update", 5.0)
    assert state["flops"]["rollout"] == 1.5e9 and state["flops"]["update"] == 0.0
    assert math.isclose(other.total_flops, 1.5e9 + 2.5e8 + 5.0)
