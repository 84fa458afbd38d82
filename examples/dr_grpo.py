"""Dr. GRPO (Liu et al. 2025, arXiv 2503.20783) written as a third-party algorithm.

GRPO without its two biases: no division by the group's reward std, and no per-response length
normalisation of the loss (a sum over a response's tokens, then a mean over responses). Import
this module to register ``dr_grpo_example``, or expose it from a package through the entry-point
group ``sppo_bench.algorithms``; the contract tests then cover it like any built-in. (The suite
ships Dr. GRPO as ``dr_grpo``; this copy takes another name because a name is registered once.)
"""

from dataclasses import dataclass

from torch import Tensor

from algorithms import Algorithm, GroupConfig, config_field, register_algorithm
from algorithms.common import LossAggMode, group_mean_std, outcome_to_tokens


@dataclass(frozen=True, kw_only=True)
class DrGRPOConfig(GroupConfig):
    loss_agg_mode: LossAggMode = config_field(
        "seq-mean-token-sum", "Sum over each response's tokens: long answers are not discounted."
    )


@register_algorithm("dr_grpo_example")
class DrGRPO(Algorithm):
    Config = DrGRPOConfig

    def advantages(
        self,
        rewards: Tensor,  # (B,)
        response_mask: Tensor,  # (B, T)
        group_ids: Tensor | None,  # (B,)
        values: Tensor | None = None,
        baseline_rewards: Tensor | None = None,
        token_kl: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        mean, _std, _count = group_mean_std(rewards, group_ids)  # (B,) each
        return outcome_to_tokens(rewards - mean, response_mask), None  # (B, T), no critic
