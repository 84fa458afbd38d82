"""``Checkpointer`` moves a state dict it does not read: it saves what ``state_dict()`` gives
every ``every`` steps and gives it back on resume with the process-wide generators as they were.
(tests/training/test_trainer_state.py resumes whole trainers through it.)"""

from __future__ import annotations

import ast
import random
from collections import Counter

import torch

from benchmarks.telemetry.tracking import NullTracker
from benchmarks.training import checkpoint
from benchmarks.training.checkpoint import Checkpointer, ResumableTracker

META = {"run_id": "r", "parent_run_id": "p", "algorithm": "grpo", "seed": 3}


def test_it_saves_every_k_steps_and_resumes_the_state_and_the_generators(tmp_path):
    asked = []

    def state_dict():
        asked.append(step)
        return {"step": step, "weights": torch.arange(3.0) * step}

    tracker = ResumableTracker(NullTracker())
    saver = Checkpointer(tmp_path, 2, META, tracker)
    for step in (1, 2, 3):
        tracker.log_metrics({"a": 1.0, "b": 2.0}, step=step)
        saver.after_step("grpo", step, state_dict)
        if step == 2:
            expected = (torch.rand(2), random.random())
    assert asked == [2]  # the state is asked for only when it is saved

    tracker = ResumableTracker(NullTracker())
    resumed = Checkpointer(tmp_path, 2, META, tracker)
    state = resumed.resume()
    assert set(state) == {"step", "weights"}  # the generators are set, not handed back
    assert state["step"] == 2 and torch.equal(state["weights"], torch.tensor([0.0, 2.0, 4.0]))
    assert tracker.step == 2 and tracker.at_step == Counter({"a": 1, "b": 1})
    again = (torch.rand(2), random.random())
    assert torch.equal(again[0], expected[0]) and again[1] == expected[1]


def test_without_a_checkpoint_there_is_nothing_to_resume(tmp_path):
    assert Checkpointer(tmp_path, 1, META).resume() is None


def test_it_never_imports_the_trainer():
    """Not even for type checking: the trainer sits above its checkpoints."""
    tree = ast.parse(open(checkpoint.__file__).read())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    } | {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    assert not any(m.startswith("benchmarks.training.trainer") for m in imported), imported
