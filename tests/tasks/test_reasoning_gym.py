"""Reasoning Gym datasets as tasks: disjoint splits, the dataset's own question text and scorer
(run in the grader's sandbox), worked solutions from metadata, difficulty groups, bad input."""

from __future__ import annotations

import json
import random

import pytest

from benchmarks.config import compose_config
from benchmarks.suite.plan import validate
from benchmarks.tasks.reasoning_gym import ReasoningGymTask

CHAIN = dict(min_terms=2, max_terms=5, min_digits=1, max_digits=2)


@pytest.fixture
def chain_sum():
    """Built per test (half a second): a task built once per module would be built inside
    whichever test ran first, and mutation testing (docs/mutation.md) would credit only that
    test with reaching the building code."""
    task = ReasoningGymTask(
        dataset="chain_sum", config=CHAIN, train_size=600, eval_size=120, group_by="num_terms"
    )
    yield task
    task.close()


def test_splits_are_disjoint_and_keep_the_datasets_question_text(chain_sum):
    import reasoning_gym

    train = {p.prompt for p in chain_sum.train_problems()}
    held = chain_sum.eval_problems()
    assert held and train.isdisjoint(p.prompt for p in held)
    # The prompt is the generator's own question, untouched.
    own = {
        e["question"] for e in reasoning_gym.create_dataset("chain_sum", size=600, seed=0, **CHAIN)
    }
    assert train == own


def test_train_and_held_out_items_are_disjoint_and_train_items_grade_as_their_own(chain_sum):
    """Disjoint by id and by content, and each train item is graded against its own entry:
    every train item's worked solution and bare answer score 1 (a held-out entry under a
    shared id would grade them against another question's answer)."""
    train, held = list(chain_sum.train_problems()), list(chain_sum.eval_problems())
    ids = [p.id for p in train + held]
    assert len(set(ids)) == len(ids)
    assert {p.prompt for p in train}.isdisjoint(p.prompt for p in held)
    assert chain_sum.grade([p.solution for p in train], train).scores == [1.0] * len(train)
    assert chain_sum.grade([f"#{p.answer}" for p in train], train).scores == [1.0] * len(train)
    assert {p.grader for p in train + held} == {"reasoning_gym"}


def test_the_held_out_items_are_the_far_seeds_items_not_trained_on():
    """Generated from the run's seed plus 1_000_000_007 (a dataset derives item i from seed + i,
    so the two sets are generated apart), the same for every build, minus training questions."""
    import reasoning_gym

    task = ReasoningGymTask(dataset="chain_sum", config=CHAIN, train_size=300, eval_size=60, seed=3)
    try:
        train = {
            e["question"]
            for e in reasoning_gym.create_dataset("chain_sum", size=300, seed=3, **CHAIN)
        }
        far = reasoning_gym.create_dataset("chain_sum", size=60, seed=3 + 1_000_000_007, **CHAIN)
        expected = [e["question"] for e in far if e["question"] not in train]
        assert [p.prompt for p in task.eval_problems()] == expected
        assert [p.id for p in task.eval_problems()] == [
            f"chain_sum/test/{i}" for i in range(len(expected))
        ]
        assert [p.prompt for p in task.train_problems()][:5] == [
            e["question"]
            for e in list(reasoning_gym.create_dataset("chain_sum", size=5, seed=3, **CHAIN))
        ]
    finally:
        task.close()


def test_one_item_each_is_enough_and_none_is_refused():
    task = ReasoningGymTask(
        dataset="chain_sum",
        config=CHAIN,
        train_size=1,
        eval_size=1,
        grader_timeout_s=7.5,
        grader_workers=2,
    )
    try:
        assert len(task.train_problems()) == 1 and len(task.eval_problems()) <= 1
        assert (task.grader.timeout_s, task.grader.workers) == (7.5, 2)  # the sandbox's settings
    finally:
        task.close()
    for sizes in (dict(train_size=0, eval_size=1), dict(train_size=1, eval_size=0)):
        message = (
            f"task.train_size={sizes['train_size']} and task.eval_size={sizes['eval_size']} "
            "must be >= 1"
        )
        with pytest.raises(ValueError) as e:
            ReasoningGymTask(dataset="chain_sum", config=CHAIN, **sizes)
        assert str(e.value) == message


def test_worked_steps_by_hand():
    from benchmarks.tasks.reasoning_gym import _running

    assert _running("12 + 3 - 4") == "12+3=15;15-4=11;#11"
    assert _running("2*3*4") == "2*3=6;6*4=24;#24"
    assert _running("12 + 3 -") is None  # an operator without its term
    assert _running("12 / 3") is None and _running("a + 1") is None


