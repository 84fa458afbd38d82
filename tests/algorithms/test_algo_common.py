"""Hand-computed cases and loop-versus-vectorised checks for algorithms.common.

The exact-value tests at the end pin what mutation testing found loose (docs/mutation.md): the
documented special cases where they differ from the general formula (fewer than two valid
elements, a group of one, the log-ratio clamps, the dual clip's edge), float64 results kept in
float64, outputs on the inputs' device, and every error message in full."""

from __future__ import annotations

import math

import pytest
import torch

from algorithms.common import (
    LOSS_AGG_MODES,
    agg_loss,
    clipped_ratio_loss,
    clipped_surrogate,
    explained_variance,
    group_index,
    group_mean_std,
    importance_ratio,
    kl_penalty,
    masked_mean,
    masked_policy_inputs,
    masked_var,
    masked_whiten,
    outcome_at_last_token,
    outcome_to_tokens,
    to_floats,
    zero_masked,
)
from testkit.messages import assert_raises_exactly, message_cases
from testkit.tensors import F64, IDS_CPU, INF, assert_on_meta, f64, meta, meta_mask

NAN = float("nan")


def t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float32)


# --- masked statistics ----------------------------------------------------------------------


def test_masked_mean_var_ignore_garbage_in_padding():
    values = t([[1.0, 2.0, NAN], [3.0, float("inf"), 1e30]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    # valid: 1, 2, 3 -> mean 2, unbiased var ((1 + 0 + 1) / 2) = 1, biased 2/3
    assert masked_mean(values, mask).item() == pytest.approx(2.0)
    assert masked_var(values, mask).item() == pytest.approx(1.0)
    assert masked_var(values, mask, unbiased=False).item() == pytest.approx(2 / 3)
    # per-row means: (1 + 2) / 2 = 1.5 and 3
    assert masked_mean(values, mask, dim=-1).tolist() == pytest.approx([1.5, 3.0])


def test_masked_mean_of_nothing_is_zero():
    values = t([[NAN, 5.0]])
    assert masked_mean(values, torch.zeros(1, 2)).item() == 0.0
    assert masked_var(values, torch.tensor([[0, 1]])).item() == 0.0  # one element: defined as 0


def test_masked_whiten_hand():
    values = t([[1.0, 2.0], [3.0, NAN]])
    mask = torch.tensor([[True, True], [True, False]])
    # mean 2, unbiased var 1 -> [-1, 0, 1], padding 0
    out = masked_whiten(values, mask)
    assert torch.allclose(out, t([[-1.0, 0.0], [1.0, 0.0]]), atol=1e-6)
    # shift_mean=False adds the mean back: [1, 2, 3]
    out = masked_whiten(values, mask, shift_mean=False)
    assert torch.allclose(out, t([[1.0, 2.0], [3.0, 0.0]]), atol=1e-6)


def test_masked_whiten_matches_verl_formula():
    g = torch.Generator().manual_seed(0)
    values = torch.randn(4, 6, generator=g, dtype=torch.float64)  # same maths: float64
    mask = torch.rand(4, 6, generator=g) > 0.3
    m = mask.double()
    # verl: masked_mean = sum(x * m) / (sum(m) + 1e-8); var unbiased; (x - mean) * rsqrt(var + 1e-8)
    mean = (values * m).sum() / m.sum()
    var = (((values - mean) ** 2) * m).sum() / m.sum() * m.sum() / (m.sum() - 1)
    expected = (values - mean) * torch.rsqrt(var + 1e-8) * m
    out = masked_whiten(values, mask)
    assert out.dtype == torch.float64
    # float64 sums of <= 24 terms of magnitude <= 3 round to <= 24 * eps64 * 3 ~ 1.6e-14 in any
    # order: 1e-12 holds on any CPU, far below a wrong mean, variance or mask (>= 1e-2)
    assert torch.allclose(out, expected, rtol=0, atol=1e-12)


# --- agg_loss -------------------------------------------------------------------------------

LOSS = t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [100.0, 100.0, 100.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", 7 / 3),  # (1 + 2 + 4) / 3 valid tokens
        ("seq-mean-token-mean", 2.75),  # ((1 + 2) / 2 + 4 / 1) / 2 non-empty rows
        ("seq-mean-token-sum", 3.5),  # ((1 + 2) + 4) / 2 non-empty rows
    ],
)
def test_agg_loss_modes_hand(mode, expected):
    assert agg_loss(LOSS, MASK, mode).item() == pytest.approx(expected)


def test_agg_loss_padding_garbage_and_empty_mask():
    loss = LOSS.clone()
    loss[2] = NAN
    loss[0, 2] = float("inf")
    for mode in LOSS_AGG_MODES:
        assert math.isfinite(agg_loss(loss, MASK, mode).item())
        assert agg_loss(loss, torch.zeros_like(MASK), mode).item() == 0.0


def test_agg_loss_unknown_mode_lists_modes():
    with pytest.raises(ValueError, match="token-mean.*seq-mean-token-mean.*seq-mean-token-sum"):
        agg_loss(LOSS, MASK, "seq-mean")


@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "seq-mean-token-sum"])
def test_agg_loss_of_one_loss_per_sequence(mode):
    # rows 0 and 1 have tokens, row 2 none: its loss (NaN garbage) is left out -> (1 + 4) / 2
    per_sequence = t([1.0, 4.0, NAN])
    assert agg_loss(per_sequence, MASK, mode).item() == 2.5
    assert agg_loss(per_sequence, torch.zeros_like(MASK), mode).item() == 0.0


