"""The prompt stream across a resume: a stream saved at any step and read back through a real
checkpoint file continues exactly as the uninterrupted one, across permutation wraps."""

from __future__ import annotations

import pytest

from benchmarks.tasks.base import TaskProblem
from benchmarks.training.checkpoint import Checkpointer
from benchmarks.training.trainer import PromptStream

META = {"run_id": "r", "parent_run_id": "p", "algorithm": "grpo", "seed": 0}
#: 7 problems taken 3 at a time: the permutations wrap inside a step, at a different offset
#: each time, and 12 steps use up five permutations.
PROBLEMS = [TaskProblem(id=f"p{i}", prompt=f"{i}=", answer=str(i)) for i in range(7)]
TAKE, STEPS = 3, 12


def _ids(stream: PromptStream, steps: int) -> list[list[str]]:
    return [[p.id for p in stream.take(TAKE)] for _ in range(steps)]


def test_the_stream_repeats_no_problem_within_a_permutation():
    ids = [i for step in _ids(PromptStream(PROBLEMS, 5), STEPS) for i in step]
    for start in range(0, len(ids) - len(PROBLEMS) + 1, len(PROBLEMS)):
        assert sorted(ids[start : start + len(PROBLEMS)]) == sorted(p.id for p in PROBLEMS)
    # Not one permutation repeated: the stream draws a new one at each wrap.
    perms = {tuple(ids[s : s + 7]) for s in range(0, 35, 7)}
    assert len(perms) > 1


@pytest.mark.parametrize("stop", range(STEPS))
def test_a_resumed_stream_equals_the_uninterrupted_one_across_wraps(stop, tmp_path):
    """Saved after step ``stop`` (before the first draw, before, at and after wraps) through the checkpoint file a
    trainer writes, then read into a fresh stream built as a resumed run builds it (same
    problems, same seed): the rest of the stream is the uninterrupted one's."""
    whole = _ids(PromptStream(PROBLEMS, 5), STEPS)
    first = PromptStream(PROBLEMS, 5)
    before = _ids(first, stop)
    saver = Checkpointer(tmp_path, 1, META)
    saver.save("grpo", stop, {"step": stop, "stream": first.state_dict()})
    _ids(first, 2)  # the killed run went on a little after its last save
    resumed = PromptStream(PROBLEMS, 5)
    resumed.load_state_dict(Checkpointer(tmp_path, 1, META).resume()["stream"])
    assert resumed.taken == stop * TAKE
    assert before + _ids(resumed, STEPS - stop) == whole


def test_a_resumed_trainer_draws_the_uninterrupted_trainers_prompts(tok, tmp_path, one_thread):
    """The same through a trainer's own ``state_dict``: its stream (horizon-1 `arith`, 235
    training problems, 50 a draw) is saved after a wrap and a resumed trainer draws on."""
    from benchmarks.tasks.arith import ArithTask
    from benchmarks.telemetry.meter import Budget
    from benchmarks.training.modeling import build_tiny_llama
    from testkit.trainers import SPEC, make_trainer

    task = ArithTask(horizon=1)
    assert len(task.train_problems()) < 250
    start = build_tiny_llama(SPEC, len(tok), seed=0)

    def trainer():
        return make_trainer("grpo", start, tok, task, Budget("samples", 64, (1.0,)), seed=3)

    def draws(t, n):
        return [[p.id for p in t.stream.take(50)] for _ in range(n)]

    whole = draws(trainer(), 12)
    first = trainer()
    before = draws(first, 5)  # one wrap used up, the second permutation under way
    Checkpointer(tmp_path, 1, META).save("grpo", 5, first.state_dict())
    resumed = trainer()
    resumed.load_state_dict(Checkpointer(tmp_path, 1, META).resume())
    assert before + draws(resumed, 7) == whole
