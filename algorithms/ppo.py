"""PPO with a token-level critic and GAE (Schulman et al. 2017, arXiv 1707.06347; GAE:
Schulman et al. 2016, arXiv 1506.02438), as verl runs it for LLMs
(``compute_gae_advantage_return``, ``compute_value_loss``, ``apply_kl_penalty``).

* token rewards: 0 everywhere except the outcome ``R`` on the last valid response token, minus
  ``kl_coef * token_kl`` on every valid token when ``kl_in_reward``;
* GAE over valid tokens (``gamma = lam = 1`` by default, i.e. Monte-Carlo returns minus V);
  ``returns = A + V`` are the critic's targets; advantages whitened over the batch's valid
  tokens (verl's ``masked_whiten``);
* value loss ``0.5 * max((V - G)^2, (clip(V, V_old +- cliprange_value) - G)^2)``, token-mean;
* critic warm-up: the harness trains only the critic for ``critic_warmup_steps`` (paper: 50).

Deviations from verl: the outcome reward sits on the last *valid* token (verl: at index
``valid_length - 1``, the same for right-padded masks, but this also handles interleaved
masks); padded positions are skipped by the recursion with ``where`` rather than mask
multiplication, so garbage there cannot leak; advantages and returns are 0 on padding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from algorithms.base import Algorithm, AlgorithmConfig, CriticKind, register_algorithm
from algorithms.common import (
    KLPenalty,
    agg_loss,
    explained_variance,
    masked_mean,
    masked_whiten,
    outcome_at_last_token,
    to_floats,
)
from algorithms.configkit import config_field

__all__ = ["PPO", "PPOConfig", "gae"]


@dataclass(frozen=True, kw_only=True)
class PPOConfig(AlgorithmConfig):
    """PPO hyper-parameters; defaults follow docs/design.md §2 and verl."""

    n: int = config_field(1, "Responses per prompt.", ge=1)
    gamma: float = config_field(1.0, "GAE discount factor.", ge=0.0, le=1.0)
    lam: float = config_field(1.0, "GAE lambda (1 = Monte-Carlo returns).", ge=0.0, le=1.0)
    whiten_advantages: bool = config_field(
        True, "Normalise advantages over the batch's valid tokens (verl's masked_whiten)."
    )
    cliprange_value: float = config_field(
        0.5, "Value clipping: V may move at most this far from V_old per update.", gt=0.0
    )
    critic_warmup_steps: int = config_field(
        50, "Initial steps that train only the critic (paper: 50).", ge=0
    )
    critic_lr: float = config_field(1e-5, "Learning rate of the token critic (verl: 1e-5).", gt=0.0)
    kl_in_reward: bool = config_field(
        False, "Subtract kl_coef * token_kl from the per-token rewards (needs a reference)."
    )
    kl_coef: float = config_field(0.001, "Weight of the KL penalty in the reward.", ge=0.0)
    kl_penalty: KLPenalty = config_field(
        "k1", "KL estimator for token_kl (and any KL loss); verl's in-reward default is k1."
    )


def gae(
    token_rewards: Tensor, values: Tensor, response_mask: Tensor, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over the valid tokens of each row.

    ``delta_t = r_t + gamma * V_next - V_t``, ``A_t = delta_t + gamma * lam * A_next``, where
    "next" is the next *valid* token (0 past the last one), so padding anywhere in a row is
    skipped. One reverse loop over T, vectorised over B (the recursion is sequential in t).

    Args:
        token_rewards: ``(B, T)`` per-token rewards.
        values: ``(B, T)`` critic values V(s_t).
        response_mask: ``(B, T)``.
        gamma: discount in [0, 1].
        lam: GAE lambda in [0, 1].

    Returns:
        ``(advantages (B, T), returns (B, T))``, returns ``= A + V``; both 0 on padding and
        detached.
    """
    with torch.no_grad():
        valid = response_mask != 0
        zero = torch.zeros((), dtype=values.dtype, device=values.device)
        v = torch.where(valid, values.detach(), zero)
        r = torch.where(valid, token_rewards.detach().to(values.dtype), zero)
        next_value = torch.zeros_like(v[:, 0])  # (B,)
        last_adv = torch.zeros_like(v[:, 0])  # (B,)
        adv = torch.zeros_like(v)  # (B, T)
        for t in reversed(range(v.shape[1])):
            delta = r[:, t] + gamma * next_value - v[:, t]
            step_adv = delta + gamma * lam * last_adv
            next_value = torch.where(valid[:, t], v[:, t], next_value)
            last_adv = torch.where(valid[:, t], step_adv, last_adv)
            adv[:, t] = last_adv
        adv = torch.where(valid, adv, zero)
        return adv, torch.where(valid, adv + v, zero)