def test_agg_loss_token_mean_needs_per_token_losses():
    with pytest.raises(
        ValueError,
        match=r"^loss_agg_mode='token-mean' needs per-token \(B, T\) losses, got one loss per "
        r"sequence \(3,\)$",
    ):
        agg_loss(t([1.0, 4.0, 0.0]), MASK, "token-mean")


# --- group statistics -----------------------------------------------------------------------


def test_group_mean_std_hand():
    # groups 7: [1, 0, 0] -> mean 1/3, unbiased std sqrt(1/3); 3: [1, 1, 1] -> 1, 0; 9: [5] -> 5, 0
    ids = torch.tensor([7, 3, 7, 3, 7, 3, 9])
    r = t([1, 1, 0, 1, 0, 1, 5])
    mean, std, count = group_mean_std(r, ids)
    s = 3**-0.5  # 0.57735
    assert mean.tolist() == pytest.approx([1 / 3, 1, 1 / 3, 1, 1 / 3, 1, 5])
    assert std.tolist() == pytest.approx([s, 0, s, 0, s, 0, 0], abs=1e-6)
    assert count.tolist() == [3, 3, 3, 3, 3, 3, 1]


def _loop_group_stats(r: torch.Tensor, ids: torch.Tensor):
    groups: dict[int, list[float]] = {}
    for value, gid in zip(r.tolist(), ids.tolist(), strict=True):
        groups.setdefault(gid, []).append(value)
    mean, std, count = [], [], []
    for gid in ids.tolist():
        xs = torch.tensor(groups[gid], dtype=torch.float64)
        mean.append(xs.mean().item())
        std.append(xs.std().item() if len(xs) > 1 else 0.0)  # torch.std is unbiased
        count.append(len(xs))
    return mean, std, count


