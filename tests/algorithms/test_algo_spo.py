"""SPO's per-prompt tracker: its update against the recipe's loop written out, its advantage by
hand, and a run killed mid-way and resumed from its checkpoint ending with exactly the tracker of
an uninterrupted run (the trainer's generic hook for algorithm state, through a real SIGKILL).
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

from algorithms import get_algorithm
from testkit.paths import REPO

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


def test_inputs_the_tracker_cannot_use_are_refused():
    algo = get_algorithm("spo")
    with pytest.raises(ValueError, match="prompt_keys"):
        algo.advantages(torch.ones(2), torch.ones(2, 2), None)
    with pytest.raises(ValueError, match="2 prompt_keys for 3 rewards"):
        algo.advantages(torch.ones(3), torch.ones(3, 2), None, prompt_keys=["a", "b"])
    kwargs = dict(
        prompt_keys=["a"], response_mask=torch.ones(1, 1), old_log_probs=torch.zeros(1, 1)
    )
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        algo.observe(rewards=torch.tensor([1.5]), new_log_probs=torch.zeros(1, 1), **kwargs)
    with pytest.raises(ValueError, match="new_log_probs"):
        algo.observe(rewards=torch.tensor([1.0]), new_log_probs=None, **kwargs)
    with pytest.raises(ValueError, match="no tracker"):
        algo.load_state_dict({})


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
