"""sppo-bench inside verl: the SPPO trainer and the registry wrappers, registered on import.

verl 0.9.1 imports every entry point of the group ``verl.plugins`` when ``import verl`` runs
(``verl/__init__.py``; a failing plugin is only logged at DEBUG, so the tests check the
registration itself), in the launcher *and* in every Ray worker. This module is that entry point
(``pyproject.toml``), so nothing in verl is forked or patched. It registers:

* ``trainer.v1.trainer_mode=sppo`` (:class:`SPPOTrainer`): verl's synchronous trainer with
  SPPO's advantage step and critic loss. A registered advantage estimator never receives the
  critic's ``values`` (``ray_trainer.compute_advantage`` passes rewards, mask, uid and config
  only), hence a trainer subclass. ``values[:, 0]`` is the critic's output at the last prompt
  token (``verl/workers/utils/padding.py`` slices model outputs shifted left by one), so with a
  causal critic it depends on the prompt only: SPPO's prompt critic, read as a logit.
* the estimator ``sppo_bench.<name>`` for every registry algorithm that verl has no built-in for,
  and the policy loss ``sppo_bench.<name>`` for those with an objective of their own (they
  override ``policy_loss`` or ``surrogate``): thin
  wrappers around ``algorithms.get_algorithm`` (configured from ``SPPO_BENCH_VERL_ALGORITHM``,
  set by :mod:`benchmarks.verl_engine.translate`), so a user's algorithm runs on verl without
  verl-specific code.

Simplifications versus the SPPO paper's verl fork (sustech-nlp/SPPO): the critic reads the full
sequence and we take its output at the last prompt token, rather than running a prompt-only
forward pass (``dp_critic._forward_prompt_value``); with causal attention the value is the same,
at the cost of the critic's forward over the response tokens.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import json
import logging
import os
import sys
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from algorithms import Algorithm, get_algorithm, list_algorithms
from benchmarks.verl_engine.translate import (
    ALGORITHM_ENV,
    BUILTIN,
    PLUGINS_ENV,
    SPPO_TRAINER_MODE,
    has_own_policy_loss,
    wrapper_name,
)

__all__ = [
    "configured_algorithm",
    "global_scale",
    "make_estimator",
    "make_policy_loss",
    "prompt_value_loss",
    "register_all",
    "sppo_advantages",
]

logger = logging.getLogger(__name__)


# --- the configured algorithm ------------------------------------------------------------------


@functools.cache
def configured_algorithm(name: str) -> Algorithm:
    """``name`` built with the params the launcher passed in ``SPPO_BENCH_VERL_ALGORITHM``
    (its registry defaults when the variable names another algorithm or is unset)."""
    spec = json.loads(os.environ.get(ALGORITHM_ENV) or "{}")
    if spec.get("name") == name:
        return get_algorithm(name, **spec.get("params", {}))
    logger.warning("%s does not configure %r: using its registry defaults", ALGORITHM_ENV, name)
    return get_algorithm(name)


def _import_user_plugins() -> None:
    """Import the suite's ``plugins`` modules (they register algorithms) in this process."""
    modules = [m for m in os.environ.get(PLUGINS_ENV, "").split(",") if m]
    if modules and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module in modules:
        importlib.import_module(module)


# --- pure functions (CPU-testable) -------------------------------------------------------------


def sppo_advantages(
    alg: Algorithm, token_scores: Tensor, values: Tensor, response_mask: Tensor
) -> tuple[Tensor, Tensor, dict[str, float]]:
    """SPPO's advantage step on verl's padded tensors, through the registry's ``sppo``.

    Args:
        alg: the registry's SPPO (or any algorithm with a ``"prompt"`` critic).
        token_scores: ``(B, T)`` verl's ``rm_scores`` (the outcome reward on the last token).
        values: ``(B, T)`` critic outputs at response positions; ``values[:, 0]`` is the logit
            at the last prompt token.
        response_mask: ``(B, T)``.

    Returns:
        ``(advantages (B, T), returns (B, T), metrics)``: ``R - sigmoid(v)`` on valid tokens,
        ``R`` broadcast on every position (the value loss reads ``returns[:, 0]``), and the
        critic's pre-update calibration metrics under the suite's names (``critic/loss``,
        ``critic/value_mean``, ``critic/calibration_error``, ``critic/explained_variance``).
    """
    rewards = token_scores.sum(-1).float()  # (B,)
    logits = values[:, 0].float()  # (B,)
    mask = response_mask.bool()
    adv, _ = alg.advantages(rewards, mask, None, values=logits)  # (B, T)
    returns = rewards[:, None].expand(mask.shape).clone()  # (B, T)
    with torch.no_grad():
        _, metrics = alg.value_loss(logits, rewards.clamp(0.0, 1.0))
    return adv.to(token_scores.dtype), returns.to(token_scores.dtype), metrics


