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
from benchmarks.telemetry.tracking import NullTracker
from benchmarks.training.modeling import build_tiny_llama
from testkit.trainers import SPEC, make_trainer

pytestmark = pytest.mark.usefixtures("one_thread")

TRAIN_T, EVAL_T = 0.7, 1.3
TOP_P = 0.9


class _Calls(list):
    """Every ``generate`` of every torch engine: (engine, temperature, top_p, seed, prompts)."""

    def by_sampling(self) -> dict[tuple[float, float], Counter]:
        """{(temperature, top_p): Counter of the prompts generated with them}."""
        out: dict[tuple[float, float], Counter] = {}
        for _, t, p, _, prompts in self:
            out.setdefault((t, p), Counter()).update(prompts)
        return out

    def at(self, temperature: float) -> list[tuple]:
        return [c for c in self if c[1] == temperature]


@pytest.fixture
def asked(monkeypatch) -> _Calls:
    calls = _Calls()
    generate = TorchEngine.generate

    def recorded(self, prompts, **kw):
        calls.append((self, kw["temperature"], kw["top_p"], kw["seed"], list(prompts)))
        return generate(self, prompts, **kw)

    monkeypatch.setattr(TorchEngine, "generate", recorded)
    return calls


def _evaluator(tok, task, **cfg):
    start = build_tiny_llama(SPEC, len(tok), seed=0)
    settings = dict(
        temperature=TRAIN_T,
        top_p=TOP_P,
        eval_temperature=EVAL_T,
        eval_k=3,
        eval_k_problems=4,
        eval_batch_size=5,
        calibration_prompts=2,
        calibration_samples=5,
    )
    return make_trainer(
        "sppo",  # a prompt critic: calibration runs too
        start,
        tok,
        task,
        Budget("samples", 64, (0.0, 0.5, 1.0)),
        seed=5,
        **{**settings, **cfg},
    )


@pytest.mark.parametrize(("fraction", "every"), [(1.0, False), (0.5, True)])
def test_each_training_evaluation_samples_at_its_own_temperature(fraction, every, tok, asked):
    task = ArithTask(horizon=1, eval_size=6)
    trainer = _evaluator(tok, task, eval_k_every_checkpoint=every)
    trainer.evaluator.evaluate(trainer.engine, 1, fraction)
    held = [p.prompt for p in task.eval_problems()]
    assert (
        asked.by_sampling()
        == {
            (0.0, 1.0): Counter(held),  # greedy accuracy: every held-out prompt once
            (EVAL_T, TOP_P): Counter({p: 3 for p in held[:4]}),  # avg@3 and pass@3
            (TRAIN_T, TOP_P): Counter({p: 5 for p in held[:2]}),  # calibration
        }
    )
    # avg@k runs as `sppo-bench eval` does: on a torch engine of its own, at eval_batch_size,
    # with the run's seed.
    (sampled,) = asked.at(EVAL_T)
    assert sampled[0] is not trainer.engine and sampled[0].batch_size == 5
    assert sampled[3] == 5


def test_without_every_checkpoint_avg_at_k_waits_for_the_end(tok, asked):
    task = ArithTask(horizon=1, eval_size=6)
    trainer = _evaluator(tok, task)
    trainer.evaluator.evaluate(trainer.engine, 1, 0.5)
    assert not asked.at(EVAL_T) and asked.at(TRAIN_T) and asked.at(0.0)


class _OtherEngine:
    """An engine that is not the torch one (as vLLM's), answering through one: the evaluation
    must use it as given, never build a torch engine in its place."""

    def __init__(self, inner: TorchEngine) -> None:
        self.inner, self.tokenizer = inner, inner.tokenizer
        self.temperatures: list[float] = []

    def generate(self, prompts, **kw):
        self.temperatures.append(kw["temperature"])
        return self.inner.generate(prompts, **kw)


