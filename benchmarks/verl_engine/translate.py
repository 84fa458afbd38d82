"""A validated suite (``SuitePlan``) -> verl 0.9.1 Hydra overrides, one set per (algorithm, seed).

The algorithm's *registered* config (``algorithms.get_algorithm``) is the source of every value:
clip ratios, dual-clip, loss aggregation, KL, samples per prompt, GAE settings, the DAPO pieces.
What verl cannot express is refused here with a :class:`~algorithms.ConfigError` naming the
field, before any GPU is touched. Mapping (docs/design.md §5, checked against verl 0.9.1's source):

========  =====================================================================================
grpo      ``algorithm.adv_estimator=grpo`` (verl's ``compute_grpo_outcome_advantage``); grpo2
          (GRPO with G = 2) the same
dr_grpo   grpo with ``algorithm.norm_adv_by_std_in_grpo=false``, ``seq-mean-token-sum``
gspo      grpo + ``actor.policy_loss.loss_mode=gspo`` (``compute_policy_loss_gspo``)
cispo     grpo + ``loss_mode=cispo`` (``compute_policy_loss_cispo``)
gmpo      grpo + ``loss_mode=geo_mean`` (``compute_policy_loss_geo_mean``)
reinforce_pp
          ``algorithm.adv_estimator=reinforce_plus_plus``, ``algorithm.gamma``, the k1 KL in the
          reward (``algorithm.use_kl_in_reward``, a fixed ``kl_ctrl``)
reinforce_pp_baseline
          ``algorithm.adv_estimator=reinforce_plus_plus_baseline``, the KL in the reward likewise
rloo      ``algorithm.adv_estimator=rloo``
remax     ``algorithm.adv_estimator=remax`` on verl's *legacy* trainer (``trainer.use_v1=false``):
          only that trainer decodes the greedy baseline (``reward_baselines``)
ppo       ``algorithm.adv_estimator=gae``, the token critic on, ``trainer.critic_warmup``
dapo      grpo + ``clip_ratio_high``, ``algorithm.filter_groups`` (metric ``acc``, the unshaped
          score) and the ``dapo`` reward manager's overlong buffer
sppo      the plugin trainer ``trainer.v1.trainer_mode=sppo`` (benchmarks.verl_engine.plugin):
          critic on, A = R - sigmoid(values[:, 0]), BCE value loss at the prompt position
spo       refused: its per-prompt tracker is state carried across steps, and verl's estimators
          see each step's rows under fresh ids, never the prompt's identity or the last step
other     ``algorithm.adv_estimator=sppo_bench.<name>`` (and a policy loss of the same name when
          the algorithm overrides ``policy_loss`` or ``surrogate``): registry wrappers, critic-free, stateless
========  =====================================================================================

verl facts this relies on (verl 0.9.1): ``compute_policy_loss_vanilla`` *always* applies
dual-clip (``clip_ratio_c`` defaults to 3.0 and must be > 1), so an algorithm without dual-clip
gets ``clip_ratio_c = 1e9``: the log-ratio is clamped to 20 before ``exp``, so the ratio never
exceeds e^20 < 1e9 and the bound is never active. verl's GRPO epsilon is fixed at 1e-6.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from algorithms import Algorithm, ConfigError
from algorithms.base import Algorithm as _AlgorithmBase
from benchmarks.suite.components import VerlEngineConfig
from benchmarks.suite.plan import SuitePlan
from benchmarks.training.config import TrainerConfig

log = logging.getLogger(__name__)

__all__ = [
    "ALGORITHM_ENV",
    "BUILTIN",
    "NO_DUAL_CLIP",
    "SPPO_TRAINER_MODE",
    "VERL_LOSS_MODES",
    "VerlPlan",
    "format_override",
    "has_own_policy_loss",
    "translate",
    "verl_engine",
    "wrapper_name",
]

#: Algorithms mapped onto verl's own estimators (plus sppo's plugin trainer).
BUILTIN: tuple[str, ...] = (
    "grpo",
    "grpo2",
    "dr_grpo",
    "gspo",
    "cispo",
    "gmpo",
    "rloo",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "remax",
    "ppo",
    "dapo",
    "sppo",
)
#: Built-ins whose policy loss is one of verl's (``actor.policy_loss.loss_mode``), not vanilla.
VERL_LOSS_MODES: dict[str, str] = {"gspo": "gspo", "cispo": "cispo", "gmpo": "geo_mean"}
#: Built-ins on verl's GRPO estimator.
_GRPO_FAMILY = ("grpo", "grpo2", "dr_grpo", "gspo", "cispo", "gmpo", "dapo")
#: ``trainer.v1.trainer_mode`` under which the plugin registers the SPPO trainer.
SPPO_TRAINER_MODE = "sppo"
#: ``clip_ratio_c`` that switches verl's (always-on) dual-clip off; see the module docstring.
NO_DUAL_CLIP = 1e9
#: Environment variable carrying ``{"name": ..., "params": {...}}`` to verl's Ray workers, where
#: the plugin's wrappers rebuild the algorithm with ``get_algorithm(name, **params)``.
ALGORITHM_ENV = "SPPO_BENCH_VERL_ALGORITHM"
#: Environment variable naming extra modules (the suite's ``plugins``) the workers import.
PLUGINS_ENV = "SPPO_BENCH_PLUGINS"
#: Our KL estimator names -> verl's ``kl_loss_type`` / ``algorithm.kl_penalty``.
_KL_NAMES = {"k1": "kl", "k3": "low_var_kl"}
_VERL_GRPO_EPS = 1e-6
_REWARD_FN = "pkg://benchmarks.verl_engine.reward"


def wrapper_name(algorithm: str) -> str:
    """Name under which the plugin registers a registry algorithm's estimator / policy loss."""
    return f"sppo_bench.{algorithm}"


