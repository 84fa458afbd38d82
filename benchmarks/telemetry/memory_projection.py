"""``sppo-bench memory``: the per-component memory accounting projected for the paper's models.

The CPU suite measures the tensors a run holds (:mod:`benchmarks.telemetry.memory`); its tiny
model cannot show what those components weigh at 1.5B or 7B parameters, where the paper measured
peak VRAM (SPPO 91.5%, SPPO with a 1.5B critic for a 7B policy 78.7%, GRPO 85.7%, PPO 89.8%).
This module computes the same components analytically from an architecture, with no download:

* weights, gradients and Adam states of the policy and the critic, and the reference's weights,
  sharded over the GPUs as FSDP does (``shard``);
* the update's peak activations for one micro-batch: with activation checkpointing, each
  layer's input plus one layer recomputed; without, every layer's saved tensors; plus the LM
  head's logits (and their gradient) where the model has one. A prompt critic (SPPO) reads the
  prompt only, a token critic (PPO) the whole sequence;
* the rollout: a bf16 copy of the policy in the inference engine and the KV cache of the GPU's
  share of the rollout batch, capped at the engine's pool (``rollout_pool_fraction``). Training
  states stay resident during the rollout (no offload).

The peak is the static states plus the larger of the two phases. The projection is a model, not a
measurement: allocator fragmentation, framework buffers and offloading are not in it, so it is
read beside the paper's percentages, not against them.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

__all__ = [
    "ARCHS",
    "PAPER_PEAK_VRAM",
    "Arch",
    "ProjectionSettings",
    "Scenario",
    "default_scenarios",
    "load_settings",
    "main",
    "project",
]

_GB = 1e9


@dataclass(frozen=True)
class Arch:
    """A decoder-only transformer's shape (Llama/Qwen2 layout, q/k/v biases as Qwen2's)."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool
    qkv_bias: bool = True

    @property
    def short(self) -> str:
        """The size part of the name, e.g. ``7b``."""
        return self.name.rsplit("-", 1)[-1]

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * (self.hidden // self.heads)

    def params(self, lm_head: bool = True) -> int:
        """Parameter count; ``lm_head=False`` for a critic (a scalar head instead)."""
        h, kv = self.hidden, self.kv_dim
        attn = 2 * h * h + 2 * h * kv + ((h + 2 * kv) if self.qkv_bias else 0)
        layer = attn + 3 * h * self.intermediate + 2 * h
        total = self.vocab * h + self.layers * layer + h
        if lm_head and not self.tied:
            total += self.vocab * h
        return total + (0 if lm_head else h + 1)


#: The paper's model sizes (DeepSeek-R1-Distill-Qwen-1.5B / -7B: the Qwen2.5 architecture).
ARCHS: dict[str, Arch] = {
    "qwen2.5-1.5b": Arch("qwen2.5-1.5b", 1536, 28, 12, 2, 8960, 151936, tied=True),
    "qwen2.5-7b": Arch("qwen2.5-7b", 3584, 28, 28, 4, 18944, 152064, tied=False),
}

#: Peak VRAM the paper reports (fraction of the GPU), for the 7B policy.
PAPER_PEAK_VRAM: dict[str, float] = {
    "grpo": 0.857,
    "ppo": 0.898,
    "sppo": 0.915,
    "sppo+1.5b critic": 0.787,
}


@dataclass(frozen=True)
class ProjectionSettings:
    """Assumptions of the projection (each one a ``sppo-bench memory --set key=value``)."""

    gpus: int = 8  # FSDP world size: weights, grads and Adam states are sharded over it
    gpu_gb: float = 80.0  # memory of one GPU
    weight_bytes: int = 2  # bf16 weights
    grad_bytes: int = 2  # bf16 gradients
    adam_bytes: int = 8  # fp32 exp_avg and exp_avg_sq
    master_bytes: int = 0  # an fp32 master copy of the weights (4), or none (0)
    checkpointing: bool = True  # activation checkpointing in the update
    micro_batch: int = 1  # sequences per micro-batch on one GPU
    prompt_len: int = 1024
    response_len: int = 8192
    #: Rollout batch in sampled responses over all GPUs, the same for every algorithm (the
    #: harness's rule: GRPO's groups take more samples per prompt, not more samples).
    samples_per_step: int = 1024
    #: The inference engine's pool (vLLM's gpu_memory_utilization; verl's default 0.5): the
    #: rollout's weights and KV cache never exceed it, a larger batch decodes in waves. 1.0:
    #: the whole batch's cache at once.
    rollout_pool_fraction: float = 0.5

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool):
                continue
            if f.name == "rollout_pool_fraction":
                if not 0.0 < v <= 1.0:
                    raise ValueError(f"memory: rollout_pool_fraction={v!r} must be in (0, 1]")
            elif not v >= (0 if f.name == "master_bytes" else 1):
                raise ValueError(f"memory: {f.name}={v!r} must be >= 1 (master_bytes: >= 0)")

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> ProjectionSettings:
        """Settings from ``key=value`` pairs or a YAML mapping; an unknown key names the allowed."""
        allowed = {f.name: f.type for f in dataclasses.fields(cls)}
        out: dict[str, Any] = {}
        for k, v in values.items():
            if k not in allowed:
                raise ValueError(f"memory: unknown setting {k!r}; allowed: {sorted(allowed)}")
            default = getattr(cls(), k)
            if isinstance(default, bool):
                out[k] = v if isinstance(v, bool) else str(v).lower() in ("1", "true", "on", "yes")
            else:
                out[k] = type(default)(v)
        return cls(**out)


