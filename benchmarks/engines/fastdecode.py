"""A lean sampler for Llama-architecture models: the rollout engine's fast path.

At the suite's sizes (d = 128, two layers, a few hundred rows) one decode step is a few million
multiply-adds, so HF's per-step machinery (mask building, cache objects that grow by
concatenation, generic rotary and attention dispatch) costs several times the matmuls. This
module runs the same model, from the same parameter tensors (read at every call, so the trainer's
latest weights are always the ones sampled), with:

- a static KV cache for prompt + response length (no per-token concatenation) in a workspace
  kept between calls (a fresh multi-MB tensor pays a page fault per 4 KB at first write),
  position-major, ``(L, rows, kv heads, head dim)``: a new token's keys are one contiguous write,
  and dropping rows copies only the positions filled so far;
- the prefill run a block of about ``PREFILL_TOKENS`` prompt tokens at a time, so each block's
  activations stay in the CPU cache (a several-MB GEMM output runs about a third slower);
- the weights rearranged once per call (:meth:`LlamaDecoder._weights`): q/k/v and gate/up
  concatenated (one GEMM instead of three or two), each RMSNorm's weight and the attention scale
  folded into the next GEMM (a norm is three ops: ``x / hypot(|x|, sqrt(d * eps))``), q/k rows
  reordered so that RoPE is one complex multiply by a table built with HF's own ``inv_freq``;
- residual adds fused into the GEMMs (``addmm_``), new keys rotated straight into the cache;
- ``F.scaled_dot_product_attention`` at prefill and, at decode, attention as a broadcast
  multiply-and-sum while the context is short (``SHORT_CONTEXT``), batched GEMMs after;
- finished rows dropped from the batch once 1/``DROP_FRACTION`` of them have finished, checked at
  every token on the CPU (the check is the only host sync; on an accelerator every 4 tokens);
- ``torch.inference_mode``.

Each token's sampling step is :func:`benchmarks.engines.sampling.next_token`, the HF loop's too,
so both paths draw the same tokens from the same seed up to the rounding of their logits.

The maths is the model's own (RMSNorm, RoPE, causal attention over the non-padding keys, SiLU
gating, the tied or untied head); only float rounding differs from HF's path, which the rollout
tests bound (sampling-time log-probs equal the teacher-forced ones to 1e-5).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.engines.rollout import past_first_eos
from benchmarks.engines.sampling import draw_uniforms, next_token, token_logprobs

__all__ = [
    "LlamaDecoder",
    "fp32_attention",
    "prefix_hidden",
    "prefix_logprobs",
    "supports",
    "supports_backbone",
]


#: Check for finished rows every this many tokens on an accelerator (the check is a host sync)
#: and on the CPU (where it is not).
CHECK_EVERY = 4
CHECK_EVERY_CPU = 1
#: Drop finished rows once at least 1/DROP_FRACTION of the active ones have finished.
DROP_FRACTION = 8
#: Prompt tokens per prefill block (see :meth:`LlamaDecoder._prefill`).
PREFILL_TOKENS = 256
#: The KV-cache workspace is kept between calls up to this size (the tiny model's is a few MB);
#: a larger one, a real model's, is freed after each call rather than held for the whole run.
KEEP_WORKSPACE_BYTES = 256 * 2**20
#: Up to this many keys per row, decode attention is a broadcast multiply-and-sum; beyond, batched
#: GEMMs. At head_dim 32 the GEMMs win from 13 keys on (15-20 % at 13-17): below about 400
#: multiply-adds per matrix, torch's CPU ``bmm`` runs a scalar loop, 2-4x slower than the sum.
SHORT_CONTEXT = 12


def supports(model: torch.nn.Module) -> bool:
    """Whether :class:`LlamaDecoder` reproduces the HF causal LM ``model``'s forward: a plain
    fp32 Llama (no biases, no rope scaling, SiLU MLP, one tensor-parallel slice). Half-precision
    models keep HF's path, whose RMSNorm upcasts in its own order (log-prob agreement is only
    tested in fp32)."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) != "llama":
        return False
    return supports_backbone(getattr(model, "model", None)) and hasattr(model, "lm_head")


