"""``algorithm.<name>.critic``: an algorithm's own critic settings (its tuned defaults) take the
place of ``trainer.critic_*`` for that algorithm only."""

from __future__ import annotations

import pytest

from benchmarks.config import compose_config
from benchmarks.suite.plan import validate


def _trainers(*overrides: str) -> dict:
    return validate(compose_config(["algorithm=[sppo,ppo,grpo]", *overrides])).trainer


@pytest.mark.slow  # a suite's plan composed and validated: ~5-7 s
def test_an_algorithms_own_critic_settings_win_for_it_alone():
    t = _trainers(
        "trainer.critic_epochs=4",
        "trainer.critic_head_init=zero",
        "algorithm.sppo.critic.epochs=2",
        "algorithm.sppo.critic.head_init=start_success",
        "algorithm.ppo.critic.epochs=null",
        "algorithm.ppo.critic.head_init=null",
    )
    assert (t["sppo"].critic_epochs, t["sppo"].critic_head_init) == (2, "start_success")
    # null in the algorithm's node leaves trainer's value
    assert (t["ppo"].critic_epochs, t["ppo"].critic_head_init) == (4, "zero")
    assert t["grpo"].critic_epochs == 4  # no critic: trainer's value, unused


@pytest.mark.slow  # a suite's plan composed and validated: ~5-7 s
def test_a_suites_tuned_values_replace_the_files_defaults_and_the_command_line_wins():
    """``tuned.<algorithm>``: a suite's own values for the algorithms it runs; an algorithm the
    suite tuned but the run does not select stays out; ``algorithm.<name>.<key>=`` still wins."""
    base = validate(compose_config(["algorithm=[sppo,ppo,grpo]"]))
    plan = validate(
        compose_config(
            [
                "algorithm=[sppo,ppo]",
                "+tuned={ppo: {actor_lr: 3.0e-4, critic_lr: 1.0e-3, critic: {head_init: normal}},"
                " grpo: {actor_lr: 5.0e-4}, sppo: {critic: {epochs: 2}}}",
                "algorithm.sppo.actor_lr=2.0e-4",
            ]
        )
    )
    assert sorted(plan.algorithms) == ["ppo", "sppo"]
    ppo, sppo = plan.trainer["ppo"], plan.trainer["sppo"]
    assert (ppo.actor_lr, ppo.critic_lr, ppo.critic_head_init) == (3.0e-4, 1.0e-3, "normal")
    assert ppo.critic_epochs == base.trainer["ppo"].critic_epochs  # not tuned: the file's
    assert sppo.actor_lr == 2.0e-4  # the command line beats the file's default
    assert sppo.critic_epochs == 2
    assert sppo.critic_lr == base.trainer["sppo"].critic_lr
