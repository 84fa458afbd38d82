"""The real-model path (``model=hf model.name_or_path=<dir>``, ``task=gsm8k``) on CPU: a smoke test.

A saved tiny model stands in for a hub checkpoint (no network here); the data are the real GSM8K
files. Loading, templating, grading through the real grader, budgets and tracking are the point,
and so is the accuracy: the checkpoint is built to give one fixed answer to every prompt, so its
accuracy before training is known from the data alone (the share of problems whose gold is that
answer), and a task that graded every row 0, or mixed rows up, cannot pass.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from mlflow.tracking import MlflowClient

from analysis import metrics as M
from benchmarks.config import compose_config
from benchmarks.suite.run import run_suite
from benchmarks.tasks.arith import ArithTask
from benchmarks.tasks.datasets import load_dataset
from benchmarks.tasks.grading import Grader
from benchmarks.training.modeling import ModelSpec, build_char_tokenizer, build_tiny_llama
from testkit.paths import needs_data, require_data

EVAL_SIZE = 16


def _answering_model(tok: Any, answer: str) -> Any:
    """A Llama whose greedy (and, by a margin of 32 logits, sampled) reply to any prompt ending
    in ``:`` (every plain-template prompt ends "Answer:") is ``answer`` then EOS.

    It is a bigram model in Llama form: one-hot embeddings, every layer's output projections
    zeroed (the residual stream stays the current token), an untied head mapping each token of
    ``:answer`` to the next one and every other token to EOS.
    """
    from transformers import LlamaForCausalLM

    spec = ModelSpec(hidden_size=64, num_layers=1, intermediate_size=64)
    cfg = build_tiny_llama(spec, len(tok), seed=0).config
    cfg.tie_word_embeddings = False
    model = LlamaForCausalLM(cfg)
    vocab, eos = len(tok), tok.eos_token_id
    assert vocab <= cfg.hidden_size and len(set(answer)) == len(answer)
    chain = tok.convert_tokens_to_ids(list(":" + answer)) + [eos]
    assert tok.unk_token_id not in chain
    with torch.no_grad():
        model.model.embed_tokens.weight.zero_()
        model.model.embed_tokens.weight[:, :vocab] = torch.eye(vocab)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        head = torch.zeros(vocab, cfg.hidden_size)
        head[eos, :vocab] = 1.0
        for cur, nxt in itertools.pairwise(chain):
            head[:, cur] = 0.0
            head[nxt, cur] = 4.0  # x sqrt(hidden)=8 after the final RMSNorm: logit 32 vs 0
        model.lm_head.weight.copy_(head)
    return model


def _table(client: MlflowClient, run_id: str, name: str, dst: Path) -> list[dict]:
    path = client.download_artifacts(run_id, f"eval_samples/{name}.json", str(dst))
    blob = json.loads(Path(path).read_text())
    return [dict(zip(blob["columns"], row, strict=True)) for row in blob["data"]]


@pytest.mark.slow  # an HF checkpoint on GSM8K: ~13 s
@needs_data
def test_hf_checkpoint_on_gsm8k(tmp_path: Path) -> None:
    golds = [p.answer for p in load_dataset("gsm8k", data_dir=require_data(), limit=EVAL_SIZE)]
    # The model's answer: the first gold whose digits differ (a bigram chain cannot repeat one).
    answer = next(g for g in golds if len(set(g)) == len(g))
    expected_start = math.fsum(float(int(g) == int(answer)) for g in golds) / EVAL_SIZE
    assert expected_start > 0.0

    tok = build_char_tokenizer(ArithTask.alphabet + " abcdefghijklmnopqrstuvwxyz.?,:\\{}$\n")
    model = _answering_model(tok, answer)
    ckpt = tmp_path / "ckpt"
    model.save_pretrained(ckpt)
    tok.save_pretrained(ckpt)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = compose_config(
        [
            "model=hf",
            f"model.name_or_path={ckpt}",
            "model.dtype=float32",
            "task=gsm8k",
            f"task.data_dir={require_data()}",
            "task.train_size=64",
            f"task.eval_size={EVAL_SIZE}",
            "task.max_new_tokens=8",
            "algorithm=[sppo,grpo]",
            "seeds=1",
            "trainer.samples_per_step=16",
            "budget.limit=32",
            "budget.eval_fractions=[0.0,1.0]",
            "suite.report=false",
            f"tracking.uri={uri}",
            f"output_dir={tmp_path / 'out'}",
        ]
    )
    result = run_suite(cfg, progress=False)
    assert [r.algorithm for r in result.runs] == ["sppo", "grpo"]
    assert result.warmstart["0"]["steps"] == 0  # real checkpoints skip the warm start
    client = MlflowClient(uri)
    acc_key = M.eval_metric("gsm8k", "accuracy")
    with Grader("integer") as grader:  # our own grading of every logged row
        for r in result.runs:
            assert r.status == "FINISHED", r.error
            assert r.metrics["compute/rollout_samples"] == 32
            # Before training the model answers `answer` everywhere: the accuracy the data give.
            assert r.start_accuracy == expected_start
            history = sorted(client.get_metric_history(r.run_id, acc_key), key=lambda m: m.step)
            assert [h.value for h in history] == [r.start_accuracy, r.final_accuracy]
            for when in ("start", "final"):
                rows = _table(client, r.run_id, f"gsm8k_{when}", tmp_path / r.algorithm / when)
                assert [row["answer"] for row in rows] == golds  # every eval problem is logged
                regraded = grader.grade([row["response"] for row in rows], golds).scores
                assert [row["score"] for row in rows] == regraded
                acc = r.start_accuracy if when == "start" else r.final_accuracy
                assert acc == math.fsum(regraded) / EVAL_SIZE
                if when == "start":
                    assert {row["response"] for row in rows} == {answer}