def global_scale(loss_agg_mode: str, response_mask: Tensor, global_batch_info: dict) -> float:
    """Factor turning a *local* mean loss (our ``agg_loss`` over this micro-batch) into verl's
    global-batch normalisation (``core_algos.agg_loss`` with ``dp_size``, ``batch_num_tokens``,
    ``global_batch_size``), so gradients do not depend on the micro-batch split.

    ``token-mean``: local tokens / global tokens * dp_size; sequence means: local sequences (with
    at least one valid token) / global sequences * dp_size; 1 when verl gives no global count.
    """
    dp_size = int(global_batch_info.get("dp_size") or 1)
    mask = response_mask.bool()
    if loss_agg_mode == "token-mean":
        total = global_batch_info.get("batch_num_tokens")
        local = float(mask.sum())
    else:
        total = global_batch_info.get("global_batch_size")
        local = float((mask.sum(-1) > 0).sum())
    if total is None:
        return 1.0
    return local / float(total) * dp_size


def make_estimator(name: str):  # verl's estimator signature
    """A verl advantage estimator computing registry algorithm ``name``'s advantages."""

    def estimator(
        token_level_rewards: Tensor,
        response_mask: Tensor,
        index: np.ndarray | None = None,
        config: Any = None,
        **kwargs: Any,
    ) -> tuple[Tensor, Tensor]:
        alg = configured_algorithm(name)
        rewards = token_level_rewards.sum(-1).float()  # (B,) outcome reward
        group_ids = None
        if index is not None:
            _, inverse = np.unique(np.asarray([str(u) for u in index]), return_inverse=True)
            group_ids = torch.as_tensor(inverse, device=rewards.device)
        adv, returns = alg.advantages(rewards, response_mask.bool(), group_ids)
        adv = adv.to(token_level_rewards.dtype)
        if returns is None or returns.shape != adv.shape:
            returns = adv  # critic-free: verl stores "returns" but nothing trains on them
        return adv, returns.to(token_level_rewards.dtype)

    estimator.__name__ = f"sppo_bench_{name}_advantage"
    return estimator


def make_policy_loss(name: str):  # verl's PolicyLossFn signature
    """A verl policy loss calling registry algorithm ``name``'s ``policy_loss``, rescaled to
    verl's global-batch normalisation (:func:`global_scale`). The KL term stays verl's
    (``actor.use_kl_loss``), so the wrapper passes no reference log-probs."""

    def policy_loss(
        old_log_prob: Tensor,
        log_prob: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, Any]]:
        if rollout_is_weights is not None:
            raise NotImplementedError(
                f"sppo_bench.{name}: rollout-correction weights are not supported by the "
                "registry wrapper; unset algorithm.rollout_correction"
            )
        alg = configured_algorithm(name)
        loss, metrics = alg.policy_loss(log_prob, old_log_prob, advantages, response_mask)
        info = dict(getattr(config, "global_batch_info", None) or {})
        loss = loss * global_scale(alg.config.loss_agg_mode, response_mask, info)
        return loss, {f"actor/{k.split('/', 1)[-1]}": v for k, v in metrics.items()}

    policy_loss.__name__ = f"sppo_bench_{name}_policy_loss"
    return policy_loss


def prompt_value_loss(config: Any, model_output: Any, data: Any, dp_group: Any = None):
    """SPPO's critic loss for verl's critic worker (``critic_wg.set_loss_fn``): BCE-with-logits
    between the critic's output at the last prompt token and the outcome reward, averaged over
    the global mini-batch's sequences (verl's ``agg_loss`` in ``seq-mean-token-sum`` mode on one
    "token" per sequence)."""
    from verl.trainer.ppo.core_algos import agg_loss
    from verl.utils.metric import AggregationType, Metric
    from verl.workers.utils.padding import no_padding_2_padding

    vpreds = no_padding_2_padding(model_output["values"], data)  # (B, T)
    dp_size = data["dp_size"]
    batch_num_tokens = data["batch_num_tokens"]
    global_batch_size = data["global_batch_size"]
    padded = data.select("returns", "response_mask").to_padded_tensor()
    logits = vpreds[:, 0].float()  # (B,) the value logit at the last prompt token
    targets = padded["returns"][:, 0].to(logits.dtype).clamp(0.0, 1.0)  # (B,) R
    bce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")  # (B,)
    loss = agg_loss(
        loss_mat=bce[:, None],
        loss_mask=torch.ones_like(bce[:, None]),
        loss_agg_mode="seq-mean-token-sum",
        dp_size=dp_size,
        global_batch_size=global_batch_size,
    )
    global_norm = dp_size > 1 or batch_num_tokens is not None or global_batch_size is not None
    aggregation = AggregationType.SUM if global_norm else AggregationType.MEAN
    metrics = {
        "critic/vf_loss": Metric(value=loss, aggregation=aggregation),
        "critic/vpred_mean": torch.sigmoid(logits).mean().detach().item(),
    }
    return loss, metrics


# --- verl registrations ------------------------------------------------------------------------


