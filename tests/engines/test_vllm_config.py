"""`engine.rollout` and the vLLM settings are checked before any compute, naming the field.

The vLLM engine itself is tested for real in tests/vllm_tests (second venv, `make test-vllm`).
"""

from __future__ import annotations

import os

import pytest

from algorithms import ConfigError
from benchmarks.config import compose_config
from benchmarks.engines.factory import check_rollout_config, make_engine_factory
from benchmarks.engines.torch_engine import TorchEngine
from benchmarks.engines.vllm_engine import VllmSettings, request_seeds, vllm_available
from benchmarks.suite.plan import validate


def test_default_config_uses_the_torch_engine(tok):
    cfg = compose_config([])
    assert cfg.engine.rollout == "torch"
    factory = make_engine_factory(cfg.engine, tok)
    assert isinstance(factory(object()), TorchEngine)


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("engine.rollout=sglang", ["engine.rollout", "torch", "vllm"]),
        (
            "engine.vllm.gpu_memory_utilization=1.5",
            ["engine.vllm.gpu_memory_utilization", "(0, 1]"],
        ),
        ("engine.vllm.dtype=int8", ["engine.vllm.dtype", "bfloat16"]),
        ("engine.vllm.kv_cache_gib=0", ["engine.vllm.kv_cache_gib"]),
    ],
)
def test_bad_vllm_settings_fail_before_compute(override, words):
    cfg = compose_config(
        ["engine.rollout=vllm", override] if "rollout" not in override else [override]
    )
    with pytest.raises(ConfigError) as e:
        check_rollout_config(cfg.engine)
    for w in words:
        assert w in str(e.value)


def test_unknown_vllm_key_is_named():
    from omegaconf import OmegaConf

    cfg = compose_config(["engine.rollout=vllm"])
    OmegaConf.set_struct(cfg, False)
    cfg.engine.vllm.swap_space = 4
    with pytest.raises(ConfigError, match=r"engine\.vllm\.swap_space: unknown key"):
        check_rollout_config(cfg.engine)


@pytest.mark.skipif(vllm_available(), reason="vLLM is installed here: the error cannot occur")
def test_vllm_rollout_without_vllm_says_how_to_install():
    cfg = compose_config(["engine.rollout=vllm"])
    with pytest.raises(
        ConfigError, match=r"engine.rollout=vllm: vllm is not installed.*install-vllm"
    ):
        validate(cfg)


def test_vllm_settings_defaults_are_valid():
    s = VllmSettings()
    assert s.device == "cpu" and s.dtype == "auto" and 0 < s.gpu_memory_utilization <= 1
    with pytest.raises(ConfigError, match="engine.device"):
        VllmSettings(device="tpu")


def test_request_seeds_are_a_function_of_seed_and_index():
    a, b = request_seeds(7, 64), request_seeds(7, 64)
    assert a == b and len(set(a)) == 64  # distinct streams within a call (a group's samples)
    assert request_seeds(7, 8) == a[:8]  # a prefix does not depend on the batch size
    assert request_seeds(8, 8) != a[:8]
    assert all(0 <= s < 2**63 for s in a)


def test_an_engine_start_leaves_the_callers_random_streams_alone(monkeypatch):
    """vLLM seeds the global generators when it starts in-process; the trainer's must not move."""
    import random

    import numpy as np
    import torch

    from benchmarks.engines.vllm_engine import _starting

    for var in ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_KVCACHE_SPACE", "VLLM_LOGGING_LEVEL"):
        monkeypatch.delenv(var, raising=False)
    torch.manual_seed(1)
    random.seed(1)
    np.random.seed(1)
    expected = (torch.rand(3), random.random(), np.random.rand())
    torch.manual_seed(1)
    random.seed(1)
    np.random.seed(1)
    set_threads = torch.set_num_threads
    with _starting(VllmSettings(kv_cache_gib=2)):
        torch.manual_seed(0)  # what vLLM does
        random.seed(0)
        np.random.seed(0)
        torch.set_num_threads = lambda n: None  # what its CPU worker does
        assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
        assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert torch.set_num_threads is set_threads
    got = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(got[0], expected[0]) and got[1:] == expected[1:]


def test_logprob_mismatch_counts_response_tokens_only():
    import torch

    from benchmarks.telemetry import metrics as M
    from benchmarks.training.trainer import rollout_logprob_mismatch

    sampler = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
    trainer = torch.tensor([[-1.1, -2.0, -9.0], [-0.2, -9.0, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    m = rollout_logprob_mismatch(sampler, trainer, mask)
    assert m[M.TRAIN_ROLLOUT_LOGPROB_DIFF_MEAN] == pytest.approx((0.1 + 0.0 + 0.3) / 3)
    assert m[M.TRAIN_ROLLOUT_LOGPROB_DIFF_MAX] == pytest.approx(0.3)
    empty = rollout_logprob_mismatch(sampler, trainer, torch.zeros_like(mask))
    assert empty[M.TRAIN_ROLLOUT_LOGPROB_DIFF_MAX] == 0.0
