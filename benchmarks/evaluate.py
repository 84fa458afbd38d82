"""``sppo-bench eval``: greedy accuracy, avg@k and pass@k of one model on benchmark tasks.

The paper reports Avg@16 (the mean score of 16 samples per problem at temperature 0.6) on AIME,
AMC, MATH-500 and Minerva; users compare their runs against those numbers, and training compares
algorithms at budget checkpoints with the same evaluation. So there is one evaluation,
:func:`evaluate_model`, that both the CLI and the trainer call:

* greedy decoding, scored once per problem: ``eval/<task>/accuracy`` with its binomial standard
  error (the same computation as :func:`benchmarks.trainer.evaluate_greedy`, which it calls);
* ``k`` samples per problem at ``temperature`` / ``top_p``: avg@k (mean verdict, each problem
  weighing the same) and pass@j for ``j`` = 1, 2, 4, ..., k with the unbiased estimator of Chen et
  al. (2021), so pass@1 equals avg@k up to rounding. MLflow refuses ``@`` in metric names, so they
  are logged as ``eval/<task>/avg_at_16`` and ``eval/<task>/pass_at_16`` (:func:`avg_at_name`,
  :func:`pass_at_name`);
* every response graded by the task's safe grader (:mod:`benchmarks.grading`: exact integer match
  in process, math-verify in a process pool with per-item timeouts); items that time out or crash
  score 0 and are counted (``grader/timeouts``, ``grader/errors``).

The CLI logs one MLflow run (tag ``sppo_bench.role=eval``) with those metrics and a per-sample
table per task (``eval_samples/<task>.json``: prompt, response, extracted answer, verdict), then
prints a summary table. ``engine=lm_eval`` (or ``--lm-eval``) runs the same tasks through
lm-eval-harness instead (:func:`evaluate_lm_eval`): task YAMLs in ``benchmarks/lm_eval_tasks``
read the same local JSONL and score with the same graders, for comparability with numbers
published through lm-eval.

Simplifications: one sampling seed per invocation (the k samples of a problem are its
repetitions); no majority vote (maj@k); prompts are not sorted by length before batching.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from benchmarks import metrics as M
from benchmarks.grading import GradeResult, avg_at_k, extract_answer, pass_at_k
from benchmarks.tasks import ArithTask, GraderSet, Task, TaskProblem

__all__ = [
    "ARITH",
    "EvalSettings",
    "avg_at_name",
    "pass_at_name",
    "TaskEval",
    "available_tasks",
    "evaluate_lm_eval",
    "evaluate_model",
    "load_model",
    "load_tokenizer",
    "log_results",
    "main",
    "parse_settings",
    "pass_ks",
]

log = logging.getLogger(__name__)

#: The synthetic task's name (every other task name is a key of ``benchmarks.datasets.DATASETS``).
ARITH = "arith"
#: Default response budget of the real datasets (the ``math`` task config uses the same).
DEFAULT_MAX_NEW_TOKENS = 1024
_ENGINES = ("torch", "vllm", "lm_eval")


def available_tasks() -> list[str]:
    """Every task name ``tasks=[...]`` accepts: ``arith`` and the real datasets."""
    from benchmarks.datasets import DATASETS

    return [ARITH, *sorted(DATASETS)]


def pass_ks(k: int) -> list[int]:
    """The ``j`` of the pass@j metrics logged for ``k`` samples: 1, 2, 4, ... and ``k`` itself.

    >>> pass_ks(16), pass_ks(6)
    ([1, 2, 4, 8, 16], [1, 2, 4, 6])
    """
    if k < 1:
        return []
    return sorted({2**i for i in range(k.bit_length()) if 2**i <= k} | {k})


def avg_at_name(k: int) -> str:
    """Metric leaf of avg@k: ``avg_at_16`` (MLflow allows no ``@`` in metric names)."""
    return f"avg_at_{k}"


def pass_at_name(k: int) -> str:
    """Metric leaf of pass@k: ``pass_at_16``."""
    return f"pass_at_{k}"


# --- settings ----------------------------------------------------------------------------------


def _f(default: Any, help: str) -> Any:  # noqa: A002 - the metadata key every field carries
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help})
    if isinstance(default, type):
        return field(default_factory=default, metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class TrackingSettings:
    """Where the evaluation run is logged."""

    uri: str | None = _f(None, "MLflow store; null: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db")
    experiment: str = _f("sppo-bench-eval", "MLflow experiment of the evaluation run")


@dataclass
class EvalSettings:
    """Every setting of ``sppo-bench eval``; each is a ``key=value`` override on the command line.

    This dataclass is the Hydra schema (registered in Hydra's ConfigStore), so types are checked
    and unknown keys are refused by Hydra, naming the key; :meth:`check` rejects bad values and
    bad combinations, naming the field.
    """

    model: str = _f("???", "HF hub id or local directory holding the model and its tokenizer")
    tasks: list[str] = _f(["math500"], "tasks to evaluate: arith or any dataset name")
    k: int = _f(16, "samples per problem for avg@k and pass@k (0: greedy only)")
    temperature: float = _f(0.6, "sampling temperature of the k samples")
    top_p: float = _f(0.95, "nucleus sampling threshold of the k samples")
    max_new_tokens: int | None = _f(
        None, f"response budget; null: 6*arith_horizon+6 for arith, {DEFAULT_MAX_NEW_TOKENS} else"
    )
    limit: int | None = _f(None, "evaluate only the first N problems of each task")
    data_dir: str | None = _f(
        None, "JSONL directory (layout of shared/data); null: $SPPO_BENCH_DATA"
    )
    template: str = _f("plain", "prompt template: plain, chat, qwen_math_chat (arith ignores it)")
    greedy: bool = _f(True, "also decode greedily and report eval/<task>/accuracy")
    seed: int = _f(0, "sampling seed")
    batch_size: int = _f(64, "sequences generated together")
    engine: str = _f(
        "torch", "torch (own batched KV-cache sampler), vllm (vLLM) or lm_eval (lm-eval-harness)"
    )
    lm_eval_backend: str = _f(
        "hf", "engine=lm_eval: hf (in-memory HF model) or vllm (lm-eval's vLLM)"
    )
    gpu_memory_utilization: float = _f(0.85, "vLLM on a GPU: share of GPU memory it may take")
    device: str = _f("auto", "auto (cuda if available, else cpu), cpu, cuda, cuda:1, ...")
    dtype: str = _f("auto", "auto (bfloat16 on GPU, float32 on CPU), float32, bfloat16, float16")
    arith_horizon: int = _f(2, "operations per arith problem")
    grader_timeout_s: float = _f(3.0, "per-item grading budget (math-verify pool)")
    grader_workers: int = _f(2, "math-verify worker processes")
    samples_logged: int | None = _f(None, "problems per task in the sample table; null: all")
    threads: int | None = _f(None, "torch intra-op threads; null: torch's default")
    tracking: TrackingSettings = _f(TrackingSettings, "MLflow store and experiment")

    def check(self) -> EvalSettings:
        """Raise :class:`algorithms.ConfigError` naming the first bad field; return ``self``."""
        from algorithms import ConfigError

        if self.model in ("", "???"):
            raise ConfigError("model: required, e.g. model=Qwen/Qwen2.5-Math-1.5B or model=<dir>")
        if not self.tasks:
            raise ConfigError(f"tasks: select at least one of {available_tasks()}")
        unknown = [t for t in self.tasks if t not in available_tasks()]
        if unknown:
            raise ConfigError(f"tasks: unknown task {unknown[0]!r}; valid: {available_tasks()}")
        if len(set(self.tasks)) != len(self.tasks):
            raise ConfigError(f"tasks={self.tasks}: a task is listed twice")
        if self.k < 0:
            raise ConfigError(f"k={self.k} must be >= 0")
        if self.k == 0 and not self.greedy:
            raise ConfigError("k=0 with greedy=false evaluates nothing: set k >= 1 or greedy=true")
        if not 0.0 < self.temperature <= 10.0:
            raise ConfigError(
                f"temperature={self.temperature} must be in (0, 10] (greedy decoding is "
                "greedy=true; the k samples need a positive temperature)"
            )
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p={self.top_p} must be in (0, 1]")
        for name in ("max_new_tokens", "limit", "samples_logged", "threads"):
            value = getattr(self, name)
            if value is not None and value < (0 if name == "samples_logged" else 1):
                raise ConfigError(f"{name}={value} must be >= 1 or null")
        for name in ("batch_size", "grader_workers", "arith_horizon"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 1")
        if not self.grader_timeout_s > 0:
            raise ConfigError(f"grader_timeout_s={self.grader_timeout_s} must be > 0")
        if self.engine not in _ENGINES:
            raise ConfigError(f"engine={self.engine!r}: allowed: {list(_ENGINES)}")
        if self.lm_eval_backend not in ("hf", "vllm"):
            raise ConfigError(f"lm_eval_backend={self.lm_eval_backend!r}: allowed: hf, vllm")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError(
                f"gpu_memory_utilization={self.gpu_memory_utilization} must be in (0, 1]"
            )
        if self.engine == "lm_eval":
            from benchmarks.lm_eval_tasks import supported_tasks

            missing = [t for t in self.tasks if t not in supported_tasks()]
            if missing:
                raise ConfigError(
                    f"tasks: {missing[0]!r} has no lm-eval task YAML; with engine=lm_eval use "
                    f"{supported_tasks()}"
                )
        from benchmarks.datasets import PROMPT_TEMPLATES

        if self.template not in PROMPT_TEMPLATES:
            raise ConfigError(f"template={self.template!r}: allowed: {sorted(PROMPT_TEMPLATES)}")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ConfigError(f"dtype={self.dtype!r}: allowed: auto, float32, bfloat16, float16")
        return self

    @property
    def uses_vllm(self) -> bool:
        """Generation runs in vLLM (``engine=vllm``, or lm-eval with its vLLM backend)."""
        return self.engine == "vllm" or (
            self.engine == "lm_eval" and self.lm_eval_backend == "vllm"
        )


_SCHEMA_NAME = "sppo_bench_eval"


def parse_settings(overrides: Sequence[str]) -> EvalSettings:
    """Compose :class:`EvalSettings` from Hydra ``key=value`` overrides and check it.

    ``tasks=math500`` (no brackets) is accepted as ``tasks=[math500]``.

    Raises:
        hydra.errors.HydraException: an unknown key or a malformed override (names the key).
        omegaconf.errors.OmegaConfBaseException: a value of the wrong type (names the key).
        algorithms.ConfigError: a value out of range or a bad combination (names the field).
    """
    from hydra import compose, initialize
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    ConfigStore.instance().store(name=_SCHEMA_NAME, node=EvalSettings)
    fixed = []
    for o in overrides:
        key, sep, value = o.partition("=")
        if sep and key.lstrip("+~") == "tasks" and value and not value.startswith("["):
            o = f"{key}=[{value}]"
        fixed.append(o)
    with initialize(version_base=None, config_path=None):
        cfg = compose(_SCHEMA_NAME, overrides=fixed)
    settings = OmegaConf.to_object(cfg)
    assert isinstance(settings, EvalSettings)
    return settings.check()


def _help() -> str:
    lines = [
        "usage: sppo-bench eval model=<path|HF id> [key=value ...] [--lm-eval]",
        "",
        "  sppo-bench eval model=Qwen/Qwen2.5-Math-1.5B tasks=[math500,aime24] k=16 temperature=0.6",
        "",
        f"tasks: {', '.join(available_tasks())}",
        "",
    ]
    for f in fields(EvalSettings):
        if f.name == "tracking":
            for t in fields(TrackingSettings):
                default = getattr(TrackingSettings(), t.name)
                lines.append(f"  tracking.{t.name}={default}  {t.metadata['help']}")
            continue
        default = getattr(EvalSettings(), f.name)
        lines.append(f"  {f.name}={default}  {f.metadata['help']}")
    lines.append("  --lm-eval  same as engine=lm_eval")
    return "\n".join(lines) + "\n"


# --- tasks -------------------------------------------------------------------------------------


@dataclass
class _EvalTask:
    """A task's held-out problems with its grading and answer extraction (the ``Task.grade`` shape
    :func:`benchmarks.trainer.evaluate_greedy` needs)."""

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


def _build_tasks(
    tasks: Sequence[str | Task],
    *,
    limit: int | None,
    data_dir: str | os.PathLike[str] | None,
    template: str,
    tokenizer: Any,
    max_new_tokens: int | None,
    arith_horizon: int,
    graders: GraderSet,
) -> list[_EvalTask]:
    """Resolve names (or trainer ``Task`` objects) into problems, graders and token budgets.

    Raises ``ValueError`` naming ``tasks`` for an unknown name and ``FileNotFoundError`` (from
    :func:`benchmarks.datasets.load_dataset`) for missing data, before any generation.
    """
    from benchmarks.datasets import DATASETS, load_dataset, render_prompt

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
                    prompt=render_prompt(p, template, tokenizer),
                    answer=p.answer,
                    grader=kind,
                )
                for p in load_dataset(t, data_dir=data_dir, limit=limit)
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


_COLUMNS = ("id", "kind", "sample", "prompt", "answer", "response", "extracted", "verdict")


def _add_rows(
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
            _COLUMNS,
            (p.id, kind, i % per_problem, p.prompt, p.answer, r, extract(r, p), float(s)),
            strict=True,
        ):
            rows[col].append(value)


def _summarise(
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


def _evaluate_task(
    engine: Any,
    et: _EvalTask,
    *,
    k: int,
    temperature: float,
    top_p: float,
    seed: int,
    greedy: bool,
    batch_size: int,
) -> TaskEval:
    from benchmarks.trainer import evaluate_greedy

    t0 = time.perf_counter()
    probs = et.problems
    rows: dict[str, list[Any]] = {c: [] for c in _COLUMNS}
    timeouts = errors = 0
    greedy_scores = None
    if greedy:
        res = evaluate_greedy(engine, et, probs, et.max_new_tokens, batch_size)
        greedy_scores = res.scores
        timeouts, errors = res.timeouts, res.errors
        _add_rows(rows, probs, res.responses, res.scores, "greedy", 1, et.extract_fn)
    matrix = None
    tokens = truncated = math.nan
    if k:
        repeated = [p for p in probs for _ in range(k)]
        ro = engine.generate(
            [p.prompt for p in repeated],
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=et.max_new_tokens,
            seed=seed,
        )
        g = et.grade(ro.texts, repeated)
        timeouts, errors = timeouts + g.timeouts, errors + g.errors
        matrix = [g.scores[i * k : (i + 1) * k] for i in range(len(probs))]  # (n, k)
        lengths = ro.lengths.float()  # (n*k,)
        eos = engine.tokenizer.eos_token_id
        has_eos = ((ro.response_ids == eos) & (ro.response_mask > 0)).any(-1)  # (n*k,)
        tokens = float(lengths.mean())
        truncated = float(((~has_eos) & (lengths >= et.max_new_tokens)).float().mean())
        _add_rows(rows, probs, ro.texts, g.scores, "sample", k, et.extract_fn)
    out = _summarise(et.name, greedy_scores, matrix, k)
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
    model: torch.nn.Module,
    tokenizer: Any,
    tasks: Sequence[str | Task],
    *,
    k: int = 16,
    temperature: float = 0.6,
    top_p: float = 0.95,
    max_new_tokens: int | None = None,
    limit: int | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    template: str = "plain",
    greedy: bool = True,
    seed: int = 0,
    batch_size: int = 64,
    arith_horizon: int = 2,
    grader_timeout_s: float = 3.0,
    grader_workers: int = 2,
    engine: Any | None = None,
) -> dict[str, TaskEval]:
    """Evaluate ``model`` on each task: greedy accuracy, avg@k and pass@j (see the module doc).

    The CLI and the trainer's budget checkpoints call this, so both report the same numbers.

    Args:
        model: An HF causal LM (any device); it is put in eval mode and restored afterwards.
        tokenizer: Its tokenizer; padding must be on the left (the engine's layout).
        tasks: Task names (``arith`` or a dataset name) or trainer ``Task`` objects (evaluated on
            their ``eval_problems()`` with their own grader, named by their ``eval_name``).
        k: Samples per problem (0: greedy only).
        temperature, top_p: Sampling parameters of the k samples.
        max_new_tokens: Response budget; ``None``: ``6 * horizon + 6`` for arith, 1024 otherwise.
        limit: Only the first ``limit`` problems of each task.
        data_dir: JSONL directory; ``None`` falls back to ``$SPPO_BENCH_DATA``.
        template: Prompt template of the real datasets (``benchmarks.datasets.PROMPT_TEMPLATES``).
        greedy: Also decode greedily (``accuracy``).
        seed: Sampling seed (the same seed gives the same samples).
        batch_size: Sequences generated together.
        arith_horizon: Operations per problem of the ``arith`` task named by string.
        grader_timeout_s, grader_workers: Per-item timeout and pool size of math-verify.
        engine: A rollout engine to generate with (e.g. a
            :class:`benchmarks.vllm_engine.VllmEngine`); ``None``: the torch engine on ``model``
            (which may then be ``None`` only if ``engine`` is given).

    Returns:
        ``{task name: TaskEval}`` in the order given.

    Raises:
        ValueError: An unknown task name (names ``tasks``).
        FileNotFoundError: A dataset file is missing (says where it looked and how to point at
            data); raised before any generation.
    """
    from benchmarks.rollout import TorchEngine

    if getattr(tokenizer, "padding_side", "left") != "left":
        raise ValueError("evaluate_model: the tokenizer must pad on the left (padding_side='left')")
    graders = GraderSet(grader_timeout_s, grader_workers)
    try:
        built = _build_tasks(
            tasks,
            limit=limit,
            data_dir=data_dir,
            template=template,
            tokenizer=tokenizer,
            max_new_tokens=max_new_tokens,
            arith_horizon=arith_horizon,
            graders=graders,
        )
        if engine is None:
            engine = TorchEngine(model, tokenizer, batch_size=batch_size)
        was_training = model.training if model is not None else False
        if model is not None:
            model.eval()
        try:
            return {
                et.name: _evaluate_task(
                    engine,
                    et,
                    k=k,
                    temperature=temperature,
                    top_p=top_p,
                    seed=seed,
                    greedy=greedy,
                    batch_size=batch_size,
                )
                for et in built
            }
        finally:
            if model is not None:
                model.train(was_training)
    finally:
        graders.close()


def evaluate_lm_eval(
    model: torch.nn.Module,
    tokenizer: Any,
    tasks: Sequence[str],
    *,
    k: int = 16,
    temperature: float = 0.6,
    top_p: float = 0.95,
    max_new_tokens: int | None = None,
    limit: int | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    template: str = "plain",
    greedy: bool = True,
    seed: int = 0,
    batch_size: int = 64,
    arith_horizon: int = 2,
    grader_timeout_s: float = 3.0,
    grader_workers: int = 2,
    backend: str = "hf",
    model_path: str | None = None,
    vllm_settings: Any = None,
) -> dict[str, TaskEval]:
    """The same evaluation as :func:`evaluate_model`, run by lm-eval-harness on the in-memory model
    (``backend="hf"``) or by lm-eval's vLLM backend on the checkpoint at ``model_path``.

    Thin wrapper over :func:`benchmarks.lm_eval_tasks.run_lm_eval` (lm-eval is an optional
    dependency, imported only here). Greedy responses agree with the torch engine's token for
    token up to floating-point ties; sampled responses come from HF ``generate``'s own random
    stream, so avg@k agrees only statistically.
    """
    from benchmarks.lm_eval_tasks import run_lm_eval

    return run_lm_eval(
        model,
        tokenizer,
        tasks,
        k=k,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        limit=limit,
        data_dir=data_dir,
        template=template,
        greedy=greedy,
        seed=seed,
        batch_size=batch_size,
        arith_horizon=arith_horizon,
        grader_timeout_s=grader_timeout_s,
        grader_workers=grader_workers,
        backend=backend,
        model_path=model_path,
        vllm_settings=vllm_settings,
    )


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


# --- model loading and the CLI ------------------------------------------------------------------


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load_model(name_or_path: str, *, device: str = "auto", dtype: str = "auto") -> tuple[Any, Any]:
    """Load an HF causal LM and its tokenizer (left padding; pad = EOS when it has none).

    ``dtype="auto"`` is bfloat16 on a GPU and float32 on the CPU (where bfloat16 matmuls are
    slow). Raises ``OSError`` when the model cannot be found or downloaded.
    """
    from transformers import AutoModelForCausalLM

    dev = _device(device)
    tok = load_tokenizer(name_or_path)
    torch_dtype = getattr(torch, _dtype(dev, dtype))
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


def _dtype(dev: torch.device, dtype: str) -> str:
    """``auto``: bfloat16 on a GPU, float32 on the CPU."""
    if dtype == "auto":
        return "bfloat16" if dev.type == "cuda" else "float32"
    return dtype


def _vllm_settings(s: EvalSettings) -> Any:
    """vLLM start settings of an evaluation: the same device and dtype rules as the torch route."""
    from benchmarks.vllm_engine import VllmSettings

    dev = _device(s.device)
    return VllmSettings(
        device="cuda" if dev.type == "cuda" else "cpu",
        dtype=_dtype(dev, s.dtype),
        gpu_memory_utilization=s.gpu_memory_utilization,
    )


def _looks_local(name: str) -> bool:
    """A path rather than a hub id: starts like one, or names an existing file or directory."""
    return name.startswith(("/", ".", "~")) or Path(name).exists()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sppo-bench")
    except PackageNotFoundError:
        return "unknown"


def _config_error(e: BaseException) -> str:
    msg = str(e).strip()
    cause = e.__cause__ or e.__context__
    if cause is not None and str(cause) and str(cause) not in msg:
        msg += f"\n{cause}"
    # Hydra's hint to append with `+key=...` does not apply: the schema has every key there is.
    return "\n".join(ln for ln in msg.splitlines() if not ln.startswith("To append to your config"))


def _print_table(results: Mapping[str, TaskEval], settings: EvalSettings, footer: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 120)
    k = settings.k
    table = Table(title=f"sppo-bench eval: {settings.model} ({settings.engine})")
    cols = ["task", "problems", "greedy acc ± s.e."]
    if k:
        cols += [f"avg@{k} ± s.e.", "pass@1", f"pass@{k}", "resp. tokens", "truncated"]
    cols += ["timeouts", "errors", "wall s"]
    for c in cols:
        table.add_column(c, justify="left" if c == "task" else "right")
    for r in results.values():
        row = [
            r.task,
            str(r.n),
            "-" if math.isnan(r.accuracy) else f"{r.accuracy:.3f} ± {r.accuracy_se:.3f}",
        ]
        if k:
            row += [
                f"{r.avg_at_k:.3f} ± {r.avg_at_k_se:.3f}",
                f"{r.pass_at.get(1, math.nan):.3f}",
                f"{r.pass_at.get(k, math.nan):.3f}",
                f"{r.response_tokens:.0f}",
                f"{r.truncated:.2f}",
            ]
        row += [str(r.timeouts), str(r.errors), f"{r.wall_s:.1f}"]
        table.add_row(*row)
    console.print(table)
    console.print(footer)


def main(argv: list[str]) -> int:
    """``sppo-bench eval [key=value ...] [--lm-eval]``: exit 0 on success, 2 on a config error.

    Every setting is checked, and every task's data read, before the model is loaded.
    """
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from algorithms import ConfigError

    argv = list(argv)
    if any(a in ("-h", "--help", "help") for a in argv):
        sys.stdout.write(_help())
        return 0
    overrides = [a for a in argv if a != "--lm-eval"]
    if len(overrides) != len(argv):
        overrides.append("engine=lm_eval")

    def fail(msg: str) -> int:
        sys.stderr.write(f"sppo-bench eval: configuration error: {msg}\n")
        return 2

    try:
        s = parse_settings(overrides)
    except (HydraException, OmegaConfBaseException, ConfigError, ValueError) as e:
        return fail(_config_error(e))
    if s.uses_vllm:
        from benchmarks.vllm_engine import vllm_available

        if not vllm_available():
            return fail(
                f"engine={s.engine}: vllm is not installed; `pip install 'sppo-bench[gpu]'` on a "
                "GPU, `make install-vllm` on a CPU (a second venv: see the README)"
            )
    if s.engine == "lm_eval":
        import importlib.util

        from benchmarks.datasets import DATASETS, resolve_data_dir

        root = resolve_data_dir(s.data_dir)
        for t in s.tasks:
            if t != ARITH and (root is None or not (root / DATASETS[t].path).is_file()):
                return fail(
                    f"data_dir={s.data_dir}: engine=lm_eval reads local JSONL files only and "
                    f"found no {DATASETS[t].path} (set data_dir=DIR or $SPPO_BENCH_DATA)"
                )
        if importlib.util.find_spec("lm_eval") is None:
            return fail(
                "engine=lm_eval: lm-eval is not installed; `pip install 'sppo-bench[eval]'` "
                "(lm-eval==0.4.13 and accelerate; not lm-eval[math], whose antlr4 pin breaks hydra)"
            )
    try:  # read every task's data now: a missing file fails before the model loads
        _build_tasks(
            s.tasks,
            limit=s.limit,
            data_dir=s.data_dir,
            template=s.template,
            tokenizer=None,
            max_new_tokens=s.max_new_tokens,
            arith_horizon=s.arith_horizon,
            graders=GraderSet(s.grader_timeout_s, s.grader_workers),
        )
    except FileNotFoundError as e:
        return fail(f"data_dir={s.data_dir}: {e} (here: data_dir=DIR)")
    except ValueError as e:
        return fail(str(e))
    if _looks_local(s.model) and not Path(s.model).expanduser().exists():
        return fail(f"model={s.model}: no such directory")
    from benchmarks.preflight import PreflightError, check_tracking_uri
    from benchmarks.tracking import default_tracking_uri

    try:
        check_tracking_uri(s.tracking.uri or default_tracking_uri())
    except PreflightError as e:
        sys.stderr.write(f"sppo-bench eval: cannot start: {e}\n")
        return 2
    if s.threads:
        torch.set_num_threads(s.threads)
    name = str(Path(s.model).expanduser()) if _looks_local(s.model) else s.model
    try:
        if s.uses_vllm:  # vLLM loads the weights itself
            model, tok = None, load_tokenizer(name)
        else:
            model, tok = load_model(name, device=s.device, dtype=s.dtype)
    except (OSError, ValueError) as e:
        return fail(f"model={s.model}: cannot load it: {e}")
    return _run(s, model, tok, name)


def _run(s: EvalSettings, model: Any, tok: Any, name: str | None = None) -> int:
    from dataclasses import asdict

    from mlflow.tracking import MlflowClient

    from benchmarks.tracking import (
        MlflowTracker,
        default_tracking_uri,
        flatten,
        git_commit,
        prepare_store,
    )

    uri = s.tracking.uri or default_tracking_uri()
    exp_id = prepare_store(uri, s.tracking.experiment)
    client = MlflowClient(uri)
    resolved = asdict(s)
    tags = {
        M.TAG_ROLE: "eval",
        M.TAG_MODEL: s.model,
        M.TAG_TASK: ",".join(s.tasks),
        M.TAG_ENGINE: s.engine,
        M.TAG_GIT_COMMIT: git_commit(),
        M.TAG_VERSION: _version(),
    }
    run_name = f"eval-{Path(s.model.rstrip('/')).name or s.model}"
    evaluate = evaluate_lm_eval if s.engine == "lm_eval" else evaluate_model
    extra: dict[str, Any] = {}
    if s.uses_vllm:
        path = name or s.model
        if s.engine == "vllm":
            from benchmarks.vllm_engine import VllmEngine

            extra["engine"] = VllmEngine(
                None, tok, settings=_vllm_settings(s), model_path=path, seed=s.seed
            )
        else:
            extra.update(backend="vllm", model_path=path, vllm_settings=_vllm_settings(s))
    with MlflowTracker.start(
        client, exp_id, run_name=run_name, tags=tags, params=flatten(resolved)
    ) as tracker:
        tracker.log_dict(resolved, "eval_config.json")
        results = evaluate(
            model,
            tok,
            list(s.tasks),
            k=s.k,
            temperature=s.temperature,
            top_p=s.top_p,
            max_new_tokens=s.max_new_tokens,
            limit=s.limit,
            data_dir=s.data_dir,
            template=s.template,
            greedy=s.greedy,
            seed=s.seed,
            batch_size=s.batch_size,
            arith_horizon=s.arith_horizon,
            grader_timeout_s=s.grader_timeout_s,
            grader_workers=s.grader_workers,
            **extra,
        )
        log_results(tracker, results, samples_logged=s.samples_logged)
        run_id = tracker.run_id
    _print_table(
        results,
        s,
        f"MLflow:  {uri}  (experiment '{s.tracking.experiment}', run {run_id})\n"
        f"open it: mlflow ui --backend-store-uri {uri}",
    )
    return 0
