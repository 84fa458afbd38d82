"""The paper's small critic (``trainer.critic_model``): a critic smaller than the policy trains,
has its FLOPs metered from its own shape, must share the policy's tokenizer, is warm-started and
cached like the policy, and a run with it resumes from a checkpoint bit-identically."""

from __future__ import annotations

import copy
import io
import random

import numpy as np
import pytest
import torch

from algorithms import ConfigError, get_algorithm
from benchmarks.engines.torch_engine import TorchEngine
from benchmarks.telemetry.meter import Budget, FlopModel
from benchmarks.training.config import TrainerConfig
from benchmarks.training.critic_model import check_same_tokenizer, critic_spec
from benchmarks.training.modeling import ModelSpec, build_char_tokenizer, build_tiny_llama
from benchmarks.training.trainer import RLTrainer, memory_metrics
from testkit.suites import MICRO
from testkit.trainers import SPEC, SPS, FirstDigitTask

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = ModelSpec(
    hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_position_embeddings=64
)


class Recorder:
    def __init__(self) -> None:
        self.history: list[tuple[int, dict[str, float]]] = []

    def log_metrics(self, metrics, step):
        self.history.append((step, dict(metrics)))

    def __getattr__(self, name):
        return lambda *a, **k: None


class SaveAt:
    def __init__(self, step: int) -> None:
        self.step, self.data = step, None

    def resume(self):
        return None

    def after_step(self, name, step, state_dict) -> None:
        if step == self.step:
            buf = io.BytesIO()
            torch.save(state_dict(), buf)
            self.data = buf.getvalue()


@pytest.fixture(scope="module")
def setup():
    task = FirstDigitTask(horizon=1, eval_size=16)
    tok = build_char_tokenizer(task.alphabet)
    return task, tok, build_tiny_llama(SPEC, len(tok), seed=0), build_tiny_llama(SMALL, len(tok), 1)


def make(name, setup, *, critic=True, tracker=None, checkpointer=None, limit=4 * SPS, **cfg):
    task, tok, start, small = setup
    alg = get_algorithm(name, **({"critic_warmup_steps": 1} if name == "ppo" else {}))
    return RLTrainer(
        algorithm=alg,
        policy=copy.deepcopy(start),
        tokenizer=tok,
        task=task,
        engine_factory=lambda m: TorchEngine(m, tok),
        budget=Budget("samples", limit, (0.0, 0.5, 1.0)),
        config=TrainerConfig(
            samples_per_step=SPS,
            max_new_tokens=10,
            eval_samples_logged=4,
            calibration_prompts=4,
            calibration_samples=2,
            **cfg,
        ),
        seed=3,
        prompt_seed=3,
        tracker=tracker if tracker is not None else Recorder(),
        critic_base=small if critic else start,
        checkpointer=checkpointer,
    )


@pytest.mark.parametrize("name", ["sppo", "ppo"])
def test_the_small_critic_trains_and_its_flops_are_its_own(setup, name):
    tr = make(name, setup, limit=SPS)
    prompts: list[list[str]] = []
    inner = tr.engine.generate

    def generate(p, **kw):
        if kw.get("seed") == 3 * 1_000_003:  # the training rollout of step 0 (trainer._rollout)
            prompts.append(list(p))
        return inner(p, **kw)

    tr.engine.generate = generate
    before = [p.detach().clone() for p in tr.critic.model.parameters()]
    tr.train()
    assert tr.critic.model.config.hidden_size == SMALL.hidden_size
    assert tr.critic.fm == FlopModel.from_config(tr.critic.model.config) != tr.fm
    assert any(
        not torch.equal(a, b) for a, b in zip(before, tr.critic.model.parameters(), strict=True)
    )
    if name == "sppo":  # the prompt critic: a forward over each prompt, then forward + backward
        (train,) = prompts
        lens = [len(p) for p in train]
        want = 4 * sum(tr.critic.fm.forward(n, 0, logits=1, head=False) for n in lens)
        assert tr.meter.flops["critic"] == want
    mem = memory_metrics(tr.policy, tr.opt, tr.critic, tr.reference)
    small_params = sum(p.numel() * 4 for p in tr.critic.model.parameters())
    assert mem["memory/critic/params_bytes"] == small_params < mem["memory/policy/params_bytes"]


