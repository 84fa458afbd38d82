"""The synthetic `arith` task: splits, worked solutions, grading, the fixed eval set, validation."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from benchmarks.tasks.arith import ArithTask
from benchmarks.tasks.base import TaskProblem

HORIZONS = (1, 2, 3, 8)
OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


@pytest.fixture(scope="module")
def tasks():
    return {h: ArithTask(horizon=h) for h in HORIZONS}


def _chain(prompt: str) -> tuple[list[str], int]:
    """Evaluate ``d op d op d ... =`` left to right modulo 10, independently of the task code."""
    assert prompt.endswith("=")
    tokens = re.findall(r"\d|[+\-*]", prompt[:-1])
    acc, steps = int(tokens[0]), []
    for op, d in zip(tokens[1::2], tokens[2::2], strict=True):
        new = OPS[op](acc, int(d)) % 10
        steps.append(f"{acc}{op}{d}={new}")
        acc = new
    return steps, acc


@pytest.mark.parametrize("h", HORIZONS)
def test_train_and_held_out_are_disjoint(tasks, h):
    t = tasks[h]
    train = {p.prompt for p in t.train_problems()}
    held = [p.prompt for p in t.eval_problems()]
    assert len(train) == len(t.train_problems())  # no duplicates either
    assert len(set(held)) == len(held)
    assert train.isdisjoint(held)
    assert len(held) == (1000 if h > 1 else 300 - len(train))  # h = 1: the whole test split
    # Every prompt has h operations.
    assert all(len(re.findall(r"[+\-*]", p)) == h for p in list(train)[:500] + held)


def test_enumerated_horizons_split_every_problem():
    """Small horizons enumerate all 10^(h+1)·3^h problems; about test_fraction of them are held out."""
    for h, total in ((1, 300), (2, 9000)):
        t = ArithTask(horizon=h, eval_size=10**6)
        n_train, n_test = len(t.train_problems()), len(t.eval_problems())
        assert n_train + n_test == total
        assert abs(n_test / total - 0.2) < 0.04


@pytest.mark.parametrize("h", HORIZONS)
def test_every_solution_is_correct_and_grades_1(tasks, h):
    t = tasks[h]
    problems = list(t.eval_problems()) + list(t.train_problems())[:3000]
    for p in problems:
        steps, answer = _chain(p.prompt)
        assert p.answer == str(answer), p
        assert p.solution == ";".join(steps) + f";#{answer}", p
        assert len(steps) == h
    assert t.grade([p.solution for p in problems], problems).scores == [1.0] * len(problems)
    # The bare-answer demonstration grades 1 as well.
    assert t.grade([f"#{p.answer}" for p in problems[:50]], problems[:50]).scores == [1.0] * 50


@pytest.mark.parametrize(
    "response, score",
    [
        ("#7", 1.0),
        ("3+4=7;#7", 1.0),
        ("#7 ", 1.0),
        ("#1;#7", 1.0),  # the last '#' counts
        ("#7;#1", 0.0),
        ("#8", 0.0),
        ("7", 0.0),  # no '#'
        ("3+4=7", 0.0),
        ("", 0.0),
        ("#", 0.0),
        ("#x", 0.0),
        ("#7a", 0.0),
        ("#-7", 0.0),
        ("#07", 0.0),
        ("#7.0", 0.0),
    ],
)
def test_grading(response, score):
    t = ArithTask(horizon=1, eval_size=5)
    p = TaskProblem(id="3+4", prompt="3+4=", answer="7", solution="3+4=7;#7")
    res = t.grade([response], [p])
    assert res.scores == [score]
    assert res.timeouts == 0 and res.errors == 0


@pytest.mark.parametrize(
    "response, answer",
    [
        ("#12", "12"),
        ("1+2=3;# 3 ", "3"),
        ("#1;#2", "2"),
        ("12", None),
        ("#", None),
        ("#x", None),
        ("#7a", None),
        ("#-7", None),
        ("#1 2", None),
    ],
)
def test_extract(response, answer):
    assert ArithTask.extract(response) == answer


def test_grade_checks_lengths_match():
    t = ArithTask(horizon=1, eval_size=5)
    with pytest.raises(ValueError):
        t.grade(["#1", "#2"], list(t.eval_problems())[:1])


def test_eval_set_is_fixed_across_constructions(tasks):
    random.seed(123)
    again = ArithTask(horizon=2)
    random.seed(456)
    other = ArithTask(horizon=2, eval_size=100)
    assert list(again.eval_problems()) == list(tasks[2].eval_problems())
    assert list(again.train_problems()) == list(tasks[2].train_problems())
    # A smaller eval_size is a prefix of the same held-out order.
    assert list(other.eval_problems()) == list(tasks[2].eval_problems())[:100]
    # The sampled (non-enumerated) regime is fixed too.
    a = ArithTask(horizon=3, max_problems=5000, eval_size=200)
    b = ArithTask(horizon=3, max_problems=5000, eval_size=200)
    assert list(a.eval_problems()) == list(b.eval_problems())
    assert len(a.train_problems()) + len(b.eval_problems()) <= 5000


def test_a_problems_split_does_not_depend_on_max_problems():
    """The split is a hash of the prompt: a held-out problem is held out in every construction."""
    small = ArithTask(horizon=3, max_problems=5000, eval_size=10**6)
    big_train = {p.prompt for p in ArithTask(horizon=3, max_problems=20000).train_problems()}
    assert big_train.isdisjoint(p.prompt for p in small.eval_problems())


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(horizon=0), "task.horizon"),
        (dict(horizon=17), "task.horizon"),
        (dict(horizon=[1, 1]), "task.horizon"),
        (dict(horizon=[]), "task.horizon"),
        (dict(horizon=[1, 4], horizon_weights=[1.0]), "task.horizon_weights"),
        (dict(horizon=[1, 4], horizon_weights=[1.0, 0.0]), "task.horizon_weights"),
        (dict(horizon=-1), "task.horizon"),
        (dict(test_fraction=0.0), "task.test_fraction"),
        (dict(test_fraction=1.0), "task.test_fraction"),
        (dict(test_fraction=-0.2), "task.test_fraction"),
        (dict(eval_size=0), "task.eval_size"),
        (dict(eval_size=-5), "task.eval_size"),
        (dict(max_problems=0), "task.max_problems"),
        (dict(max_problems=-1), "task.max_problems"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.") + "="):
        ArithTask(**kwargs)


def test_one_problem_per_horizon_is_allowed():
    t = ArithTask(horizon=[1, 2], max_problems=1, eval_size=1)
    assert len(t.train_problems()) + len(t.eval_problems()) >= 1


def test_sft_target_direct_fraction():
    t = ArithTask(horizon=2, eval_size=5)
    problems = list(t.train_problems())[:200]
    rng = random.Random(0)
    assert [t.sft_target(p, rng, 0.0) for p in problems] == [p.solution for p in problems]
    assert [t.sft_target(p, rng, 1.0) for p in problems] == [f"#{p.answer}" for p in problems]
    # In between, a seeded mix of both styles; every target is a correct demonstration.
    rng = random.Random(0)
    mixed = [t.sft_target(p, rng, 0.5) for p in problems]
    n_direct = sum(m.startswith("#") for m in mixed)
    assert 70 < n_direct < 130
    assert t.grade(mixed, problems).scores == [1.0] * len(problems)
    rng = random.Random(0)
    assert [t.sft_target(p, rng, 0.5) for p in problems] == mixed


def test_alphabet_covers_every_prompt_and_solution(tasks):
    allowed = set(ArithTask.alphabet)
    for t in tasks.values():
        for p in list(t.eval_problems())[:200]:
            assert set(p.prompt) <= allowed and set(p.solution) <= allowed


def _steps(prompt: str) -> int:
    return sum(prompt.count(o) for o in "+-*")


def test_mixed_horizons_draw_every_horizon_by_weight_and_hold_out_each():
    """``horizon=[1, 2, 8]``: difficulty varies from prompt to prompt and shows in the prompt
    (its length); training problems follow the weights, each horizon has its own held-out set,
    disjoint from training, and any prefix of the held-out order spans every horizon."""
    t = ArithTask(horizon=[8, 1, 2], horizon_weights=[1, 2, 1], eval_size=40, max_problems=4000)
    assert t.horizons == (1, 2, 8) and t.horizon == 8
    counts = Counter(_steps(p.prompt) for p in t.train_problems())
    assert counts == {1: 1000, 2: 2000, 8: 1000}  # weights in ascending-horizon order
    groups = t.eval_groups()
    assert list(groups) == ["arith_h1", "arith_h2", "arith_h8"]
    evals = t.eval_problems()
    for h, idx in zip((1, 2, 8), groups.values(), strict=True):
        assert len(idx) == 40 and {_steps(evals[i].prompt) for i in idx} == {h}
    assert sorted(i for idx in groups.values() for i in idx) == list(range(len(evals)))
    assert {_steps(p.prompt) for p in evals[:3]} == {1, 2, 8}
    assert {p.prompt for p in t.train_problems()}.isdisjoint(p.prompt for p in evals)
    assert t.grade([p.solution for p in evals], evals).scores == [1.0] * len(evals)
    single = ArithTask(horizon=2, eval_size=40)
    assert single.eval_groups() == {}  # one horizon: only the overall accuracy


def test_one_horizon_in_a_list_is_the_plain_task():
    a, b = ArithTask(horizon=3, eval_size=50), ArithTask(horizon=[3], eval_size=50)
    assert a.train_problems() == b.train_problems() and a.eval_problems() == b.eval_problems()
