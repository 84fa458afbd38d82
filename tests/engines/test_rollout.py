"""The torch rollout engine on a real tiny Llama: log-probs, padding, EOS, seeds, top-p, cat."""

from __future__ import annotations

import pytest
import torch

from benchmarks.engines.rollout import Rollout
from benchmarks.engines.sampling import draw_uniforms, sample_tokens, top_p_filter
from benchmarks.engines.teacher_forced import response_logprobs, sequence_inputs
from benchmarks.engines.torch_engine import TorchEngine
from benchmarks.tasks.arith import ArithTask
from benchmarks.training.modeling import build_tiny_llama
from testkit.tolerances import logprob_atol
from testkit.trainers import PROMPTS
from testkit.trainers import ROLLOUT_SPEC as SPEC

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model(tok):
    torch.manual_seed(0)
    return build_tiny_llama(SPEC, len(tok), seed=0)


@pytest.fixture(scope="module")
def engine(model, tok):
    return TorchEngine(model, tok)


def _full_logp(model, ro: Rollout, temperature: float) -> torch.Tensor:
    """Teacher-forced log-softmax over the whole vocabulary at each response position, (B, T, V)."""
    ids, mask, pos = sequence_inputs(
        ro.prompt_ids, ro.prompt_mask, ro.response_ids, ro.response_mask
    )
    P = ro.prompt_ids.shape[1]
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    return torch.log_softmax(logits[:, P - 1 : -1].float() / temperature, dim=-1)


# --- (a) sampling-time log-probs ------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampling_logprobs_equal_recomputed(model, engine, temperature):
    prompts = PROMPTS * 4
    ro = engine.generate(prompts, temperature=temperature, top_p=1.0, max_new_tokens=12, seed=3)
    with torch.no_grad():
        lp, ent = response_logprobs(
            model,
            ro.prompt_ids,
            ro.prompt_mask,
            ro.response_ids,
            ro.response_mask,
            temperature,
            with_entropy=True,
        )
    valid = ro.response_mask.bool()
    assert valid.sum() > 50
    # fp32 decoder vs HF's teacher-forced forward: rounding of the model's widest sums
    torch.testing.assert_close(ro.log_probs[valid], lp[valid], atol=logprob_atol(model), rtol=0)
    # Padding positions carry exactly 0 in the rollout.
    assert (ro.log_probs[~valid] == 0).all()
    # The entropy is that of the same tempered distribution: 0 < H <= log V.
    V = model.config.vocab_size
    assert (ent[valid] > 0).all() and (ent[valid] <= torch.log(torch.tensor(float(V))) + 1e-5).all()


def test_recomputed_logprobs_depend_on_temperature(model, engine):
    """The check above could pass vacuously if temperature were ignored on either side."""
    ro = engine.generate(PROMPTS, temperature=1.0, max_new_tokens=8, seed=0)
    args = (ro.prompt_ids, ro.prompt_mask, ro.response_ids, ro.response_mask)
    with torch.no_grad():
        lp1, _ = response_logprobs(model, *args, temperature=1.0)
        lp07, _ = response_logprobs(model, *args, temperature=0.7)
    valid = ro.response_mask.bool()
    assert (lp1[valid] - lp07[valid]).abs().max() > 1e-3


# --- (b) left padding -------------------------------------------------------------------------


def test_greedy_output_independent_of_left_padding(model, engine):
    batch = engine.generate(PROMPTS, temperature=0.0, max_new_tokens=12, seed=0)
    assert (batch.prompt_mask.sum(-1) < batch.prompt_ids.shape[1]).sum() >= 4  # really padded
    for i, prompt in enumerate(PROMPTS):
        alone = engine.generate([prompt], temperature=0.0, max_new_tokens=12, seed=0)
        assert alone.prompt_mask.all()
        n = int(alone.lengths[0])
        assert int(batch.lengths[i]) == n
        assert torch.equal(batch.response_ids[i, :n], alone.response_ids[0, :n])
        assert batch.texts[i] == alone.texts[0]


def test_padded_sampling_logprobs_equal_unpadded_recomputation(model, engine):
    """Each row of a left-padded sampled batch, re-scored alone (no padding at all), has the
    log-probs the KV-cache sampler saw: padding never leaks into the distribution."""
    ro = engine.generate(PROMPTS, temperature=1.0, max_new_tokens=12, seed=8)
    for i in range(len(PROMPTS)):
        n = int(ro.lengths[i])
        keep = ro.prompt_mask[i].bool()
        with torch.no_grad():
            lp, _ = response_logprobs(
                model,
                ro.prompt_ids[i : i + 1, keep],
                ro.prompt_mask[i : i + 1, keep],
                ro.response_ids[i : i + 1, :n],
                ro.response_mask[i : i + 1, :n],
            )
        # padded batch vs one unpadded row (other shapes): rounding of the model's widest sums
        torch.testing.assert_close(ro.log_probs[i, :n], lp[0], atol=logprob_atol(model), rtol=0)