def test_another_engine_is_used_for_avg_at_k_as_given(tok, asked):
    task = ArithTask(horizon=1, eval_size=6)
    trainer = _evaluator(tok, task)
    other = _OtherEngine(trainer.engine)
    trainer.evaluator.evaluate(other, 1, 1.0)
    assert sorted(other.temperatures) == [0.0, 0.0, TRAIN_T, EVAL_T]  # greedy: 6 in 5s
    assert all(call[0] is trainer.engine for call in asked)


@pytest.mark.slow  # a run with sampled evals: ~9 s
def test_avg_at_k_is_logged_at_its_step_under_its_fraction(tok, tmp_path):
    """On a real MLflow store: the sampled evaluation's metrics at the step it ran, its sample
    table per evaluation point (``f0.5``, ``final``) holding ``eval_samples_logged`` problems
    of k samples each (of the 4 sampled), cut at ``max_new_tokens``, and no grader totals (the step's own)."""
    import json

    from mlflow.tracking import MlflowClient

    from analysis import metrics as M
    from benchmarks.telemetry.tracking import MlflowTracker

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = client.create_run(
        client.create_experiment("e", artifact_location=(tmp_path / "art").as_uri())
    ).info.run_id
    task = ArithTask(horizon=1, eval_size=6)
    trainer = _evaluator(
        tok, task, eval_k_every_checkpoint=True, max_new_tokens=3, eval_samples_logged=2
    )
    trainer.evaluator.tracker = MlflowTracker(client, run_id, synchronous=True)
    trainer.evaluator.evaluate(trainer.engine, 3, 0.5)
    trainer.evaluator.evaluate(trainer.engine, 7, 1.0)
    history = client.get_metric_history(run_id, M.eval_metric("arith", "avg_at_3"))
    assert sorted(m.step for m in history) == [3, 7]
    assert M.GRADER_TIMEOUTS not in client.get_run(run_id).data.metrics
    for tag in ("f0.5", "final"):
        path = client.download_artifacts(run_id, f"eval_samples_k/{tag}/arith.json", str(tmp_path))
        table = json.loads(open(path).read())
        rows = dict(zip(table["columns"], zip(*table["data"], strict=True), strict=True))
        assert len(set(rows["id"])) == 2 and len(rows["id"]) == 6  # 2 problems, 3 samples each
        assert all(len(r) <= 3 for r in rows["response"])


def test_sppo_bench_eval_samples_at_its_temperature(tok, asked):
    settings = parse_settings(["model=tiny", "tasks=[arith]", "k=4", "temperature=0.35"])
    request = settings.request()
    task = ArithTask(horizon=1, eval_size=5)
    model = build_tiny_llama(SPEC, len(tok), seed=0)
    evaluate_model(model, tok, [task], request)
    held = [p.prompt for p in task.eval_problems()]
    assert asked.by_sampling() == {
        (0.0, 1.0): Counter(held),
        (0.35, request.top_p): Counter({p: 4 for p in held}),
    }


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
    sampled = {k: c for k, c in asked.by_sampling().items() if k[0] > 0}  # warm start: greedy
    assert sampled == {(TRAIN_T, 1.0): Counter({p: 3 for p in held})}


def test_the_greedy_evaluation_reports_every_item_and_group(tok):
    """Accuracy and its standard error overall and per horizon group, at the fraction, as the
    means of the item scores it logs (one artifact per evaluation, which an analysis
    resamples)."""
    import math

    from analysis import metrics as M

    task = ArithTask(horizon=[1, 2], eval_size=3)
    trainer = _evaluator(tok, task, eval_k=0, calibration_prompts=0)
    m = trainer.evaluator.evaluate(trainer.engine, 4, 0.5)
    ((fraction, res),) = trainer.evals
    items = trainer.evaluator.tracker.dicts[M.eval_items_file("arith", 0.5)]
    groups = task.eval_groups()
    assert items == {
        "dataset": "arith",
        "step": 4,
        "budget_fraction": 0.5,
        "scores": [float(s) for s in res.scores],
        "groups": groups,
    }
    assert fraction == 0.5 and len(res.scores) == 6 and set(groups) == {"arith_h1", "arith_h2"}

    def acc_se(scores):
        p = sum(scores) / len(scores)
        return p, math.sqrt(p * (1 - p) / len(scores))

    expected = {M.EVAL_BUDGET_FRACTION: 0.5}
    for name, idx in {"arith": range(6), **groups}.items():
        acc, se = acc_se([res.scores[i] for i in idx])
        expected[M.eval_metric(name, "accuracy")] = acc
        expected[M.eval_metric(name, "accuracy_se")] = se
    assert m == pytest.approx(expected, abs=1e-12)