@register_algorithm("ppo")
class PPO(Algorithm):
    """PPO with a token-level critic, GAE and whitened advantages (see the module docstring)."""

    Config = PPOConfig
    config: PPOConfig
    critic: CriticKind = "token"

    @property
    def kl_in_reward(self) -> bool:
        return self.config.kl_in_reward

    @property
    def critic_warmup_steps(self) -> int:
        return self.config.critic_warmup_steps

    @property
    def critic_lr(self) -> float | None:
        return self.config.critic_lr

    def advantages(
        self,
        rewards: Tensor,
        response_mask: Tensor,
        group_ids: Tensor | None,
        values: Tensor | None = None,
        baseline_rewards: Tensor | None = None,
        token_kl: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """GAE advantages (whitened if configured) and returns ``A + V`` for the critic.

        Args:
            rewards: ``(B,)`` outcome rewards.
            response_mask: ``(B, T)``.
            group_ids: ignored (may be ``None``).
            values: ``(B, T)`` token values (required).
            baseline_rewards: ignored.
            token_kl: ``(B, T)`` per-token KL to the reference, required when ``kl_in_reward``
                (compute it with ``algorithms.common.kl_penalty(old_log_probs, ref_log_probs,
                config.kl_penalty)``).

        Returns:
            ``(advantages (B, T), returns (B, T))``.
        """
        cfg = self.config
        if values is None or values.shape != response_mask.shape:
            got = None if values is None else tuple(values.shape)
            raise ValueError(
                f"ppo: values must be the critic's (B, T) token values "
                f"{tuple(response_mask.shape)}, got {got}"
            )
        token_rewards = outcome_at_last_token(rewards, response_mask)
        if cfg.kl_in_reward:
            if token_kl is None or token_kl.shape != response_mask.shape:
                raise ValueError("ppo: token_kl (B, T) is required when kl_in_reward=True")
            token_rewards = token_rewards - cfg.kl_coef * torch.where(
                response_mask != 0, token_kl.detach(), torch.zeros_like(token_rewards)
            )
        adv, returns = gae(token_rewards, values, response_mask, cfg.gamma, cfg.lam)
        if cfg.whiten_advantages:
            adv = masked_whiten(adv, response_mask)
        return adv, returns

    def value_loss(
        self,
        values: Tensor,
        targets: Tensor,
        response_mask: Tensor | None,
        old_values: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        """Clipped squared error, ``0.5 * max((V - G)^2, (clip(V, V_old +- c) - G)^2)``.

        Args:
            values: ``(B, T)`` current critic values (with grad).
            targets: ``(B, T)`` returns from :meth:`advantages`.
            response_mask: ``(B, T)`` (required).
            old_values: ``(B, T)`` critic values at rollout time; ``None``: no clipping.

        Returns:
            ``(loss, metrics)``: token-mean loss; ``critic/loss``, ``critic/value_mean``,
            ``critic/explained_variance``, ``critic/clip_frac``.
        """
        if response_mask is None:
            raise ValueError("ppo: value_loss needs the (B, T) response_mask")
        shapes = {
            k: tuple(v.shape)
            for k, v in dict(values=values, targets=targets, old_values=old_values).items()
            if v is not None
        }
        if any(s != tuple(response_mask.shape) for s in shapes.values()):
            raise ValueError(f"ppo: expected (B, T) = {tuple(response_mask.shape)}, got {shapes}")
        valid = response_mask != 0
        zero = torch.zeros((), dtype=values.dtype, device=values.device)
        v = torch.where(valid, values, zero)
        g = torch.where(valid, targets.detach().to(values.dtype), zero)
        loss_unclipped = (v - g) ** 2
        if old_values is None:
            loss_mat = loss_unclipped
            clip_frac = torch.zeros((), device=values.device)
        else:
            old = torch.where(valid, old_values.detach().to(values.dtype), zero)
            c = self.config.cliprange_value
            loss_clipped = (torch.clamp(v, old - c, old + c) - g) ** 2
            loss_mat = torch.maximum(loss_unclipped, loss_clipped)
            clip_frac = masked_mean((loss_clipped > loss_unclipped).to(values.dtype), valid)
        loss = 0.5 * agg_loss(loss_mat, valid, "token-mean")
        metrics = {
            "critic/loss": loss.detach(),
            "critic/value_mean": masked_mean(v.detach(), valid),
            "critic/explained_variance": explained_variance(v, g, valid),
            "critic/clip_frac": clip_frac,
        }
        return loss, to_floats(metrics)


@register_algorithm("ppo_inert_critic")
class PPOInertCritic(PPO):
    """Token-level PPO run with a critic too slow to learn anything within the budget.

    The math is PPO's; the name belongs to its settings (``algorithm/ppo_inert_critic.yaml``: a
    zero head and a critic learning rate well below the actor's). The head then stays near V = 0,
    GAE with gamma = lambda = 1 gives A_t = R - V ~ R, and whitening over the batch makes it
    REINFORCE with batch-whitened returns under PPO's clip: a strong critic-free baseline, beside
    ``reinforce_pp`` (the same idea with a KL in the reward), not a test of a token critic.
    """
