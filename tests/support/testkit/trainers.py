"""Tiny models and trainers that several test folders build the same way."""

from __future__ import annotations

import copy
from typing import Any

from algorithms import Algorithm, get_algorithm
from benchmarks.engines.torch_engine import TorchEngine
from benchmarks.tasks.arith import ArithTask
from benchmarks.tasks.base import TaskProblem
from benchmarks.tasks.grading import GradeResult
from benchmarks.telemetry.meter import Budget, FlopModel
from benchmarks.telemetry.tracking import NullTracker
from benchmarks.training.config import TrainerConfig
from benchmarks.training.modeling import ModelSpec
from benchmarks.training.trainer import RLTrainer

#: One layer: the trainer tests build many trainers.
SPEC = ModelSpec(
    hidden_size=32, num_layers=1, num_heads=4, intermediate_size=64, max_position_embeddings=64
)
#: Two layers: the engine tests need the cache and masks to cross a layer boundary.
ROLLOUT_SPEC = ModelSpec(
    hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position_embeddings=64
)
#: `arith` prompts of different lengths, so every batch is left-padded.
PROMPTS = ["7=", "1+2=", "3*4-5=", "9-9*9+1=", "4+4=", "0*1*2*3*4="]
SPS = 16  # samples per step
MAX_NEW = 10
#: Overrides that make every registered algorithm fit 16 samples per step and update the actor
#: within a few steps.
OVERRIDES: dict[str, dict[str, Any]] = {
    "sppo": {},
    "ppo": {"critic_warmup_steps": 1},
    "ppo_inert_critic": {"critic_warmup_steps": 1},
    "grpo": {},
    "dapo": {"group_size": 4},
    "rloo": {"group_size": 4},
    "remax": {},
}


class FirstDigitTask(ArithTask):
    """`arith` prompts with a dense reward (1 when the response starts with a digit), so an
    untrained model gets reward variance and every algorithm's update path runs."""

    def grade(self, responses: list[str], problems: list[TaskProblem]) -> GradeResult:
        assert len(responses) == len(problems)
        return GradeResult([1.0 if r[:1].isdigit() else 0.0 for r in responses])


def make_trainer(
    alg: Algorithm | str,
    start: Any,
    tok: Any,
    task: Any,
    budget: Budget,
    *,
    seed: int = 0,
    tracker: Any = None,
    checkpointer: Any = None,
    precision: str = "fp32",
    **cfg: Any,
) -> RLTrainer:
    """Build an RLTrainer the way ``benchmarks.suite.run_one`` does."""
    if isinstance(alg, str):
        alg = get_algorithm(alg, **OVERRIDES.get(alg, {}))
    reference = copy.deepcopy(start).eval().requires_grad_(False) if alg.uses_reference else None
    return RLTrainer(
        algorithm=alg,
        policy=copy.deepcopy(start),
        tokenizer=tok,
        task=task,
        engine_factory=lambda m: TorchEngine(m, tok, precision=precision),
        budget=budget,
        config=TrainerConfig(
            **{"samples_per_step": SPS, "max_new_tokens": MAX_NEW, "eval_samples_logged": 4, **cfg}
        ),
        seed=seed,
        prompt_seed=seed,
        tracker=tracker if tracker is not None else NullTracker(),
        reference=reference,
        critic_base=start,
        checkpointer=checkpointer,
        precision=precision,
    )


class EngineSpy:
    """The trainer's engine, unchanged, keeping each call's keyword arguments and rollout."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, []

    def generate(self, prompts: list[str], **kw: Any) -> Any:
        ro = self.inner.generate(prompts, **kw)
        self.calls.append((kw, ro))
        return ro

    def sync_weights(self) -> None:
        self.inner.sync_weights()


def teacher_forced_flops(fm: FlopModel, ro: Any, *, head: bool = True) -> int:
    """One teacher-forced forward over every row: prompt plus response, head on the response
    (the analytic FLOP model, recomputed from the rollout alone)."""
    plens = ro.prompt_mask.sum(-1).tolist()
    return sum(
        fm.forward(p + r, 0, logits=r, head=head)
        for p, r in zip(plens, ro.lengths.tolist(), strict=True)
    )


def rollout_logprobs(model: Any, ro: Any, temperature: float, **kwargs: Any) -> Any:
    """The teacher-forced log-probs of a recorded rollout's responses under ``model``, without
    gradients (``with_entropy=True`` adds the entropies): what a test recomputes to check the
    numbers a step reported from the same forward."""
    import torch

    from benchmarks.engines.teacher_forced import bucketed_logprobs

    with torch.no_grad():
        return bucketed_logprobs(
            model,
            ro.prompt_ids,
            ro.prompt_mask,
            ro.response_ids,
            ro.response_mask,
            temperature,
            **kwargs,
        )
