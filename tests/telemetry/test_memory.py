"""Memory per component: the accounting equals numel x element size over the state tensors, and
the profiled peak of a phase is the allocator's."""

from __future__ import annotations

import pytest
import torch

from analysis import metrics as M
from benchmarks.telemetry.memory import (
    component_metric,
    module_memory,
    tensor_bytes,
    trace_peak,
)
from benchmarks.telemetry.meter import Budget, ComputeMeter
from benchmarks.training.modeling import build_char_tokenizer, build_tiny_llama
from testkit.trainers import SPEC, FirstDigitTask, make_trainer

pytestmark = pytest.mark.usefixtures("one_thread")


def _by_hand(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def test_module_memory_is_numel_times_element_size():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.Linear(5, 3).to(torch.float64))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    size = _by_hand(list(m.parameters()))
    # Gradients counted before any backward: the buffers one will allocate (see module_memory).
    assert module_memory(m, opt) == {"params": size, "grads": size, "optimizer": 0}
    m[1].requires_grad_(False)  # frozen: no gradient buffers
    assert module_memory(m, opt)["grads"] == (7 * 5 + 5) * 4
    m[1].requires_grad_(True)
    for layer, dtype in ((m[0], torch.float32), (m[1], torch.float64)):
        layer(torch.randn(2, layer.in_features, dtype=dtype)).sum().backward()
    opt.step()
    params = list(m.parameters())
    states = [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    got = module_memory(m, opt)
    assert got["params"] == _by_hand(params) == (7 * 5 + 5) * 4 + (5 * 3 + 3) * 8
    assert got["grads"] == _by_hand([p.grad for p in params]) == got["params"]
    # AdamW: exp_avg and exp_avg_sq like the parameter, and a float32 scalar step each.
    assert got["optimizer"] == _by_hand(states) == 2 * got["params"] + 4 * 4


def test_tied_weights_count_once():
    model = build_tiny_llama(SPEC, vocab_size=20, seed=0)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    unique = {id(p): p for p in model.parameters()}.values()
    assert tensor_bytes(model.parameters()) == _by_hand(list(unique))
    views = [model.lm_head.weight, model.model.embed_tokens.weight]
    assert tensor_bytes(views) == _by_hand(views[:1])


def test_trace_peak_sees_the_live_tensors():
    x = torch.randn(256, 256)
    peaks: list[int] = []
    with trace_peak(peaks):
        a = x @ x  # 256 KiB
        b = a @ a  # 256 KiB, both alive
        c = torch.cat([a, b])  # 512 KiB: 1 MiB live at once
        del a, b
        c.sum()
    assert peaks == [2**20]


def test_meter_records_the_traced_phase_only():
    meter = ComputeMeter()
    with meter.phase("rollout"):
        torch.zeros(1000)
    assert meter.peak_tensor == {} and M.MEMORY_PEAK_TENSOR_BYTES not in meter.metrics()
    meter.trace_memory = True
    with meter.phase("update"):
        y = torch.zeros(2**16)  # 256 KiB
        del y
    with meter.phase("update"):
        y = torch.zeros(2**10)  # a smaller later entry: the phase keeps its largest
        del y
    m = meter.metrics()
    assert meter.peak_tensor == {"update": 2**18}
    assert m[M.MEMORY_PEAK_TENSOR_BYTES] == m[M.peak_tensor_phase("update")] == 2**18
    other = ComputeMeter()
    other.load_state_dict(meter.state_dict())
    assert other.peak_tensor == meter.peak_tensor
    legacy = meter.state_dict()
    legacy.pop("peak_tensor")  # a checkpoint written before the accounting
    other.load_state_dict(legacy)
    assert other.peak_tensor == {}


@pytest.mark.parametrize("name", ["ppo", "sppo", "grpo"])
def test_trainer_logs_each_component(name):
    """The logged bytes equal the sum over the live state tensors after training; a component
    the algorithm lacks is not logged; the sampled step's phases have a peak."""
    task = FirstDigitTask(horizon=1)
    tok = build_char_tokenizer(task.alphabet)
    start = build_tiny_llama(SPEC, len(tok), seed=0)
    tracker = _Recorder()
    tr = make_trainer(name, start, tok, task, Budget("samples", 48, (0.0, 1.0)), tracker=tracker)
    tr.train()
    last = tracker.history[-1][1]
    policy = list(tr.policy.parameters())
    expect = {
        component_metric("policy", "params"): _by_hand(policy),
        component_metric("policy", "grads"): _by_hand([p.grad for p in policy]),
        component_metric("policy", "optimizer"): _by_hand(
            [v for s in tr.opt.state.values() for v in s.values()]
        ),
    }
    if tr.critic is not None:
        critic = list(tr.critic.model.parameters())
        expect[component_metric("critic", "params")] = _by_hand(critic)
        expect[component_metric("critic", "grads")] = _by_hand([p.grad for p in critic])
        expect[component_metric("critic", "optimizer")] = _by_hand(
            [v for s in tr.critic.opt.state.values() for v in s.values()]
        )
    if tr.reference is not None:
        expect[component_metric("reference", "params")] = _by_hand(list(tr.reference.parameters()))
    got = {k: v for k, v in last.items() if k.startswith("memory/") and k.count("/") == 2}
    got = {k: v for k, v in got.items() if not k.startswith(M.MEMORY_PEAK_TENSOR_BYTES)}
    assert got == expect
    assert (tr.critic is not None) == any("/critic/" in k for k in last)
    phases = {k for k in last if k.startswith(M.MEMORY_PEAK_TENSOR_BYTES + "/")}
    # step 1 counted from the first actor update is profiled (trainer.memory_profile_step):
    # ppo's step 2, after its one critic warm-up step, so its update is in the peak
    want = {"rollout", *(["critic"] if tr.critic is not None else []), "update"}
    assert {M.peak_tensor_phase(p) for p in want} <= phases
    assert last[M.MEMORY_PEAK_TENSOR_BYTES] == max(last[k] for k in phases) > 0
    assert M.MEMORY_RSS_PEAK_BYTES in last and M.LEGACY_MEMORY_PEAK_BYTES not in last


def test_no_profiled_step():
    task = FirstDigitTask(horizon=1)
    tok = build_char_tokenizer(task.alphabet)
    start = build_tiny_llama(SPEC, len(tok), seed=0)
    tracker = _Recorder()
    tr = make_trainer(
        "grpo",
        start,
        tok,
        task,
        Budget("samples", 16, (0.0, 1.0)),
        tracker=tracker,
        memory_profile_step=-1,
    )
    tr.train()
    assert all(M.MEMORY_PEAK_TENSOR_BYTES not in m for _, m in tracker.history)


class _Recorder:
    def __init__(self) -> None:
        self.history: list[tuple[int, dict[str, float]]] = []

    def log_metrics(self, metrics, step):
        self.history.append((step, dict(metrics)))

    def log_table(self, data, artifact_file):
        pass

    def __getattr__(self, name):
        return lambda *a, **k: None
