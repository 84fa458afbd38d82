"""``sppo-bench eval``: greedy accuracy, avg@k, pass@k, MLflow logging, sample tables, errors.

The model is a real tiny Llama with the character tokenizer, fine-tuned for 100 steps on `arith`
(worked chains) so its accuracy sits strictly between 0 and 1: pass@k > avg@k is then a real
check, not 0 >= 0. MATH-500 goes through the math-verify process pool with the same model, on the
problems whose answer is 0 first (the model writes ``000...`` to text it cannot read), so some
verdicts are 1. Every logged row is re-graded on its own and every logged number recomputed from
the rows: a grader, task or table that scored rows wrongly cannot pass on plausible numbers.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from math import comb
from pathlib import Path

import pytest
import torch
import yaml

from analysis import metrics as M
from analysis.metrics import avg_at_name, pass_at_name, pass_ks
from benchmarks.evaluation.cli import main
from benchmarks.evaluation.evaluate import TaskEval, evaluate_model, load_model, summarise
from benchmarks.evaluation.settings import EvalRequest, parse_settings
from benchmarks.tasks.arith import ArithTask
from benchmarks.tasks.base import TaskProblem
from benchmarks.tasks.datasets import DATASETS
from benchmarks.tasks.grading import Grader
from testkit.paths import needs_data, require_data
from testkit.stores import last_eval_run
from testkit.tolerances import fp_tol

ARITH_LIMIT = 50
K = 4


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """One SQLite MLflow store for the module (its first migration costs seconds)."""
    return f"sqlite:///{tmp_path_factory.mktemp('eval_mlflow') / 'mlflow.db'}"


def _table(client, run, name: str, dst: Path) -> list[dict]:
    path = client.download_artifacts(run.info.run_id, f"eval_samples/{name}.json", str(dst))
    blob = json.loads(Path(path).read_text())
    return [dict(zip(blob["columns"], row, strict=True)) for row in blob["data"]]


def _problems(rows: list[dict]) -> list[TaskProblem]:
    return [TaskProblem(id=r["id"], prompt=r["prompt"], answer=r["answer"]) for r in rows]


def _check_metrics_are_the_rows(rows: list[dict], m: dict, task: str, n: int, k: int) -> None:
    """Every logged number of ``task`` follows from its logged rows (already re-graded by the
    caller): accuracy is the mean greedy verdict, avg@k the mean sampled one, pass@j the
    unbiased estimator from each problem's count of correct samples, with exact binomials."""
    greedy = [r for r in rows if r["kind"] == "greedy"]
    sampled = [r for r in rows if r["kind"] == "sample"]
    assert len(greedy) == n and len(sampled) == n * k and len(rows) == n * (1 + k)
    ids = [r["id"] for r in greedy]
    assert [r["id"] for r in sampled] == [i for i in ids for _ in range(k)]
    assert [r["sample"] for r in sampled] == list(range(k)) * n
    assert m[M.eval_metric(task, "problems")] == n
    assert m[M.eval_metric(task, "accuracy")] == math.fsum(r["verdict"] for r in greedy) / n
    correct = [
        round(math.fsum(r["verdict"] for r in sampled[i * k : (i + 1) * k])) for i in range(n)
    ]
    # The harness sums per-problem means (and pass@j's product form) in its own order: float64
    # rounding of n*k terms of magnitude <= 1.
    tol = fp_tol(n * k, 1.0, torch.float64)
    avg = math.fsum(c / k for c in correct) / n
    assert m[M.eval_metric(task, avg_at_name(k))] == pytest.approx(avg, abs=tol)
    for j in pass_ks(k):
        exact = math.fsum(1 - comb(k - c, j) / comb(k, j) for c in correct) / n
        assert m[M.eval_metric(task, pass_at_name(j))] == pytest.approx(exact, abs=tol), j


