"""The algorithms registered after the first six against verl 0.9.1's own functions for the same
algorithm (``verl.trainer.ppo.core_algos``): the loss value, its gradient with respect to the
log-probs, and the advantages, on random right-padded batches with groups of one, groups whose
rewards are all equal and masked tails, in float64, to 1e-6.

======================  =================================================================
gspo                    ``compute_policy_loss_gspo``; advantages ``compute_grpo_outcome_advantage``
cispo                   ``compute_policy_loss_cispo``; GRPO's advantages
gmpo                    ``compute_policy_loss_geo_mean``; GRPO's advantages
dr_grpo                 ``compute_policy_loss_vanilla`` (``seq-mean-token-sum``); GRPO's
                        advantages with ``norm_adv_by_std_in_grpo=False``
grpo2                   ``compute_policy_loss_vanilla``; GRPO's advantages on pairs
reinforce_pp            ``compute_reinforce_plus_plus_outcome_advantage`` (KL in the reward,
                        gamma 1 and 0.9); ``compute_policy_loss_vanilla``
reinforce_pp_baseline   ``compute_reinforce_plus_plus_baseline_outcome_advantage``
spo                     none in verl 0.9.1 (its recipe's tracker is checked in
                        tests/algorithms/test_algo_spo.py)
======================  =================================================================

The KL-to-reference loss term (``kl_loss_coef``) is verl's actor's, not part of its policy-loss
functions, so the losses here are compared with it off. verl trains only on GPUs; these are its
functions on CPU (no mocks).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from testkit.paths import require_module

require_module("verl")  # the `verl` extra; under CI its absence fails

from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.workers.config import FSDPActorConfig  # noqa: E402

from algorithms import get_algorithm  # noqa: E402
from benchmarks.verl_engine.translate import NO_DUAL_CLIP  # noqa: E402

SEEDS = [0, 1, 2, 3]
#: Same maths in float64: rounding of means over <= 120 terms of magnitude <= 20 is ~1e-12;
#: verl's own epsilons (sum(mask) + 1e-8 in its means, + 1e-8 in geo_mean's lengths) move a
#: result by <= 1e-8 relative. 1e-6, as the issue asks, is far below a wrong branch or group
#: (>= 1e-3).
ATOL = 1e-6
#: Log-ratio spreads: near on-policy (nothing clipped, even by GSPO's 3e-4), moderate, and far
#: off-policy (every clip branch, and GSPO's upper clamp of the log-ratio at 10 at the tail).
SPREADS = [1e-5, 0.3, 3.0]
#: The worst |ours - verl| seen per (algorithm, quantity), for the closing note.
WORST: dict[tuple[str, str], float] = {}


def _batch(seed: int, t: int = 10):
    """Groups of sizes 1..5 (at least one of size 1) whose rewards are 0/1 with one group all
    ones and one all zeros; right-padded rows of 1..t tokens, finite garbage in the padding."""
    g = torch.Generator().manual_seed(seed)
    sizes = [1, *torch.randint(1, 6, (6,), generator=g).tolist()]
    group = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])
    b = len(group)
    perm = torch.randperm(b, generator=g)
    group = group[perm]
    rewards = torch.randint(0, 2, (b,), generator=g).double()
    rewards[group == 1] = 1.0  # an all-equal group (of size >= 1) ...
    rewards[group == 2] = 0.0  # ... and another
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).double()
    token_rewards = torch.zeros(b, t, dtype=torch.float64)
    token_rewards[torch.arange(b), lengths - 1] = rewards
    uids = np.array([f"uid-{int(i)}" for i in group], dtype=object)
    f64 = dict(generator=g, dtype=torch.float64)
    old = -torch.rand(b, t, **f64) * 3
    noise = torch.randn(b, t, **f64)
    garbage = torch.randn(b, t, **f64) * 50
    token_kl = torch.rand(b, t, **f64) * 0.5
    return dict(
        group=group,
        uids=uids,
        rewards=rewards,
        mask=mask,
        token_rewards=token_rewards,
        old=torch.where(mask > 0, old, garbage),
        noise=noise,
        token_kl=torch.where(mask > 0, token_kl, garbage),
    )


def _record(name: str, what: str, ours: torch.Tensor, theirs: torch.Tensor, valid=None) -> None:
    diff = (ours.detach() - theirs.detach()).abs()
    if valid is not None:
        diff = diff[valid]
    err = float(diff.max()) if diff.numel() else 0.0
    WORST[(name, what)] = max(WORST.get((name, what), 0.0), err)
    assert err <= ATOL, (name, what, err)


def _actor_config(alg, mode: str | None = None) -> FSDPActorConfig:
    c = alg.config
    return FSDPActorConfig(
        strategy="fsdp",
        ppo_mini_batch_size=4,
        rollout_n=1,
        use_dynamic_bsz=True,
        clip_ratio_low=c.clip_ratio_low,
        clip_ratio_high=c.clip_ratio_high,
        clip_ratio_c=NO_DUAL_CLIP if c.clip_ratio_c is None else c.clip_ratio_c,
        loss_agg_mode=mode or c.loss_agg_mode,
    )


def _losses(name: str, fn, seed: int, spread: float, adv_kind: str) -> None:
    """Our policy loss and verl's ``fn`` on one batch: value and d loss / d log-probs."""
    alg = get_algorithm(name, kl_loss_coef=0.0)
    b = _batch(seed)
    mask = b["mask"]
    if adv_kind == "algorithm":  # one advantage per response, as the algorithm computes it
        adv, _ = alg.advantages(b["rewards"], mask, b["group"], token_kl=b["token_kl"])
    else:  # a different advantage on every token (verl's functions take (B, T))
        adv = torch.randn(mask.shape, generator=torch.Generator().manual_seed(seed + 50))
        adv = adv.double() * mask
    new = torch.where(mask > 0, b["old"] + spread * b["noise"], b["old"])
    ours_lp = new.clone().requires_grad_(True)
    loss, metrics = alg.policy_loss(ours_lp, b["old"], adv, mask)
    loss.backward()
    theirs_lp = new.clone().requires_grad_(True)
    their_loss, their_metrics = fn(
        b["old"], theirs_lp, adv, mask, loss_agg_mode=alg.config.loss_agg_mode,
        config=_actor_config(alg),
    )  # fmt: skip
    their_loss.backward()
    _record(name, "loss", loss, their_loss)
    _record(name, "grad", ours_lp.grad, theirs_lp.grad, mask > 0)
    _record(name, "clip_frac", torch.tensor(metrics["train/clip_frac"]),
            torch.tensor(float(their_metrics["actor/pg_clipfrac"])))  # fmt: skip
    assert metrics["train/approx_kl"] == pytest.approx(their_metrics["actor/ppo_kl"], abs=ATOL)


