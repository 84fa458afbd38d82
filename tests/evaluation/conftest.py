"""The evaluation tests' model: a tiny Llama warm-started on arith, built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmarks.tasks.arith import ArithTask


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A tiny Llama SFT'd on arith for 100 steps, saved with its tokenizer; returns its directory.

    Session-scoped and cached by config hash under the session's base temp dir, so
    test_eval.py and test_lm_eval.py share it.
    """
    from benchmarks.training.modeling import ModelSpec, build_char_tokenizer, build_tiny_llama
    from benchmarks.training.warmstart import warm_start

    task = ArithTask(horizon=2)
    tok = build_char_tokenizer(ArithTask.alphabet)
    spec = ModelSpec(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128)
    cfg = {
        "phases": [{"steps": 100, "direct_fraction": 0.0}],
        "batch_size": 32,
        "lr": 3e-3,
        "eval_every": 10**6,
        "val_size": 16,
        "stop_accuracy": None,
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is several times faster on a busy box
    try:
        _, info = warm_start(
            task=task,
            build_model=lambda: build_tiny_llama(spec, len(tok), seed=0),
            tokenizer=tok,
            cfg=cfg,
            identity={"test": "eval", "spec": spec.__dict__},
            seed=0,
            cache_dir=tmp_path_factory.getbasetemp() / "sppo_eval_cache",
            max_new_tokens=18,
        )
    finally:
        torch.set_num_threads(threads)
    return Path(info["path"])