def test_group_names_sort_by_their_number():
    from benchmarks.tasks.reasoning_gym import _natural

    keys = ["x_t10", "x_t9", "y", "x_t", "x_t0", "x_t2"]
    assert sorted(keys, key=_natural) == ["x_t", "x_t0", "x_t2", "x_t9", "x_t10", "y"]
    task = ReasoningGymTask(
        dataset="chain_sum",
        config={**CHAIN, "min_terms": 8, "max_terms": 11},
        train_size=20,
        eval_size=60,
        group_by="num_terms",
    )
    try:
        assert list(task.eval_groups()) == [f"chain_sum_num_terms{n}" for n in range(8, 12)]
    finally:
        task.close()


def test_an_unknown_group_field_names_the_fields_there_are():
    import reasoning_gym

    (entry,) = reasoning_gym.create_dataset("chain_sum", size=1, seed=1_000_000_007, **CHAIN)
    fields = sorted(k for k in entry["metadata"] if k != "difficulty")
    assert "difficulty" in entry["metadata"] and fields
    with pytest.raises(ValueError) as e:
        ReasoningGymTask(dataset="chain_sum", config=CHAIN, train_size=5, eval_size=5, group_by="x")
    assert str(e.value) == f"task.group_by='x' is not in chain_sum's metadata: {fields}"


def test_worked_solutions_score_one_and_other_answers_zero(chain_sum):
    held = list(chain_sum.eval_problems())
    solutions = [p.solution for p in held]
    assert all(
        s is not None and s.endswith(f"#{p.answer}") for s, p in zip(solutions, held, strict=True)
    )
    assert chain_sum.grade(solutions, held).scores == [1.0] * len(held)
    # A neighbour's answer scores 0 unless it happens to be the same number.
    shifted = held[1:] + held[:1]
    expected = [1.0 if a.answer == b.answer else 0.0 for a, b in zip(held, shifted, strict=True)]
    result = chain_sum.grade([f"#{b.answer}" for b in shifted], held)
    assert result.scores == expected and 0.0 in expected
    garbage = chain_sum.grade(["no answer here", "", "#", "#12abc"], held[:4])
    assert garbage.scores == [0.0] * 4 and garbage.errors == 0


def test_the_scorer_runs_in_the_grader_sandbox(chain_sum):
    chain_sum.grade([chain_sum.eval_problems()[0].solution], chain_sum.eval_problems()[:1])
    pids = [w.pid for w in chain_sum.grader._pool]
    assert pids and all(pid is not None for pid in pids)  # a worker process graded it


@pytest.mark.slow  # a suite's worker process: ~7 s
def test_the_task_reaches_a_suites_worker_process_and_grades_there(chain_sum):
    """A suite's workers receive the plan, task included, by pickling (spawn): the grader goes as
    its settings and starts a sandbox of its own in the new process."""
    import multiprocessing as mp
    import pickle
    from concurrent.futures import ProcessPoolExecutor

    from testkit.child import grade_and_close

    held = list(chain_sum.eval_problems()[:6])
    responses = [p.solution for p in held[:3]] + ["#-1", "nothing", held[5].solution]
    expected = chain_sum.grade(responses, held).scores
    copy = pickle.loads(pickle.dumps(chain_sum))
    assert copy.grader._pool == [] and copy.grader.timeout_s == chain_sum.grader.timeout_s
    try:
        assert copy.grade(responses, held).scores == expected
    finally:
        copy.close()
    # The suite's own kind of worker: a spawned ProcessPoolExecutor process.
    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        assert pool.submit(grade_and_close, chain_sum, responses, held).result(120) == expected
    assert expected == [1.0, 1.0, 1.0, 0.0, 0.0, 1.0]


def test_running_sums_are_correct_steps(chain_sum):
    for p in list(chain_sum.train_problems())[:200]:
        steps = p.solution.split(";")[:-1]
        for step in steps:
            lhs, rhs = step.split("=")
            a, op, b = _split_op(lhs)
            assert int(rhs) == (a + b if op == "+" else a - b), step
        assert steps[-1].split("=")[1] == p.answer


def _split_op(lhs: str) -> tuple[int, str, int]:
    i = max(lhs.rfind("+"), lhs.rfind("-", 1))
    return int(lhs[:i]), lhs[i], int(lhs[i + 1 :])


