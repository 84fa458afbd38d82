"""``RLTrainer.state_dict`` / ``load_state_dict``: a trainer saved at step k and loaded into a
fresh one continues exactly as the uninterrupted trainer does, and a checkpoint file written in
the layout of the code before the trainer had a state dict still loads.

(tests/suite/test_reliability.py and tests/suite/test_faults.py kill and resume whole suites through the CLI.)
"""

from __future__ import annotations

import dataclasses
import io
import random

import numpy as np
import pytest
import torch

from algorithms import get_algorithm
from analysis import metrics as M
from benchmarks.telemetry.meter import Budget
from benchmarks.telemetry.tracking import NullTracker
from benchmarks.training.checkpoint import Checkpointer
from benchmarks.training.trainer import RLTrainer
from testkit.trainers import SPS, FirstDigitTask, make_trainer

pytestmark = pytest.mark.usefixtures("one_thread")

SAVE_AT = 1  # the step the state is saved at
#: Each exercises another part of the state: a prompt critic (sppo), a token critic, several
#: mini-batches and the old-log-prob pass (ppo), the reference (grpo), dynamic-sampling refills
#: (dapo), the greedy baseline (remax).
ALGORITHMS = {
    "sppo": ({}, {}),
    "ppo": ({"critic_warmup_steps": 1}, {"mini_batches": 2}),
    "grpo": ({}, {}),
    "dapo": ({"group_size": 4}, {}),
    "remax": ({}, {}),
}
#: The checkpoint's ``trainer`` keys before the trainer had a state dict: they must not change.
LAYOUT = {
    "policy",
    "optimizer",
    "critic",
    "critic_optimizer",
    "reference_fingerprint",
    "rng",
    "stream",
    "meter",
    "step",
    "skipped",
    "consecutive_skips",
    "eval_idx",
    "step_cost",
    "evals",
}


@pytest.fixture(scope="module")
def task():
    return FirstDigitTask(horizon=1, eval_size=16)


def make(name, start, tok, task, *, tracker=None, checkpointer=None, precision="fp32"):
    params, cfg = ALGORITHMS[name]
    return make_trainer(
        get_algorithm(name, **params),
        start,
        tok,
        task,
        Budget(kind="samples", limit=6 * SPS, eval_fractions=(0.0, 0.5, 1.0)),
        seed=3,
        tracker=tracker,
        checkpointer=checkpointer,
        precision=precision,
        **cfg,
    )


def deterministic(history, after: int = -1):
    return [
        (step, {k: v for k, v in m.items() if not k.startswith(("compute/wall_s", "memory/"))})
        for step, m in history
        if step > after
    ]


class SaveAt:
    """A checkpointer that serialises ``write(trainer)`` at one step (as torch.save would to a
    file) and never restores; ``trainer`` is set once the trainer is built."""

    def __init__(self, step: int, write) -> None:
        self.step, self.write, self.data, self.trainer = step, write, None, None

    def resume(self):
        return None

    def after_step(self, name, step, state_dict) -> None:
        if step == self.step:
            buf = io.BytesIO()
            torch.save(self.write(self.trainer), buf)
            self.data = buf.getvalue()

    def read(self):
        return torch.load(io.BytesIO(self.data), map_location="cpu", weights_only=True)


def uninterrupted(name, start, tok, task, write, precision="fp32"):
    tracker, saver = NullTracker(), SaveAt(SAVE_AT, write)
    trainer = make(name, start, tok, task, tracker=tracker, checkpointer=saver, precision=precision)
    saver.trainer = trainer
    trainer.train()
    assert trainer.step >= SAVE_AT + 2 and saver.data is not None
    return trainer, deterministic(tracker.history, after=SAVE_AT), saver


def _scramble_global_rngs() -> None:
    """What a new process would have: none of the generators where the run left them."""
    torch.manual_seed(12345)
    random.seed(12345)
    np.random.seed(12345)


#: Critic metrics of the evaluation (held-out calibration), logged with a step but not its own.
HELDOUT = ("critic/calibration_", "critic/heldout_", "critic/first_value_")


