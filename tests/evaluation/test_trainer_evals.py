"""``TrainingEvaluator.maybe_eval``: which budget fractions a run evaluates at, without a model.

The evaluation itself is recorded instead of run; the trainer's tests (tests/training/) run it.
"""

from __future__ import annotations

import logging

import pytest

from benchmarks.evaluation.evaluate import EvalResult
from benchmarks.evaluation.trainer_evals import TrainingEvaluator
from benchmarks.telemetry.meter import Budget, ComputeMeter
from benchmarks.telemetry.tracking import NullTracker


class Recording(TrainingEvaluator):
    """Records the fractions it is asked to evaluate at instead of evaluating."""

    def __init__(self, budget: Budget, meter: ComputeMeter) -> None:
        super().__init__(
            name="grpo",
            task=None,
            policy=None,
            tokenizer=None,
            config=None,
            budget=budget,
            meter=meter,
            tracker=NullTracker(),
            seed=0,
            on_progress=lambda f, m: None,
            on_eval=lambda f, r: None,
        )
        self.asked: list[tuple[int, float]] = []

    def evaluate(self, engine, step: int, fraction: float) -> dict[str, float]:
        self.asked.append((step, fraction))
        self.evals.append((fraction, EvalResult(accuracy=0.5, se=0.1, n=4)))
        return {"eval/fraction": fraction}


@pytest.fixture
def evaluator() -> Recording:
    return Recording(Budget("samples", 100, (0.0, 0.25, 0.5, 1.0)), ComputeMeter())


def test_each_fraction_is_evaluated_once_when_the_budget_crosses_it(evaluator):
    assert evaluator.maybe_eval(None, 0, force_first=True) == {"eval/fraction": 0.0}
    assert evaluator.maybe_eval(None, 1) == {}  # nothing spent: 0.0 is behind
    evaluator.meter.samples = 30
    assert evaluator.maybe_eval(None, 2) == {"eval/fraction": 0.25}
    assert evaluator.maybe_eval(None, 3) == {}
    evaluator.meter.samples = 100
    evaluator.maybe_eval(None, 4)
    assert evaluator.asked == [(0, 0.0), (2, 0.25), (4, 1.0)]  # 0.5 and 1.0 crossed at once
    assert evaluator.index == 4


def test_the_last_step_evaluates_as_the_budgets_end(evaluator, caplog):
    evaluator.meter.samples = 30
    with caplog.at_level(logging.WARNING, logger="benchmarks.evaluation.trainer_evals"):
        evaluator.maybe_eval(None, 1, last=True)
    assert evaluator.asked == [(1, 1.0)]  # crossed 0.0 and 0.25; the end is evaluated, once
    assert "eval fractions [0.5] were not reached" in caplog.text
    assert evaluator.index == 4
    assert evaluator.maybe_eval(None, 2) == {}  # every fraction is behind


def test_the_first_evaluation_is_the_start_whatever_the_meter_says(evaluator):
    evaluator.meter.samples = 30  # past 0.25 already
    evaluator.maybe_eval(None, 0, force_first=True)
    assert evaluator.asked == [(0, 0.0)] and evaluator.index == 1


def test_what_the_evaluator_warns_of_word_for_word(evaluator, caplog):
    """A budget that ends before its last fractions, and a step that crosses several, are each
    said once, naming the run, the fractions and the step; a step that crosses one says
    nothing."""
    with caplog.at_level(logging.WARNING, logger="benchmarks.evaluation.trainer_evals"):
        evaluator.maybe_eval(None, 0, force_first=True)
        evaluator.meter.samples = 30
        evaluator.maybe_eval(None, 1)
        assert caplog.messages == []
        evaluator.meter.samples = 40
        evaluator.maybe_eval(None, 2, last=True)
    assert caplog.messages == [
        "grpo: the budget ended at 0.400 of its limit (the next step would not fit); "
        "eval fractions [0.5] were not reached",
    ]
    assert evaluator.asked == [(0, 0.0), (1, 0.25), (2, 1.0)]


def test_several_fractions_crossed_at_once_are_said_once(evaluator, caplog):
    evaluator.maybe_eval(None, 0, force_first=True)
    evaluator.meter.samples = 100
    with caplog.at_level(logging.WARNING, logger="benchmarks.evaluation.trainer_evals"):
        evaluator.maybe_eval(None, 3)
    assert caplog.messages == [
        "step 3 crossed eval fractions [0.25, 0.5, 1.0] at once; evaluating once, as 1.0"
    ]
    assert evaluator.asked == [(0, 0.0), (3, 1.0)]


def test_a_last_step_that_reaches_the_end_is_evaluated_once_and_silently(evaluator, caplog):
    evaluator.meter.samples = 60
    evaluator.maybe_eval(None, 1)  # 0.0, 0.25 and 0.5 at once
    caplog.clear()
    evaluator.meter.samples = 100
    with caplog.at_level(logging.WARNING, logger="benchmarks.evaluation.trainer_evals"):
        evaluator.maybe_eval(None, 2, last=True)
    assert caplog.messages == [] and evaluator.asked == [(1, 0.5), (2, 1.0)]
