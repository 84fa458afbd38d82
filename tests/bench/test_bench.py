"""`sppo-bench bench --quick`: every section is measured side by side and every ratio is a finite,
positive number (a smoke test of the harness, not a measurement)."""

from __future__ import annotations

import csv
import json
import math

import pytest

from benchmarks.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.slow  # the quick bench in full: ~1 min
def test_quick_bench_writes_a_complete_table(tmp_path, capsys):
    out = tmp_path / "bench"
    assert main(["bench", "--quick", "--repeats", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for title in (
        "bench: ceiling",
        "bench: rollout",
        "bench: step",
        "bench: warmstart",
        "bench: tracking",
        "targets",
    ):
        assert title in printed
    result = json.loads((tmp_path / "bench.json").read_text())
    rows = {(r["section"], r["name"], r["metric"]): r for r in result["rows"]}
    assert {r["section"] for r in result["rows"]} == {
        "ceiling",
        "rollout",
        "ratio",
        "step",
        "warmstart",
        "tracking",
        "memory",
    }
    for r in result["rows"]:
        assert r["n"] >= 1 and r["min"] <= r["median"] <= r["max"], r
    for name in ("sppo-bench", "sppo-bench bf16", "trl", "trl (no ckpt)"):
        for metric in ("samples/s", "step s", "utilisation", "phase rollout"):
            assert rows[("step", name, metric)]["median"] > 0
    ratios = [r for r in result["rows"] if r["section"] == "ratio"]
    # rollout (engine and its GEMM-only bound vs HF, bf16 vs fp32) at two batch sizes, step vs
    # TRL (2 ways), the share of the step its matmuls alone take, bf16 vs fp32 of the step and
    # of the warm-start step
    assert len(ratios) == 11
    for p in ("fp32", "bf16"):
        assert rows[("warmstart", f"warm-start step {p}", "step s")]["median"] > 0
    assert 0 < rows[("ratio", "step time in its matmuls", "of step")]["median"] < 1
    matmuls = rows[("step", "sppo-bench matmuls only", "utilisation")]["median"]
    assert matmuls > rows[("step", "sppo-bench", "utilisation")]["median"]
    # the replay holds the backward's matmuls too: about 3x the forward's, as the analytic count
    assert 0.5 < result["meta"]["step_matmul_flops"] / result["meta"]["step_analytic_flops"] < 2
    for r in ratios + [t for t in result["rows"] if t["section"] == "memory"]:
        assert math.isfinite(r["median"]) and r["median"] > 0, r
    assert {t["target"] for t in result["targets"]} == {
        "step_vs_trl_shipped",
        "step_vs_trl_no_ckpt",
        "step_flop_utilisation",
        "rollout_vs_hf_large",
        "step_bf16_vs_fp32",
        "warmstart_bf16_vs_fp32",
        "tracking_overhead",
    }
    for t in result["targets"]:
        assert math.isfinite(t["value"]) and t["value"] >= 0, t
    meta = result["meta"]
    assert meta["ceiling_gflops_fp32"] > 0 and len(meta["loadavg_start"]) == 3
    with (tmp_path / "bench.csv").open() as f:
        assert len(list(csv.DictReader(f))) == len(result["rows"])