# --- policy losses -----------------------------------------------------------------------------


LOSSES = {
    "gspo": core_algos.compute_policy_loss_gspo,
    "cispo": core_algos.compute_policy_loss_cispo,
    "gmpo": core_algos.compute_policy_loss_geo_mean,
    "dr_grpo": core_algos.compute_policy_loss_vanilla,
    "grpo2": core_algos.compute_policy_loss_vanilla,
    "reinforce_pp": core_algos.compute_policy_loss_vanilla,
    "reinforce_pp_baseline": core_algos.compute_policy_loss_vanilla,
}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("spread", SPREADS)
@pytest.mark.parametrize("adv_kind", ["algorithm", "per-token"])
@pytest.mark.parametrize("name", list(LOSSES))
def test_policy_loss_and_gradient_equal_verl(name, seed, spread, adv_kind):
    _losses(name, LOSSES[name], seed, spread, adv_kind)


def test_gspo_matches_verl_whatever_the_aggregation():
    """verl 0.9.1's GSPO aggregates with the actor's ``loss_agg_mode`` (token-mean by default);
    the registry's default is the paper's seq-mean-token-mean, and every mode agrees."""
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        alg = get_algorithm("gspo", loss_agg_mode=mode)
        b = _batch(7)
        mask = b["mask"]
        adv, _ = alg.advantages(b["rewards"], mask, b["group"])
        lp = (b["old"] + 0.01 * b["noise"]).requires_grad_(True)
        loss, _ = alg.policy_loss(lp, b["old"], adv, mask)
        theirs, _ = core_algos.compute_policy_loss_gspo(
            b["old"], lp, adv, mask, loss_agg_mode=mode, config=_actor_config(alg, mode)
        )
        _record("gspo", "loss", loss, theirs)


# --- advantages --------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", ["gspo", "cispo", "gmpo", "dr_grpo", "grpo2"])
def test_group_advantages_equal_verl_grpo(name, seed):
    alg = get_algorithm(name)
    b = _batch(seed)
    ours, returns = alg.advantages(b["rewards"], b["mask"], b["group"])
    theirs, _ = core_algos.compute_grpo_outcome_advantage(
        b["token_rewards"], b["mask"], b["uids"], norm_adv_by_std_in_grpo=alg.config.norm_adv_by_std
    )
    assert returns is None
    _record(name, "advantages", ours, theirs * b["mask"])


def _kl_rewards(b: dict, kl_coef: float) -> torch.Tensor:
    """verl's ``apply_kl_penalty``: token-level scores minus beta * KL on response tokens."""
    return b["token_rewards"] - kl_coef * b["token_kl"] * b["mask"]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma", [1.0, 0.9])
@pytest.mark.parametrize("kl_in_reward", [True, False])
def test_reinforce_pp_equals_verl(seed, gamma, kl_in_reward):
    alg = get_algorithm("reinforce_pp", gamma=gamma, kl_in_reward=kl_in_reward)
    b = _batch(seed)
    kl_coef = alg.config.kl_coef if kl_in_reward else 0.0
    ours, _ = alg.advantages(b["rewards"], b["mask"], None, token_kl=b["token_kl"])
    theirs, _ = core_algos.compute_reinforce_plus_plus_outcome_advantage(
        _kl_rewards(b, kl_coef), b["mask"], config=AlgoConfig(gamma=gamma)
    )
    _record("reinforce_pp", "advantages", ours, theirs)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kl_in_reward", [True, False])
def test_reinforce_pp_baseline_equals_verl(seed, kl_in_reward):
    alg = get_algorithm("reinforce_pp_baseline", kl_in_reward=kl_in_reward)
    b = _batch(seed)
    kl_coef = alg.config.kl_coef if kl_in_reward else 0.0
    ours, _ = alg.advantages(b["rewards"], b["mask"], b["group"], token_kl=b["token_kl"])
    theirs, _ = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(
        _kl_rewards(b, kl_coef), b["mask"], b["uids"]
    )
    _record("reinforce_pp_baseline", "advantages", ours, theirs)


def test_every_registered_algorithm_with_a_verl_counterpart_is_compared():
    """A new algorithm mapped onto a verl function must be added here."""
    from benchmarks.verl_engine.translate import BUILTIN

    compared = set(LOSSES) | {"gspo", "cispo", "gmpo", "dr_grpo", "grpo2"}
    first_six = {"grpo", "rloo", "remax", "ppo", "dapo", "sppo"}  # test_verl_engine.py
    assert set(BUILTIN) - first_six == compared
