"""Dr. GRPO: GRPO Done Right (Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical
Perspective", arXiv 2503.20783), as verl runs it (the ``grpo`` estimator with
``norm_adv_by_std_in_grpo=False``).

GRPO without its two biases, everything else GRPO's (G = 8 samples per prompt, per-token clip
0.2):

* advantage ``A_i = R_i - mean_g``: no division by the group's reward std, which weights prompts
  that are nearly always or nearly never solved more than the others;
* loss ``seq-mean-token-sum``: a sum over each response's tokens, then a mean over responses;
  dividing by the response length would favour long wrong answers and short right ones;
* no KL term (beta = 0), as in the paper's recipe.

Simplification: the paper divides the token sum by a constant (the generation budget, verl's
``seq-mean-token-sum-norm``); a constant factor of the loss changes nothing under Adam (up to its
epsilon), so the registry keeps the plain sum. Groups of size 1 follow GRPO (and verl): mean 0,
so ``A = R``.

``examples/dr_grpo.py`` is the same algorithm written as a user's plugin (registered as
``dr_grpo_example``): the README's worked example of adding an algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass

from algorithms.base import register_algorithm
from algorithms.common import LossAggMode
from algorithms.configkit import config_field
from algorithms.grpo import GRPO, GRPOConfig

__all__ = ["DrGRPO", "DrGRPOConfig"]


@dataclass(frozen=True, kw_only=True)
class DrGRPOConfig(GRPOConfig):
    """Dr. GRPO hyper-parameters: GRPO's with the std division and length normalisation off."""

    norm_adv_by_std: bool = config_field(
        False, "Divide by the group's std (GRPO); Dr. GRPO does not (False)."
    )
    loss_agg_mode: LossAggMode = config_field(
        "seq-mean-token-sum",
        "How per-token losses become one scalar (Dr. GRPO: sum per response, mean over responses).",
    )
    kl_loss_coef: float = config_field(
        0.0, "Weight (beta) of the KL-to-reference loss (Dr. GRPO: none).", ge=0.0
    )


@register_algorithm("dr_grpo")
class DrGRPO(GRPO):
    """GRPO's advantage without the std division, token-sum loss (see the module docstring)."""

    Config = DrGRPOConfig
    config: DrGRPOConfig