@dataclass(frozen=True)
class Scenario:
    """One bar of the paper's figure: an algorithm, its policy and its critic (None: none)."""

    label: str
    algorithm: str
    policy: Arch
    critic: Arch | None
    critic_kind: str  # "none" | "prompt" | "token"
    reference: bool


def default_scenarios() -> list[Scenario]:
    """The 1.5B policy, and the 7B policy with its own-size critic and with a 1.5B critic."""
    small, big = ARCHS["qwen2.5-1.5b"], ARCHS["qwen2.5-7b"]
    out = []
    for pol in (small, big):
        out += [
            Scenario("sppo", "sppo", pol, pol, "prompt", False),
            Scenario("ppo", "ppo", pol, pol, "token", False),
            Scenario("grpo", "grpo", pol, None, "none", True),
        ]
    out.append(Scenario("sppo+1.5b critic", "sppo", big, small, "prompt", False))
    return out


def _layer_activation_bytes(a: Arch, tokens: int, s: ProjectionSettings) -> float:
    """Saved tensors of one layer's backward per micro-batch (bf16, flash attention: no
    sequence-squared term): the two norms' inputs, q, k, v, the attention output and its
    projection's input, the MLP's gate, up, activation and product."""
    per_token = 6 * a.hidden + 2 * a.kv_dim + 4 * a.intermediate
    return float(tokens * per_token * s.weight_bytes)


def _update_activations(a: Arch, tokens: int, head: bool, s: ProjectionSettings) -> float:
    layer = _layer_activation_bytes(a, tokens, s)
    if s.checkpointing:  # each layer's input kept, one layer recomputed at a time
        body = a.layers * tokens * a.hidden * s.weight_bytes + layer
    else:
        body = a.layers * layer
    logits = tokens * a.vocab * 4 * 2 if head else 0.0  # fp32 logits and their gradient
    return body + logits


def _states(a: Arch, lm_head: bool, trained: bool, s: ProjectionSettings) -> dict[str, float]:
    n = a.params(lm_head=lm_head) / s.gpus
    if not trained:
        return {"params": n * s.weight_bytes}
    return {
        "params": n * (s.weight_bytes + s.master_bytes),
        "grads": n * s.grad_bytes,
        "optimizer": n * s.adam_bytes,
    }


def project(scenario: Scenario, s: ProjectionSettings) -> dict[str, Any]:
    """Per-GPU bytes of each component, the phases' peaks and the total, for one scenario."""
    tokens = s.micro_batch * (s.prompt_len + s.response_len)
    comp: dict[str, dict[str, float]] = {"policy": _states(scenario.policy, True, True, s)}
    if scenario.critic is not None:
        comp["critic"] = _states(scenario.critic, False, True, s)
    if scenario.reference:
        comp["reference"] = _states(scenario.policy, True, False, s)
    static = sum(v for c in comp.values() for v in c.values())
    policy_act = _update_activations(scenario.policy, tokens, True, s)
    critic_act = 0.0
    if scenario.critic is not None:
        ctoks = s.micro_batch * (s.prompt_len if scenario.critic_kind == "prompt" else 0)
        ctoks = ctoks or tokens
        critic_act = _update_activations(scenario.critic, ctoks, False, s)
    seqs = s.samples_per_step / s.gpus
    p = scenario.policy
    kv = seqs * (s.prompt_len + s.response_len) * p.layers * 2 * p.kv_dim * s.weight_bytes
    rollout = min(p.params() * s.weight_bytes + kv, s.rollout_pool_fraction * s.gpu_gb * _GB)
    activations = max(policy_act, critic_act)
    peak = static + max(activations, rollout)
    return {
        "scenario": scenario,
        "components": comp,
        "static": static,
        "activations": activations,
        "policy_activations": policy_act,
        "critic_activations": critic_act,
        "rollout": rollout,
        "peak": peak,
        "fraction": peak / (s.gpu_gb * _GB),
    }


