"""Supervised warm start of the tiny model, cached by config hash and shared by every algorithm.

On a randomly initialised model RL has nothing to improve, so each (task, model, seed) config gets
one SFT run on the task's demonstrations; every algorithm of every suite with that config starts
from the same saved weights (``benchmarks/training/start.py`` builds each start model from it). A
fixed step count ends it by default, not an accuracy threshold: a threshold stop fires while the
model still fails at the per-step skill, and RL then has no signal to work with.
``stop_accuracy`` keeps the threshold available.

``target`` ends the chain phase (the first phase) on the skill instead of a step count: it runs
until greedy accuracy on a held-out slice of the training problems (``val_size`` of them, never
trained on) reaches ``target.accuracy``, checked every ``target.every`` steps, for at least the
phase's own steps and at most ``target.max_steps``; the phases after it (the bare-answer mix)
follow as fixed steps. Which step the chain is learnt at depends on the seed and on the CPU's
floating-point path, so a fixed count is either long for most seeds or short for some. Two
settings help a slow seed get there. ``curriculum_steps``: the chain phase's longest
demonstrated chain rises from the task's shortest to its longest over that many steps, so the
model learns one step before it has to carry many. ``warmup_steps``: the learning rate rises
linearly from 0 over that many steps. They were measured together, not apart
(docs/testbeds.md). Without ``target`` neither applies and the procedure is the fixed-step one.

The step count scales with the task's longest reasoning chain (a phase's ``per_chain_step``): a
16-step chain needs far more demonstrations than a 2-step one before the model can carry it out,
and a warm start that stops short leaves the long horizons at zero, with no headroom for RL to
show anything. ``steps: 200, per_chain_step: 25`` by default is where chain-only SFT on `arith`
carries a horizon-8 chain (docs/testbeds.md)."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

from benchmarks.engines.rollout import encode_prompts
from benchmarks.engines.teacher_forced import bucketed_logprobs
from benchmarks.engines.torch_engine import TorchEngine
from benchmarks.tasks.base import CharTask, TaskProblem
from benchmarks.training.precision import autocast

log = logging.getLogger(__name__)

__all__ = [
    "TARGET_FORM",
    "WARMSTART_VERSION",
    "cache_key",
    "config_hash",
    "longest_chain",
    "parse_phases",
    "parse_target",
    "warm_start",
]

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


#: ``warmstart.target``'s keys: (kind, the check, what it allows).
_TARGET_KEYS = {
    "accuracy": (float, lambda v: 0.0 < v <= 1.0, "a number in (0, 1]"),
    "every": (int, lambda v: v >= 1, "an integer >= 1"),
    "max_steps": (int, lambda v: v >= 1, "an integer >= 1"),
}
#: ``warmstart.target`` as a user gives it whole, for messages: each key and what it allows.
TARGET_FORM = (
    "{" + ", ".join(f"{key}: {allowed}" for key, (_, _, allowed) in _TARGET_KEYS.items()) + "}"
)
#: The target-only settings of ``warmstart`` (integers >= 0; 0 turns each off).
_TARGET_EXTRAS = ("curriculum_steps", "warmup_steps")


def parse_target(cfg: Mapping[str, Any]) -> dict[str, Any] | None:
    """``warmstart.target`` as ``{accuracy, every, max_steps}``, or None when it is null or
    absent (the fixed-step warm start), after checking it and ``curriculum_steps`` and
    ``warmup_steps``. A ValueError names the bad field and what it allows. The suite calls it
    before any compute, and the warm start itself before training."""
    target = cfg.get("target")
    for key in _TARGET_EXTRAS:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"warmstart.{key}={value!r}: allowed: an integer >= 0")
        if value and target is None:
            raise ValueError(
                f"warmstart.{key}={value}: applies only with warmstart.target set "
                "({accuracy, every, max_steps}); set it to 0 or null without one"
            )
    if target is None:
        return None
    if not isinstance(target, Mapping) or set(target) != set(_TARGET_KEYS):
        raise ValueError(
            f"warmstart.target={target!r}: allowed: null, or a mapping with exactly the keys "
            f"{sorted(_TARGET_KEYS)}: {TARGET_FORM}"
        )
    parsed: dict[str, Any] = {}
    for key, (kind, ok, allowed) in _TARGET_KEYS.items():
        value = target[key]
        good = not isinstance(value, bool) and (
            isinstance(value, int) or (kind is float and isinstance(value, float))
        )
        if not good or not ok(kind(value)):
            raise ValueError(f"warmstart.target.{key}={value!r}: allowed: {allowed}")
        parsed[key] = kind(value)
    return parsed


def longest_chain(task: CharTask, sample: int = 2000) -> int:
    """Reasoning steps in the task's longest worked demonstration (``a+b=c;`` is one step) among
    its first ``sample`` training problems: `arith`'s longest horizon, `chain_sum`'s terms - 1,
    0 for a task whose demonstrations are bare answers."""
    rng = random.Random(0)
    problems = list(task.train_problems())[:sample]
    return max((task.sft_target(p, rng, 0.0).count(";") for p in problems), default=0)


def _chain_lengths(task: CharTask, problems: list[TaskProblem]) -> list[int]:
    """Reasoning steps in each problem's worked demonstration (``;``-separated, as
    :func:`longest_chain` counts them); its own random draws, so the training stream is
    untouched."""
    rng = random.Random(0)
    return [task.sft_target(p, rng, 0.0).count(";") for p in problems]


class _Curriculum:
    """The chain phase's training problems, shortest chains first: at step ``t`` of
    ``steps`` the pool holds the problems whose chain is at most
    ``lo + ceil((hi - lo) * t / steps)`` long (``lo``, ``hi``: the task's shortest and longest
    chains), every problem from step ``steps`` on. A pool too small for a batch takes the next
    length's problems too."""

    def __init__(self, task: CharTask, problems: list[TaskProblem], steps: int, batch: int) -> None:
        lengths = _chain_lengths(task, problems)
        self.lo, self.hi = min(lengths), max(lengths)
        self.steps = steps
        self.pools: dict[int, list[TaskProblem]] = {}
        for n in range(self.hi, self.lo - 1, -1):
            pool = [p for p, k in zip(problems, lengths, strict=True) if k <= n]
            self.pools[n] = pool if len(pool) >= batch or n == self.hi else self.pools[n + 1]

    def longest(self, step: int) -> int:
        if self.steps <= 0 or step >= self.steps:
            return self.hi
        return self.lo + math.ceil((self.hi - self.lo) * step / self.steps)

    def pool(self, step: int) -> list[TaskProblem]:
        return self.pools[self.longest(step)]


