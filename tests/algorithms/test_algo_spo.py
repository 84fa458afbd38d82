"""SPO's per-prompt tracker: its update against the recipe's loop written out and by hand (every
step metric, the ``state_dict`` round trip bit for bit, a state it cannot use refused rather than
truncated), its advantage by hand, every error message in full, and a run killed mid-way and
resumed from its checkpoint ending with exactly the tracker of an uninterrupted run (the
trainer's generic hook for algorithm state, through a real SIGKILL).

Everything that builds a config does it inside the test: mutmut forks its workers after the
modules are imported, so work done at import time runs unmutated (docs/mutation.md).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from algorithms import ConfigError, get_algorithm
from algorithms.spo import SPOConfig
from testkit.paths import REPO
from testkit.tensors import F64, META, NAN, f64, meta, meta_mask
from testkit.tolerances import EPS32, fp_tol

# --- the tracker against the recipe's loop ----------------------------------------------------


def _recipe_step(prior, alpha, beta, mark, total, keys, rewards, drift, cfg):
    """verl-recipe ``spo``'s update (alpha <- rho alpha + r, beta <- rho beta + 1 - r with
    rho = clip(2^(-D / D_half), rho_min, rho_max)), one prompt at a time, with D the growth of
    the running drift total since the prompt was last drawn (module docstring of
    algorithms/spo.py) and several draws of a prompt in one step summed."""
    total += drift
    seen = {}
    for k, r in zip(keys, rewards, strict=True):
        s, n = seen.get(k, (0.0, 0))
        seen[k] = (s + r, n + 1)
    for k, (s, n) in seen.items():
        d = total - mark[k] if k in mark else 0.0
        rho = min(max(2.0 ** (-d / cfg.drift_half_life), cfg.rho_min), cfg.rho_max)
        a, b = alpha.get(k, prior[0]), beta.get(k, prior[1])
        alpha[k], beta[k], mark[k] = rho * a + s, rho * b + (n - s), total
    return total


def test_tracker_follows_the_recipe_update_step_by_step():
    algo = get_algorithm("spo")
    algo.reset_state()
    cfg = algo.config
    g = torch.Generator().manual_seed(0)
    alpha, beta, mark, total = {}, {}, {}, 0.0
    for step in range(12):
        b, t = 6, 5
        keys = [f"p{int(i)}" for i in torch.randint(0, 5, (b,), generator=g)]  # repeats
        rewards = torch.randint(0, 2, (b,), generator=g).double()
        mask = torch.arange(t)[None, :] < torch.randint(1, t + 1, (b,), generator=g)[:, None]
        old = -torch.rand(b, t, generator=g, dtype=torch.float64)
        new = old + 0.05 * step * torch.randn(b, t, generator=g, dtype=torch.float64)
        new = torch.where(mask, new, torch.full_like(new, float("nan")))  # padding never read
        # the advantage reads the tracker before this step's outcomes
        p = torch.tensor(
            [alpha.get(k, 0.5) / (alpha.get(k, 0.5) + beta.get(k, 0.5)) for k in keys],
            dtype=torch.float64,
        )
        a = rewards - p
        expected = (a - a.mean()) / (a.std() + 1e-8)
        adv, returns = algo.advantages(rewards, mask, None, prompt_keys=keys)
        assert returns is None
        torch.testing.assert_close(adv, expected[:, None] * mask, atol=1e-12, rtol=0)
        metrics = algo.observe(
            prompt_keys=keys,
            rewards=rewards,
            response_mask=mask,
            old_log_probs=old,
            new_log_probs=new,
        )
        drift = float(((new - old).abs() * mask).nan_to_num().sum() / mask.sum())
        total = _recipe_step(
            (0.5, 0.5), alpha, beta, mark, total, keys, rewards.tolist(), drift, cfg
        )
        assert metrics["train/spo_drift"] == pytest.approx(drift, rel=1e-6)
        state = algo.state_dict()
        columns = zip(state["alpha"].tolist(), state["beta"].tolist(), strict=True)
        got = dict(zip(state["keys"], columns, strict=True))
        assert got.keys() == alpha.keys()
        for k in alpha:
            assert got[k][0] == pytest.approx(alpha[k], abs=1e-12)
            assert got[k][1] == pytest.approx(beta[k], abs=1e-12)
        assert state["drift_total"] == pytest.approx(total, abs=1e-12)


def test_first_draw_forgets_at_rho_max_and_drift_halves_memory():
    algo = get_algorithm("spo", rho_min=0.1, rho_max=1.0)
    mask = torch.ones(1, 2, dtype=torch.bool)
    zeros = torch.zeros(1, 2)

    def draw(r: float, change: float) -> dict:
        return algo.observe(
            prompt_keys=["x"],
            rewards=torch.tensor([r]),
            response_mask=mask,
            old_log_probs=zeros,
            new_log_probs=zeros + change,
        )

    m = draw(1.0, 0.0)  # first draw: D = 0, rho = min(1, rho_max) = 1
    assert m["train/spo_rho"] == 1.0 and algo.success_estimate("x") == pytest.approx(1.5 / 2)
    m = draw(0.0, 0.06)  # the policy moved by D_half since: rho = 1/2
    assert m["train/spo_rho"] == pytest.approx(0.5)
    # alpha = 0.5 * 1.5 = 0.75, beta = 0.5 * 0.5 + 1 = 1.25
    assert algo.success_estimate("x") == pytest.approx(0.75 / 2.0)
    assert algo.success_estimate("unseen") == 0.5  # the Beta(0.5, 0.5) prior
    assert m["train/spo_tracked_prompts"] == 1.0


def test_advantage_is_batch_normalised_and_a_single_row_gets_zero():
    algo = get_algorithm("spo")
    r = torch.tensor([1.0, 0.0, 1.0, 1.0])
    adv, _ = algo.advantages(r, torch.ones(4, 2), None, prompt_keys=list("abcd"))
    a = r - 0.5
    expected = (a - a.mean()) / (a.std() + 1e-8)
    torch.testing.assert_close(adv[:, 0], expected)
    one, _ = algo.advantages(torch.tensor([1.0]), torch.ones(1, 3), None, prompt_keys=["a"])
    assert one.tolist() == [[0.0, 0.0, 0.0]]


# --- SPO: configuration and inputs ------------------------------------------------------------


def test_spo_rho_min_may_equal_rho_max_and_not_exceed_it():
    # equal bounds fix the forgetting factor whatever the drift: alpha = 0.75 * 0.5 + 1
    algo = get_algorithm("spo", rho_min=0.75, rho_max=0.75)
    zeros = torch.zeros(1, 1)
    for change in (0.0, 5.0):  # unseen (D = 0), then D = 5 (2^(-5 / 0.06) ~ 0)
        metrics = algo.observe(
            prompt_keys=["x"],
            rewards=torch.tensor([1.0]),
            response_mask=torch.ones(1, 1),
            old_log_probs=zeros,
            new_log_probs=zeros + change,
        )
        assert metrics["train/spo_rho"] == 0.75
    # alpha = 0.75 * (0.75 * 0.5 + 1) + 1 = 2.03125, beta = 0.75 * 0.75 * 0.5 = 0.28125
    assert algo.success_estimate("x") == 2.03125 / 2.3125
    with pytest.raises(ConfigError) as err:
        SPOConfig(rho_min=0.9, rho_max=0.8)
    assert str(err.value) == "SPOConfig.rho_min=0.9 is invalid: must be <= rho_max=0.8"


def _observe(algo, keys, rewards, new=0.0, mask=None):
    """One ``observe`` of ``len(keys)`` rows of two tokens: log-probs move from 0 by ``new``
    (a number or a (B, 2) tensor; None passes no new log-probs)."""
    b = len(keys)
    mask = torch.ones(b, 2) if mask is None else mask
    old = torch.zeros(b, 2, dtype=F64)
    return algo.observe(
        prompt_keys=keys,
        rewards=f64(rewards),
        response_mask=mask,
        old_log_probs=old,
        new_log_probs=None if new is None else old + new,
    )


MASK23 = torch.ones(2, 3, dtype=torch.bool)
R2 = torch.tensor([1.0, 0.0])
SPO_NO_TRACKER = "spo: the saved state has no tracker ({}); it was not written by SPO.state_dict"
SPO_ERRORS = [
    (
        lambda: get_algorithm("spo").advantages(R2, MASK23, None),
        "spo: prompt_keys (one string per row naming its prompt) is required: the baseline is "
        "the prompt's tracked success rate",
    ),
    (
        lambda: get_algorithm("spo").observe(
            prompt_keys=None,
            rewards=R2,
            response_mask=MASK23,
            old_log_probs=torch.zeros(2, 3),
            new_log_probs=torch.zeros(2, 3),
        ),
        "spo: prompt_keys (one string per row naming its prompt) is required: the baseline is "
        "the prompt's tracked success rate",
    ),
    (
        lambda: get_algorithm("spo").advantages(R2, MASK23, None, prompt_keys=["a", "b", "c"]),
        "spo: 3 prompt_keys for 2 rewards",
    ),
    (
        lambda: get_algorithm("spo").advantages(R2, MASK23, None, prompt_keys=["a"]),
        "spo: 1 prompt_keys for 2 rewards",
    ),
    (
        lambda: _observe(get_algorithm("spo"), ["a", "b"], [1.0, 0.0], new=None),
        "spo: observe needs new_log_probs (the updated policy's)",
    ),
    (
        lambda: _observe(get_algorithm("spo"), ["a", "b", "c"], [0.25, -0.5, 1.0]),
        "spo: the tracker counts successes, so rewards must lie in [0, 1]; got min -0.5, max 1.0",
    ),
    (
        lambda: _observe(get_algorithm("spo"), ["a", "b"], [0.0, 1.5]),
        "spo: the tracker counts successes, so rewards must lie in [0, 1]; got min 0.0, max 1.5",
    ),
    (
        lambda: get_algorithm("spo").load_state_dict({}),
        SPO_NO_TRACKER.format("['alpha', 'beta', 'drift_mark', 'drift_total', 'keys'] missing"),
    ),
    (
        lambda: get_algorithm("spo").load_state_dict(
            {k: v for k, v in get_algorithm("spo").state_dict().items() if k != "drift_mark"}
        ),
        SPO_NO_TRACKER.format("['drift_mark'] missing"),
    ),
]


SPO_ERROR_IDS = [
    "advantages-no-keys",
    "observe-no-keys",
    "key-count",
    "key-count-short",
    "no-new-log-probs",
    "reward-below-0",
    "reward-above-1",
    "empty-state",
    "state-without-drift-mark",
]


@pytest.mark.parametrize("call, message", SPO_ERRORS, ids=SPO_ERROR_IDS)
def test_spo_error_message_in_full(call, message):
    with pytest.raises(ValueError) as err:
        call()
    assert str(err.value) == message


# --- SPO: the tracker, its metrics and its state ----------------------------------------------


def test_spo_observe_updates_the_tracker_and_reports_the_steps_means():
    """Hand-computed with D_half = 0.5 (rho = 2^(-D / 0.5)), clipped to [0.1, 1]."""
    algo = get_algorithm("spo", rho_min=0.1, rho_max=1.0, drift_half_life=0.5)
    # step 1: the policy moves by 0.25 per token; "a" is new, so D = 0 and rho = 1:
    # a = (1 * 0.5 + 1, 1 * 0.5 + 0), marked at the drift total 0.25; the baseline the step
    # used is the prior's 0.5
    m1 = _observe(algo, ["a"], [1.0], new=0.25)
    assert m1 == {
        "train/spo_drift": 0.25,
        "train/spo_rho": 1.0,
        "train/spo_baseline": 0.5,
        "train/spo_tracked_prompts": 1.0,
    }
    assert algo.success_estimate("a") == 0.75
    # step 2: "a" twice (0 and 1) and "b" once (1); a padded token changes by NaN, never read.
    # drift 0.5 -> total 0.75; a: D = 0.75 - 0.25 = 0.5, rho = 1/2: alpha = 0.5 * 1.5 + 1,
    # beta = 0.5 * 0.5 + 1; b: new, rho = 1. Baseline: mean p over the rows, (0.75 + 0.5 +
    # 0.75) / 3; rho: mean over the prompts, (0.5 + 1) / 2
    mask = torch.tensor([[1, 1], [1, 1], [1, 0]])
    new = f64([[0.5, 0.5], [0.5, 0.5], [0.5, NAN]])
    m2 = _observe(algo, ["a", "b", "a"], [0.0, 1.0, 1.0], new=new, mask=mask)
    # the metrics travel as float32 tensors (one device sync): 2/3 is rounded to float32
    assert m2["train/spo_baseline"] == pytest.approx(2 / 3, rel=EPS32, abs=0)
    assert {k: v for k, v in m2.items() if k != "train/spo_baseline"} == {
        "train/spo_drift": 0.5,
        "train/spo_rho": 0.75,
        "train/spo_tracked_prompts": 2.0,
    }
    state = algo.state_dict()
    assert state["keys"] == ["a", "b"]
    assert state["alpha"].tolist() == [1.75, 1.5]
    assert state["beta"].tolist() == [1.25, 0.5]
    assert state["drift_mark"].tolist() == [0.75, 0.75]
    assert state["drift_total"] == 0.75
    assert (algo.success_estimate("a"), algo.success_estimate("b")) == (1.75 / 3, 0.75)
    assert algo.success_estimate("unseen") == 0.5


def _trained_spo(**overrides):
    """SPO after three steps whose drifts (0.1, 0.2, 0.3 per token) float32 cannot hold."""
    algo = get_algorithm("spo", **overrides)
    for step, keys in enumerate((["a", "b"], ["b", "c"], ["a", "c", "c"])):
        _observe(algo, keys, [1.0, 0.0, 1.0][: len(keys)], new=0.1 * (step + 1))
    return algo


def test_spo_state_dict_round_trip_is_exact():
    algo = _trained_spo()
    state = algo.state_dict()
    assert state["keys"] == ["a", "b", "c"]
    assert [state[k].dtype for k in ("alpha", "beta", "drift_mark")] == [F64] * 3
    assert state["drift_total"] == 0.1 + 0.2 + 0.1 * 3  # each step's float64 mean, summed
    resumed = get_algorithm("spo")
    resumed.load_state_dict(state)
    again = resumed.state_dict()
    assert again["keys"] == state["keys"] and again["drift_total"] == state["drift_total"]
    for k in ("alpha", "beta", "drift_mark"):
        assert torch.equal(again[k], state[k])
    # and the two continue alike, bit for bit: the next step reads every mark and the total
    m_algo, m_resumed = (
        _observe(a, ["a", "b", "d"], [0.0, 1.0, 1.0], new=0.05) for a in (algo, resumed)
    )
    assert m_algo == m_resumed
    final, resumed_final = algo.state_dict(), resumed.state_dict()
    assert final["keys"] == resumed_final["keys"] == ["a", "b", "c", "d"]
    assert final["drift_total"] == resumed_final["drift_total"]
    for k in ("alpha", "beta", "drift_mark"):
        assert torch.equal(final[k], resumed_final[k])


@pytest.mark.parametrize("column", ["keys", "alpha", "beta", "drift_mark"])
def test_spo_refuses_a_state_whose_columns_differ_in_length(column):
    """A state cut short in one column is refused and the tracker left as it was, not read as
    the prompts the shorter columns happen to cover."""
    algo = _trained_spo()
    before = algo.state_dict()
    state = dict(before)
    state[column] = state[column][:2]
    with pytest.raises(ValueError, match=r"^zip\(\) argument \d is (shorter|longer) than argument"):
        algo.load_state_dict(state)
    after = algo.state_dict()
    assert after["keys"] == before["keys"]
    for k in ("alpha", "beta", "drift_mark"):
        assert torch.equal(after[k], before[k])


# --- SPO: the advantage -----------------------------------------------------------------------


def test_spo_advantage_of_two_rows_is_normalised():
    # unseen prompts: A = r - 0.5 = [0.5, -0.5], mean 0, unbiased std sqrt(0.5)
    adv, returns = get_algorithm("spo").advantages(
        f64([1.0, 0.0]), torch.ones(2, 2), None, prompt_keys=["a", "b"]
    )
    assert returns is None and adv.dtype == F64
    a = 0.5 / (math.sqrt(0.5) + 1e-8)
    torch.testing.assert_close(adv, f64([[a, a], [-a, -a]]), atol=fp_tol(2, dtype=F64), rtol=0)


def test_spo_advantage_stays_on_the_rewards_device():
    """``meta`` stands in for an accelerator: SPO's baseline is built from the tracker's Python
    floats, so it must be built on the rewards' device."""
    adv, returns = get_algorithm("spo").advantages(
        meta(3), meta_mask(3, 4), None, prompt_keys=["a", "b", "c"]
    )
    assert adv.device == META and returns is None