@pytest.mark.slow  # the eval CLI in a subprocess: ~10 s each
def test_cli_arith_metrics_table_and_greedy_agreement(tiny_model, store, tmp_path, capsys):
    code = main(
        [
            f"model={tiny_model}",
            "tasks=[arith]",
            f"k={K}",
            f"limit={ARITH_LIMIT}",
            "temperature=1.0",
            "top_p=1.0",
            "threads=1",
            f"tracking.uri={store}",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "arith" in out and f"avg@{K}" in out and "mlflow ui --backend-store-uri" in out
    client, run = last_eval_run(store)
    tags, m = run.data.tags, run.data.metrics
    assert tags[M.TAG_ROLE] == "eval"
    assert tags[M.TAG_MODEL] == str(tiny_model)
    assert tags[M.TAG_TASK] == "arith"
    assert run.info.status == "FINISHED"

    acc = m[M.eval_metric("arith", "accuracy")]
    avg = m[M.eval_metric("arith", avg_at_name(K))]
    p1 = m[M.eval_metric("arith", pass_at_name(1))]
    pk = m[M.eval_metric("arith", pass_at_name(K))]
    assert 0.0 < avg < 1.0, "the fixture model should be neither hopeless nor perfect"
    assert pk > avg  # some problems are solved by one sample in k but not by all
    assert p1 == pytest.approx(avg, abs=1e-12)
    assert m[M.eval_metric("arith", "accuracy_se")] == pytest.approx(
        math.sqrt(acc * (1 - acc) / ARITH_LIMIT)
    )
    assert m[M.GRADER_TIMEOUTS] == 0 and m[M.GRADER_ERRORS] == 0
    assert m[M.eval_metric("arith", "problems")] == ARITH_LIMIT
    for j in pass_ks(K):
        assert M.eval_metric("arith", pass_at_name(j)) in m

    # Greedy accuracy is exactly what the trainer's evaluate_greedy gives on the same problems.
    from benchmarks.engines.torch_engine import TorchEngine
    from benchmarks.evaluation.evaluate import evaluate_greedy

    model, tok = load_model(str(tiny_model), device="cpu")
    task = ArithTask(horizon=2)
    ref = evaluate_greedy(
        TorchEngine(model, tok, batch_size=64), task, task.eval_problems()[:ARITH_LIMIT], 18, 64
    )
    assert acc == pytest.approx(ref.accuracy, abs=1e-12)

    rows = _table(client, run, "arith", tmp_path)
    assert set(rows[0]) >= {"id", "prompt", "response", "extracted", "verdict", "kind", "sample"}
    greedy = [r for r in rows if r["kind"] == "greedy"]
    assert [r["response"] for r in greedy] == ref.responses
    assert [r["prompt"] for r in greedy] == [p.prompt for p in task.eval_problems()[:ARITH_LIMIT]]
    # Each row re-graded by the task's own grader, on the logged response and gold alone.
    regraded = task.grade([r["response"] for r in rows], _problems(rows)).scores
    assert [r["verdict"] for r in rows] == regraded
    for r in rows:
        assert r["extracted"] == ArithTask.extract(r["response"])
    _check_metrics_are_the_rows(rows, m, "arith", ARITH_LIMIT, K)


def _zero_answers_first(dst: Path) -> list[str]:
    """MATH-500 laid out as a data directory, its problems whose answer is 0 first (the rest in
    file order); returns the ids in the new order.

    The fixture model writes the digits it knows, mostly ``0000...``, after text it cannot read,
    so on these problems some verdicts are 1: a pool, a task or a table that scored every row 0
    fails, which on the file's own first ten problems (none of them answered 0) it would not.
    """
    src = require_data() / DATASETS["math500"].path
    lines = src.read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines]
    order = sorted(range(len(rows)), key=lambda i: rows[i]["answer"] != "0")  # stable
    out = dst / DATASETS["math500"].path
    out.parent.mkdir(parents=True)
    out.write_text("".join(lines[i] + "\n" for i in order), encoding="utf-8")
    return [rows[i]["id"] for i in order]


@pytest.mark.slow  # a math-verify pool on MATH-500: ~8 s
@needs_data
def test_math500_through_the_math_verify_pool(tiny_model, store, tmp_path):
    """MATH-500 through the math-verify process pool: each logged row, re-graded on its own by a
    pool of ours, has the logged verdict, and the logged numbers are those of the rows."""
    ids = _zero_answers_first(tmp_path / "data")
    code = main(
        [
            f"model={tiny_model}",
            "tasks=[math500]",
            "k=2",
            "limit=10",
            "max_new_tokens=16",
            f"data_dir={tmp_path / 'data'}",
            "grader_timeout_s=1.0",
            "threads=1",
            f"tracking.uri={store}",
        ]
    )
    assert code == 0
    client, run = last_eval_run(store)
    m = run.data.metrics
    assert m[M.GRADER_ERRORS] == 0
    # The model's samples include towers such as `1111111**1100000` (seconds of big-integer
    # work): such an item times out, scores 0 and is counted, and the run goes on.
    assert m[M.GRADER_TIMEOUTS] == m[M.eval_metric("math500", "grader_timeouts")] <= 3
    rows = _table(client, run, "math500", tmp_path)
    greedy = [r for r in rows if r["kind"] == "greedy"]
    assert [r["id"] for r in greedy] == ids[:10]
    assert greedy[0]["prompt"].startswith("Question: ")
    # Row by row, so that an item that times out here is known: it scores 0, as it did there.
    with Grader("math_verify", timeout_s=1.0) as grader:
        for r in rows:
            g = grader.grade([r["response"]], [r["answer"]])
            assert g.errors == 0
            assert r["verdict"] == (0.0 if g.timeouts else g.scores[0]), r
    assert {r["verdict"] for r in rows} == {0.0, 1.0}
    _check_metrics_are_the_rows(rows, m, "math500", 10, 2)


def test_evaluate_model_is_seeded_and_takes_trainer_tasks(tiny_model):
    """The trainer passes its own Task objects; the same problems give the same numbers."""
    model, tok = load_model(str(tiny_model), device="cpu")
    req = EvalRequest(k=2, temperature=1.0, top_p=1.0, seed=3, batch_size=64)
    by_name = evaluate_model(model, tok, ["arith"], replace(req, limit=20))["arith"]
    by_task = evaluate_model(model, tok, [ArithTask(horizon=2, eval_size=20)], req)["arith"]
    assert isinstance(by_name, TaskEval) and by_name.n == by_task.n == 20
    assert by_name.rows["response"] == by_task.rows["response"]
    assert by_name.metrics() == pytest.approx(by_task.metrics() | _wall(by_name))
    other = evaluate_model(model, tok, ["arith"], replace(req, limit=20, seed=4))["arith"]
    assert other.rows["response"] != by_name.rows["response"]  # the seed reaches the sampler


def _wall(r: TaskEval) -> dict[str, float]:
    return {M.eval_metric(r.task, "wall_s"): r.wall_s}


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({"k": -1}, "k=-1"),
        ({"k": 0, "greedy": False}, "k=0"),
        ({"temperature": 11.0}, "temperature=11.0"),
        ({"top_p": 0.0}, "top_p=0.0"),
        ({"limit": 0}, "limit=0"),
        ({"max_new_tokens": 0}, "max_new_tokens=0"),
        ({"batch_size": 0}, "batch_size=0"),
        ({"grader_timeout_s": 0.0}, "grader_timeout_s=0.0"),
        ({"template": "nosuch"}, "template='nosuch'"),
        ({"backend": "sglang"}, "backend='sglang'"),
    ],
)
def test_request_rejects_a_bad_value_naming_the_field(kw, expected):
    with pytest.raises(ValueError, match=f"^{expected}"):
        EvalRequest(**kw)


