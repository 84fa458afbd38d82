"""The start's difficulty: per-prompt success rates recomputed independently, the summary's
shares, the cache, and torch's global random state left untouched."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.evaluation.difficulty import measure_difficulty, summarise_rates
from benchmarks.tasks.arith import ArithTask
from benchmarks.training.modeling import build_tiny_llama
from testkit.trainers import SPEC

pytestmark = pytest.mark.usefixtures("one_thread")


def test_summary_counts_the_bands_and_groups():
    rates = [0.0, 0.0, 0.125, 0.5, 0.875, 1.0, 1.0, 0.1]
    s = summarise_rates(rates, {"a": [0, 1, 2, 3], "b": [4, 5, 6, 7], "empty": []})
    assert s["prompts"] == 8
    assert s["mid_fraction"] == 4 / 8  # 0.125, 0.5, 0.875 and 0.1 (the band is closed)
    assert s["never_fraction"] == 2 / 8 and s["always_fraction"] == 2 / 8
    assert s["mean"] == pytest.approx(sum(rates) / 8, abs=1e-15)
    assert s["groups"] == {
        "a": pytest.approx(0.625 / 4, abs=1e-15),
        "b": pytest.approx(2.975 / 4, abs=1e-15),
    }


def test_rates_equal_an_independent_count_and_are_cached(tok, tmp_path):
    task = ArithTask(horizon=[1, 2], eval_size=6)
    model = build_tiny_llama(SPEC, len(tok), seed=0).eval()
    before = torch.random.get_rng_state()
    kwargs = dict(prompts=10, samples=4, temperature=1.0, top_p=1.0, max_new_tokens=12)
    out = measure_difficulty(model, tok, task, cache=tmp_path / "d.json", **kwargs)
    assert torch.equal(torch.random.get_rng_state(), before)
    # Independently: the same draws (engine seed) graded one by one.
    from benchmarks.engines.torch_engine import TorchEngine

    probs = list(task.eval_problems()[:10])
    ro = TorchEngine(model, tok).generate(
        [p.prompt for p in probs for _ in range(4)],
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=12,
        seed=out["settings"]["seed"],
    )
    hits = [
        ArithTask.extract(t) == p.answer
        for t, p in zip(ro.texts, [p for p in probs for _ in range(4)], strict=True)
    ]
    assert out["rates"] == [sum(hits[4 * i : 4 * i + 4]) / 4 for i in range(10)]
    assert set(out["summary"]["groups"]) == {"arith_h1", "arith_h2"}
    # Cached by its settings: a second call reads the file, other settings measure again.
    (tmp_path / "d.json").write_text(json.dumps(out | {"rates": [9.0] * 10}))
    assert (
        measure_difficulty(model, tok, task, cache=tmp_path / "d.json", **kwargs)["rates"]
        == [9.0] * 10
    )
    other = measure_difficulty(
        model, tok, task, cache=tmp_path / "d.json", **{**kwargs, "samples": 2}
    )
    assert other["settings"]["samples"] == 2 and len(other["rates"]) == 10
