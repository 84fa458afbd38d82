"""Every sample a native run generates is charged to its budget: the samples a filter discards
(DAPO's dynamic sampling) and a greedy baseline's (ReMax) as much as the trained ones; only the
evaluations, metered apart, are not. The generations are counted at the engine, where the
trainer cannot forget them."""

from __future__ import annotations

import pytest

from algorithms import get_algorithm
from benchmarks.telemetry.meter import Budget
from benchmarks.training.modeling import build_tiny_llama
from testkit.trainers import SPEC, FirstDigitTask, make_trainer

pytestmark = pytest.mark.usefixtures("one_thread")


class _Count:
    """Wraps a trainer's engine and evaluator: sums what ``generate`` returns outside the
    evaluations."""

    def __init__(self, trainer) -> None:
        self.samples = self.tokens = self.calls = 0
        self.in_eval = False
        generate, evaluate = trainer.engine.generate, trainer.evaluator.evaluate

        def counted_generate(prompts, **kw):
            ro = generate(prompts, **kw)
            if not self.in_eval:
                self.calls += 1
                self.samples += len(ro.texts)
                self.tokens += int(ro.lengths.sum())
            return ro

        def flagged_evaluate(*a, **kw):
            self.in_eval = True
            try:
                return evaluate(*a, **kw)
            finally:
                self.in_eval = False

        trainer.engine.generate = counted_generate
        trainer.evaluator.evaluate = flagged_evaluate


@pytest.mark.parametrize(
    ("name", "params"),
    [
        # Groups of 4 over 16 samples, refilled up to 3 times: most first batches keep too few.
        ("dapo", {"group_size": 4, "max_gen_batches": 3}),
        ("remax", {}),  # a greedy response per prompt beside the sampled ones
        ("grpo", {"group_size": 4}),
    ],
)
def test_every_generated_sample_is_charged(name, params, tok):
    task = FirstDigitTask(horizon=1)
    start = build_tiny_llama(SPEC, len(tok), seed=0)
    alg = get_algorithm(name, **params)
    trainer = make_trainer(alg, start, tok, task, Budget("samples", 160, (0.0, 1.0)), seed=1)
    count = _Count(trainer)
    trainer.train()
    meter = trainer.meter
    assert trainer.step >= 2
    if name == "dapo":
        assert count.calls > trainer.step  # the filter discarded groups and the batch refilled
    else:  # one generation per step, and ReMax's greedy one
        assert count.calls == trainer.step * (2 if name == "remax" else 1)
    assert meter.samples == count.samples
    assert meter.rollout_tokens == count.tokens
    assert meter.samples <= 160  # and the budget holds all of them