def test_it_resumes_bit_identically(setup):
    saver = SaveAt(1)
    full_tracker = Recorder()
    full = make("sppo", setup, tracker=full_tracker, checkpointer=saver)
    full.train()
    assert full.step >= 3 and saver.data is not None
    torch.manual_seed(999)
    random.seed(999)
    np.random.seed(999)
    again_tracker = Recorder()
    again = make("sppo", setup, tracker=again_tracker)
    again.load_state_dict(torch.load(io.BytesIO(saver.data), weights_only=True))
    again.train()

    def steady(history):
        return [
            (s, {k: v for k, v in m.items() if not k.startswith(("compute/wall_s", "memory/"))})
            for s, m in history
            if s > 1
        ]

    assert steady(again_tracker.history) == steady(full_tracker.history)
    for a, b in zip(again.critic.model.parameters(), full.critic.model.parameters(), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(again.policy.parameters(), full.policy.parameters(), strict=True):
        assert torch.equal(a, b)


def test_the_tokenizer_is_checked(setup):
    task, tok, start, _ = setup
    other = build_char_tokenizer("xyz")
    with pytest.raises(ConfigError, match="must share the policy's tokenizer"):
        check_same_tokenizer(other, tok, "elsewhere")
    check_same_tokenizer(build_char_tokenizer(task.alphabet), tok, "same")
    too_small = build_tiny_llama(SMALL, len(tok) - 1, 0)
    with pytest.raises(ConfigError, match=r"critic's vocabulary \(\d+ tokens\) is smaller"):
        make("sppo", (task, tok, start, too_small))


def test_spec_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"trainer.critic_model.depth: unknown field"):
        TrainerConfig(samples_per_step=16, critic_model={"depth": 2})
    with pytest.raises(ConfigError, match=r"trainer.critic_model=3: allowed null"):
        TrainerConfig(samples_per_step=16, critic_model=3)
    with pytest.raises(
        ConfigError, match=r"trainer.critic_model.hidden_size=30 must be a multiple"
    ):
        critic_spec({"hidden_size": 30}, SPEC)
    with pytest.raises(ConfigError, match="needs the tiny policy"):
        critic_spec({"hidden_size": 16}, None)
    assert critic_spec({"hidden_size": 16, "num_heads": 2}, SPEC).num_layers == SPEC.num_layers


def test_a_tiny_spec_is_warm_started_and_cached(tmp_path):
    from benchmarks.config import compose_config
    from benchmarks.suite.plan import validate
    from benchmarks.training.start import critic_start, policy_start

    overrides = [
        *MICRO,
        "warmstart.phases=[{steps:4,direct_fraction:0.0}]",
        "warmstart.val_size=8",
        "algorithm=[sppo]",
        f"cache_dir={tmp_path}",
        "trainer.critic_model={hidden_size:32,intermediate_size:64,num_heads:2}",
    ]
    plan = validate(compose_config(overrides))
    value = plan.trainer["sppo"].critic_model
    assert dict(value) == {"hidden_size": 32, "intermediate_size": 64, "num_heads": 2}
    tok = build_char_tokenizer(plan.task.alphabet)
    a = critic_start(plan.start_recipe, value, 0, plan.task, tok)
    b = critic_start(plan.start_recipe, value, 0, plan.task, tok)
    assert a.config.hidden_size == 32 and a.config.num_attention_heads == 2
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)  # the second one is the cache's
    policy, _ = policy_start(plan.start_recipe, 0, plan.task, tok)
    assert policy.config.hidden_size != 32
    assert len(list((tmp_path / "warmstart").iterdir())) == 2  # its own cache entry
    with pytest.raises(ConfigError, match=r"trainer.critic_model.hidden_size=33"):
        validate(compose_config([*overrides[:-1], "trainer.critic_model={hidden_size:33}"]))
    with pytest.raises(ConfigError, match=r"trainer.critic_model.max_position_embeddings=8"):
        validate(
            compose_config([*overrides[:-1], "trainer.critic_model={max_position_embeddings:8}"])
        )