def _sppo_estimator_guard(*args: Any, **kwargs: Any) -> Any:
    raise ValueError(
        f"algorithm.adv_estimator={wrapper_name('sppo')} needs the SPPO trainer: set "
        f"trainer.v1.trainer_mode={SPPO_TRAINER_MODE} (the critic values are only available there)"
    )


def register_all() -> list[str]:
    """Register the wrappers for every registry algorithm verl has no built-in for; idempotent.
    Returns the estimator names registered by this call."""
    from verl.trainer.ppo import core_algos

    from algorithms import algorithm_class

    done = []
    if wrapper_name("sppo") not in core_algos.ADV_ESTIMATOR_REGISTRY:
        core_algos.register_adv_est(wrapper_name("sppo"))(_sppo_estimator_guard)
        done.append(wrapper_name("sppo"))
    for name in list_algorithms():
        key = wrapper_name(name)
        if name in BUILTIN or key in core_algos.ADV_ESTIMATOR_REGISTRY:
            continue
        core_algos.register_adv_est(key)(make_estimator(name))
        done.append(key)
        if has_own_policy_loss(algorithm_class(name)):
            core_algos.register_policy_loss(key)(make_policy_loss(name))
    return done


_TRAINER_MODULE = "verl.trainer.ppo.v1.trainer_base"


def _register_trainer() -> None:
    """Register :class:`SPPOTrainer` with verl's v1 trainer registry (idempotent)."""
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY, register_trainer
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    if SPPO_TRAINER_MODE in TRAINER_REGISTRY:
        return

    @register_trainer(SPPO_TRAINER_MODE)
    class SPPOTrainer(PPOTrainerSync):
        """verl's synchronous trainer with SPPO's advantage and critic loss (module docstring)."""

        def __init__(self, config: Any) -> None:
            super().__init__(config)
            if not self.use_critic:
                raise ValueError("trainer.v1.trainer_mode=sppo needs critic.enable=True")
            if self.config.algorithm.use_kl_in_reward:
                raise ValueError("trainer.v1.trainer_mode=sppo: SPPO uses no KL in the reward")
            self.algorithm = configured_algorithm("sppo")

        def _build_replay_buffer(self):
            # verl reads trainer_mode both as the registry key and as the sync/async switch
            # (`self.trainer_mode == "sync"` in the base class): this trainer is synchronous.
            self.trainer_mode = "sync"
            return super()._build_replay_buffer()

        def _setup(self) -> None:
            from verl.utils.config import omega_conf_to_dataclass

            super()._setup()
            critic_cfg = omega_conf_to_dataclass(self.config.critic)
            self.critic_wg.set_loss_fn(functools.partial(prompt_value_loss, config=critic_cfg))

        def _compute_advantage(self, batch, metrics: dict):
            import transfer_queue as tq
            from tensordict import TensorDict
            from verl.workers.utils.padding import response_to_nested

            data = tq.kv_batch_get(
                keys=batch.keys,
                partition_id=batch.partition_id,
                select_fields=["response_mask", "rm_scores", "values"],
            )
            nested_mask = data["response_mask"]
            padded = data.to_padded_tensor()
            adv, returns, critic_metrics = sppo_advantages(
                self.algorithm, padded["rm_scores"], padded["values"], padded["response_mask"]
            )
            metrics.update(critic_metrics)
            output = TensorDict(
                {
                    "advantages": response_to_nested(adv, nested_mask),
                    "returns": response_to_nested(returns, nested_mask),
                },
                batch_size=len(batch),
            )
            return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=output)


class _AfterImport(importlib.abc.MetaPathFinder):
    """A post-import hook: runs ``callback`` right after ``module`` is first executed.

    Importing verl's v1 trainer pulls in Ray, TransferQueue and the agent loop; doing that in
    ``import verl`` (where entry points load) would slow down every verl process, including the
    vLLM workers, and fail where TransferQueue is absent. So the SPPO trainer is registered when,
    and only if, something imports the trainer registry (``main_ppo``'s TaskRunner does).
    """

    def __init__(self, module: str, callback: Any) -> None:
        self.module, self.callback, self._busy = module, callback, False

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.module or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy = False
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _CallbackLoader(spec.loader, self.callback)
        return spec


class _CallbackLoader(importlib.abc.Loader):
    """Delegates to the real loader, then calls back (see :class:`_AfterImport`)."""

    def __init__(self, loader: Any, callback: Any) -> None:
        self._loader, self._callback = loader, callback

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        self._callback()

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, ... for tracebacks
        return getattr(self._loader, name)


def _register_trainer_when_imported() -> None:
    if _TRAINER_MODULE in sys.modules:
        _register_trainer()
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(_TRAINER_MODULE, _register_trainer))


def _load() -> None:
    try:
        _import_user_plugins()
    except Exception:  # a broken user module must not hide the SPPO trainer
        logger.exception("sppo-bench: importing %s failed", os.environ.get(PLUGINS_ENV))
    register_all()
    _register_trainer_when_imported()


_load()