@dataclass
class VerlPlan:
    """One verl launch: Hydra overrides for ``verl.trainer.main_ppo`` and its environment."""

    algorithm: str
    seed: int
    run_name: str
    overrides: list[str]
    env: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)

    def command(self, python: str) -> list[str]:
        """The argv that launches this run."""
        return [python, "-m", "verl.trainer.main_ppo", *self.overrides]


_SAFE = re.compile(r"^[A-Za-z0-9_.\-/@~]+$")


def _fmt(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot pass a non-finite number to verl: {value}")
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(_fmt(v) for v in value) + "]"
    s = str(value)
    if _SAFE.match(s) and s not in ("null", "true", "false"):
        return s
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def format_override(key: str, value: Any) -> str:
    """One Hydra override ``key=value`` (strings quoted when Hydra's grammar needs it)."""
    return f"{key}={_fmt(value)}"


def _overrides_method(alg: Algorithm, method: str) -> bool:
    return getattr(type(alg), method) is not getattr(_AlgorithmBase, method)


def has_own_policy_loss(cls: type[Algorithm]) -> bool:
    """Whether a registry algorithm's objective differs from the base's clipped surrogate (it
    overrides ``policy_loss`` or only its ``surrogate``): verl then runs its loss through the
    plugin's wrapper instead of the vanilla loss."""
    base = _AlgorithmBase
    return any(getattr(cls, m) is not getattr(base, m) for m in ("policy_loss", "surrogate"))


def _algorithm_values(name: str, alg: Algorithm) -> dict[str, Any]:
    """verl keys that carry the algorithm itself (estimator, losses, critic, reward shaping)."""
    c = alg.config
    kl_type = _KL_NAMES[c.kl_penalty]
    actor = "actor_rollout_ref.actor"
    v: dict[str, Any] = {
        f"{actor}.clip_ratio_low": c.clip_ratio_low,
        f"{actor}.clip_ratio_high": c.clip_ratio_high,
        f"{actor}.clip_ratio_c": c.clip_ratio_c if c.clip_ratio_c is not None else NO_DUAL_CLIP,
        f"{actor}.loss_agg_mode": c.loss_agg_mode,
        f"{actor}.ppo_epochs": c.ppo_epochs,
        f"{actor}.use_kl_loss": c.kl_loss_coef > 0,
        f"{actor}.kl_loss_coef": c.kl_loss_coef,
        f"{actor}.kl_loss_type": kl_type,
        f"{actor}.entropy_coeff": 0.0,
        f"{actor}.policy_loss.loss_mode": "vanilla",
        "actor_rollout_ref.rollout.n": alg.samples_per_prompt,
        "algorithm.use_kl_in_reward": False,
        "algorithm.filter_groups.enable": False,
        "trainer.critic_warmup": 0,
        "critic.enable": False,
    }
    if alg.needs_prompt_keys or _overrides_method(alg, "observe"):
        raise ConfigError(
            f"algorithm={name}: it carries per-prompt state from step to step (e.g. SPO's "
            "tracker), and verl's advantage estimators see each step's rows under fresh ids, "
            "never a prompt's identity or the previous steps; use engine=torch"
        )
    if name in _GRPO_FAMILY:
        if not math.isclose(c.eps, _VERL_GRPO_EPS, rel_tol=1e-9):
            raise ConfigError(
                f"algorithm.{name}.params.eps={c.eps}: verl's GRPO estimator uses a fixed "
                f"epsilon of {_VERL_GRPO_EPS}; set eps={_VERL_GRPO_EPS} for engine=verl"
            )
        v["algorithm.adv_estimator"] = "grpo"
        v["algorithm.norm_adv_by_std_in_grpo"] = c.norm_adv_by_std
    if name in VERL_LOSS_MODES:
        v[f"{actor}.policy_loss.loss_mode"] = VERL_LOSS_MODES[name]
    if name in ("reinforce_pp", "reinforce_pp_baseline"):
        v.update(
            {
                "algorithm.adv_estimator": "reinforce_plus_plus"
                if name == "reinforce_pp"
                else "reinforce_plus_plus_baseline",
                "algorithm.use_kl_in_reward": c.kl_in_reward,
                "algorithm.kl_penalty": kl_type,
                "algorithm.kl_ctrl.type": "fixed",
                "algorithm.kl_ctrl.kl_coef": c.kl_coef,
            }
        )
        if name == "reinforce_pp":
            v["algorithm.gamma"] = c.gamma
    if name == "dapo":
        v["algorithm.filter_groups.enable"] = c.dynamic_sampling
        v["algorithm.filter_groups.metric"] = "acc"  # the unshaped score, as the native DAPO
        v["reward.reward_manager.name"] = "dapo"
        buf = "+reward.reward_kwargs.overlong_buffer_cfg"
        v[f"{buf}.enable"] = c.overlong_penalty
        v[f"{buf}.len"] = c.overlong_buffer
        v[f"{buf}.penalty_factor"] = c.overlong_penalty_factor
        v[f"{buf}.log"] = False
        v["+reward.reward_kwargs.max_resp_len"] = c.max_response_length
    elif name == "rloo":
        v["algorithm.adv_estimator"] = "rloo"
    elif name == "remax":
        v["algorithm.adv_estimator"] = "remax"
        v["trainer.use_v1"] = False  # only the legacy trainer decodes the greedy baseline
    elif name == "ppo":
        if not c.whiten_advantages:
            raise ConfigError(
                "algorithm.ppo.params.whiten_advantages=False: verl's GAE estimator always "
                "whitens; set it to true for engine=verl"
            )
        v.update(
            {
                "algorithm.adv_estimator": "gae",
                "algorithm.gamma": c.gamma,
                "algorithm.lam": c.lam,
                "algorithm.use_kl_in_reward": c.kl_in_reward,
                "algorithm.kl_penalty": kl_type,
                "algorithm.kl_ctrl.type": "fixed",
                "algorithm.kl_ctrl.kl_coef": c.kl_coef,
                "critic.enable": True,
                "critic.cliprange_value": c.cliprange_value,
                "critic.loss_agg_mode": "token-mean",
                "trainer.critic_warmup": c.critic_warmup_steps,
            }
        )
    elif name == "sppo":
        v.update(
            {
                # The plugin trainer computes the advantage itself; the estimator named here
                # only raises if someone selects it without the plugin trainer.
                "algorithm.adv_estimator": wrapper_name("sppo"),
                "trainer.v1.trainer_mode": SPPO_TRAINER_MODE,
                "critic.enable": True,
                "critic.ppo_epochs": c.ppo_epochs,
            }
        )
    elif name not in BUILTIN:
        _check_wrappable(name, alg)
        v["algorithm.adv_estimator"] = wrapper_name(name)
        if has_own_policy_loss(type(alg)):
            v[f"{actor}.policy_loss.loss_mode"] = wrapper_name(name)
    return v


def verl_engine(plan: SuitePlan) -> VerlEngineConfig:
    """The plan's engine config, which must be verl's."""
    if not isinstance(plan.engine, VerlEngineConfig):
        raise ConfigError(f"engine.name={plan.engine.name!r}: verl's translation needs engine=verl")
    return plan.engine


def _critic_path(trainer: TrainerConfig, eng: VerlEngineConfig, model: str) -> str:
    """verl's ``critic.model.path``: ``trainer.critic_model`` (an HF id or directory), else
    ``engine.critic_model``, else the policy's checkpoint. Both set must agree; a tiny-Llama
    spec has no checkpoint for verl to load."""
    own, engine = trainer.critic_model, eng.critic_model
    if isinstance(own, Mapping):
        raise ConfigError(
            "trainer.critic_model: a tiny-Llama spec is the torch engine's; engine=verl needs an "
            "HF id or directory (or engine.critic_model)"
        )
    if own is not None and engine and str(own) != str(engine):
        raise ConfigError(
            f"trainer.critic_model={own} and engine.critic_model={engine} disagree; set one"
        )
    return str(own or engine or model)


def _critic_schedule(trainer: TrainerConfig, prompts: int) -> dict[str, Any]:
    """The trainer's critic settings as verl's: warm-up steps (``trainer.critic_warmup``),
    epochs (``critic.ppo_epochs``) and mini-batches (``critic.ppo_mini_batch_size``, in prompts
    as verl counts it). Unset (null) settings leave the algorithm's own values in place.

    verl builds its critic head itself: ``AutoModelForTokenClassification.from_pretrained`` on the
    policy's checkpoint, whose missing ``score`` layer HF initialises as ``normal`` does here
    (N(0, initializer_range) weights, zero bias). So ``normal`` is what runs; the trainer's
    default ``zero`` cannot reach verl (said in the log), and ``start_success`` is refused."""
    out: dict[str, Any] = {}
    if trainer.critic_warmup_steps is not None:
        out["trainer.critic_warmup"] = int(trainer.critic_warmup_steps)
    if trainer.critic_epochs is not None:
        out["critic.ppo_epochs"] = int(trainer.critic_epochs)
    if trainer.critic_mini_batches is not None:
        if prompts % trainer.critic_mini_batches:
            raise ConfigError(
                f"trainer.critic_mini_batches={trainer.critic_mini_batches} must divide the "
                f"prompts per step ({prompts}) on engine=verl"
            )
        out["critic.ppo_mini_batch_size"] = prompts // trainer.critic_mini_batches
    if trainer.critic_head_init not in ("normal", "zero"):
        raise ConfigError(
            f"trainer.critic_head_init={trainer.critic_head_init!r}: engine=verl initialises its "
            "critic's head itself, as HF's token-classification head; allowed there: ['normal'] "
            "(or the default 'zero', which runs verl's head too)"
        )
    if trainer.critic_head_init == "zero":
        log.warning(
            "engine=verl: trainer.critic_head_init=zero does not reach verl, whose critic head is "
            "HF's token-classification head (normal); trainer.critic_head_init=normal says so"
        )
    return out


def _check_wrappable(name: str, alg: Algorithm) -> None:
    """Refuse, naming what is missing, registry algorithms verl cannot run through wrappers."""
    if alg.critic != "none":
        raise ConfigError(
            f"algorithm={name}: it trains a {alg.critic!r} critic, and verl's advantage "
            "estimators never receive critic values; engine=verl runs critic algorithms only "
            "for sppo (plugin trainer) and ppo (GAE). Use engine=torch for this one"
        )
    if alg.needs_greedy_baseline:
        raise ConfigError(
            f"algorithm={name}: needs a greedy baseline, which verl decodes only for its own "
            "remax estimator; use engine=torch"
        )
    for method in ("shape_rewards", "filter_groups", "value_loss"):
        if _overrides_method(alg, method):
            raise ConfigError(
                f"algorithm={name}: overrides {method}, which has no verl hook in the registry "
                "wrappers (only advantages and policy_loss are wrapped); use engine=torch"
            )
    if alg.kl_in_reward:
        raise ConfigError(f"algorithm={name}: kl_in_reward is not wrapped for verl")


def _budget_steps(plan: SuitePlan, samples_per_step: int) -> int:
    """verl's step count for the suite's budget: ``engine.total_training_steps`` when set, else
    the whole steps a ``samples`` budget pays for, ``floor(limit / samples_per_step)``.

    verl trains whole steps of ``samples_per_step`` samples, so where the limit is not a multiple
    of the step the run stops short of it, as the native trainer does (it starts no step that
    would not fit): the samples a run is planned to generate never exceed its budget. A budget
    below one step is refused before launch. ``samples_per_step`` counts every sample a step
    generates (ReMax's greedy baseline included); DAPO's refills are not known beforehand and
    are charged afterwards (:mod:`benchmarks.verl_engine.metrics`).
    """
    eng = verl_engine(plan)
    if eng.total_training_steps is not None:
        return eng.total_training_steps
    if plan.budget.kind != "samples":
        raise ConfigError(
            f"budget.kind={plan.budget.kind}: verl stops on a step count; set "
            "engine.total_training_steps, or use budget=samples (steps = limit / samples per step)"
        )
    steps = int(float(plan.budget.limit) // samples_per_step)
    if steps < 1:
        raise ConfigError(
            f"budget.limit={plan.budget.limit:g} is less than one verl step ({samples_per_step} "
            "samples); raise budget.limit or lower trainer.samples_per_step "
            "(engine.train_batch_size)"
        )
    return steps


def _test_freq(fractions: Sequence[float], steps: int) -> int:
    positive = sorted({float(f) for f in fractions if float(f) > 0})
    if not positive:
        return -1
    gaps = [b - a for a, b in zip([0.0, *positive], positive, strict=False)]
    return max(1, round(min(gaps) * steps))


def translate(
    plan: SuitePlan,
    name: str,
    *,
    seed: int,
    train_file: str,
    val_files: Sequence[str],
    run_name: str,
    output_dir: str,
    tracking: Mapping[str, str] | None = None,
) -> VerlPlan:
    """Overrides that run ``name`` (built with ``alg``) for one seed on verl.

    Args:
        plan: the validated suite (``engine`` must be the verl group).
        name: the algorithm's registry name, a key of ``plan.algorithms``.
        seed: the run's seed (data order, rollout sampling, FSDP init).
        train_file, val_files: parquet files from :mod:`benchmarks.verl_engine.export`.
        run_name: the MLflow child run's name (also verl's ``trainer.experiment_name``).
        output_dir: checkpoints and rollout dumps go under it.
        tracking: ``{"MLFLOW_TRACKING_URI": ..., "MLFLOW_RUN_ID": ...}`` to hand to verl's
            MLflow logger (``None``: console only, e.g. for a dry run).

    Raises:
        ConfigError: a value verl cannot express (names the field and what to do).
    """
    alg = plan.algorithms[name]
    trainer = plan.trainer[name]
    eng = verl_engine(plan)
    n = alg.samples_per_prompt
    samples_per_step = trainer.samples_per_step
    if eng.train_batch_size is not None:
        prompts = eng.train_batch_size
    else:
        if samples_per_step % n:
            raise ConfigError(
                f"trainer.samples_per_step={samples_per_step} must be a multiple of {name}'s "
                f"samples per prompt ({n}), or set engine.train_batch_size (prompts per step)"
            )
        prompts = samples_per_step // n
    mini = eng.ppo_mini_batch_size
    if mini is None:
        mini = prompts // trainer.mini_batches
    mini = int(mini)
    if mini < 1 or prompts % mini:
        raise ConfigError(
            f"engine.ppo_mini_batch_size={mini} must divide the prompts per step ({prompts})"
        )
    # ReMax also decodes one greedy baseline response per prompt, charged like the samples.
    steps = _budget_steps(plan, prompts * (n + int(alg.needs_greedy_baseline)))
    model = plan.model.name_or_path
    if model is None:
        raise ConfigError(
            "model.name_or_path=null: engine=verl needs a real checkpoint (HF id or directory), "
            "e.g. model=hf model.name_or_path=Qwen/Qwen2.5-0.5B-Instruct"
        )
    max_response = trainer.max_new_tokens
    max_prompt = eng.max_prompt_length
    max_tokens = eng.max_token_len_per_gpu or 2 * (max_prompt + max_response)
    fractions = list(plan.budget.eval_fractions)
    actor_lr = trainer.actor_lr
    critic_lr = trainer.critic_lr
    actor = "actor_rollout_ref.actor"
    rollout = "actor_rollout_ref.rollout"
    v: dict[str, Any] = {
        "data.train_files": [train_file],
        "data.val_files": list(val_files),
        "data.train_batch_size": prompts,
        "data.max_prompt_length": max_prompt,
        "data.max_response_length": max_response,
        "data.filter_overlong_prompts": True,
        "data.truncation": "error",
        "data.seed": seed,
        "data.dataloader_num_workers": 0,
        "actor_rollout_ref.model.path": str(model),
        "actor_rollout_ref.model.enable_gradient_checkpointing": eng.gradient_checkpointing,
        "actor_rollout_ref.model.use_remove_padding": True,
        f"{actor}.optim.weight_decay": float(trainer.weight_decay),
        f"{actor}.grad_clip": float(trainer.grad_clip),
        f"{actor}.ppo_mini_batch_size": mini,
        f"{actor}.use_dynamic_bsz": eng.use_dynamic_bsz,
        f"{actor}.ppo_max_token_len_per_gpu": int(max_tokens),
        f"{actor}.data_loader_seed": seed,
        f"{actor}.fsdp_config.param_offload": eng.param_offload,
        f"{actor}.fsdp_config.optimizer_offload": eng.optimizer_offload,
        "actor_rollout_ref.ref.fsdp_config.param_offload": eng.param_offload,
        f"{rollout}.name": eng.rollout,
        f"{rollout}.tensor_model_parallel_size": eng.tensor_parallel,
        f"{rollout}.gpu_memory_utilization": eng.gpu_memory_utilization,
        f"{rollout}.temperature": float(trainer.temperature),
        f"{rollout}.top_p": float(trainer.top_p),
        f"{rollout}.seed": seed,
        f"{rollout}.val_kwargs.n": eng.val_n,
        f"{rollout}.val_kwargs.do_sample": eng.val_n > 1,
        f"{rollout}.val_kwargs.temperature": eng.val_temperature if eng.val_n > 1 else 0.0,
        "reward.custom_reward_function.path": _REWARD_FN,
        "reward.custom_reward_function.name": "compute_score",
        "trainer.n_gpus_per_node": eng.n_gpus_per_node,
        "trainer.nnodes": eng.nnodes,
        "trainer.total_training_steps": steps,
        "trainer.total_epochs": 1_000_000,  # the step count stops the run
        "trainer.val_before_train": any(float(f) == 0.0 for f in fractions),
        "trainer.test_freq": _test_freq(fractions, steps),
        "trainer.save_freq": -1,
        "trainer.project_name": plan.tracking.experiment,
        "trainer.experiment_name": run_name,
        "trainer.logger": ["console", "mlflow"] if tracking else ["console"],
        "trainer.default_local_dir": f"{output_dir}/checkpoints/{run_name}",
    }
    if not eng.use_dynamic_bsz:
        mbs = eng.micro_batch_size_per_gpu
        v[f"{actor}.ppo_micro_batch_size_per_gpu"] = mbs
        v[f"{rollout}.log_prob_micro_batch_size_per_gpu"] = mbs
        v["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"] = mbs
    v[f"{actor}.optim.lr"] = float(actor_lr)
    v.update(_algorithm_values(name, alg))
    if v["critic.enable"]:
        if critic_lr is None:
            raise ConfigError(f"algorithm.{name}.critic_lr=null: {name} trains a critic on verl")
        v.update(
            {
                "critic.optim.lr": float(critic_lr),
                "critic.optim.weight_decay": float(trainer.weight_decay),
                "critic.grad_clip": float(trainer.grad_clip),
                "critic.model.path": str(_critic_path(trainer, eng, model)),
                "critic.model.enable_gradient_checkpointing": eng.gradient_checkpointing,
                "critic.ppo_max_token_len_per_gpu": int(max_tokens),
                "critic.fsdp.param_offload": eng.param_offload,
                "critic.fsdp.optimizer_offload": eng.optimizer_offload,
            }
        )
        if not eng.use_dynamic_bsz:
            v["critic.ppo_micro_batch_size_per_gpu"] = eng.micro_batch_size_per_gpu
        v.update(_critic_schedule(trainer, prompts))
    params = {
        f: getattr(alg.config, f) for f in alg.config.__dataclass_fields__
    }  # the full registry config, so workers rebuild exactly this algorithm
    env = {ALGORITHM_ENV: json.dumps({"name": name, "params": params}, sort_keys=True)}
    if plan.plugins:
        env[PLUGINS_ENV] = ",".join(plan.plugins)
    env.update(dict(tracking or {}))
    # Ray workers of an existing cluster do not inherit the launcher's environment: hand the
    # variables over through verl's runtime_env as well.
    for key, value in env.items():
        v[f"+ray_kwargs.ray_init.runtime_env.env_vars.{key}"] = value
    overrides = [format_override(k, val) for k, val in v.items()]
    overrides += list(eng.extra_overrides)
    return VerlPlan(name, seed, run_name, overrides, env, v)
