"""The tiny policy and the dense-reward task that the trainer's step tests share."""

from __future__ import annotations

import pytest

from benchmarks.training.modeling import build_tiny_llama
from testkit.trainers import SPEC, FirstDigitTask


@pytest.fixture(scope="module")
def start(tok):
    """The one-layer tiny Llama every step starts from (built once per module: cheap, and a
    module that trains it in place cannot leak into another)."""
    return build_tiny_llama(SPEC, len(tok), seed=0)


@pytest.fixture(scope="module")
def dense():
    """Arith problems graded by their first digit: a reward on most samples, so every step has
    advantages to train on."""
    return FirstDigitTask(horizon=1, eval_size=16)