def load_settings(path: str | None, sets: list[str]) -> ProjectionSettings:
    """Settings from a YAML file's mapping (or its ``memory:`` node), then ``key=value`` pairs."""
    values: dict[str, Any] = {}
    if path:
        import yaml

        blob = yaml.safe_load(Path(path).read_text()) or {}
        values.update(blob.get("memory", blob))
    for item in sets:
        if "=" not in item:
            raise ValueError(f"memory: --set {item!r}: expected key=value")
        k, v = item.split("=", 1)
        values[k.strip()] = v.strip()
    return ProjectionSettings.from_mapping(values)


def main(argv: list[str]) -> int:
    """``sppo-bench memory [--config FILE] [--set key=value ...]``: print the projection."""
    import argparse
    import sys

    from rich.console import Console
    from rich.table import Table

    p = argparse.ArgumentParser(
        prog="sppo-bench memory",
        description="Per-GPU memory of the paper's settings, projected analytically.",
    )
    p.add_argument("--config", help="YAML mapping of settings (or a `memory:` node)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"one setting; keys: {[f.name for f in dataclasses.fields(ProjectionSettings)]}",
    )
    a = p.parse_args(argv)
    try:
        s = load_settings(a.config, a.set)
    except (ValueError, OSError) as e:
        sys.stderr.write(f"sppo-bench memory: {e}\n")
        return 2
    console = Console(width=None if sys.stdout.isatty() else 140)
    table = Table(title=f"Projected peak memory per GPU ({s.gpus} x {s.gpu_gb:g} GB)")
    cols = ("policy", "critic", "algorithm", "policy states", "critic states", "reference")
    for c in (*cols, "policy act.", "critic act.", "rollout", "peak GB", "% of GPU"):
        table.add_column(c, justify="right")
    table.add_column("paper", justify="right")
    for sc in default_scenarios():
        r = project(sc, s)
        comp = r["components"]
        gb = {k: sum(v.values()) / _GB for k, v in comp.items()}
        paper = PAPER_PEAK_VRAM.get(sc.label) if sc.policy.name.endswith("7b") else None
        table.add_row(
            sc.policy.short,
            "-" if sc.critic is None else sc.critic.short,
            sc.label,
            f"{gb['policy']:.1f}",
            f"{gb.get('critic', 0.0):.1f}",
            f"{gb.get('reference', 0.0):.1f}",
            f"{r['policy_activations'] / _GB:.1f}",
            f"{r['critic_activations'] / _GB:.1f}",
            f"{r['rollout'] / _GB:.1f}",
            f"{r['peak'] / _GB:.1f}",
            f"{100 * r['fraction']:.1f}%",
            "-" if paper is None else f"{100 * paper:.1f}%",
        )
    console.print(table)
    console.print("All columns in GB per GPU; act.: the update's peak activations.")
    console.print(
        "Assumptions: "
        + ", ".join(f"{f.name}={getattr(s, f.name)}" for f in dataclasses.fields(s))
        + f". Weights {s.weight_bytes} B/param (bf16), grads {s.grad_bytes} B, Adam states "
        f"{s.adam_bytes} B (fp32 m and v), master copy {s.master_bytes} B; FSDP shards states over "
        f"{s.gpus} GPUs; activation checkpointing {'on' if s.checkpointing else 'off'}, "
        f"micro-batch {s.micro_batch} x {s.prompt_len + s.response_len} tokens; the rollout holds "
        "a bf16 policy copy and its batch's KV cache, at most the engine's pool "
        f"({s.rollout_pool_fraction:g} of the GPU), beside the resident training states. Not "
        "modelled: fragmentation, framework buffers, offloading. The paper's "
        "percentages (7B policy) are measurements of its own runs, shown for reference.",
        soft_wrap=True,
        markup=False,
    )
    return 0
