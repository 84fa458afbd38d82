"""SPO: Single-stream Policy Optimization (Xu & Ding 2025, arXiv 2509.13232; verl-recipe
``spo/spo_ray_trainer.py``).

Group methods spend G samples per prompt to get a baseline, and a group whose samples all agree
teaches nothing. SPO samples *one* response per prompt and takes the baseline from a persistent
per-prompt value tracker instead, so no sample is wasted on building a baseline:

* **tracker**: each prompt x has a Beta(alpha, beta) estimate of its success probability,
  ``p(x) = alpha / (alpha + beta)``. After each step that drew x, with outcome r in [0, 1]:
  ``alpha <- rho * alpha + r``, ``beta <- rho * beta + (1 - r)``. The forgetting factor adapts to
  how far the policy has moved since x was last seen: ``rho = 2 ** (-D / D_half)`` clipped to
  ``[rho_min, rho_max]``, with D the mean absolute change of token log-probs (the recipe's KL
  proxy) and ``D_half = 0.06``, ``rho_min = 0.875``, ``rho_max = 0.96`` (the recipe's values);
  a prompt seen for the first time has D = 0 (so ``rho = rho_max``);
* **advantage**: ``A = r - p(x)`` before the tracker sees r, then normalised over the whole batch,
  ``(A - mean) / (std + 1e-8)`` (unbiased std over responses), broadcast on the response's tokens;
* **policy loss**: PPO's per-token clip with clip-higher (0.2 / 0.28) and dual-clip c = 10,
  ``token-mean``, no KL: the recipe's launch settings.

The tracker is state carried across steps (:meth:`SPO.state_dict`): the harness resets it when a
run starts, updates it through :meth:`SPO.observe` after every policy update, and checkpoints it
with the trainer, so a resumed run continues with exactly the tracker it was killed with.

Simplifications versus the paper and recipe, each because the harness gives every algorithm the
same prompt stream and measures every algorithm's compute the same way:

* **D** is measured on the batches in between, not on x's own previous response: after each
  update the harness recomputes the batch's log-probs under the updated policy (one more
  teacher-forced pass, metered), the step's drift ``d = mean |logp_new - logp_old|`` over the
  batch's tokens accumulates into a running total, and x's D is that total's growth since x
  was last drawn. The recipe re-scores x's last response with the current policy instead, which
  would need every prompt's last response kept and scored again.
* **Initialisation**: the paper initialises every training prompt from n0 offline samples of
  the starting policy (``alpha = n_eff * (s + 0.5) / (n0 + 1)``, ``n_eff = 1 / (1 - rho_min)``),
  which on the CPU suite would cost more rollouts than the whole budget before the first update.
  Unseen prompts start from the prior ``Beta(prior_alpha, prior_beta) = Beta(0.5, 0.5)``, the
  recipe's own choice when no offline values are given (``offline_N = 0``). With prompts rarely
  drawn twice (a large training set, a small budget), SPO is then close to REINFORCE with a
  batch-normalised reward.
* **Prioritised sampling** (drawing prompts in proportion to ``sqrt(p (1 - p)) + 0.05``) is left
  out: the harness draws one seeded prompt stream for every algorithm.
* Several samples of one prompt in a step (``n > 1``, or the stream wrapping around) all update
  its tracker: ``alpha <- rho * alpha + sum r``, ``beta <- rho * beta + sum (1 - r)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from algorithms.base import (
    Algorithm,
    AlgorithmConfig,
    ConfigError,
    config_field,
    register_algorithm,
)
from algorithms.common import masked_mean, outcome_to_tokens, to_floats

__all__ = ["SPO", "SPOConfig"]


@dataclass(frozen=True, kw_only=True)
class SPOConfig(AlgorithmConfig):
    """SPO hyper-parameters; defaults are the recipe's (see the module docstring)."""

    n: int = config_field(1, "Responses per prompt; SPO uses 1 (its point: no groups).", ge=1)
    clip_ratio_high: float = config_field(
        0.28, "Clip-higher: ratio clipped at 1 + clip_ratio_high (recipe: 0.28).", gt=0.0
    )
    clip_ratio_c: float | None = config_field(
        10.0, "Dual-clip constant c for negative advantages (recipe: 10); None disables.", gt=1.0
    )
    rho_min: float = config_field(
        0.875, "Lowest forgetting factor of the tracker (recipe: 0.875).", gt=0.0, le=1.0
    )
    rho_max: float = config_field(
        0.96, "Highest forgetting factor of the tracker (recipe: 0.96).", gt=0.0, le=1.0
    )
    drift_half_life: float = config_field(
        0.06,
        "D_half: policy drift (mean |change of token log-probs|) that halves the tracker's "
        "memory (recipe: 0.06).",
        gt=0.0,
    )
    prior_alpha: float = config_field(
        0.5,
        "Beta prior's alpha for a prompt not seen yet (recipe without offline values: 0.5).",
        gt=0.0,
    )
    prior_beta: float = config_field(
        0.5,
        "Beta prior's beta for a prompt not seen yet (recipe without offline values: 0.5).",
        gt=0.0,
    )
    adv_eps: float = config_field(
        1e-8, "Added to the batch std before dividing the advantages.", gt=0.0
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.rho_min > self.rho_max:
            raise ConfigError(
                f"{type(self).__name__}.rho_min={self.rho_min} is invalid: must be <= "
                f"rho_max={self.rho_max}"
            )


@register_algorithm("spo")
class SPO(Algorithm):
    """One sample per prompt against a persistent per-prompt success tracker (module docstring)."""

    Config = SPOConfig
    config: SPOConfig

    def __init__(self, config: AlgorithmConfig | None = None) -> None:
        super().__init__(config)
        #: prompt key -> [alpha, beta, running drift total when last drawn]
        self._tracker: dict[str, list[float]] = {}
        self._drift_total = 0.0

    @property
    def needs_prompt_keys(self) -> bool:
        return True

    @property
    def needs_updated_log_probs(self) -> bool:
        return True

    # --- the tracker ---------------------------------------------------------------------------

    def success_estimate(self, prompt_key: str) -> float:
        """The tracker's ``p(x) = alpha / (alpha + beta)`` (the prior's for an unseen prompt)."""
        cfg = self.config
        alpha, beta, _ = self._tracker.get(prompt_key, (cfg.prior_alpha, cfg.prior_beta, 0.0))
        return alpha / (alpha + beta)

    def reset_state(self) -> None:
        self._tracker = {}
        self._drift_total = 0.0

    def state_dict(self) -> dict[str, Any]:
        keys = list(self._tracker)
        rows = [self._tracker[k] for k in keys]
        as_f64 = dict(dtype=torch.float64)
        return {
            "keys": keys,
            "alpha": torch.tensor([r[0] for r in rows], **as_f64),
            "beta": torch.tensor([r[1] for r in rows], **as_f64),
            "drift_mark": torch.tensor([r[2] for r in rows], **as_f64),
            "drift_total": self._drift_total,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        missing = {"keys", "alpha", "beta", "drift_mark", "drift_total"} - set(state)
        if missing:
            raise ValueError(
                f"{self.name}: the saved state has no tracker ({sorted(missing)} missing); it "
                "was not written by SPO.state_dict"
            )
        columns = (state["alpha"].tolist(), state["beta"].tolist(), state["drift_mark"].tolist())
        self._tracker = {k: [a, b, m] for k, a, b, m in zip(state["keys"], *columns, strict=True)}
        self._drift_total = float(state["drift_total"])

    # --- tensor functions ----------------------------------------------------------------------

    def advantages(
        self,
        rewards: Tensor,
        response_mask: Tensor,
        group_ids: Tensor | None,
        values: Tensor | None = None,
        baseline_rewards: Tensor | None = None,
        token_kl: Tensor | None = None,
        prompt_keys: Sequence[str] | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``r - p(x)`` normalised over the batch, on valid tokens; no returns. Reads the
        tracker, does not change it (:meth:`observe` does, after the update).

        Args:
            rewards: ``(B,)`` outcome rewards.
            response_mask: ``(B, T)``.
            group_ids, values, baseline_rewards, token_kl: ignored.
            prompt_keys: ``B`` strings naming each row's prompt (required).

        Returns:
            ``(advantages (B, T), None)``.
        """
        keys = self._keys(prompt_keys, rewards)
        with torch.no_grad():
            r = rewards.detach()
            baseline = torch.tensor(
                [self.success_estimate(k) for k in keys], dtype=r.dtype, device=r.device
            )
            advantage = r - baseline
            centred = advantage - advantage.mean()
            if advantage.numel() > 1:
                centred = centred / (advantage.std() + self.config.adv_eps)
            return outcome_to_tokens(centred, response_mask), None

    def observe(
        self,
        *,
        prompt_keys: Sequence[str],
        rewards: Tensor,
        response_mask: Tensor,
        old_log_probs: Tensor,
        new_log_probs: Tensor | None,
    ) -> dict[str, float]:
        """Fold the step's outcomes into the tracker (see the module docstring).

        Args:
            prompt_keys: ``B`` strings naming each row's prompt.
            rewards: ``(B,)`` outcome scores in [0, 1].
            response_mask: ``(B, T)``.
            old_log_probs: ``(B, T)`` log-probs before the update.
            new_log_probs: ``(B, T)`` log-probs after it (required).

        Returns:
            ``train/spo_drift`` (this step's d), ``train/spo_rho`` (mean forgetting factor over
            the step's prompts), ``train/spo_baseline`` (mean p(x) the step's advantages used)
            and ``train/spo_tracked_prompts``.
        """
        keys = self._keys(prompt_keys, rewards)
        if new_log_probs is None:
            raise ValueError(f"{self.name}: observe needs new_log_probs (the updated policy's)")
        r = rewards.detach().double().cpu()
        if bool(((r < 0) | (r > 1)).any()):
            raise ValueError(
                f"{self.name}: the tracker counts successes, so rewards must lie in [0, 1]; got "
                f"min {r.min().item()}, max {r.max().item()}"
            )
        valid = response_mask != 0
        zero = torch.zeros((), dtype=old_log_probs.dtype, device=old_log_probs.device)
        change = torch.where(valid, (new_log_probs.detach() - old_log_probs.detach()).abs(), zero)
        drift = float(masked_mean(change, valid))
        self._drift_total += drift
        successes: dict[str, float] = {}
        draws: dict[str, int] = {}
        for key, reward in zip(keys, r.tolist(), strict=True):
            successes[key] = successes.get(key, 0.0) + reward
            draws[key] = draws.get(key, 0) + 1
        baseline = sum(self.success_estimate(k) for k in keys) / max(1, len(keys))
        cfg = self.config
        rhos = []
        for key, s in successes.items():
            alpha, beta, mark = self._tracker.get(key, (cfg.prior_alpha, cfg.prior_beta, None))
            since = 0.0 if mark is None else self._drift_total - mark
            rho = min(max(math.pow(2.0, -since / cfg.drift_half_life), cfg.rho_min), cfg.rho_max)
            rhos.append(rho)
            self._tracker[key] = [
                rho * alpha + s,
                rho * beta + (draws[key] - s),
                self._drift_total,
            ]
        return to_floats(
            {
                "train/spo_drift": torch.tensor(drift),
                "train/spo_rho": torch.tensor(sum(rhos) / max(1, len(rhos))),
                "train/spo_baseline": torch.tensor(baseline),
                "train/spo_tracked_prompts": torch.tensor(float(len(self._tracker))),
            }
        )

    def _keys(self, prompt_keys: Sequence[str] | None, rewards: Tensor) -> list[str]:
        if prompt_keys is None:
            raise ValueError(
                f"{self.name}: prompt_keys (one string per row naming its prompt) is required: "
                "the baseline is the prompt's tracked success rate"
            )
        keys = [str(k) for k in prompt_keys]
        if len(keys) != rewards.shape[0]:
            raise ValueError(f"{self.name}: {len(keys)} prompt_keys for {rewards.shape[0]} rewards")
        return keys
