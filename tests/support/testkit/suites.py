"""The micro suite: small enough for a test (< 60 s on 2 cores), yet it runs every phase."""

from __future__ import annotations

MICRO = [
    "warmstart.phases=[{steps:40,direct_fraction:0.0},{steps:10,direct_fraction:0.6}]",
    "warmstart.eval_every=50",
    "seeds=1",
    "warmstart.val_size=64",
    # One horizon: the default's mix of four would multiply the held-out set and the chain length.
    "task.horizon=2",
    "task.eval_size=200",
    "trainer.samples_per_step=32",
    "budget.limit=256",
    "budget.eval_fractions=[0.0,0.5,1.0]",
    "suite.report=false",
    "algorithm.dapo.params.group_size=4",
    # At most 3 x 32 samples per DAPO step (dynamic sampling refills): no step can cross 0.5 and
    # 1.0 at once, so every algorithm is evaluated at every fraction whatever the draws.
    "algorithm.dapo.params.max_gen_batches=3",
]