# --- killed and resumed through the trainer ----------------------------------------------------

STEPS, SAVE_EVERY, KILL_AFTER = 8, 2, 5

#: One process: build the trainer the suite's way on a task of 12 prompts (16 draws per step,
#: so prompts come back every step, some twice in one), train with a checkpoint every
#: SAVE_EVERY steps, print the tracker. Under SPPO_BENCH_FAULTS the process SIGKILLs itself
#: after step KILL_AFTER; the next run of the same script resumes from the checkpoint on disk.
RUN = (
    textwrap.dedent(
        """
    import json, sys
    import torch
    from benchmarks.tasks.arith import ArithTask
    from benchmarks.telemetry.meter import Budget
    from benchmarks.training.checkpoint import Checkpointer
    from benchmarks.training.modeling import build_char_tokenizer, build_tiny_llama
    from testkit.trainers import SPEC, SPS, FirstDigitTask, make_trainer

    class FewPrompts(FirstDigitTask):
        def train_problems(self):
            return super().train_problems()[:12]

    torch.set_num_threads(1)
    tok = build_char_tokenizer(ArithTask.alphabet)
    start = build_tiny_llama(SPEC, len(tok), seed=0)
    meta = {"run_id": "r", "parent_run_id": "p", "algorithm": "spo", "seed": 1}
    trainer = make_trainer(
        "spo", start, tok, FewPrompts(horizon=1, eval_size=8),
        Budget(kind="samples", limit=STEPS * SPS, eval_fractions=(0.0, 1.0)),
        seed=1, actor_lr=3e-2,
    )
    trainer.checkpointer = Checkpointer(sys.argv[1], SAVE_EVERY, meta) if sys.argv[1] else None
    trainer.train()
    state = trainer.alg.state_dict()
    print(json.dumps({
        "step": trainer.step,
        "keys": state["keys"],
        "alpha": state["alpha"].tolist(),
        "beta": state["beta"].tolist(),
        "drift_mark": state["drift_mark"].tolist(),
        "drift_total": state["drift_total"],
    }))
    """
    )
    .replace("STEPS", str(STEPS))
    .replace("SAVE_EVERY", str(SAVE_EVERY))
)