class _NoGroups:
    """A task without held-out groups (no ``eval_groups``), as a real dataset may be."""

    def __init__(self, task: ArithTask) -> None:
        self.task = task
        self.name, self.eval_name = task.name, task.eval_name

    def eval_problems(self):
        return self.task.eval_problems()

    def grade(self, responses, problems):
        return self.task.grade(responses, problems)


def test_a_task_without_groups_reports_the_whole_set(tok):
    from analysis import metrics as M

    trainer = _evaluator(tok, ArithTask(horizon=1, eval_size=4), eval_k=0, calibration_prompts=0)
    trainer.evaluator.task = _NoGroups(trainer.task)
    m = trainer.evaluator.evaluate(trainer.engine, 1, 1.0)
    assert set(m) == {
        M.eval_metric("arith", "accuracy"),
        M.eval_metric("arith", "accuracy_se"),
        M.EVAL_BUDGET_FRACTION,
    }
    assert trainer.evaluator.tracker.dicts[M.eval_items_file("arith", 1.0)]["groups"] == {}


class _Tables(NullTracker):
    """Keeps the tables too."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, dict[str, list]] = {}
        self.logged: list[str] = []

    def log_table(self, data, artifact_file: str) -> None:
        self.tables[artifact_file] = dict(data)
        self.logged.append(artifact_file)


def test_what_each_evaluation_point_runs_and_logs(tok, asked):
    """The greedy sample table at the start and the end only; avg@k (k = 1 counts) at the end;
    calibration (one prompt counts) at the end only when not asked at every eval, with its
    table at the end; the progress and evaluation callbacks at every point."""
    task = ArithTask(horizon=1, eval_size=6)
    trainer = _evaluator(
        tok,
        task,
        eval_k=1,
        calibration_prompts=1,
        calibration_every_eval=False,
        eval_samples_logged=2,
    )
    ev = trainer.evaluator
    ev.tracker = _Tables()
    progress, evals = [], []
    ev.on_progress = lambda f, m: progress.append((f, m))
    ev.on_eval = lambda f, r: evals.append((f, r))
    trainer.meter.samples = 32
    held = list(task.eval_problems())
    ev.evaluate(trainer.engine, 0, 0.0)
    assert ev.tracker.logged == ["eval_samples/arith_start.json"]
    for step, fraction in ((1, 0.5), (2, 1.0)):
        ev.evaluate(trainer.engine, step, fraction)
    assert ev.tracker.logged == [
        "eval_samples/arith_start.json",  # nothing at 0.5
        "eval_samples/arith_final.json",
        "eval_samples_k/final/arith.json",
        "critic_calibration.json",
    ]
    final = ev.tracker.tables["eval_samples/arith_final.json"]
    (_, res) = evals[-1]
    assert final == {
        "prompt": [p.prompt for p in held[:2]],
        "answer": [p.answer for p in held[:2]],
        "response": res.responses[:2],
        "score": res.scores[:2],
    }
    assert len(asked.at(EVAL_T)) == 1  # avg@1, once, at the end
    assert len(asked.at(TRAIN_T)) == 1  # calibration once, at the end
    assert [f for f, _ in evals] == [0.0, 0.5, 1.0] and all(r is not None for _, r in evals)
    assert progress == [(0.5, {"acc": r.accuracy}) for _, r in evals]
