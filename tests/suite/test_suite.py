"""The default suite end to end at a micro budget, on a real temporary MLflow store.

Every accuracy the suite logs is checked against a number computed here another way: greedy
decoding written out in this file (a full forward per token, no KV cache, no padding, none of the
engines' code) on the cached warm start and on a replay of one run's training, the arith answer
rule applied to each logged response, and avg@k / pass@k recomputed from the logged sample rows.
"""

from __future__ import annotations

import copy
import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import torch
from mlflow.tracking import MlflowClient

from analysis import metrics as M
from testkit.tolerances import fp_tol


def _children(result):
    client = MlflowClient(result.tracking_uri)
    exp = client.get_experiment_by_name(result.experiment)
    runs = client.search_runs(
        [exp.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{result.parent_run_id}'"
    )
    return client, runs


def _history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def _table(client: MlflowClient, run_id: str, path: str, dst: Path) -> list[dict[str, Any]]:
    """A ``log_table`` artifact as rows, parsed here from MLflow's JSON layout."""
    blob = json.loads(Path(client.download_artifacts(run_id, path, str(dst))).read_text())
    return [dict(zip(blob["columns"], row, strict=True)) for row in blob["data"]]


def _arith_verdict(response: str, answer: str) -> float:
    """The arith rule, written out: the digits after the response's last ``#`` are the answer."""
    if "#" not in response:
        return 0.0
    tail = response[response.rindex("#") + 1 :].strip()
    return 1.0 if tail.isdigit() and tail == answer else 0.0


@torch.no_grad()
def _greedy(model: torch.nn.Module, tok: Any, prompts: list[str], max_new: int) -> list[Any]:
    """Greedy decoding without the engines: the whole unpadded sequence through the model at
    every step, prompts of one length batched. Returns per prompt (text, gap, scale): gap is the
    smallest top-1 minus top-2 logit met before its EOS (a row whose gap is within rounding of
    zero may decode differently on another fp32 path, no other row may), scale the largest
    |logit| of its batch."""
    model.eval()
    eos = tok.eos_token_id
    enc = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    by_len: dict[int, list[int]] = {}
    for i, ids in enumerate(enc):
        by_len.setdefault(len(ids), []).append(i)
    out: list[Any] = [None] * len(prompts)
    for rows in by_len.values():
        ids = torch.tensor([enc[i] for i in rows])
        done = torch.zeros(len(rows), dtype=torch.bool)
        gaps = torch.full((len(rows),), math.inf, dtype=torch.float64)
        scale = 0.0
        for _ in range(max_new):
            logits = model(input_ids=ids).logits[:, -1].double()  # (B, V)
            top = logits.topk(2, dim=-1).values
            gaps = torch.where(done, gaps, torch.minimum(gaps, top[:, 0] - top[:, 1]))
            scale = max(scale, logits.abs().max().item())
            nxt = logits.argmax(-1)
            ids = torch.cat([ids, nxt[:, None]], dim=1)
            done = done | (nxt == eos)
            if bool(done.all()):
                break
        for j, i in enumerate(rows):
            new = ids[j, len(enc[i]) :].tolist()
            new = new[: new.index(eos)] if eos in new else new
            out[i] = (tok.decode(new, skip_special_tokens=True), gaps[j].item(), scale)
    return out


def _gap_tol(model: torch.nn.Module, scale: float) -> float:
    """How far rounding can move a top-1 minus top-2 logit gap between two fp32 forward paths
    (the engines' static-cache decoder and the full forward above): each logit by at most
    fp_tol of the widest reduction (the MLP width) at the logits' magnitude, the gap by twice
    that: ~7e-4 for the warm start (|logits| <= 6), whose smallest gap over the 200 problems
    is 3e-3 here."""
    cfg = model.config
    return 2 * fp_tol(max(cfg.hidden_size, cfg.intermediate_size), scale=scale)


def _check_greedy_accuracy(
    model: torch.nn.Module, tok: Any, problems: list[Any], max_new: int, logged: float
) -> list[Any]:
    """``logged`` is the greedy accuracy of ``model`` on ``problems``: exactly, unless some
    rows' argmax is a near tie, each of which may flip one verdict on another fp32 path."""
    n = len(problems)
    decoded = _greedy(model, tok, [p.prompt for p in problems], max_new)
    right = sum(
        _arith_verdict(text, p.answer) for (text, _, _), p in zip(decoded, problems, strict=True)
    )
    ties = sum(gap <= _gap_tol(model, scale) for _, gap, scale in decoded)
    if ties == 0:
        assert logged == right / n, (logged, right, n)
    else:
        assert abs(round(logged * n) - right) <= ties, (logged, right, n, ties)
    return decoded


def test_four_child_runs_finish(micro_suite):
    result, _ = micro_suite
    client, runs = _children(result)
    assert sorted(r.data.tags[M.TAG_ALGORITHM] for r in runs) == ["dapo", "grpo", "ppo", "sppo"]
    assert all(r.info.status == "FINISHED" for r in runs)
    parent = client.get_run(result.parent_run_id)
    assert parent.data.tags[M.TAG_ROLE] == "suite"
    for r in runs:
        assert r.data.tags[M.TAG_ROLE] == "run"
        assert r.data.tags[M.TAG_BUDGET_KIND] == "samples"
        assert r.data.params["budget.limit"] == "256"
        assert r.data.params["algorithm.name"] == r.data.tags[M.TAG_ALGORITHM]


def test_evals_at_the_same_budget_fractions(micro_suite):
    result, cfg = micro_suite
    client, runs = _children(result)
    acc = M.eval_metric("arith", "accuracy")
    fractions = {}
    starts = {}
    for r in runs:
        hist = sorted(
            client.get_metric_history(r.info.run_id, M.EVAL_BUDGET_FRACTION), key=lambda m: m.step
        )
        fractions[r.data.tags[M.TAG_ALGORITHM]] = [m.value for m in hist]
        accs = sorted(client.get_metric_history(r.info.run_id, acc), key=lambda m: m.step)
        assert [m.step for m in accs] == [m.step for m in hist]
        starts[r.data.tags[M.TAG_ALGORITHM]] = accs[0].value
        # The binomial standard error of the accuracy logged at the same step, over eval_size.
        se = _history(client, r.info.run_id, M.eval_metric("arith", "accuracy_se"))
        n = cfg.task.eval_size
        assert se == [(m.step, math.sqrt(m.value * (1 - m.value) / n)) for m in accs]
    assert all(v == list(cfg.budget.eval_fractions) for v in fractions.values()), fractions
    # Same warm start, same greedy decoding: every algorithm starts at the same accuracy.
    assert len(set(starts.values())) == 1, starts


def _timing(key: str) -> bool:
    """Wall time and memory (the resident set, and the profiled tensor peak, seen to differ by a
    few hundred bytes between identical runs): the metrics that differ between two runs of the
    same numbers."""
    return key.startswith(
        (M.COMPUTE_WALL_S, M.MEMORY_PEAK_BYTES, M.MEMORY_PEAK_TENSOR_BYTES)
    ) or key.endswith("/wall_s")


def _start_model(cfg: Any) -> tuple[Any, torch.nn.Module, Any]:
    """The suite's plan, its seed-0 warm start read back from the suite's cache, the tokenizer."""
    from benchmarks.suite.plan import validate
    from benchmarks.tasks.arith import ArithTask
    from benchmarks.training.modeling import build_char_tokenizer
    from benchmarks.training.start import policy_start

    plan = validate(cfg)
    tok = build_char_tokenizer(ArithTask.alphabet)
    start, info = policy_start(plan.start_recipe, plan.start_seed(0), plan.task, tok)
    assert info["cached"], info  # the suite's own warm start, not a new one
    return plan, start, tok


def test_logged_accuracies_are_the_greedy_accuracies_of_the_start(
    micro_suite, tmp_path, one_thread
):
    """Every run's first evaluation is the warm start's greedy accuracy, decoded here; every
    logged sample row is an eval problem in order, with its own verdict; the run summaries are
    the histories' first and last points."""
    result, cfg = micro_suite
    client, runs = _children(result)
    plan, start, tok = _start_model(cfg)
    probs = list(plan.task.eval_problems())
    assert len(probs) == cfg.task.eval_size
    max_new = plan.task_config.max_new_tokens
    acc = M.eval_metric("arith", "accuracy")
    first = {r.data.tags[M.TAG_ALGORITHM]: _history(client, r.info.run_id, acc)[0] for r in runs}
    step, logged = first["sppo"]
    assert step == 0 and set(first.values()) == {(0, logged)}
    decoded = _check_greedy_accuracy(start, tok, probs, max_new, logged)

    summaries = {s.algorithm: s for s in result.runs}
    shown = cfg.trainer.eval_samples_logged
    for r in runs:
        algo = r.data.tags[M.TAG_ALGORITHM]
        hist = _history(client, r.info.run_id, acc)
        assert (summaries[algo].start_accuracy, summaries[algo].final_accuracy) == (
            hist[0][1],
            hist[-1][1],
        )
        for when in ("start", "final"):
            rows = _table(client, r.info.run_id, f"eval_samples/arith_{when}.json", tmp_path / algo)
            assert [(x["prompt"], x["answer"]) for x in rows] == [
                (p.prompt, p.answer) for p in probs[:shown]
            ], (algo, when)
            for x in rows:  # each logged verdict is the rule applied to its logged response
                assert x["score"] == _arith_verdict(x["response"], x["answer"]), (algo, when, x)
            if when == "start":  # the warm start's responses, as decoded here
                for x, (text, gap, scale) in zip(rows, decoded, strict=False):
                    assert x["response"] == text or gap <= _gap_tol(start, scale), (algo, x, text)


def test_final_accuracy_is_the_trained_policys_greedy_accuracy(micro_suite, one_thread):
    """Replay the sppo run's training in this process (no MLflow, no checkpointer): every
    deterministic number it computes is what the suite logged, and the final evaluation logged
    is the greedy accuracy of the replayed policy, decoded here."""
    from benchmarks.engines.factory import make_engine_factory
    from benchmarks.telemetry.tracking import NullTracker
    from benchmarks.training.trainer import RLTrainer

    result, cfg = micro_suite
    plan, start, tok = _start_model(cfg)
    name, seed = "sppo", 0
    alg = plan.algorithms[name]
    tracker = NullTracker()
    trainer = RLTrainer(
        algorithm=alg,
        policy=copy.deepcopy(start),
        tokenizer=tok,
        task=plan.task,
        engine_factory=make_engine_factory(tok, seed=seed),
        budget=plan.budget,
        config=plan.trainer[name],
        seed=seed,
        prompt_seed=seed,
        tracker=tracker,
        reference=copy.deepcopy(start).eval().requires_grad_(False) if alg.uses_reference else None,
        critic_base=start,
    )
    trainer.train()

    client, runs = _children(result)
    (run,) = [r for r in runs if r.data.tags[M.TAG_ALGORITHM] == name]
    replayed: dict[str, list[tuple[int, float]]] = {}
    for step, metrics in tracker.history:
        for key, value in metrics.items():
            replayed.setdefault(key, []).append((step, value))
    deterministic = sorted(k for k in run.data.metrics if not _timing(k))
    assert deterministic == sorted(k for k in replayed if not _timing(k))
    for key in deterministic:  # same machine, same seeds: bit for bit
        assert _history(client, run.info.run_id, key) == sorted(replayed[key]), key
    final = _history(client, run.info.run_id, M.eval_metric("arith", "accuracy"))[-1][1]
    probs = list(plan.task.eval_problems())
    _check_greedy_accuracy(trainer.policy, tok, probs, plan.trainer[name].max_new_tokens, final)


def test_compute_counters_monotone_and_within_budget(micro_suite):
    result, cfg = micro_suite
    client, runs = _children(result)
    for r in runs:
        for key in (
            M.COMPUTE_ROLLOUT_SAMPLES,
            M.COMPUTE_ROLLOUT_TOKENS,
            M.COMPUTE_FLOPS,
            M.COMPUTE_PROMPTS,
        ):
            hist = sorted(
                client.get_metric_history(r.info.run_id, key), key=lambda m: (m.step, m.timestamp)
            )
            values = [m.value for m in hist]
            assert values == sorted(values), (r.data.tags[M.TAG_ALGORITHM], key)
        samples = max(
            m.value for m in client.get_metric_history(r.info.run_id, M.COMPUTE_ROLLOUT_SAMPLES)
        )
        assert samples <= cfg.budget.limit
        # Samples per step divide the limit, so every algorithm spends all of it.
        assert samples == cfg.budget.limit


def test_each_metric_is_logged_once_per_step(micro_suite):
    """Two values at one step draw a vertical jump in MLflow's charts: every (key, step) once."""
    result, _ = micro_suite
    client, runs = _children(result)
    for r in runs:
        keys = [k for k in r.data.metrics if k.startswith(("compute/", "eval/", "train/"))]
        assert M.COMPUTE_FLOPS in keys and M.wall_phase("eval") in keys
        for key in keys:
            steps = [m.step for m in client.get_metric_history(r.info.run_id, key)]
            assert len(steps) == len(set(steps)), (r.data.tags[M.TAG_ALGORITHM], key, steps)


def test_table_artifacts_and_plot(micro_suite):
    result, _ = micro_suite
    client, runs = _children(result)
    for r in runs:
        names = {a.path for a in client.list_artifacts(r.info.run_id, "eval_samples")}
        assert names == {"eval_samples/arith_start.json", "eval_samples/arith_final.json"}
        # Artifacts live beside the database, not in the working directory.
        db = Path(result.tracking_uri.removeprefix("sqlite:///"))
        assert r.info.artifact_uri.startswith((db.parent / "mlartifacts").as_uri())
    assert result.plot is not None and result.plot.exists() and result.plot.stat().st_size > 10_000
    parent_files = {a.path for a in client.list_artifacts(result.parent_run_id)}
    assert "config.yaml" in parent_files and "figures" in parent_files


@pytest.mark.slow  # a micro suite with sampled evals: ~40 s
def test_sampled_eval_at_checkpoints(tmp_path):
    """``trainer.eval_k`` adds avg@k / pass@k at budget checkpoints through `sppo-bench eval`'s code."""
    from benchmarks.config import compose_config
    from benchmarks.suite.plan import validate
    from benchmarks.suite.run import run_suite
    from testkit.suites import MICRO

    cfg = compose_config(
        [
            *MICRO,
            "algorithm=[grpo]",
            "trainer.eval_k=4",
            "trainer.eval_k_every_checkpoint=true",
            "trainer.eval_k_problems=20",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
            f"cache_dir={tmp_path / 'cache'}",
            f"output_dir={tmp_path / 'out'}",
        ]
    )
    result = run_suite(cfg, progress=False)
    run = result.runs[0]
    assert run.status == "FINISHED", run.error
    client = MlflowClient(result.tracking_uri)
    avg = client.get_metric_history(run.run_id, "eval/arith/avg_at_4")
    pass_k = client.get_metric_history(run.run_id, "eval/arith/pass_at_4")
    assert len(avg) == len(cfg.budget.eval_fractions) == len(pass_k)
    fraction_at = dict(_history(client, run.run_id, M.EVAL_BUDGET_FRACTION))
    problems = list(validate(cfg).task.eval_problems())
    k, n = 4, 20
    for step, _ in _history(client, run.run_id, "eval/arith/avg_at_4"):
        f = fraction_at[step]
        tag = "final" if f >= 1.0 else f"f{f:g}"
        rows = _table(client, run.run_id, f"eval_samples_k/{tag}/arith.json", tmp_path / tag)
        assert all(x["kind"] == "sample" for x in rows)
        assert [(x["id"], x["prompt"], x["answer"]) for x in rows[::k]] == [
            (p.id, p.prompt, p.answer) for p in problems[:n]
        ]
        per: dict[str, list[float]] = {}
        for x in rows:  # each logged verdict is the rule applied to its logged response
            v = _arith_verdict(x["response"], x["answer"])
            assert x["verdict"] == v, x
            per.setdefault(x["id"], []).append(v)
        assert len(per) == n and all(len(v) == k for v in per.values())
        # avg@k: problems weigh equally; pass@j: the unbiased 1 - C(k - c, j) / C(k, j), here
        # with exact fractions. Float64 rounding of a mean of n terms each rounded within ~k
        # ulps separates them from the harness's floats.
        tol = fp_tol(n + k, dtype=torch.float64)
        want = {"avg_at_4": Fraction(sum(map(sum, per.values()))) / (n * k)}
        for j in (1, 2, 4):
            want[f"pass_at_{j}"] = (
                sum(
                    1 - Fraction(math.comb(k - int(sum(v)), j), math.comb(k, j))
                    for v in per.values()
                )
                / n
            )
        for leaf, value in want.items():
            got = dict(_history(client, run.run_id, f"eval/arith/{leaf}"))[step]
            assert got == pytest.approx(float(value), abs=tol, rel=0), (tag, leaf)