def supports_backbone(backbone: Any) -> bool:
    """:func:`supports` for a bare backbone (an HF ``LlamaModel``, no LM head), e.g. the
    critic's (:func:`prefix_hidden`); None or any other object is not supported."""
    cfg = getattr(backbone, "config", None)
    rotary = getattr(backbone, "rotary_emb", None)
    embed = getattr(backbone, "embed_tokens", None)
    return (
        cfg is not None
        and getattr(cfg, "model_type", None) == "llama"
        and rotary is not None
        and embed is not None
        and embed.weight.dtype == torch.float32
        and getattr(rotary, "rope_type", None) == "default"
        and not getattr(cfg, "attention_bias", False)
        and not getattr(cfg, "mlp_bias", False)
        and getattr(cfg, "hidden_act", None) == "silu"
        and getattr(cfg, "pretraining_tp", 1) == 1
    )


def _group_rows(key: torch.Tensor) -> tuple[list[int], list[int]]:
    """Rows of ``key`` (rows, n) grouped by equality: the first row of each group, in order of
    appearance, and each row's group. A dict over the rows' tuples: a few times cheaper than
    ``torch.unique(dim=0)`` at a few hundred rows."""
    slot: dict = {}
    inv = [slot.setdefault(r, len(slot)) for r in map(tuple, key.tolist())]
    first = [0] * len(slot)
    for i in reversed(range(len(inv))):
        first[inv[i]] = i
    return first, inv