def _step(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    task: CharTask,
    opt: torch.optim.Optimizer,
    rng: random.Random,
    pool: list[TaskProblem],
    facts: list[TaskProblem],
    n_facts: int,
    batch_size: int,
    direct: float,
    precision: str,
) -> float:
    """One SFT step on ``batch_size`` problems drawn from ``pool`` (``n_facts`` of them stated
    facts), each demonstrated bare with probability ``direct``; the loss."""
    batch = rng.sample(pool, batch_size - n_facts)
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
    with autocast(precision):
        lp, _ = bucketed_logprobs(model, pid, pm, rid, rm, buckets=4, min_rows=16)
    loss = -(lp.float() * rm).sum() / rm.sum()  # in fp32 whatever the forward ran in
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


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

    started = time.perf_counter()
    validating = 0.0
    rng = random.Random(seed)
    torch.manual_seed(seed)
    train = list(task.train_problems())
    val = rng.sample(train, min(int(cfg["val_size"]), len(train)))
    target = parse_target(cfg)
    if target is not None:  # the slice the target is checked on is never trained on
        held = {id(p) for p in val}
        train = [p for p in train if id(p) not in held]
    opt = torch.optim.AdamW(model.parameters(), lr=float(cfg["lr"]))
    warmup = int(cfg.get("warmup_steps") or 0)
    sched = (
        torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / warmup))
        if warmup
        else None
    )
    engine = TorchEngine(model, tokenizer, precision=precision)  # validation samples in it too
    phases = parse_phases(cfg["phases"], longest_chain(task))
    log.info("warm start: %s (steps, direct_fraction) per phase", phases)
    facts = task.facts()
    batch_size = int(cfg["batch_size"])
    n_facts = round(batch_size * float(cfg.get("facts_fraction", 0.0)))

    def train_step(pool: list[TaskProblem], direct: float) -> float:
        loss = _step(
            model, tokenizer, task, opt, rng, pool, facts, n_facts, batch_size, direct, precision
        )
        if sched is not None:
            sched.step()
        return loss

    def validate(step: int, loss: float) -> float:
        nonlocal validating
        t0 = time.perf_counter()
        acc = evaluate_greedy(engine, task, val, max_new_tokens).accuracy
        validating += time.perf_counter() - t0
        log.info("warm start step %d: loss %.3f, validation greedy accuracy %.3f", step, loss, acc)
        return acc

    model.train()
    info: dict[str, Any] = {}
    if target is None:
        stop = cfg.get("stop_accuracy")
        acc = float("nan")
        schedule = [d for n, d in phases for _ in range(n)]
        total = len(schedule)
        step = 0
        for step, direct in enumerate(schedule, start=1):
            loss = train_step(train, direct)
            if step % int(cfg["eval_every"]) == 0 or step == total:
                acc = validate(step, loss)
                last_phase = step > total - phases[-1][0]
                if stop is not None and last_phase and acc >= float(stop):
                    break
    else:
        chain, reached, acc = _chain_phase(
            task, train, cfg, target, phases[0], train_step, validate
        )
        step = chain
        loss = float("nan")
        for n, direct in phases[1:]:
            for _ in range(n):
                step += 1
                loss = train_step(train, direct)
        if step > chain:
            acc = validate(step, loss)
        info = {
            "chain_steps": chain,
            "target_step": reached,
            "seconds": time.perf_counter() - started,
            "validation_seconds": validating,
        }
    model.eval()
    return {"steps": step, "val_accuracy": acc, **info}


