"""``trainer.prompt_pool``: RL prompts from a fixed pool of the task's training problems, so they
recur (SPO's setting), the same pool for every seed and algorithm; checked before any compute."""

from __future__ import annotations

import pytest

from algorithms import ConfigError
from benchmarks.config import compose_config
from benchmarks.suite.plan import validate
from benchmarks.telemetry.meter import Budget
from benchmarks.training.modeling import build_char_tokenizer, build_tiny_llama
from testkit.trainers import SPEC, SPS, FirstDigitTask, make_trainer

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def setup():
    task = FirstDigitTask(horizon=1)
    tok = build_char_tokenizer(task.alphabet)
    return task, tok, build_tiny_llama(SPEC, len(tok), seed=0)


def test_the_stream_draws_only_the_pool_and_every_prompt_recurs(setup):
    task, tok, start = setup
    pool = 8
    seen = {}
    for name, seed in (("spo", 0), ("spo", 1), ("grpo", 0)):
        tr = make_trainer(
            name,
            start,
            tok,
            task,
            Budget("samples", 4 * SPS, (0.0, 1.0)),
            prompt_pool=pool,
            calibration_prompts=0,
            seed=seed,
        )
        tr.train()
        assert list(tr.stream.problems) == list(task.train_problems()[:pool])
        seen[(name, seed)] = tr.stream.taken
        if name == "spo":  # one sample per prompt: 64 prompts from a pool of 8, each tracked
            assert len(tr.alg._tracker) == pool
    assert seen[("spo", 0)] == 4 * SPS  # every sampled response took a prompt from the pool


def test_a_pool_larger_than_the_training_set_or_on_verl_fails_before_any_compute():
    cfg = compose_config(["algorithm=[spo]", "task.horizon=1", "trainer.prompt_pool=100000"])
    with pytest.raises(ConfigError, match=r"trainer.prompt_pool=100000: the task has only \d+"):
        validate(cfg)
    with pytest.raises(ConfigError, match=r"trainer.prompt_pool=0 must be >= 1"):
        validate(compose_config(["algorithm=[spo]", "trainer.prompt_pool=0"]))
    cfg = compose_config(["algorithm=[spo]", "engine=verl", "trainer.prompt_pool=8"])
    with pytest.raises(ConfigError, match=r"engine=verl draws prompts from its own files"):
        validate(cfg)


@pytest.mark.slow  # the claims suites' starts planned: ~5 s
def test_claims_spo_reuses_the_claims_starts_and_pools_512_prompts():
    claims = validate(compose_config(["suite=claims"]))
    spo = validate(compose_config(["suite=claims_spo"]))
    assert sorted(spo.algorithms) == ["grpo", "spo", "sppo"]
    assert {t.prompt_pool for t in spo.trainer.values()} == {512}
    # the warm start's cache key (task, model, warm-start settings) is suite=claims'
    assert spo.start_recipe.identity() == claims.start_recipe.identity()
    assert spo.task_config == claims.task_config and spo.budget == claims.budget
