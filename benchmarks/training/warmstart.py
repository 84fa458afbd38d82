"""Supervised warm start of the tiny model, cached by config hash and shared by every algorithm.

On a randomly initialised model RL has nothing to improve, so each (task, model, seed) config gets
one SFT run on the task's demonstrations; every algorithm of every suite with that config starts
from the same saved weights (``benchmarks/training/start.py`` builds each start model from it). A
fixed step count ends it by default, not an accuracy threshold: a threshold stop fires while the
model still fails at the per-step skill, and RL then has no signal to work with.
``stop_accuracy`` keeps the threshold available.

The step count scales with the task's longest reasoning chain (a phase's ``per_chain_step``): a
16-step chain needs far more demonstrations than a 2-step one before the model can carry it out,
and a warm start that stops short leaves the long horizons at zero, with no headroom for RL to
show anything. ``steps: 200, per_chain_step: 25`` by default is where chain-only SFT on `arith`
carries a horizon-8 chain (docs/testbeds.md)."""

from __future__ import annotations

import hashlib
import json
import logging
import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

from benchmarks.engines.rollout import encode_prompts
from benchmarks.engines.teacher_forced import bucketed_logprobs
from benchmarks.engines.torch_engine import TorchEngine
from benchmarks.tasks.base import CharTask
from benchmarks.training.precision import autocast

log = logging.getLogger(__name__)

__all__ = ["WARMSTART_VERSION", "config_hash", "longest_chain", "parse_phases", "warm_start"]

#: Bump when the warm-start procedure changes, so old caches are not reused.
WARMSTART_VERSION = 4


