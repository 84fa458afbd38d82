"""Tolerances for tests that compare two float computations of one quantity, in one place.

Two code paths that do the same maths (a fast path and HF's forward, a vectorised function and a
loop, ours and verl's) round differently, and so does one path on two CPU kinds: fp32 reductions
are blocked and vectorised differently on AVX2 and AVX-512 machines (the fp32 critic's fast-path
and HF gradients, within 1e-5 + 1e-4 of each other on AMD EPYC, differed by 1.06e-4 in an element
of 0.067 on an Intel Xeon). A tolerance here says
what rounding it stands for, so that it holds on any x86-64 CPU torch supports, and stays far
below the size of a real bug (a wrong row gathered, a missing term, a wrong branch).

Where the claim is "the same maths", the tests compare in float64 (:data:`F64_SAME_MATH`); fp32
stays where the fp32 path itself is the subject (sampling-time log-probs, :func:`logprob_atol`).
Claims of bit-identity on one machine (same seed, same samples; resume equals its twin; a freed
workspace changes nothing) compare exactly instead, with ``torch.equal`` or ``atol=0``.
"""

from __future__ import annotations

import pytest
import torch

EPS32 = torch.finfo(torch.float32).eps  # 2**-23 ~ 1.19e-7
EPS64 = torch.finfo(torch.float64).eps  # 2**-52 ~ 2.22e-16


def fp_tol(n: int, scale: float = 1.0, dtype: torch.dtype = torch.float32) -> float:
    """Absolute tolerance between two computations, in ``dtype``, of one quantity whose
    summation orders differ (two code paths, or one path on two CPU kinds). The rounding error
    of a sum of ``n`` terms is at most about ``n * eps * sum|terms|`` in any order (the
    first-order worst-case bound), so with ``scale`` >= sum|terms| (for a mean: the terms'
    magnitude) the tolerance holds whatever a CPU's kernels do."""
    return n * torch.finfo(dtype).eps * scale


def logprob_atol(model: torch.nn.Module) -> float:
    """Absolute tolerance between fp32 log-probs of ``model`` from two forward paths (KV-cache
    decoder, HF's cache path, HF's full forward, other batch shapes): the widest reduction on
    the way to a log-prob is the hidden or MLP width (attention spans <= 40 keys here, the
    vocabulary 19 tokens), on values of magnitude <= 4 (|log p| <= 3.5 at the temperatures
    used, |logits| < 1): 64 * eps32 * 4 ~ 3.1e-5 for the 64-wide tiny Llama. Observed: 1-2 ulp
    (2.4e-7); a wrong token, row, position or temperature moves log-probs by > 1e-3."""
    cfg = model.config
    return fp_tol(max(cfg.hidden_size, cfg.intermediate_size, 40), scale=4.0)


#: Relative tolerance, to the compared tensor's largest magnitude (:func:`assert_close_to_scale`),
#: between two float64 computations of the same maths. Summation order moves float64 results by
#: ~n * eps64 (<= 1e-13 at these sizes; observed ~1e-15 of the scale). What can stay above that
#: are the fp32 islands both paths keep by design, RoPE cos/sin tables (HF and fastdecode both
#: build them in fp32) and ``token_logprobs``' fp32 log-softmax: an entry there may round to a
#: neighbouring fp32 value on one path only, an eps32-relative change (moving every RoPE entry
#: by 1 ulp moves the tiny Llama's gradients by <= 2.4e-7 of their scale). 8 * eps32 ~ 9.5e-7,
#: three orders below a real bug: a wrong row or a missing position moves a value or a gradient
#: by >= 1e-3 of its scale.
F64_SAME_MATH = 8 * EPS32


def assert_close_to_scale(actual: torch.Tensor, expected: torch.Tensor, rel: float) -> None:
    """``|actual - expected| <= rel * max|expected|`` elementwise. The rounding error of a sum
    grows with its terms, not with its (possibly cancelled) result, so a gradient element near 0
    in a tensor of scale 60 is judged against the tensor's scale, not against itself (the
    elementwise ``rtol`` that failed across CPU kinds)."""
    scale = expected.detach().abs().max().item() if expected.numel() else 0.0
    torch.testing.assert_close(actual, expected, atol=rel * scale, rtol=0)


def hf_rmsnorm_in_model_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF's ``LlamaRMSNorm`` casts its input to fp32 (a guard for half precision); for a float64
    model that is a downcast, fp32 rounding on HF's side only. Compute the same formula,
    ``w * x * rsqrt(mean(x**2) + eps)``, in the model's dtype for this test, so that a float64
    HF forward is float64 throughout (fastdecode's ``F.rms_norm`` already is)."""
    from transformers.models.llama import modeling_llama

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))

    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", forward)