def _run(ckpt_dir: str, faults: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SPPO_BENCH_FAULTS"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests" / "support")])
    if faults:
        env["SPPO_BENCH_FAULTS"] = faults
    return subprocess.run(
        [sys.executable, "-c", RUN, ckpt_dir],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.slow  # two training runs in subprocesses, one killed: ~35 s
def test_a_killed_and_resumed_run_ends_with_the_uninterrupted_tracker(tmp_path):
    """SIGKILL after step 5 (the last checkpoint is step 4's), then the same command resumes:
    the tracker at the end (every prompt's alpha, beta and drift mark, the drift total) is
    bit for bit the uninterrupted run's. A tracker not saved or not restored would have
    forgotten steps 1-4, one restored but left stale across runs would hold extra counts."""
    twin = _run("")
    assert twin.returncode == 0, twin.stderr[-3000:]
    expected = json.loads(twin.stdout.strip().splitlines()[-1])
    assert expected["step"] == STEPS and len(expected["keys"]) == 12
    assert expected["drift_total"] > 0 and min(expected["alpha"]) > 0

    killed = _run(str(tmp_path), faults=f"kill@spo:{KILL_AFTER}:step")
    assert killed.returncode == -9, (killed.returncode, killed.stderr[-3000:])
    saved = torch.load(tmp_path / "checkpoint.pt", map_location="cpu", weights_only=True)
    assert saved["trainer"]["step"] == 4 and "algorithm" in saved["trainer"]
    assert len(saved["trainer"]["algorithm"]["keys"]) == 12

    resumed = _run(str(tmp_path))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads(resumed.stdout.strip().splitlines()[-1]) == expected
    assert not math.isnan(expected["drift_total"])
