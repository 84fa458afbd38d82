"""The critic of a critic algorithm (PPO's token critic, SPPO's prompt critic): its value model,
its optimizer, its FLOP count, its update step and the diagnostics of whether it learns.

The trainer asks it for values before the update (baselines, GAE, value clipping) and for one
optimizer step per mini-batch; the loss is the algorithm's own (:meth:`Algorithm.value_loss`).
A token critic values every response token (verl's alignment: the value before each token), a
prompt critic only the last prompt token, so it costs a forward over the prompt alone.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import torch

from algorithms import Algorithm, ConfigError
from analysis import metrics as M
from benchmarks.engines.fastdecode import prefix_hidden, supports_backbone
from benchmarks.engines.rollout import Rollout
from benchmarks.engines.teacher_forced import by_length, sequence_inputs
from benchmarks.telemetry.memory import module_memory
from benchmarks.telemetry.meter import ComputeMeter, FlopModel
from benchmarks.training.config import TrainerConfig
from benchmarks.training.modeling import ValueModel
from benchmarks.training.optim import guarded_step
from benchmarks.training.precision import autocast

log = logging.getLogger(__name__)

__all__ = ["Critic", "rollout_flops"]


def rollout_flops(
    fm: FlopModel, ro: Rollout, *, head: bool = True, prompt_only: bool = False
) -> float:
    """FLOPs of one teacher-forced forward over the rollout (x3 with its backward): prompt plus
    response, the head on the response tokens; ``prompt_only``, over each prompt alone."""
    plens = ro.prompt_mask.sum(-1).long().tolist()
    rlens = ro.lengths.tolist()
    if prompt_only:
        return float(sum(fm.forward(p, 0, logits=1, head=False) for p in plens))
    return float(
        sum(fm.forward(p + r, 0, logits=r, head=head) for p, r in zip(plens, rlens, strict=True))
    )


class Critic:
    """A :class:`ValueModel` on ``base`` (a copy: the policy's, or a smaller model sharing the
    policy's tokenizer), with its optimizer and its share of the compute meter."""

    def __init__(
        self,
        base: torch.nn.Module,
        *,
        algorithm: Algorithm,
        config: TrainerConfig,
        meter: ComputeMeter,
        tokenizer_size: int,
        precision: str = "fp32",
        seed: int = 0,
    ) -> None:
        vocab = getattr(base.config, "vocab_size", None)
        if vocab is not None and vocab < tokenizer_size:
            raise ConfigError(
                f"trainer.critic_model: the critic's vocabulary ({vocab} tokens) is smaller "
                f"than the policy's tokenizer ({tokenizer_size}); the critic must share the "
                "policy's tokenizer"
            )
        self.alg, self.kind = algorithm, algorithm.critic  # kind: "prompt" or "token"
        self.cfg, self.meter = config, meter
        #: The backbone's matmuls run in it (``fp32`` or ``bf16``); the head, the values and the
        #: value loss (BCE, MSE) are fp32 at either.
        self.precision = precision
        self.model = ValueModel(base)
        if config.critic_head_init == "normal":
            self._normal_head(seed)
        lr = config.critic_lr if config.critic_lr is not None else algorithm.critic_lr
        self.opt = torch.optim.AdamW(
            self.model.parameters(), lr=lr, weight_decay=config.weight_decay
        )
        self.fm = FlopModel.from_config(self.model.config)
        #: The head as initialised: how far training moved it is a diagnostic of whether the
        #: critic learns at all (``critic/head_delta_*``).
        self.head0 = self._head_vector()

    def values(self, ro: Rollout) -> torch.Tensor:
        """Token critic: (B, T) values before each response token. Prompt critic: (B,) logit at
        the last prompt token (prompts are left-padded, so that is the last prompt column).
        fp32, the backbone's matmuls under the precision's autocast."""
        with autocast(self.precision):
            return self._values(ro)

    def _values(self, ro: Rollout) -> torch.Tensor:
        critic = self.model
        if self.kind == "prompt":
            mask = ro.prompt_mask.long()
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            return critic(ro.prompt_ids, mask, pos)[:, -1]
        if supports_backbone(critic.backbone):  # Llama: the policy's fast teacher-forced path

            def values(
                pi: torch.Tensor, pm: torch.Tensor, ri: torch.Tensor, rm: torch.Tensor
            ) -> tuple[torch.Tensor]:
                return (critic.value_head(prefix_hidden(critic.backbone, pi, pm, ri)),)

            (v,) = by_length(
                values,
                ro.prompt_ids,
                ro.prompt_mask,
                ro.response_ids,
                ro.response_mask,
                self.cfg.length_buckets,
            )
            return v
        ids, mask, pos = sequence_inputs(
            ro.prompt_ids, ro.prompt_mask, ro.response_ids, ro.response_mask
        )
        P, T = ro.prompt_ids.shape[1], ro.response_ids.shape[1]
        return critic(ids, mask, pos)[:, P - 1 : P - 1 + T]

    def flops(self, ro: Rollout) -> float:
        """FLOPs of one forward of :meth:`values` over the rollout (no LM head)."""
        return rollout_flops(self.fm, ro, head=False, prompt_only=self.kind == "prompt")

    def update(
        self, sub: Rollout, returns: torch.Tensor, old_values: torch.Tensor | None
    ) -> tuple[dict[str, float], str | None]:
        """One optimizer step; returns its metrics and what was non-finite, if anything."""
        with self.meter.phase("critic", flops=3 * self.flops(sub)):  # forward + backward
            v = self.values(sub)
            vloss, vm = self.alg.value_loss(v, returns, sub.response_mask, old_values)
            gn, failed = guarded_step(
                vloss, self.opt, self.model.parameters(), self.cfg.grad_clip, "critic"
            )
            if gn is not None:
                vm[M.CRITIC_GRAD_NORM] = gn
        return vm, failed

    # ------------------------------------------------------------------ the head

    def _head_vector(self) -> torch.Tensor:
        h = self.model.head
        return torch.cat([h.weight.detach().flatten(), h.bias.detach().flatten()]).clone()

    @torch.no_grad()
    def _normal_head(self, seed: int) -> None:
        """``trainer.critic_head_init=normal``: HF's initialisation of a token-classification
        head (weights ~ N(0, initializer_range), bias 0), drawn from a generator of its own so
        the run's other random streams are the same as with any other head."""
        std = float(getattr(self.model.config, "initializer_range", 0.02))
        gen = torch.Generator().manual_seed(seed)
        w = self.model.head.weight
        w.copy_(torch.randn(w.shape, generator=gen, dtype=torch.float32).to(w.dtype) * std)
        self.model.head.bias.zero_()

    @torch.no_grad()
    def init_head(self, scores: torch.Tensor) -> None:
        """``trainer.critic_head_init=start_success``: the bias at the first batch's mean
        success s (logit(s) for a prompt critic, s for a token critic), the weights at 0, so
        the critic starts as the best constant predictor (see ``CRITIC_HEAD_INITS``)."""
        s = float(scores.float().mean())
        if self.kind == "prompt":
            s = min(max(s, 1e-3), 1 - 1e-3)
            bias = math.log(s / (1 - s))
        else:
            bias = s
        self.model.head.weight.zero_()
        self.model.head.bias.fill_(bias)
        self.head0 = self._head_vector()
        log.info("critic head initialised at bias %.4f (first batch's success %.4f)", bias, s)

    # ------------------------------------------------------------------ diagnostics

    def prediction_std(self, values: torch.Tensor) -> float:
        """Spread of the predictions over the batch: of sigmoid(v) for a prompt critic, of the
        value at the first response token for a token critic. Near 0, the critic predicts one
        number for every prompt."""
        pred = torch.sigmoid(values) if self.kind == "prompt" else values[:, 0]
        return float(pred.double().std(unbiased=False)) if pred.numel() else 0.0

    def metrics(self) -> dict[str, float]:
        """How far training moved the head from its initialisation."""
        delta = self._head_vector() - self.head0
        return {
            M.CRITIC_HEAD_DELTA_NORM: float(delta.double().norm()),
            M.CRITIC_HEAD_DELTA_MAX: float(delta.abs().max()),
        }

    def memory(self) -> dict[str, int]:
        """Bytes of the parameters, gradients and optimizer state (:func:`module_memory`)."""
        return module_memory(self.model, self.opt)

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        """The weights and optimizer, under the trainer checkpoint's keys; the initial head only
        when ``trainer.critic_head_init`` is not the zero head (a default checkpoint keeps the
        layout it always had). The tensors are the live ones, as torch's are."""
        return {
            "critic": self.model.state_dict(),
            "critic_optimizer": self.opt.state_dict(),
            **({"critic_head_init": self.head0} if self.cfg.critic_head_init != "zero" else {}),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["critic"])
        self.opt.load_state_dict(state["critic_optimizer"])
        if "critic_head_init" in state:  # absent: the zero head
            self.head0 = state["critic_head_init"].clone()