class LlamaDecoder:
    """Prefill + static-cache decode over a HF ``LlamaForCausalLM``'s parameters."""

    def __init__(self, model: torch.nn.Module, precision: str = "fp32") -> None:
        if not supports(model):
            raise ValueError(f"LlamaDecoder: unsupported model {type(model).__name__}")
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"LlamaDecoder: precision={precision!r}: allowed: fp32, bf16")
        self.model = model
        #: bf16: the layers' GEMMs take bf16 copies of the weights (made at every call, so always
        #: the latest) and of their inputs; the residual stream, norms, RoPE, attention, the KV
        #: cache and the LM head stay fp32, so the sampled log-probs are fp32 functions of
        #: bf16-rounded hidden states, as the trainer's bf16 teacher-forced pass computes them.
        self.bf16 = precision == "bf16"
        cfg = model.config
        self.nh = cfg.num_attention_heads
        self.nkv = cfg.num_key_value_heads or self.nh
        self.hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.nh
        self.eps = cfg.rms_norm_eps
        self.d = cfg.hidden_size
        self._ws: torch.Tensor | None = None
        # per call, on the prompts' device: sqrt(d * eps) for :meth:`_norm`, ones(head_dim)
        self._eps_d: torch.Tensor | None = None
        self._ones_hd: torch.Tensor | None = None

    def _workspace(self, numel: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """A flat tensor of at least ``numel`` elements, kept between calls for the KV caches: a
        fresh multi-MB tensor costs a page fault per 4 KB page at its first write, about as much
        as writing it, at every call and every drop."""
        ws = self._ws
        if ws is None or ws.numel() < numel or ws.device != device or ws.dtype != dtype:
            ws = self._ws = torch.empty(numel, device=device, dtype=dtype)
        return ws

    def _weights(self) -> dict:
        """The model's weights rearranged for :meth:`_decode_block` (transposed, as ``torch.mm``'s
        right operand):

        - each RMSNorm's weight, times sqrt(d), folded into the columns of the GEMM it feeds, so
          that a norm is only ``x / sqrt(sum(x^2) + d * eps)`` (:meth:`_norm`);
        - q/k rows reordered within each head to interleaved pairs ``[0, h, 1, h + 1, ...]``
          (h = head_dim / 2), so that RoPE's rotate-half is one complex multiply of
          ``view_as_complex`` pairs (:meth:`_rope`); attention scores are sums over the head
          dimension, unchanged when q and k share the order (v keeps HF's);
        - the attention scale head_dim**-0.5 folded into the q rows.
        """
        m = self.model
        d, nh, nkv, hd = self.d, self.nh, self.nkv, self.hd
        h = hd // 2
        pairs = torch.stack([torch.arange(h), torch.arange(h) + h], dim=-1).flatten()
        pairs = pairs.to(m.model.embed_tokens.weight.device)

        def interleave(w: torch.Tensor, heads: int) -> torch.Tensor:
            return w.view(heads, hd, d).index_select(1, pairs).reshape(heads * hd, d)

        root = d**0.5
        layers = []
        for layer in m.model.layers:
            a, mlp = layer.self_attn, layer.mlp
            wqkv = torch.cat(
                [
                    interleave(a.q_proj.weight, nh) * hd**-0.5,
                    interleave(a.k_proj.weight, nkv),
                    a.v_proj.weight,
                ]
            )
            wgu = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
            w = (
                (wqkv * (layer.input_layernorm.weight * root)).t(),
                a.o_proj.weight.t(),
                (wgu * (layer.post_attention_layernorm.weight * root)).t(),
                mlp.down_proj.weight.t(),
            )
            if self.bf16:  # contiguous bf16 copies: the GEMMs' right operands
                w = tuple(z.to(torch.bfloat16) for z in w)
            layers.append(w)
        return {
            "embed": m.model.embed_tokens.weight,
            "layers": layers,
            "head": (m.lm_head.weight * (m.model.norm.weight * root)).t(),
        }

    def _mm(self, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``a @ w`` in fp32: in bf16, a bf16 GEMM of ``a`` rounded to bf16, widened after."""
        if self.bf16:
            return torch.mm(a.to(torch.bfloat16), w).float()
        return torch.mm(a, w)

    def _addmm_(self, x: torch.Tensor, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``x += a @ w`` in place on the fp32 residual stream ``x``; returns ``x``."""
        if self.bf16:
            return x.add_(torch.mm(a.to(torch.bfloat16), w))
        return x.addmm_(a, w)

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        """RMSNorm without its weight and without the 1/sqrt(d) (both folded into the next GEMM's
        weights): ``x / sqrt(|x|^2 + d * eps)``, three ops (``F.rms_norm`` runs six)."""
        return x / torch.hypot(torch.linalg.vector_norm(x, dim=-1, keepdim=True), self._eps_d)

    def _rope(self, n: int, device: torch.device) -> torch.Tensor:
        """``exp(i * pos * inv_freq) * attention_scaling`` for positions 0..n-1, (n, hd/2)
        complex: HF's cos/sin (the same float products) as one table."""
        rot = self.model.model.rotary_emb
        pos = torch.arange(n, device=device, dtype=torch.float32)
        freqs = pos[:, None] * rot.inv_freq.float()[None, :].to(device)
        return torch.complex(
            freqs.cos() * rot.attention_scaling, freqs.sin() * rot.attention_scaling
        )

    def _prefill_block(
        self,
        x: torch.Tensor,  # (N, P, d)
        w: tuple,
        rot: torch.Tensor,  # (N, P, 1, hd/2) complex
        mask: torch.Tensor | None,  # (N, 1, P, P) bool, or None: plain causal
        cache: tuple[torch.Tensor, torch.Tensor],  # this block's (P, N, nkv, hd) cache views
    ) -> torch.Tensor:
        """One layer over whole prompts: writes the keys/values into ``cache`` and returns the new
        hidden states."""
        wqkv, wo, wgu, wdown = w
        N, S, d = x.shape
        nh, nkv, hd = self.nh, self.nkv, self.hd
        qkv = self._mm(self._norm(x).view(N * S, d), wqkv).view(N, S, nh + 2 * nkv, hd)
        c = torch.view_as_complex(qkv.unflatten(-1, (-1, 2)))  # (N, S, heads, hd/2)
        k, v = (z.transpose(0, 1) for z in cache)  # (N, S, nkv, hd) views of the cache
        q = torch.view_as_real(c[:, :, :nh] * rot).flatten(-2)
        torch.mul(c[:, :, nh : nh + nkv], rot, out=torch.view_as_complex(k.unflatten(-1, (-1, 2))))
        v.copy_(qkv[:, :, nh + nkv :])
        attn = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            attn_mask=mask,
            is_causal=mask is None,
            scale=1.0,  # folded into the q weights
            enable_gqa=nkv != nh,
        )
        x = self._addmm_(x.view(N * S, d), attn.transpose(1, 2).reshape(N * S, nh * hd), wo)
        return self._mlp(x, wgu, wdown).view(N, S, d)

    def _mlp(self, x: torch.Tensor, wgu: torch.Tensor, wdown: torch.Tensor) -> torch.Tensor:
        """``x + down(silu(gate) * up)``, in place on the residual stream ``x`` (rows, d)."""
        n = self._norm(x)
        gu = torch.mm(n.to(torch.bfloat16) if self.bf16 else n, wgu)  # bf16 stays bf16 here
        i = gu.shape[-1] // 2
        g = F.silu(gu[:, :i], inplace=True).mul_(gu[:, i:])
        return x.add_(torch.mm(g, wdown)) if self.bf16 else x.addmm_(g, wdown)

    def _decode_block(
        self,
        x: torch.Tensor,  # (b, d): one new token per active row; updated in place
        w: tuple,
        rot: torch.Tensor,  # (b, 1, hd/2) complex
        cache: tuple[torch.Tensor, torch.Tensor],  # (L, b, nkv, hd) each, position-major
        at: int,  # cache position of the new token
        bias: torch.Tensor | None,  # (at + 1, b): -inf on prompt padding, or None
    ) -> torch.Tensor:
        wqkv, wo, wgu, wdown = w
        b, d = x.shape
        nh, nkv, hd = self.nh, self.nkv, self.hd
        g = nh // nkv
        qkv = self._mm(self._norm(x), wqkv).view(b, nh + 2 * nkv, hd)
        c = torch.view_as_complex(qkv.unflatten(-1, (-1, 2)))  # (b, heads, hd/2)
        k_cache, v_cache = cache
        q = torch.view_as_real(c[:, :nh] * rot).view(b, nkv, g, hd)
        # the new keys (rotated) and values go straight into the cache
        torch.mul(
            c[:, nh : nh + nkv], rot, out=torch.view_as_complex(k_cache[at].unflatten(-1, (-1, 2)))
        )
        v_cache[at] = qkv[:, nh + nkv :]
        n = at + 1
        k, v = k_cache[:n], v_cache[:n]  # (n, b, nkv, hd): contiguous, position-major
        if n <= SHORT_CONTEXT:
            # A few keys per row: broadcast multiply-and-sum over contiguous memory beats
            # b * nh tiny batched GEMMs, whose per-matrix cost dominates at this size; the sum
            # over the head dimension as a GEMV runs faster than ``sum(-1)``.
            prod = q * k.unsqueeze(3)  # (n, b, nkv, g, hd)
            scores = torch.mv(prod.view(-1, hd), self._ones_hd).view(n, b, nkv, g)
            if bias is not None:
                scores = scores + bias[:, :, None, None]
            p = torch.softmax(scores, dim=0)
            attn = (p.unsqueeze(-1) * v.unsqueeze(3)).sum(0)  # (b, nkv, g, hd)
        else:
            kt = k.permute(1, 2, 3, 0)  # (b, nkv, hd, n)
            scores = torch.matmul(q, kt)  # (b, nkv, g, n)
            if bias is not None:
                scores = scores + bias.t()[:, None, None, :]
            attn = torch.matmul(torch.softmax(scores, dim=-1), v.permute(1, 2, 0, 3))
        self._addmm_(x, attn.view(b, nh * hd), wo)
        return self._mlp(x, wgu, wdown)

    def generate(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        *,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        eos_id: int,
        pad_id: int,
        gen: torch.Generator,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sampled (or greedy, temperature 0) response ids and their log-probs, (B, T) each, with
        ``pad_id`` / 0 after a row's EOS; T is the last EOS + 1 when every row ended. Prompts
        (B, P) are left-padded; ``gen`` supplies the uniforms (:func:`draw_uniforms`). Runs under
        ``inference_mode``; the results are cloned out of it, so autograd may use them."""
        with torch.inference_mode():
            ids, lps = self._generate(
                prompt_ids,
                prompt_mask,
                temperature=temperature,
                top_p=top_p,
                max_new_tokens=max_new_tokens,
                eos_id=eos_id,
                pad_id=pad_id,
                gen=gen,
            )
        ws = self._ws
        if ws is not None and ws.numel() * ws.element_size() > KEEP_WORKSPACE_BYTES:
            self._ws = None  # a real model's caches: not held between calls
        fmt = torch.contiguous_format  # the step-major buffers come back transposed
        return ids.clone(memory_format=fmt), lps.clone(memory_format=fmt)

    def _prefill(
        self,
        W: dict,
        pid: torch.Tensor,  # (n, P) distinct prompts, left-padded
        pmask: torch.Tensor,  # (n, P) bool
        rot_t: torch.Tensor,  # (L, hd/2) complex
        caches: list,  # per layer (P or more, n, nkv, hd) x 2: filled at [:P]
    ) -> torch.Tensor:
        """All layers over the prompts, a block of rows at a time so that each block's
        activations stay in cache (one (rows x P, 4d) GEMM output of several MB runs at about
        two thirds of the speed of the same work in ``PREFILL_TOKENS``-row pieces). Returns the
        last position's hidden state, (n, d)."""
        n, P = pid.shape
        device = pid.device
        padded = not bool(pmask.all())
        causal = torch.ones(P, P, dtype=torch.bool, device=device).tril()
        eye = torch.eye(P, dtype=torch.bool, device=device)
        pos = (pmask.long().cumsum(-1) - 1).clamp(min=0)
        step = max(1, PREFILL_TOKENS // P)
        last = []
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            pm = pmask[r0:r1]
            # causal over the real prompt keys; a padding query attends to itself only, so no
            # softmax row is empty (its output is never read)
            mask = ((causal & pm[:, None, :]) | eye).unsqueeze(1) if padded else None
            x = F.embedding(pid[r0:r1], W["embed"])
            rot = rot_t[pos[r0:r1]].unsqueeze(2)
            for w, (kc, vc) in zip(W["layers"], caches, strict=True):
                x = self._prefill_block(x, w, rot, mask, (kc[:P, r0:r1], vc[:P, r0:r1]))
            last.append(x[:, -1])
        return torch.cat(last)

    def _generate(
        self,
        prompt_ids: torch.Tensor,  # (B, P) left-padded
        prompt_mask: torch.Tensor,  # (B, P) float or long
        *,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        eos_id: int,
        pad_id: int,
        gen: torch.Generator,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        W = self._weights()
        device, dtype = prompt_ids.device, W["embed"].dtype
        self._eps_d = torch.tensor((self.d * self.eps) ** 0.5, device=device, dtype=dtype)
        self._ones_hd = torch.ones(self.hd, device=device, dtype=dtype)
        B, P = prompt_ids.shape
        T = max_new_tokens
        L = P + T
        rot_t = self._rope(L, device)
        plen = prompt_mask.long().sum(-1)  # real prompt tokens per row

        nl, per = len(W["layers"]), L * B * self.nkv * self.hd
        # Two sets of caches in the persistent workspace: a drop copies from one to the other.
        ws = self._workspace(2 * nl * 2 * per, device, dtype)[: 2 * nl * 2 * per]
        ws = ws.view(2, nl, 2, per)

        def caches_in(s: int, rows: int) -> list:
            shape, numel = (L, rows, self.nkv, self.hd), L * rows * self.nkv * self.hd
            return [tuple(ws[s, i, j, :numel].view(shape) for j in range(2)) for i in range(nl)]

        s = 0
        caches = caches_in(s, B)
        # A prompt repeated n times (GRPO's group) is prefilled once and its keys/values copied
        # to its n rows.
        first, inv = _group_rows(torch.cat([prompt_ids, prompt_mask.long()], dim=-1))
        if len(first) < B:
            n = len(first)
            first = torch.tensor(first, device=device)
            inv = torch.tensor(inv, device=device)
            pre = [
                tuple(
                    torch.empty(P, n, self.nkv, self.hd, device=device, dtype=dtype) for _ in "kv"
                )
                for _ in W["layers"]
            ]
            pid, pmask = prompt_ids.index_select(0, first), prompt_mask.index_select(0, first)
            x = self._prefill(W, pid, pmask.bool(), rot_t, pre)
            for (k, v), (kp, vp) in zip(caches, pre, strict=True):
                torch.index_select(kp, 1, inv, out=k[:P])
                torch.index_select(vp, 1, inv, out=v[:P])
            x = x.index_select(0, inv)
        else:
            x = self._prefill(W, prompt_ids, prompt_mask.bool(), rot_t, caches)
        # Decode: an additive bias over the keys (-inf on prompt padding), or none at all.
        key_bias = None
        if not bool(prompt_mask.bool().all()):
            key_bias = torch.zeros(L, B, dtype=dtype, device=device)
            key_bias[:P].masked_fill_(~prompt_mask.bool().t(), float("-inf"))
        # Each step's rotation per row, (T, B, 1, hd/2): a view per step, gathered at drops only.
        rots = rot_t[plen[None, :] + torch.arange(T, device=device)[:, None]].unsqueeze(2)
        # Step-major outputs: a step's draws are one contiguous write; entries after a row's
        # EOS (or never written, once the row is dropped) are set to pad / 0 at the end.
        ids_out = torch.full((T, B), pad_id, dtype=torch.long, device=device)
        lp_out = torch.zeros(T, B, dtype=torch.float32, device=device)
        # Each step's uniform per row, (T, B), gathered at drops like ``rots``.
        us = None if temperature == 0 else draw_uniforms(gen, T, B, device)
        rows = torch.arange(B, device=device)  # original row of each active row
        dropped = False  # whether rows is still arange(B)
        done = torch.zeros(B, dtype=torch.bool, device=device)
        check = CHECK_EVERY if device.type != "cpu" else CHECK_EVERY_CPU
        steps = 0
        for t in range(T):
            logits = torch.mm(self._norm(x), W["head"])
            nxt, lp = next_token(
                logits, None if us is None else us[t], temperature=temperature, top_p=top_p
            )
            if dropped:
                ids_out[t].index_copy_(0, rows, nxt)
                lp_out[t].index_copy_(0, rows, lp)
            else:
                ids_out[t] = nxt
                lp_out[t] = lp
            done |= nxt == eos_id
            steps = t + 1
            if t + 1 == T:
                break
            at = P + t  # cache position of this token
            if (t + 1) % check == 0:
                n_done = int(done.sum())
                if n_done == done.numel():
                    break
                # Drop finished rows once enough have piled up: a drop copies every active row's
                # filled cache, so dropping one row at a time would cost more than it saves.
                if n_done > 0 and n_done * DROP_FRACTION >= done.numel():
                    keep = (~done).nonzero().squeeze(-1)
                    # index_select: a plain row gather, about 10x faster than t[keep] here
                    rows, nxt, x, done = (z.index_select(0, keep) for z in (rows, nxt, x, done))
                    rots = rots.index_select(1, keep)
                    if us is not None:
                        us = us.index_select(1, keep)
                    if key_bias is not None:
                        key_bias = key_bias.index_select(1, keep)
                    s = 1 - s
                    fresh = caches_in(s, keep.numel())
                    for (k, v), (k2, v2) in zip(caches, fresh, strict=True):
                        torch.index_select(k[:at], 1, keep, out=k2[:at])
                        torch.index_select(v[:at], 1, keep, out=v2[:at])
                    caches = fresh
                    dropped = True
            xs = F.embedding(nxt, W["embed"])  # (b, d)
            m = None if key_bias is None else key_bias[: at + 1]
            for w, cache in zip(W["layers"], caches, strict=True):
                xs = self._decode_block(xs, w, rots[t], cache, at, m)
            x = xs
        ids_out, lp_out = ids_out[:steps].t(), lp_out[:steps].t()
        is_eos = ids_out == eos_id
        after = past_first_eos(ids_out, eos_id)
        ids_out, lp_out = ids_out.masked_fill(after, pad_id), lp_out.masked_fill(after, 0.0)
        if bool(is_eos.any(-1).all()):  # every row ended: trim to the last EOS
            steps = int(is_eos.float().argmax(-1).max()) + 1
            ids_out, lp_out = ids_out[:, :steps], lp_out[:, :steps]
        return ids_out, lp_out


def fp32_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs: Any
) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` in fp32 whatever the autocast: under CPU bf16 autocast
    torch runs it (and its backward) in bf16, several times slower than in fp32 at these sizes
    (head_dim 32, a few dozen keys: no GEMM big enough to gain), and with bf16 softmax weights.
    The output comes back in ``v``'s dtype, the one the next projection reads (under autocast
    it would cast it so anyway). fp32 (or fp64) inputs pass through unchanged."""
    dt = torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)
    dt = torch.promote_types(dt, torch.float32)
    with torch.autocast(q.device.type, enabled=False):
        out = F.scaled_dot_product_attention(q.to(dt), k.to(dt), v.to(dt), **kwargs)
    return out.to(v.dtype)


def prefix_logprobs(
    model: torch.nn.Module,  # a Llama that :func:`supports`
    prompt_ids: torch.Tensor,  # (B, P) left-padded
    prompt_mask: torch.Tensor,  # (B, P)
    response_ids: torch.Tensor,  # (B, T)
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Teacher-forced response log-probs, (B, T), with each distinct prompt run once
    (:func:`prefix_hidden`); only float rounding differs from HF's forward."""
    h = prefix_hidden(model.model, prompt_ids, prompt_mask, response_ids)
    # The LM head in fp32 under any autocast, as the decoder's: a bf16 logit is off by up to
    # |logit| / 256, which the log-probs (and so every ratio) would carry.
    with torch.autocast(h.device.type, enabled=False):
        logits = F.linear(h.to(model.lm_head.weight.dtype), model.lm_head.weight)
    return token_logprobs(logits, response_ids, temperature, with_entropy)


def prefix_hidden(
    backbone: torch.nn.Module,  # a LlamaModel that :func:`supports_backbone`
    prompt_ids: torch.Tensor,  # (B, P) left-padded
    prompt_mask: torch.Tensor,  # (B, P)
    response_ids: torch.Tensor,  # (B, T)
) -> torch.Tensor:
    """The final-norm hidden states that predict each response token, (B, T, d): the last prompt
    position's for token 0, then the response's own, as HF's ``last_hidden_state`` at positions
    P-1 .. P+T-2 (the policy's head turns them into log-probs, the token critic's into values).

    A GRPO-style batch repeats every prompt n times; the prompt's hidden states and keys/values
    do not depend on the response, so they are computed for the distinct prompts only and shared
    by their responses (autograd sums the shared prefix's gradients over the group, as the
    repeated computation would). Responses attend to [own prompt's keys | causal response keys],
    exactly the full sequence's attention; only float rounding differs from HF's forward.
    """
    m = backbone
    cfg = m.config
    nh = cfg.num_attention_heads
    nkv = cfg.num_key_value_heads or nh
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // nh
    d, eps = cfg.hidden_size, cfg.rms_norm_eps
    device = prompt_ids.device
    key = torch.cat([prompt_ids, prompt_mask.long()], dim=-1)
    uniq, inv = torch.unique(key, dim=0, return_inverse=True)
    P = prompt_ids.shape[1]
    pid, pmask = uniq[:, :P], uniq[:, P:].bool()
    B, T = response_ids.shape
    rot = m.rotary_emb
    embed = m.embed_tokens.weight
    pad_idx = m.embed_tokens.padding_idx  # HF's embedding gives that row no gradient
    dtype = embed.dtype
    n_pos = P + T
    pos_all = torch.arange(n_pos, device=device, dtype=torch.float32)
    freqs = pos_all[:, None] * rot.inv_freq.float().to(device)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos_t = (emb.cos() * rot.attention_scaling).to(dtype)
    sin_t = (emb.sin() * rot.attention_scaling).to(dtype)

    def rope(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:  # x (N, S, H, hd), pos (N, S)
        cos, sin = cos_t[pos].unsqueeze(2), sin_t[pos].unsqueeze(2)
        h = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * sin

    def qkv_of(layer: torch.nn.Module, x: torch.Tensor, pos: torch.Tensor) -> tuple:
        a = layer.self_attn
        w = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])
        N, S, _ = x.shape
        h = F.rms_norm(x, (d,), layer.input_layernorm.weight, eps)
        qkv = F.linear(h, w).view(N, S, nh + 2 * nkv, hd)
        qk = rope(qkv[:, :, : nh + nkv], pos)
        return (
            qk[:, :, :nh].transpose(1, 2),
            qk[:, :, nh:].transpose(1, 2),
            qkv[:, :, nh + nkv :].transpose(1, 2),
        )

    def finish(layer: torch.nn.Module, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        N, S, _ = x.shape
        x = x + F.linear(attn.transpose(1, 2).reshape(N, S, nh * hd), layer.self_attn.o_proj.weight)
        mlp = layer.mlp
        h = F.rms_norm(x, (d,), layer.post_attention_layernorm.weight, eps)
        g, u = F.linear(h, torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])).chunk(2, dim=-1)
        return x + F.linear(F.silu(g) * u, mlp.down_proj.weight)

    # Distinct prompts: causal over their real keys (a padding query attends to itself only).
    pos_p = (pmask.long().cumsum(-1) - 1).clamp(min=0)
    padded = not bool(pmask.all())
    mask_p = None
    if padded:
        causal = torch.ones(P, P, dtype=torch.bool, device=device).tril()
        eye = torch.eye(P, dtype=torch.bool, device=device)
        mask_p = ((causal & pmask[:, None, :]) | eye).unsqueeze(1)
    x = F.embedding(pid, embed, padding_idx=pad_idx)
    prefix_kv = []
    for layer in m.layers:
        q, k, v = qkv_of(layer, x, pos_p)
        prefix_kv.append((k, v))
        attn = fp32_attention(
            q, k, v, attn_mask=mask_p, is_causal=mask_p is None, enable_gqa=nkv != nh
        )
        x = finish(layer, x, attn)
    last = x[:, -1]  # (G, d): predicts response token 0
    # Responses: [own prompt's real keys | causal response keys].
    plen = pmask.long().sum(-1)
    pos_r = plen[inv][:, None] + torch.arange(T, device=device)[None, :]
    causal_r = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    mask_r = torch.cat(
        [pmask[inv][:, None, None, :].expand(B, 1, T, P), causal_r.expand(B, 1, T, T)], dim=-1
    )
    x = F.embedding(response_ids, embed, padding_idx=pad_idx)
    for layer, (k_p, v_p) in zip(m.layers, prefix_kv, strict=True):
        q, k, v = qkv_of(layer, x, pos_r)
        k = torch.cat([k_p[inv], k], dim=2)
        v = torch.cat([v_p[inv], v], dim=2)
        attn = fp32_attention(q, k, v, attn_mask=mask_r, enable_gqa=nkv != nh)
        x = finish(layer, x, attn)
    h = torch.cat([last[inv].unsqueeze(1), x[:, : T - 1]], dim=1)  # positions P-1 .. P+T-2
    return F.rms_norm(h, (d,), m.norm.weight, eps)
