"""The lm-eval route: sppo task YAMLs on the local JSONL, scored by our graders, on an in-memory
model, offline; greedy results agree with ``sppo-bench eval``'s own engine sample for sample.

Runs wherever lm-eval is importable (the ``eval`` extra); the guard below is only that.
"""

from __future__ import annotations

import pytest
import torch

from testkit.paths import require_data, require_module
from testkit.stores import last_eval_run

require_module("lm_eval")  # the `eval` extra; under CI its absence fails
pytestmark = pytest.mark.usefixtures("one_thread")

from analysis import metrics as M  # noqa: E402
from analysis.metrics import avg_at_name, pass_at_name  # noqa: E402
from benchmarks.evaluation.cli import main  # noqa: E402
from benchmarks.evaluation.evaluate import evaluate_model, load_model  # noqa: E402
from benchmarks.evaluation.lm_eval import (  # noqa: E402
    TASKS_DIR,
    evaluate_lm_eval,
    lm_eval_task_name,
    supported_tasks,
)
from benchmarks.evaluation.settings import EvalRequest  # noqa: E402

K = 4


@pytest.fixture(scope="module")
def both_routes(tiny_model):  # noqa: F811 - the imported fixture
    """The same 20 MATH-500 and 20 arith problems through both engines (greedy and k samples)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, tok = load_model(str(tiny_model), device="cpu")
        req = EvalRequest(
            k=K,
            limit=20,
            max_new_tokens=18,
            temperature=1.0,
            top_p=1.0,
            data_dir=require_data(),
            grader_timeout_s=1.0,
        )
        native = evaluate_model(model, tok, ["math500", "arith"], req)
        lm = evaluate_lm_eval(model, tok, ["math500", "arith"], req)
    finally:
        torch.set_num_threads(threads)
    return native, lm


def _greedy(rows: dict, col: str) -> list:
    return [v for v, kind in zip(rows[col], rows["kind"], strict=True) if kind == "greedy"]


@pytest.mark.slow  # lm-eval beside the native engine on real data: ~30 s
@pytest.mark.parametrize("task", ["math500", "arith"])
def test_greedy_agrees_with_the_native_engine(both_routes, task):
    native, lm = both_routes
    a, b = native[task], lm[task]
    assert b.engine == "lm_eval" and b.n == a.n == 20
    # Same problems, same prompts, same responses, same verdicts.
    for col in ("id", "prompt", "response", "verdict"):
        assert _greedy(b.rows, col) == _greedy(a.rows, col), col
    assert b.accuracy == a.accuracy
    # lm-eval's own aggregate (its `mean` over our process_results) is the same number.
    assert b.reported[f"{lm_eval_task_name(task)}/accuracy"] == pytest.approx(a.accuracy)
    assert b.errors == 0


@pytest.mark.slow  # both routes' lm-eval runs (module fixture): ~50 s
def test_arith_accuracy_is_not_trivially_zero(both_routes):
    native, _ = both_routes
    assert native["arith"].accuracy > 0.0


@pytest.mark.slow  # both routes' lm-eval runs (module fixture): ~50 s
@pytest.mark.parametrize("task", ["math500", "arith"])
def test_sampled_metrics_match_lm_eval_aggregates(both_routes, task):
    """k samples through lm-eval (`repeats` + `take_first_k`): our formulas over its samples give
    the numbers lm-eval aggregates from our process_results. (The samples themselves come from
    HF generate's random stream, so they differ from the native engine's.)"""
    _, lm = both_routes
    r = lm[task]
    name = f"{lm_eval_task_name(task)}_k{K}"
    assert r.k == K
    assert r.reported[f"{name}/{avg_at_name(K)}"] == pytest.approx(r.avg_at_k)
    for j, v in r.pass_at.items():
        assert r.reported[f"{name}/{pass_at_name(j)}"] == pytest.approx(v)
    assert r.pass_at[1] == pytest.approx(r.avg_at_k)
    assert r.pass_at[K] >= r.avg_at_k
    assert sum(kind == "sample" for kind in r.rows["kind"]) == 20 * K


def test_task_manager_indexes_every_yaml():
    from lm_eval.tasks import TaskManager

    tm = TaskManager(include_path=str(TASKS_DIR), include_defaults=False)
    assert {lm_eval_task_name(t) for t in supported_tasks()} <= set(tm.all_tasks)


@pytest.mark.slow  # the CLI with lm-eval: ~9 s
def test_cli_lm_eval_flag(tiny_model, tmp_path):  # noqa: F811
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = main(
        [
            f"model={tiny_model}",
            "tasks=[aime24]",
            "--lm-eval",
            "k=2",
            "limit=5",
            "max_new_tokens=8",
            f"data_dir={require_data()}",
            "threads=1",
            f"tracking.uri={uri}",
        ]
    )
    assert code == 0
    _, run = last_eval_run(uri)
    assert run.data.tags[M.TAG_ENGINE] == "lm_eval"
    m = run.data.metrics
    assert m[M.eval_metric("aime24", "problems")] == 5
    assert M.eval_metric("aime24", avg_at_name(2)) in m
    assert m[M.GRADER_ERRORS] == 0


def test_chat_template_prompts_agree(tiny_model):  # noqa: F811
    """With a chat template (system + user turn), lm-eval sends the very prompt we render."""
    model, tok = load_model(str(tiny_model), device="cpu")
    tok.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    req = EvalRequest(
        k=0, limit=3, max_new_tokens=4, data_dir=require_data(), template="qwen_math_chat"
    )
    a = evaluate_model(model, tok, ["aime24"], req)["aime24"]
    b = evaluate_lm_eval(model, tok, ["aime24"], req)["aime24"]
    assert a.rows["prompt"][0].startswith("<system>Please reason step by step")
    assert b.rows["prompt"] == a.rows["prompt"]
    assert b.rows["response"] == a.rows["response"]
