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


# --- exact facts, held-out set, horizons and mixtures (docs/mutation.md) ----------------------


def test_facts_are_the_whole_single_step_table() -> None:
    """The warm start's facts are every ``a op b`` over digit pairs and the three operations,
    once each, with the step as its solution: 300, not a sample, not longer chains."""
    facts = ArithTask(horizon=1, eval_size=1).facts()
    assert len(facts) == 300
    expected = {f"{a}{op}{b}=" for a in range(10) for op in "+-*" for b in range(10)}
    assert {f.prompt for f in facts} == expected
    for f in facts:
        a, op, b = int(f.prompt[0]), f.prompt[1], int(f.prompt[2])
        value = {"+": a + b, "-": a - b, "*": a * b}[op] % 10
        assert (f.answer, f.solution) == (str(value), f"{f.prompt}{value};#{value}")


def test_the_arith_held_out_set_is_the_published_one() -> None:
    """Every published arith number was measured on these held-out problems (recorded once:
    they must never change), and an enumerable horizon gives the same set whatever
    ``max_problems`` is, as long as it covers every problem (9000 at horizon 2)."""
    h2 = ["4*2+1=", "0*4+3=", "2+5-9=", "2-9+3=", "7*2*8="]
    h3 = ["1-5-1-7=", "6-3*2-7=", "3+9-7*0=", "6*6-1*8=", "8-0*4*4="]
    assert [p.prompt for p in ArithTask(horizon=2, eval_size=5).eval_problems()] == h2
    assert [p.prompt for p in ArithTask(horizon=3, eval_size=5).eval_problems()] == h3
    exact = ArithTask(horizon=2, eval_size=5, max_problems=9000)
    assert [p.prompt for p in exact.eval_problems()] == h2


def test_max_problems_caps_the_problems_drawn() -> None:
    """Below the count of distinct problems (9000 at horizon 2), ``max_problems`` is how many
    there are, split between training and held-out."""
    task = ArithTask(horizon=2, max_problems=8000, eval_size=10_000)
    assert len(task.train_problems()) + len(task.eval_problems()) == 8000


def test_an_arith_problem_in_full() -> None:
    """A problem as a task built in this test has it (not as a module fixture built it: mutmut
    credits only the test that built the fixture): its id, prompt, answer, and the worked
    solution the warm start is trained on, each step ``a op b = c`` modulo 10 and left to right
    (no operator precedence), ``;``-separated, then ``#`` and the answer."""
    problems = ArithTask(horizon=3, eval_size=5).eval_problems()
    assert problems[1] == TaskProblem(
        id="6-3*2-7", prompt="6-3*2-7=", answer="9", solution="6-3=3;3*2=6;6-7=9;#9"
    )


def test_arith_horizons_from_1_to_the_maximum_and_nothing_else() -> None:
    """Every integer horizon in [1, MAX_HORIZON] builds; a bool (an int to Python), 0 and
    MAX_HORIZON + 1 are refused with the whole message."""
    from benchmarks.tasks.arith import MAX_HORIZON

    assert ArithTask(horizon=MAX_HORIZON, eval_size=1, max_problems=50).horizon == MAX_HORIZON
    for bad in (True, 0, MAX_HORIZON + 1):
        with pytest.raises(ValueError) as err:
            ArithTask(horizon=bad)
        assert str(err.value) == (
            f"task.horizon={bad} is not allowed: use an integer in [1, {MAX_HORIZON}] "
            "or a list of them (problems are drawn from every listed horizon)"
        )


def test_arith_defaults_are_the_documented_ones() -> None:
    """Horizon 2 with 1000 held-out problems, and at most 20 000 problems per horizon (seen at
    horizon 4, which has more: horizon 2 enumerates its 9000)."""
    task = ArithTask()
    assert (task.horizon, len(task.eval_problems())) == (2, 1000)
    h4 = ArithTask(horizon=4, eval_size=10**6)
    assert len(h4.train_problems()) + len(h4.eval_problems()) == 20_000


def test_a_mixed_arith_task_trains_on_equal_shares_in_a_fixed_order() -> None:
    """Without weights every horizon gets an equal share of ``max_problems`` training problems,
    shuffled once with a fixed seed (recorded: the training order is part of what a seed draws,
    so it must not change between runs or machines)."""
    task = ArithTask(horizon=[1, 2], max_problems=20, eval_size=1)
    train = task.train_problems()
    ops = [sum(c in "+-*" for c in p.prompt) for p in train]
    assert (len(train), ops.count(1), ops.count(2)) == (20, 10, 10)
    assert [p.prompt for p in train[:6]] == [
        "0-1+1=",
        "8*8*5=",
        "2+8+2=",
        "8+4-0=",
        "2+9=",
        "0+2+5=",
    ]


def test_a_small_share_of_a_mixed_arith_task_still_gets_one_problem() -> None:
    """A horizon whose share rounds to no problem still gets one (and only one): every listed
    horizon is trained on."""
    task = ArithTask(horizon=[1, 2], horizon_weights=[0.005, 0.995], max_problems=100, eval_size=1)
    ops = [sum(c in "+-*" for c in p.prompt) for p in task.train_problems()]
    assert (ops.count(1), ops.count(2)) == (1, 100)
