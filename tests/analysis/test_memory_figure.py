"""The memory figure and table from the per-component accounting, and old runs' resident set."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pandas as pd
import pytest

from analysis import memory_components_table, memory_table
from analysis import metrics as M
from analysis.plots import plot_memory

MIB = 2.0**20


def _rows(run: str, algo: str, metrics: dict[str, list[float]], **extra: str) -> list[dict]:
    return [
        {"run_id": run, "algorithm": algo, "step": step, "metric": m, "value": v, **extra}
        for m, values in metrics.items()
        for step, v in enumerate(values)
    ]


def _frame() -> pd.DataFrame:
    pol = {
        "memory/policy/params_bytes": [4 * MIB, 4 * MIB],
        "memory/policy/grads_bytes": [0.0, 4 * MIB],  # no grads before the first step
        "memory/policy/optimizer_bytes": [0.0, 8 * MIB],
    }
    rows = []
    rows += _rows(
        "a0",
        "sppo",
        {
            **pol,
            "memory/critic/params_bytes": [4 * MIB] * 2,
            "memory/critic/grads_bytes": [0, 3 * MIB],
            "memory/critic/optimizer_bytes": [0, 6 * MIB],
            M.MEMORY_PEAK_TENSOR_BYTES: [1 * MIB, 1 * MIB],
            M.MEMORY_RSS_PEAK_BYTES: [700 * MIB, 800 * MIB],
        },
    )
    rows += _rows(
        "a1",
        "sppo",
        {
            **pol,
            "memory/critic/params_bytes": [4 * MIB] * 2,
            "memory/critic/grads_bytes": [0, 3 * MIB],
            "memory/critic/optimizer_bytes": [0, 6 * MIB],
            M.MEMORY_PEAK_TENSOR_BYTES: [3 * MIB, 3 * MIB],
        },
    )
    rows += _rows(
        "b0",
        "grpo",
        {
            **pol,
            "memory/reference/params_bytes": [4 * MIB] * 2,
            M.MEMORY_PEAK_TENSOR_BYTES: [5 * MIB, 5 * MIB],
            M.LEGACY_MEMORY_PEAK_BYTES: [400 * MIB],
        },
    )
    return pd.DataFrame(rows)


def test_components_are_per_run_peaks_averaged_over_seeds():
    t = memory_components_table(_frame()).set_index("algorithm")
    assert list(t.index) == ["sppo", "grpo"]
    assert t.loc["sppo", "policy weights"] == 4
    assert t.loc["sppo", "policy grads"] == 4 and t.loc["sppo", "policy Adam"] == 8
    assert t.loc["sppo", "critic weights"] == 4 and t.loc["sppo", "critic grads + Adam"] == 9
    assert t.loc["sppo", "peak activations"] == 2  # mean of 1 and 3 over the seeds
    assert t.loc["sppo", "reference weights"] == 0
    assert t.loc["grpo", "reference weights"] == 4 and t.loc["grpo", "critic weights"] == 0
    assert t.loc["sppo", "total_mib"] == 4 + 4 + 8 + 4 + 9 + 2
    assert t.loc["grpo", "total_mib"] == 4 + 4 + 8 + 4 + 5


def test_a_small_critic_is_its_own_bar():
    df = _frame()
    df["critic_model"] = None
    small = df[df["run_id"] == "a1"].assign(run_id="c0", critic_model="tiny-h64")
    t = memory_components_table(pd.concat([df, small])).set_index("algorithm")
    assert list(t.index) == ["sppo", "sppo (critic tiny-h64)", "grpo"]
    assert t.loc["sppo (critic tiny-h64)", "peak activations"] == 3


def test_a_smaller_critic_is_recognised_from_the_accounting():
    df = _frame()
    small = df[df["run_id"] == "a1"].assign(run_id="c0")
    small.loc[small["metric"] == "memory/critic/params_bytes", "value"] = MIB  # 1/4 of the policy
    t = memory_components_table(pd.concat([df, small])).set_index("algorithm")
    assert list(t.index) == ["sppo", "sppo (critic 0.25x policy)", "grpo"]
    assert t.loc["sppo (critic 0.25x policy)", "critic weights"] == 1
    assert t.loc["sppo", "critic weights"] == 4


def test_old_runs_resident_set_is_still_read():
    m = memory_table(_frame()).set_index("algorithm")
    assert m.loc["sppo", "peak_memory_mib"] == 800  # the mean over seeds of what each logged
    assert m.loc["grpo", "peak_memory_mib"] == 400  # logged as memory/peak_bytes
    assert m.loc["sppo", "normalised"] == 1.0


def test_plot_memory_stacks_the_components_or_falls_back():
    ax = plot_memory(_frame())
    assert [t.get_text() for t in ax.get_xticklabels()] == ["sppo", "grpo"]
    assert "Memory per component" in ax.get_title()
    heights = sum(p.get_height() for p in ax.patches if p.get_x() < 0.5)
    assert heights == pytest.approx(31)
    old = _frame()
    old = old[~old["metric"].isin([m for m in old["metric"].unique() if m.count("/") == 2])]
    old = old[old["metric"] != M.MEMORY_PEAK_TENSOR_BYTES]
    ax = plot_memory(old)
    assert "normalised" in ax.get_title()