@pytest.mark.parametrize("seed", range(5))
def test_group_mean_std_matches_loop(seed):
    g = torch.Generator().manual_seed(seed)
    b = 40
    ids = torch.tensor([-5, 0, 3, 100, 7, 2**40])[torch.randint(0, 6, (b,), generator=g)]
    r = torch.randn(b, generator=g, dtype=torch.float64)
    r[: b // 4] = torch.randint(0, 2, (b // 4,), generator=g).double()  # binary rewards too
    mean, std, count = group_mean_std(r, ids)
    ref_mean, ref_std, ref_count = _loop_group_stats(r, ids)
    assert mean.tolist() == pytest.approx(ref_mean, abs=1e-12)
    assert std.tolist() == pytest.approx(ref_std, abs=1e-12)
    assert count.tolist() == ref_count


def test_group_mean_std_shape_error():
    with pytest.raises(ValueError, match="group_ids"):
        group_mean_std(t([1.0, 2.0]), torch.tensor([1, 2, 3]))


def test_outcome_at_last_token():
    # the last valid token of each row, wherever the padding is; a row without tokens gets none
    mask = torch.tensor([[1, 1, 0], [0, 1, 1], [1, 0, 1], [0, 0, 0]])
    out = outcome_at_last_token(t([2.0, -1.0, 3.0, 5.0]), mask)
    assert out.tolist() == [[0.0, 2.0, 0.0], [0.0, 0.0, -1.0], [0.0, 0.0, 3.0], [0.0, 0.0, 0.0]]


def test_outcome_to_tokens():
    out = outcome_to_tokens(t([2.0, -1.0]), torch.tensor([[1, 1, 0], [0, 1, 1]]))
    assert out.tolist() == [[2.0, 2.0, 0.0], [0.0, -1.0, -1.0]]
    with pytest.raises(ValueError, match=r"\(B,\)"):
        outcome_to_tokens(t([1.0]), torch.ones(2, 3))


# --- KL estimators --------------------------------------------------------------------------


def test_kl_penalty_hand():
    logp = t([[0.0, -1.0]])
    ref = t([[math.log(2), -1.0]])
    # k1 = logp - ref = [-ln 2, 0]; k3 = exp(ref - logp) - (ref - logp) - 1 = 2 - ln 2 - 1 = 0.30685
    assert kl_penalty(logp, ref, "k1").tolist()[0] == pytest.approx([-0.693147, 0.0], abs=1e-6)
    assert kl_penalty(logp, ref, "k3").tolist()[0] == pytest.approx([0.306853, 0.0], abs=1e-6)
    # verl's low_var_kl clamps: log-ratio 50 -> 20, exp(20) - 21 -> clamped to 10
    assert kl_penalty(t([0.0]), t([50.0]), "k3").item() == 10.0
    with pytest.raises(ValueError, match="k1.*k3"):
        kl_penalty(logp, ref, "k2")


# --- clipped surrogate ----------------------------------------------------------------------

# Four tokens: A=+1 ratio 1.25 | A=-1 ratio 4 | A=-1 ratio 0.5 | padding (NaN garbage).
LOGP = t([[math.log(1.25), math.log(4.0), math.log(0.5), NAN]])
OLD = t([[0.0, 0.0, 0.0, NAN]])
ADV = t([[1.0, -1.0, -1.0, NAN]])
PAD = torch.tensor([[1, 1, 1, 0]])


def test_zero_masked_and_masked_policy_inputs_drop_padding_garbage():
    x = t([[1.0, NAN, float("inf")]]).requires_grad_(True)
    mask = torch.tensor([[1, 0, 0]])
    out = zero_masked(x, mask)
    assert out.tolist() == [[1.0, 0.0, 0.0]]
    out.sum().backward()
    assert x.grad.tolist() == [[1.0, 0.0, 0.0]]  # exactly 0 behind the padding, not NaN
    logp = LOGP.clone().requires_grad_(True)
    old = OLD.clone().requires_grad_(True)
    adv = ADV.clone().requires_grad_(True)
    valid, lp, o, a = masked_policy_inputs(logp, old, adv, PAD)
    assert valid.dtype == torch.bool and valid.tolist() == [[True, True, True, False]]
    assert lp.requires_grad and not o.requires_grad and not a.requires_grad
    assert lp.tolist()[0][3] == o.tolist()[0][3] == a.tolist()[0][3] == 0.0
    assert a.tolist()[0][:3] == [1.0, -1.0, -1.0]


def test_importance_ratio_clamps_the_log_ratio_at_20():
    log_ratio, ratio = importance_ratio(t([[math.log(2.0), 100.0, -100.0]]), t([[0.0, 0.0, 0.0]]))
    assert log_ratio.tolist()[0] == pytest.approx([math.log(2.0), 20.0, -20.0])
    assert ratio.tolist()[0] == pytest.approx([2.0, math.exp(20.0), math.exp(-20.0)], rel=1e-6)


def test_clipped_ratio_loss_hand():
    # A=+1 r=1.25 -> max(-1.25, -1.2) = -1.2 clipped; A=-1 r=4 -> max(4, 1.2) = 4 unclipped;
    # A=-1 r=0.5 -> max(0.5, 0.8) = 0.8 clipped; A=+1 r=1 -> -1 either way, not clipped
    losses, clipped = clipped_ratio_loss(
        t([[1.0, -1.0, -1.0, 1.0]]), t([[1.25, 4.0, 0.5, 1.0]]), 0.2, 0.2
    )
    assert losses.tolist()[0] == pytest.approx([-1.2, 4.0, 0.8, -1.0])
    assert clipped.tolist() == [[True, False, True, False]]


def test_clipped_surrogate_symmetric_clip_and_dual_clip():
    # t0: max(-1.25, -1.2) = -1.2 (clipped); t1: max(4, 1.2) = 4, dual-clip min(4, 3) = 3;
    # t2: max(0.5, 0.8) = 0.8 (clipped); padding 0.
    pg, stats = clipped_surrogate(LOGP, OLD, ADV, PAD, 0.2, 0.2, 3.0)
    assert pg.tolist()[0] == pytest.approx([-1.2, 3.0, 0.8, 0.0])
    assert stats["clip_frac"].item() == pytest.approx(2 / 3)
    assert stats["dual_clip_frac"].item() == pytest.approx(1 / 3)
    # approx_kl = mean(old - logp) = -(ln 1.25 + ln 4 + ln 0.5) / 3 = -0.305430
    assert stats["approx_kl"].item() == pytest.approx(-0.305430, abs=1e-6)


def test_clipped_surrogate_without_dual_clip():
    pg, stats = clipped_surrogate(LOGP, OLD, ADV, PAD, 0.2, 0.2, None)
    assert pg.tolist()[0] == pytest.approx([-1.2, 4.0, 0.8, 0.0])
    assert "dual_clip_frac" not in stats


def test_clipped_surrogate_clip_higher():
    # eps_high 0.28: ratio 1.25 < 1.28 is no longer clipped -> -1.25
    pg, stats = clipped_surrogate(LOGP, OLD, ADV, PAD, 0.2, 0.28, None)
    assert pg.tolist()[0] == pytest.approx([-1.25, 4.0, 0.8, 0.0])
    assert stats["clip_frac"].item() == pytest.approx(1 / 3)


def test_clipped_surrogate_gradient_zero_in_padding_and_clipped_tokens():
    logp = LOGP.clone().requires_grad_(True)
    pg, _ = clipped_surrogate(logp, OLD, ADV, PAD, 0.2, 0.2, 3.0)
    pg.sum().backward()
    grad = logp.grad[0].tolist()
    # t0, t2 clipped and t1 dual-clipped: constant in logp -> 0; padding exactly 0, not NaN
    assert grad == [0.0, 0.0, 0.0, 0.0]
    logp.grad = None
    pg, _ = clipped_surrogate(logp, OLD, -ADV, PAD, 0.2, 0.2, 3.0)
    pg.sum().backward()
    # A=-1 ratio 1.25 unclipped? max(1.25, 1.2) = 1.25 -> d/dlogp (ratio) = 1.25
    assert logp.grad[0, 0].item() == pytest.approx(1.25)
    assert torch.isfinite(logp.grad).all()


def test_log_ratio_is_clamped():
    pg, _ = clipped_surrogate(t([[100.0]]), t([[0.0]]), t([[-1.0]]), torch.ones(1, 1), 0.2, 0.2)
    assert pg.item() == pytest.approx(math.exp(20.0), rel=1e-5)


# --- misc -----------------------------------------------------------------------------------


def test_explained_variance():
    target = t([1.0, 0.0, 1.0])
    assert explained_variance(target, target).item() == pytest.approx(1.0)
    assert explained_variance(torch.full((3,), 2 / 3), target).item() == pytest.approx(
        0.0, abs=1e-6
    )
    # p = [.5, .5, .75]: Var(R) = 2/9, Var(R - p) = 0.180556 -> 1 - 0.8125 = 0.1875
    assert explained_variance(t([0.5, 0.5, 0.75]), target).item() == pytest.approx(0.1875)
    assert math.isnan(explained_variance(t([0.1, 0.2]), t([1.0, 1.0])).item())
    masked = explained_variance(t([1.0, NAN]), t([1.0, 5.0]), torch.tensor([True, False]))
    assert math.isnan(masked.item())  # one valid target: no variance


def test_to_floats():
    out = to_floats({"a": torch.tensor(1.5), "b": torch.tensor([2])})
    assert out == {"a": 1.5, "b": 2.0}
    assert all(type(v) is float for v in out.values())
    assert to_floats({}) == {}


# --- exact values where they differ from the general formula ---------------------------------


def test_masked_var_with_two_and_with_one_valid_element():
    # Two valid elements: (1 - 2)^2 + (3 - 2)^2 = 2 over n - 1 = 1 (Bessel) -> 2; biased -> 1.
    assert masked_var(f64([1.0, 3.0]), torch.tensor([1, 1])).item() == 2.0
    assert masked_var(f64([1.0, 3.0]), torch.tensor([1, 1]), unbiased=False).item() == 1.0
    # Fewer than two valid elements: defined as 0 whatever the one value is (inf - inf is NaN).
    assert masked_var(f64([INF, 5.0]), torch.tensor([1, 0])).item() == 0.0


def test_group_statistics_biased_and_of_a_group_of_one():
    values, ids = f64([1.0, 2.0, 4.0, INF]), torch.tensor([0, 0, 0, 9])
    mean, std, count = group_mean_std(values, ids, unbiased=False)
    # group 0: mean 7/3, squared deviations 16/9 + 1/9 + 25/9 = 42/9, over n = 3 -> 14/9
    assert mean[0].item() == pytest.approx(7 / 3, rel=1e-15)
    assert std[0].item() == pytest.approx(math.sqrt(14 / 9), rel=1e-15)
    _, std_unbiased, _ = group_mean_std(values, ids)
    assert std_unbiased[0].item() == pytest.approx(math.sqrt(7 / 3), rel=1e-15)  # 42/9 over 2
    # A group of one has (unbiased) std 0, even when its one value makes the deviation NaN.
    assert std_unbiased[3].item() == 0.0
    assert count.tolist() == [3.0, 3.0, 3.0, 1.0]


def test_k3_of_an_impossible_token_is_the_clamp():
    # ref - logp = +inf (the policy gives the token probability 0): the log-ratio clamp at 20
    # keeps exp() finite, so k3 is the 10 of the outer clamp, not inf - inf = NaN.
    kl = kl_penalty(f64([[-INF, 0.0]]), f64([[0.0, 0.0]]), "k3")
    assert kl.tolist() == [[10.0, 0.0]]


def test_clipped_surrogate_clamps_a_tiny_ratio_at_exp_minus_20():
    # log-ratio -30 is clamped to -20: A = 1 keeps the unclipped -A * ratio (ratio < 0.8)
    one = torch.ones(1, 1, dtype=F64)
    pg, stats = clipped_surrogate(f64([[-30.0]]), f64([[0.0]]), one, one, 0.2, 0.2)
    assert pg.item() == pytest.approx(-math.exp(-20.0), rel=1e-15)
    assert stats["approx_kl"].item() == 20.0


def test_dual_clip_bounds_negative_advantages_only():
    # A = +0.5 at ratio 1: no dual clip (the bound -A * c = -1.5 is for A < 0): loss -0.5
    one = torch.ones(1, 1, dtype=F64)
    pg, stats = clipped_surrogate(f64([[0.0]]), f64([[0.0]]), f64([[0.5]]), one, 0.2, 0.2, 3.0)
    assert pg.item() == -0.5 and stats["dual_clip_frac"].item() == 0.0


def test_dual_clip_fraction_counts_strictly_bounded_tokens():
    # A = -1 at a ratio exactly c: the surrogate max(r, 1.2) = c equals the bound -A * c, which
    # is then not active (nothing is bounded), so the fraction is 0
    c = torch.exp(f64(0.5)).item()
    one = torch.ones(1, 1, dtype=F64)
    pg, stats = clipped_surrogate(f64([[0.5]]), f64([[0.0]]), -one, one, 0.2, 0.2, c)
    assert pg.item() == c and stats["dual_clip_frac"].item() == 0.0


def test_outcome_at_last_token_in_float64():
    out = outcome_at_last_token(f64([0.1, 0.7]), torch.tensor([[1, 1, 0], [1, 0, 1]]))
    assert out.dtype == F64
    assert out.tolist() == [[0.0, 0.1, 0.0], [0.0, 0.0, 0.7]]


def test_explained_variance_in_the_prediction_dtype():
    # float32 targets against float64 predictions are compared in float64
    target32 = torch.tensor([0.1, 0.7, 0.3, 0.9])
    pred = f64([0.2, 0.5, 0.4, 0.6])
    t = target32.double()
    expected = 1 - torch.var(t - pred, unbiased=False) / torch.var(t, unbiased=False)
    got = explained_variance(pred, target32)
    assert got.dtype == F64
    # float64 sums of 4 terms of size <= 1: rounding ~1e-15; float32 statistics differ by ~1e-8
    assert got.item() == pytest.approx(expected.item(), abs=1e-13)


COMMON_ERRORS = [
    (
        lambda: outcome_to_tokens(torch.zeros(3), torch.ones(2, 5)),
        ValueError,
        "scores must have shape (B,) = (2,), got (3,)",
    ),
    (
        lambda: group_index(torch.zeros(2, 2)),
        ValueError,
        "group_ids must have shape (B,), got (2, 2)",
    ),
]


@message_cases(COMMON_ERRORS)
def test_error_message_in_full(call, kind, message):
    assert_raises_exactly(call, kind, message)


META_CALLS = {
    "group_mean_std": lambda: group_mean_std(meta(3), IDS_CPU),
    "outcome_at_last_token": lambda: outcome_at_last_token(meta(3), meta_mask(3, 4)),
}


@pytest.mark.parametrize("name", list(META_CALLS))
def test_outputs_stay_on_the_inputs_device(name):
    """Group statistics and the outcome's token placement on ``meta`` inputs: every output on
    their device (0-dim CPU tensors are scalars to both CUDA and ``meta``, so only those may
    be made on the CPU)."""
    assert_on_meta(META_CALLS[name]())
