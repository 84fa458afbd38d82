"""Critics that can learn: held-out calibration logged at every evaluation point (checked against
hand-computed values), a prompt critic that learns a prompt feature deciding success, and the
critic settings (warm-up counted in the budget, its own mini-batches and epochs, the head's
initialisation), each failing with a message that names the key."""

from __future__ import annotations

import math

import pytest
import torch

from algorithms import ConfigError, get_algorithm
from analysis import metrics as M
from benchmarks.evaluation.calibration import (
    ece,
    pearson,
    prompt_critic_calibration,
    token_critic_calibration,
)
from benchmarks.tasks.base import TaskProblem
from benchmarks.tasks.grading import GradeResult
from benchmarks.telemetry.meter import Budget
from benchmarks.training.config import TrainerConfig
from benchmarks.training.modeling import build_char_tokenizer, build_tiny_llama
from testkit.trainers import SPEC, SPS, FirstDigitTask, make_trainer

pytestmark = pytest.mark.usefixtures("one_thread")


# --- the metrics, by hand ---------------------------------------------------------------------


def test_prompt_calibration_by_hand():
    p = torch.tensor([0.2, 0.6, 0.9], dtype=torch.float64)
    y = torch.tensor(
        [[0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]], dtype=torch.float64
    )
    m = prompt_critic_calibration(p, y)
    # empirical 0.25, 0.75, 1.0; Pearson by hand:
    px, ey = [0.2, 0.6, 0.9], [0.25, 0.75, 1.0]
    mx, my = sum(px) / 3, sum(ey) / 3
    cov = sum((a - mx) * (b - my) for a, b in zip(px, ey, strict=True))
    den = math.sqrt(sum((a - mx) ** 2 for a in px) * sum((b - my) ** 2 for b in ey))
    assert m[M.CRITIC_CALIBRATION_PEARSON] == pytest.approx(cov / den, abs=1e-12)
    # one prompt per bin (0.2, 0.6, 0.9 fall in bins 2, 6, 9): mean |p - empirical|
    assert m[M.CRITIC_CALIBRATION_ECE] == pytest.approx((0.05 + 0.15 + 0.1) / 3, abs=1e-7)
    # Brier over the 12 samples: 3 x 0.04 + 0.64 for the first prompt, 0.16 x 3 + 0.36, 0.01 x 4
    brier = (3 * 0.04 + 0.64 + 3 * 0.16 + 0.36 + 4 * 0.01) / 12
    assert m[M.CRITIC_CALIBRATION_BRIER] == pytest.approx(brier, abs=1e-7)


def test_ece_shares_bins_and_agrees_with_the_analysis():
    from analysis.calibration import expected_calibration_error

    rng = torch.Generator().manual_seed(0)
    p, e = torch.rand(50, generator=rng), torch.rand(50, generator=rng)
    p[0], p[1] = 1.0, 0.0  # the edges
    assert ece(p, e) == pytest.approx(expected_calibration_error(p.numpy(), e.numpy()), abs=1e-6)
    assert ece(torch.tensor([0.1, 0.1, 0.9]), torch.tensor([0.0, 0.2, 1.0])) == pytest.approx(
        0.1 / 3, abs=1e-7
    )


def test_undefined_is_nan():
    assert math.isnan(pearson(torch.ones(4), torch.arange(4.0)))
    assert math.isnan(pearson(torch.ones(1), torch.ones(1)))


def test_token_calibration_by_hand():
    # 2 prompts x k=2 samples; values (B, T) and masks with padding at the end of rows.
    values = torch.tensor(
        [[0.8, 0.5, 9.0], [0.8, 0.7, 0.6], [0.1, 0.4, 9.0], [0.1, 9.0, 9.0]], dtype=torch.float64
    )
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 1, 0], [1, 0, 0]])
    outcome = torch.tensor([1.0, 1.0, 0.0, 1.0])
    m = token_critic_calibration(values, mask, outcome, k=2)
    v = [0.8, 0.5, 0.8, 0.7, 0.6, 0.1, 0.4, 0.1]
    g = [1, 1, 1, 1, 1, 0, 0, 1]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    var = lambda xs: mean([(x - mean(xs)) ** 2 for x in xs])  # noqa: E731
    ev = 1 - var([a - b for a, b in zip(g, v, strict=True)]) / var(g)
    assert m[M.CRITIC_HELDOUT_EXPLAINED_VAR] == pytest.approx(ev, abs=1e-12)
    # first values 0.8, 0.1 against empirical 1.0, 0.5: two points, correlation 1
    assert m[M.CRITIC_FIRST_VALUE_PEARSON] == pytest.approx(1.0)


