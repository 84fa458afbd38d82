"""Numbers published through lm-eval-harness are only comparable with ours when lm-eval scores
the same problems with the same graders: hence sppo task YAMLs here, and a runner that puts our
in-memory model and our request through lm-eval.

Each ``sppo_<dataset>.yaml`` reads the local JSONL (``dataset_path: json``, ``data_files``
relative to the data directory) and scores with sppo-bench's graders through :mod:`.utils`. Use
them from lm-eval's own CLI (run it inside the data directory, or pass absolute ``data_files``)::

    cd "$SPPO_BENCH_DATA" && lm_eval --model hf --model_args pretrained=<model> \\
        --include_path <repo>/benchmarks/evaluation/lm_eval --tasks sppo_math500,sppo_aime24

or through ``sppo-bench eval engine=lm_eval``, which calls :func:`evaluate_lm_eval`: a small
per-run YAML per task includes the checked-in one and sets absolute data paths, the response
budget and (for the k samples) ``repeats: k`` with a ``take_first_k`` filter; the logged samples
become the same :class:`benchmarks.evaluation.evaluate.TaskEval` as the native engine's.

lm-eval is optional (``pip install 'sppo-bench[eval]'``: ``lm-eval==0.4.13`` and ``accelerate``;
never ``lm-eval[math]``, whose antlr4 4.11 pin breaks hydra's 4.9) and imported only inside
:func:`evaluate_lm_eval`.
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

__all__ = ["TASKS_DIR", "lm_eval_task_name", "evaluate_lm_eval", "supported_tasks"]

from benchmarks.evaluation.lm_eval.registry import TASKS_DIR, lm_eval_task_name, supported_tasks

if TYPE_CHECKING:
    from benchmarks.evaluation.evaluate import TaskEval
    from benchmarks.evaluation.settings import EvalRequest

log = logging.getLogger(__name__)


def _write_jsonl(path: Path, rows: Sequence[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def _task_yaml(
    out_dir: Path,
    name: str,
    *,
    base: Path,
    data_file: Path,
    max_new_tokens: int,
    k: int | None,
    temperature: float,
    top_p: float,
) -> None:
    """A per-run task that includes the checked-in ``base`` and overrides data and sampling."""
    import yaml

    cfg: dict[str, Any] = {
        "include": str(base),
        "task": name,
        "dataset_kwargs": {"data_files": {"test": str(data_file)}},
    }
    if k is None:  # greedy
        cfg["generation_kwargs"] = {
            "until": [],
            "do_sample": False,
            "temperature": 0.0,
            "repetition_penalty": 1.0,  # over a checkpoint's generation_config, as natively
            "max_gen_toks": max_new_tokens,
        }
    else:
        from analysis.metrics import avg_at_name, pass_at_name, pass_ks

        cfg["generation_kwargs"] = {
            "until": [],
            "do_sample": True,
            "temperature": temperature,
            "top_p": top_p,
            "top_k": 0,  # HF generate's default top_k=50 would truncate; the native engine has none
            "repetition_penalty": 1.0,
            "max_gen_toks": max_new_tokens,
        }
        cfg["repeats"] = k
        cfg["filter_list"] = [{"name": "all", "filter": [{"function": "take_first_k", "k": k}]}]
        cfg["metric_list"] = [
            {"metric": m, "aggregation": "mean", "higher_is_better": True}
            for m in [avg_at_name(k), *(pass_at_name(j) for j in pass_ks(k))]
        ]
    (out_dir / f"{name}.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")


def evaluate_lm_eval(
    model: Any, tokenizer: Any, tasks: Sequence[str], request: EvalRequest
) -> dict[str, TaskEval]:
    """Evaluate an in-memory HF model through ``lm_eval.simple_evaluate`` on the sppo tasks.

    ``request`` is that of :func:`benchmarks.evaluation.evaluate.evaluate_model`, plus the route:
    ``request.backend="vllm"`` runs lm-eval's own vLLM backend, which loads the checkpoint at
    ``request.model_path`` itself (``model`` is then unused and may be ``None``), started as
    ``request.vllm_settings`` says. The result has the same shape as ``evaluate_model``'s
    (``{task: TaskEval}``), its ``reported`` field holding lm-eval's own aggregates. The problems
    (and their order) are those of ``evaluate_model``: lm-eval's ``limit`` also keeps the first N
    rows, and ``arith`` problems are written to a JSONL first.

    Raises:
        ValueError: A task without a YAML here (names ``tasks``), or ``backend="vllm"`` without
            ``model_path``.
        FileNotFoundError: A dataset file is missing.
    """
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from benchmarks.evaluation import evaluate as E
    from benchmarks.evaluation.settings import ARITH
    from benchmarks.tasks.dataset_task import GraderSet
    from benchmarks.tasks.datasets import DATASETS, PROMPT_TEMPLATES, resolve_data_dir

    from . import utils

    unsupported = [t for t in tasks if t not in supported_tasks()]
    if unsupported:
        raise ValueError(
            f"tasks: {unsupported[0]!r} has no lm-eval task YAML; with engine=lm_eval use one of "
            f"{supported_tasks()}"
        )
    tpl = PROMPT_TEMPLATES[request.template]
    chat = tpl.kind == "chat"
    built = E.build_tasks(  # same problems, prompts and budgets as the native engine
        list(tasks),
        request,
        tokenizer=tokenizer,
        graders=GraderSet(request.grader_timeout_s, request.grader_workers),
    )
    root = resolve_data_dir(request.data_dir)
    utils.configure(
        template=request.template,
        timeout_s=request.grader_timeout_s,
        workers=request.grader_workers,
    )
    utils.reset()
    longest = max(
        len(tokenizer(p.prompt, add_special_tokens=False)["input_ids"])
        for et in built
        for p in et.problems
    )
    budget = max(et.max_new_tokens for et in built)
    if request.backend == "vllm":
        from benchmarks.engines.vllm_engine import lm_eval_vllm

        if request.model_path is None:
            raise ValueError("evaluate_lm_eval: backend='vllm' needs model_path (lm-eval loads it)")
        lm = lm_eval_vllm(
            request.model_path,
            settings=request.vllm_settings,
            batch_size=request.batch_size,
            seed=request.seed,
        )
    else:  # "hf" (the request admits no other)
        lm = HFLM(
            pretrained=model,
            tokenizer=tokenizer,
            batch_size=request.batch_size,
            # Room for the longest prompt: lm-eval would otherwise cut prompts from the left to
            # the model's context (the native engine never does).
            max_length=longest + budget + 16,
            add_bos_token=False,  # the native engine encodes prompts without special tokens
        )
    out: dict[str, TaskEval] = {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sppo_lm_eval_") as tmp:
        tmp_dir = Path(tmp)
        names: list[str] = []
        for et in built:
            base = TASKS_DIR / f"{lm_eval_task_name(et.name)}.yaml"
            if et.name == ARITH:
                data_file = tmp_dir / "arith" / "test.jsonl"
                _write_jsonl(
                    data_file,
                    [{"id": p.id, "problem": p.prompt, "answer": p.answer} for p in et.problems],
                )
            else:
                data_file = (root / DATASETS[et.name].path) if root is not None else None
                if data_file is None or not data_file.is_file():
                    raise FileNotFoundError(
                        f"data_dir={request.data_dir}: engine=lm_eval reads local JSONL files only; "
                        f"no {DATASETS[et.name].path} there (set data_dir or $SPPO_BENCH_DATA)"
                    )
                data_file = data_file.resolve()
            variants = ([None] if request.greedy else []) + ([request.k] if request.k else [])
            for kk in variants:
                name = lm_eval_task_name(et.name) + ("" if kk is None else f"_k{kk}")
                _task_yaml(
                    tmp_dir,
                    name,
                    base=base,
                    data_file=data_file,
                    max_new_tokens=et.max_new_tokens,
                    k=kk,
                    temperature=request.temperature,
                    top_p=request.top_p,
                )
                names.append(name)
        try:
            res = lm_eval.simple_evaluate(
                model=lm,
                tasks=names,
                task_manager=TaskManager(include_path=str(tmp_dir), include_defaults=False),
                limit=request.limit,
                log_samples=True,
                bootstrap_iters=0,
                apply_chat_template=chat,
                system_instruction=tpl.system if chat else None,
                random_seed=request.seed,
                numpy_random_seed=request.seed,
                torch_random_seed=request.seed,
                fewshot_random_seed=request.seed,
            )
        finally:
            utils.close_graders()
    wall = time.perf_counter() - t0
    assert res is not None
    for et in built:
        out[et.name] = _to_task_eval(et, res, request.k, request.greedy, tokenizer, utils)
        out[et.name].wall_s = wall / len(built)  # lm-eval runs every task in one pass
    return out


def _to_task_eval(et: Any, res: dict, k: int, greedy: bool, tokenizer: Any, utils: Any) -> TaskEval:
    """Per-sample rows and summary numbers (sppo-bench's formulas) from lm-eval's sample log."""
    import dataclasses

    from benchmarks.evaluation import evaluate as E

    by_id = {p.id: p for p in et.problems}
    rows: dict[str, list[Any]] = {c: [] for c in E.SAMPLE_COLUMNS}
    reported: dict[str, float] = {}
    greedy_scores: list[float] | None = None
    matrix: list[list[float]] | None = None
    lengths: list[int] = []

    def samples(name: str) -> list[dict]:
        reported.update(
            {
                f"{name}/{m.split(',')[0]}": float(v)
                for m, v in res["results"][name].items()
                if "," in m and not m.split(",")[0].endswith("_stderr") and _num(v)
            }
        )
        return sorted(res["samples"][name], key=lambda s: s["doc_id"])

    def scored(doc: dict, responses: list[str]) -> list[float]:
        pid, answer = str(doc.get("id", "")), str(doc["answer"])
        verdicts = [utils.verdict(pid, answer, r) for r in responses]
        return [0.0 if v is None else v for v in verdicts]

    def problem(s: dict) -> Any:
        """Our problem, with the prompt lm-eval actually sent (chat-templated when asked)."""
        return dataclasses.replace(by_id[str(s["doc"]["id"])], prompt=str(s["arguments"][0][0]))

    base = lm_eval_task_name(et.name)
    if greedy:
        greedy_scores = []
        for s in samples(base):
            resp = _flat(s["filtered_resps"])[0]
            sc = scored(s["doc"], [resp])
            greedy_scores += sc
            E.add_rows(rows, [problem(s)], [resp], sc, "greedy", 1, et.extract_fn)
    if k:
        matrix = []
        for s in samples(f"{base}_k{k}"):
            resps = _flat(s["filtered_resps"])
            sc = scored(s["doc"], resps)
            matrix.append(sc)
            lengths += [len(tokenizer(r, add_special_tokens=False)["input_ids"]) for r in resps]
            E.add_rows(rows, [problem(s)], resps, sc, "sample", len(resps), et.extract_fn)
    out = E.summarise(et.name, greedy_scores, matrix, k)
    out.rows, out.engine, out.reported = rows, "lm_eval", reported
    out.max_new_tokens = et.max_new_tokens
    for p in et.problems:
        t, e = utils.grader_counts(p.id, p.answer)
        out.timeouts, out.errors = out.timeouts + t, out.errors + e
    if lengths:
        out.response_tokens = sum(lengths) / len(lengths)
        out.truncated = sum(n >= et.max_new_tokens for n in lengths) / len(lengths)
    return out


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not (isinstance(v, float) and math.isnan(v))


def _flat(resps: Any) -> list[str]:
    """lm-eval's ``filtered_resps`` as a flat list of strings (it nests one level per request)."""
    out: list[str] = []
    for r in resps if isinstance(resps, list | tuple) else [resps]:
        out += _flat(r) if isinstance(r, list | tuple) else [str(r)]
    return out
