"""The real-model path (``model=hf model.name_or_path=<dir>``, ``task=gsm8k``) on CPU: a smoke test.

A saved tiny model stands in for a hub checkpoint (no network here); the data are the real GSM8K
files. Accuracy is not the point: loading, templating, grading through the real grader, budgets
and tracking are.
"""

from __future__ import annotations

from benchmarks.config import compose_config
from benchmarks.suite.run import run_suite
from benchmarks.tasks.arith import ArithTask
from benchmarks.training.modeling import ModelSpec, build_char_tokenizer, build_tiny_llama
from testkit.paths import DATA_DIR


def test_hf_checkpoint_on_gsm8k(tmp_path):
    tok = build_char_tokenizer(ArithTask.alphabet + " abcdefghijklmnopqrstuvwxyz.?,:\\{}$\n")
    model = build_tiny_llama(
        ModelSpec(hidden_size=32, num_layers=1, intermediate_size=64), len(tok), seed=0
    )
    ckpt = tmp_path / "ckpt"
    model.save_pretrained(ckpt)
    tok.save_pretrained(ckpt)
    cfg = compose_config(
        [
            "model=hf",
            f"model.name_or_path={ckpt}",
            "model.dtype=float32",
            "task=gsm8k",
            f"task.data_dir={DATA_DIR}",
            "task.train_size=64",
            "task.eval_size=16",
            "task.max_new_tokens=8",
            "algorithm=[sppo,grpo]",
            "seeds=1",
            "trainer.samples_per_step=16",
            "budget.limit=32",
            "budget.eval_fractions=[0.0,1.0]",
            "suite.report=false",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
            f"output_dir={tmp_path / 'out'}",
        ]
    )
    result = run_suite(cfg, progress=False)
    assert [r.algorithm for r in result.runs] == ["sppo", "grpo"]
    for r in result.runs:
        assert r.status == "FINISHED", r.error
        assert r.metrics["compute/rollout_samples"] == 32
        assert 0.0 <= r.final_accuracy <= 1.0
    assert result.warmstart["0"]["steps"] == 0  # real checkpoints skip the warm start