# --- logged live ------------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.history: list[tuple[int, dict[str, float]]] = []
        self.tables: dict[str, dict] = {}

    def log_metrics(self, metrics, step):
        self.history.append((step, dict(metrics)))

    def log_table(self, data, artifact_file):
        self.tables[artifact_file] = data

    def __getattr__(self, name):
        return lambda *a, **k: None


@pytest.fixture(scope="module")
def setup():
    task = FirstDigitTask(horizon=1)
    tok = build_char_tokenizer(task.alphabet)
    return task, tok, build_tiny_llama(SPEC, len(tok), seed=0)


@pytest.mark.parametrize(
    ("name", "keys"),
    [
        (
            "sppo",
            {M.CRITIC_CALIBRATION_PEARSON, M.CRITIC_CALIBRATION_ECE, M.CRITIC_CALIBRATION_BRIER},
        ),
        ("ppo", {M.CRITIC_HELDOUT_EXPLAINED_VAR, M.CRITIC_FIRST_VALUE_PEARSON}),
    ],
)
def test_calibration_at_every_eval_point(setup, name, keys):
    task, tok, start = setup
    rec = Recorder()
    tr = make_trainer(
        name,
        start,
        tok,
        task,
        Budget("samples", 2 * SPS, (0.0, 0.5, 1.0)),
        tracker=rec,
        calibration_prompts=6,
        calibration_samples=2,
    )
    tr.train()
    at_evals = [m for _, m in rec.history if M.EVAL_BUDGET_FRACTION in m]
    # The zero head predicts one value for every prompt at the start: its correlation is
    # undefined there and left out (not logged as NaN).
    pearsons = {M.CRITIC_CALIBRATION_PEARSON, M.CRITIC_FIRST_VALUE_PEARSON}
    assert len(at_evals) == 3 and all(keys - pearsons <= set(m) for m in at_evals)
    assert not pearsons & set(at_evals[0]) and keys <= set(at_evals[-1])
    assert all(math.isfinite(v) for m in at_evals for k, v in m.items() if k in keys)
    others = [m for _, m in rec.history if M.EVAL_BUDGET_FRACTION not in m]
    assert not any(keys & set(m) for m in others)
    assert ("critic_calibration.json" in rec.tables) == (name == "sppo")
    # trainer.calibration_every_eval=false: the final evaluation only, as before
    rec = Recorder()
    make_trainer(
        name,
        start,
        tok,
        task,
        Budget("samples", 2 * SPS, (0.0, 0.5, 1.0)),
        tracker=rec,
        calibration_prompts=6,
        calibration_samples=2,
        calibration_every_eval=False,
    ).train()
    with_keys = [m[M.EVAL_BUDGET_FRACTION] for _, m in rec.history if keys <= set(m)]
    assert with_keys == [1.0]


class FeatureTask(FirstDigitTask):
    """Success is decided by the prompt alone: the first operand below 5. A prompt critic that
    reads its prompt can predict it perfectly, whatever the policy answers."""

    def grade(self, responses: list[str], problems: list[TaskProblem]) -> GradeResult:
        return GradeResult([1.0 if int(p.prompt[0]) < 5 else 0.0 for p in problems])


def test_a_prompt_critic_learns_a_feature_that_decides_success(setup):
    _, tok, start = setup
    task = FeatureTask(horizon=1)
    rec = Recorder()
    tr = make_trainer(
        "sppo",
        start,
        tok,
        task,
        Budget("samples", 40 * SPS, (0.0, 1.0)),
        tracker=rec,
        calibration_prompts=40,
        calibration_samples=1,
        critic_warmup_steps=1000,
        critic_head_init="start_success",
        critic_lr=3e-3,
        critic_epochs=2,
    )
    policy0 = [p.detach().clone() for p in tr.policy.parameters()]
    tr.train()
    first = rec.history[0][1]
    last = rec.history[-1][1]
    assert first[M.CRITIC_CALIBRATION_BRIER] == pytest.approx(0.25, abs=0.05)  # knows nothing
    assert last[M.CRITIC_CALIBRATION_PEARSON] > 0.8
    assert last[M.CRITIC_HEAD_DELTA_NORM] > 0.0
    # warm-up for the whole run: the actor never moved, and its rollouts were all budgeted
    assert all(torch.equal(a, b) for a, b in zip(policy0, tr.policy.parameters(), strict=True))
    assert last[M.COMPUTE_ROLLOUT_SAMPLES] == 40 * SPS


# --- the settings -----------------------------------------------------------------------------


