"""One evaluation, shared by ``sppo-bench eval`` and the trainer's budget checkpoints.

The paper reports Avg@16 (the mean score of 16 samples per problem at temperature 0.6) on AIME,
AMC, MATH-500 and Minerva; users compare their runs against those numbers, and training compares
algorithms at budget checkpoints. Both only mean something if they come from the same code, so
:func:`evaluate_model` takes tasks and an :class:`~benchmarks.evaluation.settings.EvalRequest`
and nothing else decides how they are scored:

* greedy accuracy with its binomial standard error, through :func:`evaluate_greedy` (the
  trainer's own greedy evaluation), so the two agree sample for sample;
* avg@k and pass@j (``j`` = 1, 2, 4, ..., k) with the unbiased estimator of Chen et al. (2021),
  so pass@1 equals avg@k up to rounding; MLflow refuses ``@`` in metric names, hence
  ``eval/<task>/avg_at_16`` (:func:`avg_at_name`, :func:`pass_at_name`);
* the task's safe grader (:mod:`benchmarks.tasks.grading`): a pathological response times out
  and scores 0, counted, instead of hanging or killing the run.

The lm-eval route (:func:`benchmarks.evaluation.lm_eval.evaluate_lm_eval`) reuses
:func:`build_tasks` and :func:`summarise`, so its numbers differ only where its responses do.

Simplifications: one sampling seed per invocation (the k samples of a problem are its
repetitions); no majority vote (maj@k); prompts are not sorted by length before batching.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from analysis import metrics as M
from analysis.metrics import avg_at_name, pass_at_name, pass_ks
from benchmarks.engines.rollout import RolloutEngine
from benchmarks.engines.torch_engine import TorchEngine
from benchmarks.evaluation.estimators import avg_at_k, pass_at_k
from benchmarks.evaluation.settings import (
    ARITH,
    DEFAULT_MAX_NEW_TOKENS,
    EvalRequest,
    available_tasks,
)
from benchmarks.tasks.arith import ArithTask
from benchmarks.tasks.base import Task, TaskProblem
from benchmarks.tasks.dataset_task import GraderSet
from benchmarks.tasks.grading import GradeResult, extract_answer

__all__ = [
    "EvalRequest",
    "EvalResult",
    "TaskEval",
    "evaluate_greedy",
    "evaluate_model",
    "group_accuracies",
    "load_model",
    "load_tokenizer",
    "log_results",
]

log = logging.getLogger(__name__)


# --- tasks -------------------------------------------------------------------------------------


@dataclass
class _EvalTask:
    """A task's held-out problems with its grading and answer extraction (the ``Task.grade`` shape
    :func:`benchmarks.evaluation.evaluate.evaluate_greedy` needs)."""

    name: str
    problems: list[TaskProblem]
    max_new_tokens: int
    grade_fn: Callable[[Sequence[str], Sequence[TaskProblem]], GradeResult]
    extract_fn: Callable[[str, TaskProblem], str | None]

    def grade(self, responses: Sequence[str], problems: Sequence[TaskProblem]) -> GradeResult:
        return self.grade_fn(responses, problems)


def _extract(response: str, problem: TaskProblem) -> str | None:
    """The answer the grader looks at, for the sample table (display only; regex, never eval)."""
    tail = response[-32_768:]
    if problem.grader == "math_verify":
        return extract_answer(tail, "boxed")
    return extract_answer(tail, "integer")


def _arith_max_tokens(horizon: int) -> int:
    return 6 * horizon + 6  # as the `arith_max_tokens` resolver of the training config


def build_tasks(
    tasks: Sequence[str | Task], request: EvalRequest, *, tokenizer: Any, graders: GraderSet
) -> list[_EvalTask]:
    """Resolve names (or trainer ``Task`` objects) into problems, graders and token budgets.

    Raises ``ValueError`` naming ``tasks`` for an unknown name and ``FileNotFoundError`` (from
    :func:`benchmarks.tasks.datasets.load_dataset`) for missing data, before any generation.
    """
    from benchmarks.tasks.datasets import DATASETS, load_dataset, render_prompt

    limit = request.limit
    max_new_tokens = request.max_new_tokens
    arith_horizon = request.arith_horizon
    out: list[_EvalTask] = []
    for t in tasks:
        if not isinstance(t, str):  # a trainer's Task: its own held-out set and grader
            probs = list(t.eval_problems())[:limit] if limit else list(t.eval_problems())
            horizon = getattr(t, "horizon", arith_horizon)
            budget = max_new_tokens or (
                _arith_max_tokens(horizon) if isinstance(t, ArithTask) else DEFAULT_MAX_NEW_TOKENS
            )
            extract = (lambda r, p: ArithTask.extract(r)) if isinstance(t, ArithTask) else _extract
            out.append(_EvalTask(t.eval_name, probs, budget, t.grade, extract))
        elif t == ARITH:
            arith = ArithTask(horizon=arith_horizon, eval_size=limit or 1000)
            out.append(
                _EvalTask(
                    ARITH,
                    list(arith.eval_problems()),
                    max_new_tokens or _arith_max_tokens(arith_horizon),
                    arith.grade,
                    lambda r, p: ArithTask.extract(r),
                )
            )
        elif t in DATASETS:
            kind = DATASETS[t].grader
            probs = [
                TaskProblem(
                    id=p.id,
                    prompt=render_prompt(p, request.template, tokenizer),
                    answer=p.answer,
                    grader=kind,
                )
                for p in load_dataset(t, data_dir=request.data_dir, limit=limit)
            ]
            budget = max_new_tokens or DEFAULT_MAX_NEW_TOKENS
            out.append(_EvalTask(t, probs, budget, graders.grade, _extract))
        else:
            raise ValueError(f"tasks: unknown task {t!r}; valid: {available_tasks()}")
        if not out[-1].problems:
            raise ValueError(f"tasks: {out[-1].name!r} has no problems (limit={limit})")
    return out


# --- results -----------------------------------------------------------------------------------


@dataclass
class TaskEval:
    """One task's evaluation: the numbers and the per-sample rows behind them.

    Attributes:
        task: Name in metric keys (``eval/<task>/...``).
        n: Problems evaluated.
        k: Samples per problem (0: none).
        accuracy: Greedy accuracy (NaN when greedy decoding was off).
        accuracy_se: Its binomial standard error, sqrt(p(1-p)/n).
        avg_at_k: Mean verdict of the k samples, each problem weighing the same (NaN if k = 0).
        avg_at_k_se: Standard error of avg@k over problems (std of per-problem means / sqrt(n)).
        pass_at: ``{j: pass@j}`` for ``j`` in :func:`pass_ks` (unbiased estimator).
        timeouts: Items whose grading timed out (scored 0).
        errors: Items whose grading raised or crashed (scored 0).
        max_new_tokens: Response budget used.
        response_tokens: Mean length of the sampled responses, in tokens.
        truncated: Share of sampled responses that hit ``max_new_tokens`` without an EOS.
        wall_s: Seconds spent on generation and grading.
        rows: The per-sample table, column-wise (one row per greedy response and per sample).
        engine: ``torch`` or ``lm_eval``.
        reported: lm-eval's own aggregates, ``{"<lm-eval task>/<metric>": value}`` (lm_eval
            engine only), to check against the numbers above.
    """

    task: str
    n: int
    k: int
    accuracy: float = math.nan
    accuracy_se: float = math.nan
    avg_at_k: float = math.nan
    avg_at_k_se: float = math.nan
    pass_at: dict[int, float] = field(default_factory=dict)
    timeouts: int = 0
    errors: int = 0
    max_new_tokens: int = 0
    response_tokens: float = math.nan
    truncated: float = math.nan
    wall_s: float = 0.0
    rows: dict[str, list[Any]] = field(default_factory=dict)
    engine: str = "torch"
    reported: dict[str, float] = field(default_factory=dict)

    def metrics(self) -> dict[str, float]:
        """Flat ``eval/<task>/<metric>`` dict (NaN entries left out)."""
        name = self.task
        m: dict[str, float] = {
            M.eval_metric(name, "accuracy"): self.accuracy,
            M.eval_metric(name, "accuracy_se"): self.accuracy_se,
            M.eval_metric(name, "problems"): float(self.n),
            M.eval_metric(name, "grader_timeouts"): float(self.timeouts),
            M.eval_metric(name, "grader_errors"): float(self.errors),
            M.eval_metric(name, "wall_s"): self.wall_s,
        }
        if self.k:
            m[M.eval_metric(name, avg_at_name(self.k))] = self.avg_at_k
            m[M.eval_metric(name, avg_at_name(self.k) + "_se")] = self.avg_at_k_se
            for j, v in self.pass_at.items():
                m[M.eval_metric(name, pass_at_name(j))] = v
            m[M.eval_metric(name, "response_tokens")] = self.response_tokens
            m[M.eval_metric(name, "truncated")] = self.truncated
        return {k: float(v) for k, v in m.items() if not math.isnan(v)}


SAMPLE_COLUMNS = ("id", "kind", "sample", "prompt", "answer", "response", "extracted", "verdict")


def add_rows(
    rows: dict[str, list[Any]],
    problems: Sequence[TaskProblem],
    responses: Sequence[str],
    scores: Sequence[float],
    kind: str,
    per_problem: int,
    extract: Callable[[str, TaskProblem], str | None],
) -> None:
    for i, (r, s) in enumerate(zip(responses, scores, strict=True)):
        p = problems[i // per_problem]
        for col, value in zip(
            SAMPLE_COLUMNS,
            (p.id, kind, i % per_problem, p.prompt, p.answer, r, extract(r, p), float(s)),
            strict=True,
        ):
            rows[col].append(value)


def summarise(
    task: str,
    greedy_scores: Sequence[float] | None,
    sample_scores: Sequence[Sequence[float]] | None,
    k: int,
) -> TaskEval:
    """Accuracy, avg@k and pass@j with standard errors from verdict lists (one formula for every
    engine, so the torch and lm-eval routes are summarised identically)."""
    n = len(greedy_scores) if greedy_scores is not None else len(sample_scores or [])
    out = TaskEval(task=task, n=n, k=k if sample_scores else 0)
    if greedy_scores is not None:
        acc = math.fsum(greedy_scores) / n
        out.accuracy, out.accuracy_se = acc, math.sqrt(acc * (1 - acc) / n)
    if sample_scores:
        per = [math.fsum(row) / len(row) for row in sample_scores]
        out.avg_at_k = avg_at_k([list(row) for row in sample_scores])
        var = math.fsum((x - out.avg_at_k) ** 2 for x in per) / (n - 1) if n > 1 else 0.0
        out.avg_at_k_se = math.sqrt(var / n)
        correct = [round(math.fsum(row)) for row in sample_scores]
        out.pass_at = {j: math.fsum(pass_at_k(k, c, j) for c in correct) / n for j in pass_ks(k)}
    return out


# --- the evaluation ----------------------------------------------------------------------------


def _evaluate_task(engine: Any, et: _EvalTask, request: EvalRequest) -> TaskEval:
    t0 = time.perf_counter()
    probs = et.problems
    rows: dict[str, list[Any]] = {c: [] for c in SAMPLE_COLUMNS}
    timeouts = errors = 0
    greedy_scores = None
    k = request.k
    if request.greedy:
        res = evaluate_greedy(engine, et, probs, et.max_new_tokens, request.batch_size)
        greedy_scores = res.scores
        timeouts, errors = res.timeouts, res.errors
        add_rows(rows, probs, res.responses, res.scores, "greedy", 1, et.extract_fn)
    matrix = None
    tokens = truncated = math.nan
    if k:
        repeated = [p for p in probs for _ in range(k)]
        ro = engine.generate(
            [p.prompt for p in repeated],
            temperature=request.temperature,
            top_p=request.top_p,
            max_new_tokens=et.max_new_tokens,
            seed=request.seed,
        )
        g = et.grade(ro.texts, repeated)
        timeouts, errors = timeouts + g.timeouts, errors + g.errors
        matrix = [g.scores[i * k : (i + 1) * k] for i in range(len(probs))]  # (n, k)
        lengths = ro.lengths.float()  # (n*k,)
        eos = engine.tokenizer.eos_token_id
        has_eos = ((ro.response_ids == eos) & (ro.response_mask > 0)).any(-1)  # (n*k,)
        tokens = float(lengths.mean())
        truncated = float(((~has_eos) & (lengths >= et.max_new_tokens)).float().mean())
        add_rows(rows, probs, ro.texts, g.scores, "sample", k, et.extract_fn)
    out = summarise(et.name, greedy_scores, matrix, k)
    out.timeouts, out.errors, out.rows = timeouts, errors, rows
    out.max_new_tokens, out.response_tokens, out.truncated = et.max_new_tokens, tokens, truncated
    out.wall_s = time.perf_counter() - t0
    log.info(
        "eval %s: %d problems, greedy %.3f, avg@%d %.3f, pass@%d %.3f (%.1f s)",
        et.name,
        out.n,
        out.accuracy,
        k,
        out.avg_at_k,
        k,
        out.pass_at.get(k, math.nan),
        out.wall_s,
    )
    return out


def evaluate_model(
    model: torch.nn.Module | None,
    tokenizer: Any,
    tasks: Sequence[str | Task],
    request: EvalRequest,
    *,
    engine: RolloutEngine | None = None,
) -> dict[str, TaskEval]:
    """Evaluate ``model`` on each task as ``request`` says: greedy accuracy, avg@k and pass@j.

    The CLI and the trainer's budget checkpoints call this, so both report the same numbers.

    Args:
        model: An HF causal LM (any device); it is put in eval mode and restored afterwards.
            ``None`` only with ``engine``.
        tokenizer: Its tokenizer; padding must be on the left (the engine's layout).
        tasks: Task names (``arith`` or a dataset name) or trainer ``Task`` objects (evaluated on
            their ``eval_problems()`` with their own grader, named by their ``eval_name``).
        request: Sampling, budgets, data and grading (its lm-eval fields are not used here).
        engine: A rollout engine to generate with (e.g. a
            :class:`benchmarks.engines.vllm_engine.VllmEngine`); ``None``: the torch engine on
            ``model`` at ``request.batch_size``.

    Returns:
        ``{task name: TaskEval}`` in the order given.

    Raises:
        ValueError: An unknown task name (names ``tasks``), or a tokenizer padding on the right.
        FileNotFoundError: A dataset file is missing (says where it looked and how to point at
            data); raised before any generation.
    """
    if getattr(tokenizer, "padding_side", "left") != "left":
        raise ValueError("evaluate_model: the tokenizer must pad on the left (padding_side='left')")
    graders = GraderSet(request.grader_timeout_s, request.grader_workers)
    try:
        built = build_tasks(tasks, request, tokenizer=tokenizer, graders=graders)
        if engine is None:
            engine = TorchEngine(model, tokenizer, batch_size=request.batch_size)
        was_training = model.training if model is not None else False
        if model is not None:
            model.eval()
        try:
            return {et.name: _evaluate_task(engine, et, request) for et in built}
        finally:
            if model is not None:
                model.train(was_training)
    finally:
        graders.close()


def log_results(
    tracker: Any,
    results: Mapping[str, TaskEval],
    *,
    step: int = 0,
    samples_logged: int | None = None,
    grader_totals: bool = True,
    table_prefix: str = "eval_samples",
) -> dict[str, float]:
    """Log every task's metrics at ``step`` and its sample table as ``<prefix>/<task>.json``.

    ``grader_totals`` adds ``grader/timeouts`` and ``grader/errors`` summed over the tasks (the
    standalone evaluation run); the trainer, whose own steps log those names, passes ``False``.
    Returns the metrics logged.
    """
    metrics: dict[str, float] = {}
    for r in results.values():
        metrics.update(r.metrics())
    if grader_totals:
        metrics[M.GRADER_TIMEOUTS] = float(sum(r.timeouts for r in results.values()))
        metrics[M.GRADER_ERRORS] = float(sum(r.errors for r in results.values()))
    tracker.log_metrics(metrics, step=step)
    for r in results.values():
        rows = r.rows
        if samples_logged is not None:
            ids = list(dict.fromkeys(rows["id"]))[:samples_logged]
            keep = set(ids)
            idx = [i for i, pid in enumerate(rows["id"]) if pid in keep]
            rows = {c: [v[i] for i in idx] for c, v in rows.items()}
        if rows and rows.get("id"):
            tracker.log_table(rows, f"{table_prefix}/{r.task}.json")
    return metrics


# --- model loading -------------------------------------------------------------------------------


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load_model(name_or_path: str, *, device: str = "auto", dtype: str = "auto") -> tuple[Any, Any]:
    """Load an HF causal LM and its tokenizer (left padding; pad = EOS when it has none).

    ``dtype="auto"`` is bfloat16 on a GPU and float32 on the CPU (where bfloat16 matmuls are
    slow). Raises ``OSError`` when the model cannot be found or downloaded.
    """
    from transformers import AutoModelForCausalLM

    dev = resolve_device(device)
    tok = load_tokenizer(name_or_path)
    torch_dtype = getattr(torch, resolve_dtype(dev, dtype))
    model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=torch_dtype)
    model.to(dev)
    model.eval()
    return model, tok


def load_tokenizer(name_or_path: str) -> Any:
    """The tokenizer of :func:`load_model` alone (left padding; pad = EOS when it has none)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(name_or_path, padding_side="left")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def resolve_dtype(dev: torch.device, dtype: str) -> str:
    """``auto``: bfloat16 on a GPU, float32 on the CPU."""
    if dtype == "auto":
        return "bfloat16" if dev.type == "cuda" else "float32"
    return dtype


@dataclass
class EvalResult:
    accuracy: float
    se: float
    n: int
    responses: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    timeouts: int = 0
    errors: int = 0


def evaluate_greedy(
    engine: RolloutEngine,
    task: Task,
    problems: Sequence[TaskProblem],
    max_new_tokens: int,
    batch_size: int = 512,
) -> EvalResult:
    """Greedy accuracy with its binomial standard error, sqrt(p(1-p)/n)."""
    responses: list[str] = []
    scores: list[float] = []
    timeouts = errors = 0
    for i in range(0, len(problems), batch_size):
        chunk = problems[i : i + batch_size]
        ro = engine.generate(
            [p.prompt for p in chunk],
            temperature=0.0,
            top_p=1.0,
            max_new_tokens=max_new_tokens,
            seed=0,
        )
        g = task.grade(ro.texts, chunk)
        responses += ro.texts
        scores += g.scores
        timeouts += g.timeouts
        errors += g.errors
    n = len(scores)
    acc = sum(scores) / n
    return EvalResult(acc, math.sqrt(acc * (1 - acc) / n), n, responses, scores, timeouts, errors)


def group_accuracies(
    result: EvalResult, groups: Mapping[str, Sequence[int]]
) -> dict[str, tuple[float, float]]:
    """``{group: (accuracy, binomial standard error)}`` per named subset of the evaluated
    problems (a mixed-horizon task's ``eval_groups()``): the overall accuracy of a mixed task
    hides where, along the horizon, an algorithm gains."""
    out: dict[str, tuple[float, float]] = {}
    for name, idx in groups.items():
        if idx:
            acc = sum(result.scores[i] for i in idx) / len(idx)
            out[name] = (acc, math.sqrt(acc * (1 - acc) / len(idx)))
    return out
