"""``algorithm.<name>.critic``: an algorithm's own critic settings (its tuned defaults) take the
place of ``trainer.critic_*`` for that algorithm only."""

from __future__ import annotations

from benchmarks.config import compose_config
from benchmarks.suite.plan import validate


def _trainers(*overrides: str) -> dict:
    return validate(compose_config(["algorithm=[sppo,ppo,grpo]", *overrides])).trainer


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