def test_letter_counts_are_a_chain_the_datasets_scorer_accepts():
    task = ReasoningGymTask(
        dataset="letter_counting",
        config={"min_words": 3, "max_words": 8},
        train_size=50,
        eval_size=40,
        group_by="span_length",
    )
    try:
        held = list(task.eval_problems())
        for p in held:
            meta = json.loads(task._payload[p.id])["entry"]["metadata"]
            steps = p.solution.split(";")
            assert steps[-1] == f"#{p.answer}"
            assert [s.rsplit("=", 1)[0] for s in steps[:-1]] == meta["span"]  # every word, in order
            counts = [int(s.rsplit("=", 1)[1]) for s in steps[:-1]]
            letter = meta["target_letter"]
            by_hand = [
                sum(w.lower().count(letter) for w in meta["span"][: i + 1])
                for i in range(len(counts))
            ]
            assert counts == by_hand and counts[-1] == int(p.answer) >= 1
        assert task.grade([p.solution for p in held], held).scores == [1.0] * len(held)
        wrong = [f"#{int(p.answer) + 1}" for p in held]
        assert task.grade(wrong, held).scores == [0.0] * len(held)
        assert set(task.eval_groups()) <= {f"letter_counting_span_length{n}" for n in range(3, 9)}
    finally:
        task.close()


def test_groups_follow_the_metadata_and_cover_the_held_out_set(chain_sum):
    groups = chain_sum.eval_groups()
    assert list(groups) == [f"chain_sum_num_terms{n}" for n in range(2, 6)]
    held = chain_sum.eval_problems()
    assert sorted(i for idx in groups.values() for i in idx) == list(range(len(held)))
    for name, idx in groups.items():
        n = int(name.removeprefix("chain_sum_num_terms"))
        assert all(held[i].prompt.count("+") + held[i].prompt.count(" - ") == n - 1 for i in idx)


def test_tag_format_and_datasets_without_worked_solutions():
    task = ReasoningGymTask(
        dataset="letter_counting", train_size=50, eval_size=20, answer_format="tag"
    )
    try:
        held = list(task.eval_problems())
        assert all(p.solution is None for p in held)
        assert task.sft_target(held[0], random.Random(0), 0.0) == f"#{held[0].answer}"
        right = [f"I count. <answer>{p.answer}</answer>" for p in held]
        assert task.grade(right, held).scores == [1.0] * len(held)
        assert task.grade([f"#{p.answer}" for p in held], held).scores == [0.0] * len(held)
    finally:
        task.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(dataset="no_such_set"), "task.dataset='no_such_set' is not a Reasoning Gym dataset"),
        (dict(dataset="chain_sum", config={"min_termz": 2}), "min_termz"),
        (dict(dataset="chain_sum", config={"min_terms": 5, "max_terms": 2}), "max_terms"),
        (dict(dataset="chain_sum", answer_format="xml"), "task.answer_format='xml'"),
        (dict(dataset="chain_sum", group_by="colour"), "task.group_by='colour'"),
    ],
)
def test_bad_settings_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        ReasoningGymTask(train_size=20, eval_size=10, **kwargs).close()


def test_suite_validation_reports_bad_settings_before_any_compute():
    from algorithms import ConfigError

    with pytest.raises(ConfigError, match="not a Reasoning Gym dataset"):
        validate(compose_config(["task=reasoning_gym", "task.dataset=nope"]))
    # The tiny model's positions must hold the dataset's longest prompt plus the response.
    with pytest.raises(ConfigError, match="max_position_embeddings"):
        validate(compose_config(["task=reasoning_gym", "task.train_size=50", "task.eval_size=20"]))
    plan = validate(
        compose_config(
            [
                "task=reasoning_gym",
                "task.train_size=50",
                "task.eval_size=20",
                "model.max_position_embeddings=256",
            ]
        )
    )
    assert plan.task.dataset == "chain_sum"
    plan.task.close()


def test_a_datasets_settings_replace_the_default_datasets():
    """``task.config={...}`` is the named dataset's settings, whole: the default dataset's
    (chain_sum's) fields are not merged in, which another dataset would reject by name."""
    base = ["task=reasoning_gym", "task.train_size=50", "task.eval_size=20"]
    lc = ["task.dataset=letter_counting", "task.group_by=span_length"]
    cfg = compose_config(
        [*base, *lc, "task.config={min_words:4}", "model.max_position_embeddings=320"]
    )
    assert dict(cfg.task.config) == {"min_words": 4}
    plan = validate(cfg)
    assert plan.task.config == {"min_words": 4}
    plan.task.close()
    # One field of the default dataset's settings still changes alone.
    one = compose_config([*base, "task.config.min_terms=3"])
    assert one.task.config.min_terms == 3 and one.task.config.max_terms == 6
    with pytest.raises(Exception, match=r"task\.config: only task=reasoning_gym"):
        compose_config(["task.config={min_terms:3}"])