def test_start_success_sets_the_bias_at_the_first_batch(setup):
    task, tok, start = setup
    for name in ("sppo", "ppo"):
        tr = make_trainer(
            name,
            start,
            tok,
            task,
            Budget("samples", SPS, (0.0, 1.0)),
            critic_head_init="start_success",
            critic_warmup_steps=1,
            calibration_prompts=0,
        )
        seen = []
        original = tr.critic.init_head
        tr.critic.init_head = lambda scores, o=original, seen=seen: (
            seen.append(float(scores.mean())),
            o(scores),
        )
        tr.train()
        s = seen[0]
        want = math.log(s / (1 - s)) if name == "sppo" else s
        assert tr.critic.head0[-1].item() == pytest.approx(want, abs=1e-6)
        assert torch.count_nonzero(tr.critic.head0[:-1]) == 0
        state = tr.state_dict()
        assert torch.equal(state["critic_head_init"], tr.critic.head0)


def test_normal_head_is_hf_init_drawn_from_the_run_seed_alone(setup):
    """``normal``: weights ~ N(0, initializer_range), bias 0, a function of the run's seed only;
    drawing them leaves the run's other random streams as any other head would (the first
    batch's rollouts are the same as with the zero head)."""
    task, tok, start = setup
    heads, first = {}, {}
    for init, seed in (("normal", 0), ("normal", 0), ("normal", 1), ("zero", 0)):
        rec = Recorder()
        tr = make_trainer(
            "ppo",
            start,
            tok,
            task,
            Budget("samples", SPS, (0.0, 1.0)),
            critic_head_init=init,
            calibration_prompts=0,
            tracker=rec,
            seed=seed,
        )
        head = tr.critic.head0.clone()
        tr.train()
        heads.setdefault((init, seed), []).append(head)
        reward = next(m[M.TRAIN_REWARD_MEAN] for _, m in rec.history if M.TRAIN_REWARD_MEAN in m)
        first.setdefault((init, seed), reward)
    a, b = heads[("normal", 0)]
    assert torch.equal(a, b)
    assert not torch.equal(a, heads[("normal", 1)][0])
    w = a[:-1]
    std = float(getattr(start.config, "initializer_range", 0.02))
    # d draws of N(0, std): the sample std is within 5 standard errors (std / sqrt(2d)) of std
    assert abs(float(w.std()) - std) < 5 * std / math.sqrt(2 * w.numel())
    assert a[-1].item() == 0.0
    assert first[("normal", 0)] == first[("zero", 0)]


def test_warmup_setting_overrides_the_algorithms(setup):
    task, tok, start = setup
    ppo = get_algorithm("ppo", critic_warmup_steps=7)
    tr = make_trainer(ppo, start, tok, task, Budget("samples", SPS), calibration_prompts=0)
    assert tr.critic_warmup_steps == 7
    tr = make_trainer(
        ppo, start, tok, task, Budget("samples", SPS), calibration_prompts=0, critic_warmup_steps=2
    )
    assert tr.critic_warmup_steps == 2
    tr = make_trainer(
        "grpo",
        start,
        tok,
        task,
        Budget("samples", SPS),
        calibration_prompts=0,
        critic_warmup_steps=2,
    )
    assert tr.critic_warmup_steps == 0  # no critic: nothing to warm up


def test_critic_schedule_counts_its_steps_and_keeps_the_actors(setup):
    task, tok, start = setup
    steps = []

    def run(**cfg):
        tr = make_trainer(
            "sppo", start, tok, task, Budget("samples", SPS), calibration_prompts=0, **cfg
        )
        calls = []
        original = tr.critic.update
        tr.critic.update = lambda sub, r, v, o=original: (calls.append(len(r)), o(sub, r, v))[1]
        tr.train()
        steps.append(calls)
        return tr

    a = run()
    b = run(critic_mini_batches=4, critic_epochs=3)
    assert steps[0] == [SPS] and steps[1] == [SPS // 4] * 12
    # the actor's update is the same: the critic's schedule draws its own permutation, and the
    # first step's advantages come from the critic before any update
    for p, q in zip(a.policy.parameters(), b.policy.parameters(), strict=True):
        assert torch.equal(p, q)


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"critic_warmup_steps": -1}, "trainer.critic_warmup_steps=-1 must be >= 0 or null"),
        ({"critic_mini_batches": 0}, "trainer.critic_mini_batches=0 must be >= 1 or null"),
        ({"critic_mini_batches": 3}, "trainer.critic_mini_batches=3 must divide"),
        ({"critic_epochs": 0}, "trainer.critic_epochs=0 must be >= 1 or null"),
        (
            {"critic_head_init": "ones"},
            r"trainer.critic_head_init='ones': allowed \['zero', 'start_success', 'normal'\]",
        ),
        ({"memory_profile_step": -2}, "trainer.memory_profile_step=-2 must be >= -1. Step"),
    ],
)
def test_bad_values_name_the_key(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        TrainerConfig(samples_per_step=16, **kw)