def test_greedy_is_argmax_of_teacher_forced_logits(model, engine):
    ro = engine.generate(PROMPTS, temperature=0.0, max_new_tokens=10, seed=0)
    logp = _full_logp(model, ro, 1.0)
    valid = ro.response_mask.bool()
    assert torch.equal(logp.argmax(-1)[valid], ro.response_ids[valid])


# --- (c) EOS ----------------------------------------------------------------------------------


def test_generation_stops_at_eos(engine, tok):
    eos, pad = tok.eos_token_id, tok.pad_token_id
    ro = engine.generate(PROMPTS * 8, temperature=1.0, max_new_tokens=20, seed=11)
    ids, mask = ro.response_ids, ro.response_mask
    saw_early_eos = False
    for b in range(ids.shape[0]):
        row = ids[b].tolist()
        if eos in row:
            k = row.index(eos)
            saw_early_eos |= k < ids.shape[1] - 1
            assert mask[b, : k + 1].tolist() == [1.0] * (k + 1)  # up to and including EOS
            assert mask[b, k + 1 :].sum() == 0
            assert all(t == pad for t in row[k + 1 :])
            assert (ro.log_probs[b, k + 1 :] == 0).all()
            body = row[:k]
        else:
            assert mask[b].sum() == ids.shape[1]
            body = row
        assert ro.texts[b] == tok.decode(body, skip_special_tokens=True)
        assert int(ro.lengths[b]) == int(mask[b].sum())
    assert saw_early_eos


def test_generation_ends_when_every_row_emitted_eos(engine, tok):
    """A batch whose rows all emitted EOS has T = (last EOS position + 1), not max_new_tokens."""
    eos = tok.eos_token_id
    for seed in range(200):
        ro = engine.generate(["1+2="], temperature=1.0, max_new_tokens=20, seed=seed)
        if eos in ro.response_ids[0].tolist():
            break
    else:
        pytest.fail("no seed produced an EOS")
    k = ro.response_ids[0].tolist().index(eos)
    assert ro.response_ids.shape[1] == k + 1 < 20
    assert "<eos>" not in ro.texts[0] and len(ro.texts[0]) <= k


def test_texts_exclude_eos_when_token_0_is_an_ordinary_character():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # As in GPT-2 / Llama 3 / Qwen 2.5: id 0 is "!", the special tokens come elsewhere.
    vocab = {"!": 0, "<eos>": 1, "<pad>": 2}
    for ch in ArithTask.alphabet:
        vocab[ch] = len(vocab)
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", padding_side="left"
    )
    model = build_tiny_llama(SPEC, len(tok), seed=0)
    ro = TorchEngine(model, tok).generate(PROMPTS * 4, temperature=1.0, max_new_tokens=12, seed=0)
    ended = [i for i, row in enumerate(ro.response_ids.tolist()) if tok.eos_token_id in row]
    assert ended  # some rows emitted EOS
    for i, row in enumerate(ro.response_ids.tolist()):
        n = row.index(tok.eos_token_id) if i in ended else len(row)
        assert ro.texts[i] == tok.decode(row[:n], skip_special_tokens=True), (row, ro.texts[i])


# --- (d) seeds --------------------------------------------------------------------------------


def test_same_seed_same_samples_different_seed_different(engine):
    kw = dict(temperature=1.0, top_p=1.0, max_new_tokens=10)
    a = engine.generate(PROMPTS, seed=5, **kw)
    b = engine.generate(PROMPTS, seed=5, **kw)
    c = engine.generate(PROMPTS, seed=6, **kw)
    assert torch.equal(a.response_ids, b.response_ids)
    assert torch.equal(a.log_probs, b.log_probs)
    assert a.texts == b.texts
    assert a.response_ids.shape != c.response_ids.shape or not torch.equal(
        a.response_ids, c.response_ids
    )


def test_seed_reproducible_across_engine_batches(model, tok):
    """Splitting into engine batches changes the draws but is itself reproducible."""
    eng = TorchEngine(model, tok, batch_size=4)
    a = eng.generate(PROMPTS * 2, temperature=1.0, max_new_tokens=8, seed=2)
    b = eng.generate(PROMPTS * 2, temperature=1.0, max_new_tokens=8, seed=2)
    assert a.response_ids.shape[0] == 12 and torch.equal(a.response_ids, b.response_ids)


