"""How hard the held-out prompts are for a start model: each prompt's success rate over ``k``
samples at the training temperature.

A testbed separates algorithms only where the start policy sometimes succeeds and sometimes
fails: a prompt it always solves (or never does) gives every outcome-reward method the same zero
signal, and a prompt critic has nothing to predict when every prompt is equally hard. So the
suite measures, for each seed's start, the share of prompts with a success rate in [0.1, 0.9],
the spread of those rates, and the mean per difficulty group (horizon), and logs them
(``start/...``) beside the runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.engines.torch_engine import TorchEngine
from benchmarks.tasks.base import Task

__all__ = ["MID_BAND", "measure_difficulty", "summarise_rates"]

#: Success rates in this closed band count as "learnable": neither always right nor always wrong.
MID_BAND = (0.1, 0.9)
#: Seed of the sampling draws (fixed, so every seed's start is measured on the same draws).
_SEED = 515_151


def summarise_rates(
    rates: Sequence[float], groups: Mapping[str, Sequence[int]] | None = None
) -> dict[str, Any]:
    """Mean, standard deviation, the share in :data:`MID_BAND`, the shares solved never and
    always, and the mean per group."""
    t = torch.tensor(list(rates), dtype=torch.float64)
    lo, hi = MID_BAND
    out: dict[str, Any] = {
        "prompts": len(rates),
        "mean": float(t.mean()),
        "std": float(t.std(unbiased=False)),
        "mid_fraction": float(((t >= lo) & (t <= hi)).double().mean()),
        "never_fraction": float((t == 0).double().mean()),
        "always_fraction": float((t == 1).double().mean()),
        "groups": {},
    }
    for name, idx in (groups or {}).items():
        kept = [i for i in idx if i < len(rates)]
        if kept:
            out["groups"][name] = float(t[kept].mean())
    return out


@torch.no_grad()
def measure_difficulty(
    model: torch.nn.Module,
    tokenizer: Any,
    task: Task,
    *,
    prompts: int,
    samples: int,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    cache: Path | None = None,
) -> dict[str, Any]:
    """Per-prompt success rates of ``model`` on the first ``prompts`` held-out problems, with
    their summary. Cached in ``cache`` (a JSON file beside the warm start) by its settings, so
    the runs of one seed measure it once. Leaves torch's global random state as it found it."""
    settings = {
        "prompts": prompts,
        "samples": samples,
        "temperature": temperature,
        "top_p": top_p,
        "max_new_tokens": max_new_tokens,
        "seed": _SEED,
    }
    if cache is not None and cache.exists():
        stored = json.loads(cache.read_text())
        if stored.get("settings") == settings:
            return stored
    probs = list(task.eval_problems()[:prompts])
    with torch.random.fork_rng(devices=[]):
        ro = TorchEngine(model, tokenizer).generate(
            [p.prompt for p in probs for _ in range(samples)],
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_new_tokens,
            seed=_SEED,
        )
    scores = task.grade(ro.texts, [p for p in probs for _ in range(samples)]).scores
    rates = [sum(scores[i * samples : (i + 1) * samples]) / samples for i in range(len(probs))]
    groups = task.eval_groups() if hasattr(task, "eval_groups") else {}
    out = {
        "settings": settings,
        "rates": rates,
        "summary": summarise_rates(rates, groups),
    }
    if cache is not None:
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(json.dumps(out))
        tmp.replace(cache)
    return out
