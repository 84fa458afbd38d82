"""`engine.rollout` and the vLLM settings are checked before any compute, naming the field.

The vLLM engine itself is tested for real in tests/vllm_tests (second venv, `make test-vllm`).
"""

from __future__ import annotations

import pytest

from algorithms import ConfigError
from benchmarks.config import compose_config
from benchmarks.engines.factory import check_rollout_config, make_engine_factory
from benchmarks.engines.torch_engine import TorchEngine
from benchmarks.engines.vllm_engine import VllmSettings, request_seeds, vllm_available
from benchmarks.suite.components import TorchEngineConfig
from benchmarks.suite.plan import as_dict, validate


def test_default_config_uses_the_torch_engine(tok):
    cfg = compose_config([])
    assert cfg.engine.rollout == "torch"
    engine = TorchEngineConfig.from_node(as_dict(cfg.engine))
    assert (engine.rollout, engine.vllm) == ("torch", None)
    factory = make_engine_factory(tok, rollout=engine.rollout, batch_size=engine.rollout_batch_size)
    made = factory(object())
    assert isinstance(made, TorchEngine) and made.batch_size == cfg.engine.rollout_batch_size


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


def test_logprob_mismatch_counts_response_tokens_only():
    import torch

    from analysis import metrics as M
    from benchmarks.training.trainer import rollout_logprob_mismatch

    sampler = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
    trainer = torch.tensor([[-1.1, -2.0, -9.0], [-0.2, -9.0, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    m = rollout_logprob_mismatch(sampler, trainer, mask)
    assert m[M.TRAIN_ROLLOUT_LOGPROB_DIFF_MEAN] == pytest.approx((0.1 + 0.0 + 0.3) / 3)
    assert m[M.TRAIN_ROLLOUT_LOGPROB_DIFF_MAX] == pytest.approx(0.3)
    empty = rollout_logprob_mismatch(sampler, trainer, torch.zeros_like(mask))
    assert empty[M.TRAIN_ROLLOUT_LOGPROB_DIFF_MAX] == 0.0