# --- (e) top-p --------------------------------------------------------------------------------


def test_top_p_filter_hand_computed():
    probs = torch.tensor([[0.15, 0.5, 0.05, 0.3]])
    out = top_p_filter(probs.log(), 0.7).exp()
    # Sorted 0.5, 0.3, 0.15, 0.05: 0.3 crosses 0.7 and is kept, the rest dropped.
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.625, 0.0, 0.375]]))
    # A top_p below the largest probability keeps only the mode.
    torch.testing.assert_close(
        top_p_filter(probs.log(), 0.1).exp(), torch.tensor([[0.0, 1.0, 0.0, 0.0]])
    )


def test_inverse_cdf_draws_follow_the_distribution():
    """Frequencies of many draws match each row's softmax (chi-square), a probability-0 token is
    never drawn, and a row's draws come from its own column of uniforms."""
    from scipy.stats import chisquare

    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3], [0.25, 0.25, 0.25, 0.25], [0.0, 0.0, 1.0, 0.0]])
    n = 20_000
    u = draw_uniforms(torch.Generator().manual_seed(0), n, probs.shape[0])  # (n, rows)
    lp = probs.log().expand(n, -1, -1).reshape(-1, probs.shape[1])  # row r of step t: t*3 + r
    draws = sample_tokens(lp, u.reshape(-1)).view(n, -1)
    for r in range(probs.shape[0]):
        counts = torch.bincount(draws[:, r], minlength=probs.shape[1]).double()
        assert counts[probs[r] == 0].sum() == 0
        live = probs[r] > 0
        if live.sum() > 1:
            expected = probs[r][live].double()
            expected = expected / expected.sum() * n
            assert chisquare(counts[live], expected).pvalue > 1e-3
    # A uniform decides its row's token alone: the same u on a permuted batch, the same tokens.
    perm = torch.tensor([2, 0, 1])
    torch.testing.assert_close(
        sample_tokens(probs.log()[perm], u[0, perm]), sample_tokens(probs.log(), u[0])[perm]
    )


def test_inverse_cdf_edges_pick_tokens_of_positive_probability():
    """u = 0 draws the first token of positive probability; u just below 1, whose product with
    the total may round up to it, the last one (never the probability-0 tail)."""
    lp = torch.tensor([[0.0, 0.2, 0.5, 0.3, 0.0, 0.0]]).log()
    below_one = torch.tensor([1.0 - 2.0**-24])
    assert sample_tokens(lp, torch.tensor([0.0])).item() == 1
    assert sample_tokens(lp, below_one).item() == 3
    # Unnormalised (a top-p filter renormalises in log space; rounding leaves totals near 1)
    assert sample_tokens(lp + 0.3, below_one).item() == 3


def _outside_nucleus(model, ro: Rollout, temperature: float, top_p: float) -> tuple[int, int]:
    """(tokens sampled outside the top-p nucleus of the full softmax, valid tokens)."""
    logp = _full_logp(model, ro, temperature)  # (B, T, V)
    probs = logp.exp()
    p_tok = probs.gather(-1, ro.response_ids.unsqueeze(-1))  # (B, T, 1)
    # Probability mass strictly more likely than the sampled token: < top_p inside the nucleus.
    mass_before = (probs * (probs > p_tok)).sum(-1)  # (B, T)
    valid = ro.response_mask.bool()
    outside = (mass_before >= top_p + 1e-4) & valid
    return int(outside.sum()), int(valid.sum())


def test_top_p_never_samples_outside_the_nucleus(model, engine):
    kw = dict(temperature=0.7, max_new_tokens=12, seed=4)
    ro = engine.generate(PROMPTS * 6, top_p=0.5, **kw)
    outside, n = _outside_nucleus(model, ro, 0.7, 0.5)
    assert n > 100 and outside == 0
    # The same check without the filter does find tokens outside the nucleus: it can fail.
    ro_full = engine.generate(PROMPTS * 6, top_p=1.0, **kw)
    outside_full, _ = _outside_nucleus(model, ro_full, 0.7, 0.5)
    assert outside_full > 10