def test_cli_settings_build_the_request_key_for_key():
    """Every request field but the lm-eval route's is a CLI key of the same name and default."""
    s = parse_settings(["model=m", "k=4", "limit=20", "seed=7", "lm_eval_backend=vllm"])
    assert s.request() == EvalRequest(k=4, limit=20, seed=7, backend="vllm")
    assert parse_settings(["model=m"]).request() == EvalRequest()
    assert EvalRequest(data_dir=Path("/d")).data_dir == "/d"  # a Path is stored as a string


def test_summary_formulas_on_a_hand_made_verdict_matrix():
    matrix = [[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]
    r = summarise("t", [1.0, 0.0, 0.0], matrix, 4)
    assert r.accuracy == pytest.approx(1 / 3)
    assert r.accuracy_se == pytest.approx(math.sqrt((1 / 3) * (2 / 3) / 3))
    assert r.avg_at_k == pytest.approx((0.25 + 1 + 0) / 3)
    # Per-problem means 0.25, 1, 0: sample std / sqrt(3).
    mean = 1.25 / 3
    var = ((0.25 - mean) ** 2 + (1 - mean) ** 2 + mean**2) / 2
    assert r.avg_at_k_se == pytest.approx(math.sqrt(var / 3))
    # pass@2 of 1 correct in 4 is 1 - C(3,2)/C(4,2) = 0.5.
    assert r.pass_at == pytest.approx({1: 1.25 / 3, 2: (0.5 + 1 + 0) / 3, 4: 2 / 3})
    assert pass_ks(16) == [1, 2, 4, 8, 16] and pass_ks(6) == [1, 2, 4, 6] and pass_ks(1) == [1]


@pytest.fixture
def no_hub(monkeypatch):
    """No `datasets` package: a missing file must not turn into a network attempt."""
    monkeypatch.setitem(sys.modules, "datasets", None)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["tasks=[nosuch]"], ["tasks", "nosuch", "math500", "arith"]),
        (["tasks=[arith]", "nosuch=1"], ["nosuch"]),
        (["tasks=[arith]", "k=abc"], ["k", "abc"]),
        (["tasks=[arith]", "k=-1"], ["k=-1"]),
        (["tasks=[arith]", "temperature=0"], ["temperature", "greedy"]),
        (["tasks=[arith]", "top_p=1.5"], ["top_p"]),
        (["tasks=[arith]", "template=nosuch"], ["template", "plain"]),
        (["tasks=[arith]", "engine=sglang"], ["engine", "lm_eval"]),
        (["tasks=[gsm8k_train]", "engine=lm_eval"], ["tasks", "gsm8k_train", "lm-eval"]),
        (["tasks=[arith,arith]"], ["tasks", "twice"]),
        (["tasks=[math500]", "data_dir={empty}"], ["data_dir=", "math500/test.jsonl"]),
        (["tasks=[aime24]", "data_dir={empty}", "--lm-eval"], ["data_dir=", "aime24/test.jsonl"]),
        (["tasks=[arith]", "model=/no/such/model/dir"], ["model=/no/such/model/dir"]),
        (["tasks=[arith]", "model=???"], ["model"]),
    ],
)
def test_bad_settings_exit_2_naming_the_field(
    args, expected, tmp_path, monkeypatch, capsys, no_hub
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    argv = [a.replace("{empty}", str(tmp_path / "empty")) for a in args]
    if not any(a.startswith("model=") for a in argv):
        argv.insert(0, "model=/unused")
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    for piece in expected:
        assert piece in err, (piece, err)
    assert not (tmp_path / "mlflow.db").exists()  # nothing started


def test_help_lists_every_setting(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for key in ("model=", "tasks=", "k=16", "temperature=0.6", "tracking.uri=", "--lm-eval"):
        assert key in out


def _yaml_load(path: Path) -> dict:
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))
    return yaml.load(path.read_text(), Loader=Loader)  # noqa: S506 - our own files


def test_lm_eval_task_yamls_match_the_dataset_specs():
    """Each sppo_<name>.yaml reads the spec's file and grades with the spec's grader kind."""
    from benchmarks.evaluation.lm_eval import TASKS_DIR, supported_tasks

    names = supported_tasks()
    assert {"arith", "math500", "aime24", "aime25", "amc23", "minerva", "gsm8k"} <= set(names)
    template = _yaml_load(TASKS_DIR / "_sppo_template_yaml")
    assert template["dataset_path"] == "json"
    for name in names:
        cfg = _yaml_load(TASKS_DIR / f"sppo_{name}.yaml")
        assert cfg["task"] == f"sppo_{name}"
        assert cfg["include"] == "_sppo_template_yaml"
        if name == "arith":
            assert cfg["process_results"].endswith(".process_results_arith")
            continue
        spec = DATASETS[name]
        assert cfg["dataset_kwargs"]["data_files"]["test"] == spec.path
        assert cfg["process_results"].endswith(f".process_results_{spec.grader}")