def _chain_phase(
    task: CharTask,
    train: list[TaskProblem],
    cfg: Mapping[str, Any],
    target: Mapping[str, Any],
    phase: tuple[int, float],
    train_step: Callable[[list[TaskProblem], float], float],
    validate: Callable[[int, float], float],
) -> tuple[int, int | None, float]:
    """The first phase run to ``target``: ``(steps, the step the target was reached at or
    None, the last validation accuracy)``. It checks the target every ``target.every`` steps
    once the curriculum holds every chain length and the phase's own steps are done, and
    stops at ``target.max_steps`` (or the phase's steps, if more) whatever it reached."""
    steps, direct = phase
    cap = max(int(target["max_steps"]), steps)
    curriculum = _Curriculum(
        task, train, int(cfg.get("curriculum_steps") or 0), int(cfg["batch_size"])
    )
    acc = float("nan")
    for step in range(1, cap + 1):
        loss = train_step(curriculum.pool(step - 1), direct)
        due = (
            step % int(target["every"]) == 0
            and step >= steps
            and curriculum.longest(step) == curriculum.hi
        )
        if due or step == cap:
            acc = validate(step, loss)
            if acc >= float(target["accuracy"]):
                return step, step, acc
        elif step % int(target["every"]) == 0:
            log.info(
                "warm start step %d: loss %.3f, chains up to %d steps",
                step,
                loss,
                curriculum.longest(step),
            )
    log.warning(
        "warm start: the chain phase ended at its cap of %d steps with validation accuracy "
        "%.3f, short of the target %.3f",
        cap,
        acc,
        target["accuracy"],
    )
    return cap, None, acc


def cache_key(
    *, identity: Mapping[str, Any], cfg: Mapping[str, Any], seed: int, precision: str = "fp32"
) -> str:
    """The cache key of the warm start :func:`warm_start` trains for these arguments (its folder
    is ``<cache_dir>/warmstart/<key>``): a hash of the identity, the warm-start settings, the
    seed and the precision. The target's settings are named only when set, and the precision
    only when it is not fp32, so every fixed-step fp32 start keeps its key."""
    ws = {k: v for k, v in cfg.items() if v or k not in ("target", *_TARGET_EXTRAS)}
    parts: dict[str, Any] = {"identity": identity, "warmstart": ws, "seed": seed}
    if precision != "fp32":
        parts["precision"] = precision
    return config_hash(parts)


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
    ``precision``, resolved: ``fp32`` or ``bf16``), or train and cache it. Returns
    ``(model, info)``; info has steps, val_accuracy, path, cached and, with ``warmstart.target``,
    chain_steps, target_step (None: not reached), seconds and validation_seconds. The precision
    is named in the key only when it is not fp32, so every fp32 start keeps its key."""
    from transformers import AutoModelForCausalLM

    key = cache_key(identity=identity, cfg=cfg, seed=seed, precision=precision)
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