def config_hash(parts: Mapping[str, Any]) -> str:
    blob = json.dumps({"v": WARMSTART_VERSION, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def parse_phases(phases: Any, chain: int = 0) -> list[tuple[int, float]]:
    """``warmstart.phases`` as ``[(steps, direct_fraction), ...]``, where a phase's steps are
    ``steps + per_chain_step * chain`` (``chain``: the task's longest reasoning chain). A
    ValueError names the bad entry. The suite calls it before any compute, and the warm start
    itself before training."""
    parsed = []
    for i, ph in enumerate(phases or []):
        keys = set(ph) if isinstance(ph, Mapping) else set()
        if (
            not {"steps", "direct_fraction"}
            <= keys
            <= {"steps", "direct_fraction", "per_chain_step"}
            or int(ph["steps"]) < 0
            or int(ph.get("per_chain_step", 0)) < 0
            or not 0.0 <= float(ph["direct_fraction"]) <= 1.0
        ):
            raise ValueError(
                f"warmstart.phases[{i}]={ph}: need {{steps: int >= 0, direct_fraction: [0, 1]}} "
                "and optionally per_chain_step: int >= 0 (extra steps per reasoning step of the "
                "task's longest chain)"
            )
        steps = int(ph["steps"]) + int(ph.get("per_chain_step", 0)) * chain
        parsed.append((steps, float(ph["direct_fraction"])))
    if not parsed:
        raise ValueError("warmstart.phases is empty: need at least one {steps, direct_fraction}")
    return parsed


def longest_chain(task: CharTask, sample: int = 2000) -> int:
    """Reasoning steps in the task's longest worked demonstration (``a+b=c;`` is one step) among
    its first ``sample`` training problems: `arith`'s longest horizon, `chain_sum`'s terms - 1,
    0 for a task whose demonstrations are bare answers."""
    rng = random.Random(0)
    problems = list(task.train_problems())[:sample]
    return max((task.sft_target(p, rng, 0.0).count(";") for p in problems), default=0)


def _sft(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    task: CharTask,
    cfg: Mapping[str, Any],
    seed: int,
    max_new_tokens: int,
    precision: str = "fp32",
) -> dict:
    from benchmarks.evaluation.evaluate import evaluate_greedy

    rng = random.Random(seed)
    torch.manual_seed(seed)
    train = list(task.train_problems())
    val = rng.sample(train, min(int(cfg["val_size"]), len(train)))
    opt = torch.optim.AdamW(model.parameters(), lr=float(cfg["lr"]))
    engine = TorchEngine(model, tokenizer, precision=precision)
    stop = cfg.get("stop_accuracy")
    acc = float("nan")
    phases = parse_phases(cfg["phases"], longest_chain(task))
    log.info("warm start: %s (steps, direct_fraction) per phase", phases)
    facts = task.facts()
    n_facts = round(int(cfg["batch_size"]) * float(cfg.get("facts_fraction", 0.0)))
    schedule = [d for n, d in phases for _ in range(n)]
    total = len(schedule)
    step = 0
    model.train()
    for step, direct in enumerate(schedule, start=1):
        batch = rng.sample(train, int(cfg["batch_size"]) - n_facts)
        extra = rng.sample(facts, n_facts)
        targets = [task.sft_target(p, rng, direct) + tokenizer.eos_token for p in batch]
        targets += [task.sft_target(p, rng, 0.0) + tokenizer.eos_token for p in extra]  # stated
        batch += extra
        pid, pm = encode_prompts(tokenizer, [p.prompt for p in batch])
        enc = tokenizer(
            targets,
            return_tensors="pt",
            padding=True,
            padding_side="right",
            add_special_tokens=False,
        )
        rid, rm = enc["input_ids"], enc["attention_mask"].float()
        # Rows grouped by length: a batch mixing 1- and 16-step chains would otherwise pay for
        # its longest one in every row (the loss is the same function of the weights).
        with autocast(precision):  # the log-probs come back in fp32, and so the loss
            lp, _ = bucketed_logprobs(model, pid, pm, rid, rm, buckets=4, min_rows=16)
        loss = -(lp * rm).sum() / rm.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % int(cfg["eval_every"]) == 0 or step == total:
            acc = evaluate_greedy(engine, task, val, max_new_tokens).accuracy
            log.info(
                "warm start step %d: loss %.3f, validation greedy accuracy %.3f",
                step,
                loss.item(),
                acc,
            )
            last_phase = step > total - phases[-1][0]
            if stop is not None and last_phase and acc >= float(stop):
                break
    model.eval()
    return {"steps": step, "val_accuracy": acc}


def warm_start(
    *,
    task: CharTask,
    build_model: Callable[[], PreTrainedModel],  # a fresh, randomly initialised model
    tokenizer: PreTrainedTokenizerBase,
    cfg: Mapping[str, Any],
    identity: Mapping[str, Any],
    seed: int,
    cache_dir: str | Path,
    max_new_tokens: int,
    precision: str = "fp32",
) -> tuple[PreTrainedModel, dict[str, Any]]:
    """Load the cached warm start for ``identity`` (task + model + warm-start config + seed +
    resolved ``precision``, named in the key only when not fp32), or train and cache it.
    Returns ``(model, info)``; info has steps, val_accuracy, path, cached."""
    from transformers import AutoModelForCausalLM

    parts = {"identity": identity, "warmstart": dict(cfg), "seed": seed}
    if precision != "fp32":
        parts["precision"] = precision
    key = config_hash(parts)
    path = Path(cache_dir).expanduser() / "warmstart" / key
    meta = path / "warmstart.json"
    if meta.exists():
        info = json.loads(meta.read_text())
        model = AutoModelForCausalLM.from_pretrained(path)
        model.eval()
        log.info("warm start: reusing %s (validation accuracy %.3f)", path, info["val_accuracy"])
        return model, {**info, "path": str(path), "cached": True}
    model = build_model()
    info = _sft(model, tokenizer, task, cfg, seed, max_new_tokens, precision)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    tmp = meta.with_suffix(".tmp")
    tmp.write_text(
        json.dumps({**info, "identity": dict(identity), "precision": precision}, default=str)
    )
    tmp.replace(meta)  # written last: a killed warm start is never mistaken for a finished one
    return model, {**info, "path": str(path), "cached": False}