@pytest.mark.slow  # two trainers per case, resumed mid-run: ~4-6 s each
@pytest.mark.parametrize(
    ("name", "precision"),
    [(name, "fp32") for name in ALGORITHMS]
    # bf16 (forced: emulated on a CPU without it, so this runs everywhere): the autocast casts
    # are deterministic functions of the fp32 weights, so a resumed run is as exact as in fp32
    + [(name, "bf16") for name in ("sppo", "ppo", "grpo")],
)
def test_state_dict_round_trip_continues_exactly(name, precision, start, tok, task):
    full, expected, saver = uninterrupted(name, start, tok, task, RLTrainer.state_dict, precision)
    assert expected[0][0] == SAVE_AT + 1 and M.TRAIN_POLICY_LOSS in expected[0][1]

    _scramble_global_rngs()
    resumed = make(name, start, tok, task, precision=precision)
    resumed.load_state_dict(saver.read())
    assert resumed.step == SAVE_AT
    # The next step alone gives exactly the uninterrupted step's metrics ...
    stats = resumed.train_step()
    assert stats == {k: v for k, v in expected[0][1].items() if k in stats}
    assert not {k for k in expected[0][1] if k not in stats} - {
        k for k in expected[0][1] if k.startswith(("compute/", "eval/", "memory/", *HELDOUT))
    }
    # ... and a fresh trainer loaded the same way continues to the same end.
    _scramble_global_rngs()
    tracker = NullTracker()
    again = make(name, start, tok, task, tracker=tracker, precision=precision)
    again.load_state_dict(saver.read())
    again.train()
    assert deterministic(tracker.history) == expected
    assert again.evals == full.evals
    for a, b in zip(again.policy.parameters(), full.policy.parameters(), strict=True):
        assert torch.equal(a, b)


def _old_trainer_state(t: RLTrainer) -> dict:
    """A checkpoint's ``trainer`` entry as benchmarks/training/checkpoint.py wrote it before the
    trainer had a state dict (its ``trainer_state`` and ``_rng_state``, verbatim)."""
    np_state = np.random.get_state()
    rng = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype("int64")), *np_state[2:]],
    }
    ref = t.reference
    return {
        "policy": t.policy.state_dict(),
        "optimizer": t.opt.state_dict(),
        "critic": None if t.critic is None else t.critic.model.state_dict(),
        "critic_optimizer": None if t.critic is None else t.critic.opt.state_dict(),
        "reference_fingerprint": 0.0
        if ref is None
        else float(sum(p.detach().double().abs().sum() for p in ref.parameters())),
        "rng": rng,
        "stream": {
            "rng": t.stream.rng.getstate(),
            "order": list(t.stream.order),
            "taken": t.stream.taken,
        },
        "meter": t.meter.state_dict(),
        "step": t.step,
        "skipped": t.skipped,
        "consecutive_skips": t._consecutive_skips,
        "eval_idx": t.evaluator.index,
        "step_cost": t._step_cost,
        "evals": [(f, dataclasses.asdict(r)) for f, r in t.evals],
    }


META = {"run_id": "r", "parent_run_id": "p", "algorithm": "grpo", "seed": 3}


@pytest.mark.parametrize("name", ["sppo", "grpo"])
def test_a_checkpoint_in_the_old_layout_still_resumes(name, start, tok, task, tmp_path):
    full, expected, saver = uninterrupted(name, start, tok, task, _old_trainer_state)
    (tmp_path / Checkpointer.FILE).write_bytes(
        _as_checkpoint_file({"version": 1, "meta": META, "trainer": saver.read()})
    )
    _scramble_global_rngs()
    tracker = NullTracker()
    resumed = make(
        name, start, tok, task, tracker=tracker, checkpointer=Checkpointer(tmp_path, 0, META)
    )
    resumed.train()
    assert deterministic(tracker.history) == expected
    assert resumed.evals == full.evals


def test_a_checkpoint_keeps_its_layout(start, tok, task, tmp_path):
    """What :class:`Checkpointer` writes now has exactly the keys the old code wrote."""
    trainer = make("ppo", start, tok, task)
    Checkpointer(tmp_path, 1, META).save("ppo", trainer.step, trainer.state_dict())
    state = torch.load(tmp_path / Checkpointer.FILE, map_location="cpu", weights_only=True)
    assert set(state) == {"version", "meta", "trainer", "logged_at_step"}
    assert set(state["trainer"]) == LAYOUT
    assert set(state["trainer"]["stream"]) == {"rng", "order", "taken"}
    assert set(state["trainer"]["rng"]) >= {"torch", "python", "numpy"}


def _as_checkpoint_file(state: dict) -> bytes:
    buf = io.BytesIO()
    torch.save({**state, "logged_at_step": {}}, buf)
    return buf.getvalue()