def test_top_p_first_token_frequencies_match_renormalised_nucleus(model, engine):
    n, top_p, temperature = 4000, 0.6, 1.0
    ro = engine.generate(
        ["3*4-5="] * n, temperature=temperature, top_p=top_p, max_new_tokens=1, seed=9
    )
    logp = _full_logp(model, ro.select(torch.tensor([0])), temperature)[0, 0]  # (V,)
    expected = top_p_filter(logp.unsqueeze(0), top_p).exp()[0]
    counts = torch.bincount(ro.response_ids[:, 0], minlength=expected.numel()).float() / n
    assert (expected == 0).sum() > 3  # the nucleus really excludes tokens
    assert counts[expected == 0].sum() == 0
    assert (counts - expected).abs().max() < 0.03
    # Log-probs returned are those of the unfiltered tempered distribution (what the trainer
    # recomputes), not of the renormalised nucleus.
    # fp32 decoder vs HF's full forward: rounding of the model's widest sums (logprob_atol)
    torch.testing.assert_close(
        ro.log_probs[:, 0], logp[ro.response_ids[:, 0]], atol=logprob_atol(model), rtol=0
    )


def test_tiny_top_p_is_greedy(engine):
    greedy = engine.generate(PROMPTS, temperature=0.0, max_new_tokens=8, seed=0)
    nucleus1 = engine.generate(PROMPTS, temperature=1.0, top_p=1e-6, max_new_tokens=8, seed=123)
    assert torch.equal(greedy.response_ids, nucleus1.response_ids)


# --- (f) Rollout.cat --------------------------------------------------------------------------


def test_cat_repads_and_preserves_logprobs(model, engine, tok):
    a = engine.generate(["7=", "4+4="], temperature=1.0, max_new_tokens=5, seed=1)
    b = engine.generate(
        ["9-9*9+1=", "1+2=", "0*1*2*3*4="], temperature=1.0, max_new_tokens=9, seed=2
    )
    assert a.prompt_ids.shape[1] != b.prompt_ids.shape[1]
    assert a.response_ids.shape[1] != b.response_ids.shape[1]
    c = Rollout.cat([a, b], tok.pad_token_id)
    P = max(a.prompt_ids.shape[1], b.prompt_ids.shape[1])
    T = max(a.response_ids.shape[1], b.response_ids.shape[1])
    assert c.prompt_ids.shape == (5, P) and c.response_ids.shape == (5, T)
    assert c.texts == a.texts + b.texts
    assert torch.equal(c.lengths, torch.cat([a.lengths, b.lengths]))
    # Prompts stay right-aligned (left padding), responses left-aligned (right padding).
    for src, rows in ((a, range(0, 2)), (b, range(2, 5))):
        p, t = src.prompt_ids.shape[1], src.response_ids.shape[1]
        for i, r in enumerate(rows):
            assert torch.equal(c.prompt_ids[r, P - p :], src.prompt_ids[i])
            assert (c.prompt_ids[r, : P - p] == tok.pad_token_id).all()
            assert c.prompt_mask[r, : P - p].sum() == 0
            assert torch.equal(c.response_ids[r, :t], src.response_ids[i])
            assert c.response_mask[r, t:].sum() == 0
    # The same decoded prompts: padding added by cat is invisible to the tokenizer.
    assert tok.batch_decode(c.prompt_ids.tolist(), skip_special_tokens=True) == [
        "7=",
        "4+4=",
        "9-9*9+1=",
        "1+2=",
        "0*1*2*3*4=",
    ]

    def recompute(r: Rollout) -> torch.Tensor:
        with torch.no_grad():
            return response_logprobs(
                model, r.prompt_ids, r.prompt_mask, r.response_ids, r.response_mask
            )[0]

    lp_c = recompute(c)
    for src, sl in ((a, slice(0, 2)), (b, slice(2, 5))):
        t = src.response_ids.shape[1]
        m = src.response_mask.bool()
        # the same rows re-scored in another padding/shape: rounding of the model's widest sums
        torch.testing.assert_close(
            lp_c[sl, :t][m], recompute(src)[m], atol=logprob_atol(model), rtol=0
        )
        # cat copies the stored log-probs: bit-identical, not a rounding claim
        torch.testing.assert_close(c.log_probs[sl, :t][m], src.log_probs[m], atol=0, rtol=0)
    assert (c.log_probs[~c.response_mask.bool()] == 0).all()


def test_select_keeps_rows_aligned(engine):
    ro = engine.generate(PROMPTS, temperature=1.0, max_new_tokens=6, seed=7)
    idx = torch.tensor([4, 0, 2])
    s = ro.select(idx)
    assert s.texts == [ro.texts[i] for i in (4, 0, 2)]
    assert torch.equal(s.response_ids, ro.response_ids[idx])
    assert torch.equal(s.prompt_ids, ro.prompt_ids[idx])
    assert torch.equal(s.log_probs, ro.log_probs[idx])
