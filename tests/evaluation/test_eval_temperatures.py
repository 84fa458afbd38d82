"""Every evaluation samples at the temperature its setting names: the trainer's greedy
evaluation at 0, its avg@k / pass@k at ``eval_temperature``, a critic's calibration at the
training ``temperature`` (the policy's success as training samples it, which the critic
predicts), and ``sppo-bench eval``'s k samples at its ``temperature``. Each generation is
recorded at the engine, with the prompts it was asked, so each evaluation is told apart by
what it asks."""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks.engines.torch_engine import TorchEngine
from benchmarks.evaluation.evaluate import evaluate_model
from benchmarks.evaluation.settings import parse_settings
from benchmarks.tasks.arith import ArithTask
from benchmarks.telemetry.meter import Budget
from benchmarks.training.modeling import build_tiny_llama
from testkit.trainers import SPEC, make_trainer

pytestmark = pytest.mark.usefixtures("one_thread")

TRAIN_T, EVAL_T = 0.7, 1.3


@pytest.fixture
def asked(monkeypatch) -> dict[float, Counter]:
    """{temperature: Counter of the prompts generated at it}, for every torch engine."""
    calls: dict[float, Counter] = {}
    generate = TorchEngine.generate

    def recorded(self, prompts, **kw):
        calls.setdefault(kw["temperature"], Counter()).update(prompts)
        return generate(self, prompts, **kw)

    monkeypatch.setattr(TorchEngine, "generate", recorded)
    return calls


@pytest.mark.parametrize(("fraction", "every"), [(1.0, False), (0.5, True)])
def test_each_training_evaluation_samples_at_its_own_temperature(fraction, every, tok, asked):
    task = ArithTask(horizon=1, eval_size=6)
    start = build_tiny_llama(SPEC, len(tok), seed=0)
    trainer = make_trainer(
        "sppo",  # a prompt critic: calibration runs too
        start,
        tok,
        task,
        Budget("samples", 64, (0.0, 0.5, 1.0)),
        temperature=TRAIN_T,
        eval_temperature=EVAL_T,
        eval_k=3,
        eval_k_problems=4,
        eval_k_every_checkpoint=every,
        calibration_prompts=2,
        calibration_samples=5,
    )
    trainer.evaluator.evaluate(trainer.engine, 1, fraction)
    held = [p.prompt for p in task.eval_problems()]
    assert (
        asked
        == {
            0.0: Counter(held),  # greedy accuracy: every held-out prompt once
            EVAL_T: Counter({p: 3 for p in held[:4]}),  # avg@3 and pass@3
            TRAIN_T: Counter({p: 5 for p in held[:2]}),  # calibration
        }
    )


def test_sppo_bench_eval_samples_at_its_temperature(tok, asked):
    settings = parse_settings(["model=tiny", "tasks=[arith]", "k=4", "temperature=0.35"])
    request = settings.request()
    task = ArithTask(horizon=1, eval_size=5)
    model = build_tiny_llama(SPEC, len(tok), seed=0)
    evaluate_model(model, tok, [task], request)
    held = [p.prompt for p in task.eval_problems()]
    assert asked == {0.0: Counter(held), 0.35: Counter({p: 4 for p in held})}


def test_the_starts_difficulty_is_measured_at_the_training_temperature(tok, asked, tmp_path):
    """The headroom checks read the start's per-prompt success rates, which must be the
    policy's success as training samples it: at ``trainer.temperature``, whatever the
    evaluation's temperature. Through a composed suite's start recipe, as a suite builds it."""
    from benchmarks.config import compose_config
    from benchmarks.suite.plan import validate
    from benchmarks.training.start import policy_start

    cfg = compose_config(
        [
            f"cache_dir={tmp_path}",
            "task.horizon=1",
            "model.hidden_size=16",
            "model.num_layers=1",
            "model.num_heads=2",
            "model.intermediate_size=32",
            "warmstart.phases=[{steps:2,direct_fraction:0.0}]",
            "warmstart.batch_size=4",
            "warmstart.eval_every=2",
            "warmstart.val_size=4",
            "warmstart.difficulty_prompts=4",
            "warmstart.difficulty_samples=3",
            f"trainer.temperature={TRAIN_T}",
            f"trainer.eval_temperature={EVAL_T}",
        ]
    )
    plan = validate(cfg)
    _, info = policy_start(plan.start_recipe, 0, plan.task, tok)
    held = [p.prompt for p in plan.task.eval_problems()[:4]]
    assert info["difficulty"]["prompts"] == 4
    sampled = {t: c for t, c in asked.items() if t > 0}  # the warm start's checks are greedy
    assert sampled == {TRAIN_T: Counter({p: 3 for p in held})}
