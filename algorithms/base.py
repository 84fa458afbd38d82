"""The algorithm interface, its typed configuration, and the registry.

An algorithm is a class registered with ``@register_algorithm("name")``: a frozen, validated
hyper-parameter dataclass (``Config``) plus pure tensor functions (reward shaping, batch filter,
advantages, policy loss, value loss). The harness owns everything else (rollout, grading,
models, optimisers); it only ever calls the methods declared on :class:`Algorithm`, so a new
algorithm needs no harness change (docs/design.md §2).

Third-party packages register algorithms through the entry-point group
``sppo_bench.algorithms``: each entry point is loaded once, on the first registry lookup;
importing its module runs the decorator. An entry point may also name an unregistered
:class:`Algorithm` subclass, which is then registered under the entry point's name.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar, get_args

import torch
from torch import Tensor

from algorithms.common import (
    KLPenalty,
    LossAggMode,
    agg_loss,
    clipped_surrogate,
    kl_penalty,
    masked_mean,
    to_floats,
    zero_masked,
)
from algorithms.configkit import ConfigError, check_fields, config_field

__all__ = [
    "ENTRY_POINT_GROUP",
    "Algorithm",
    "AlgorithmConfig",
    "CriticKind",
    "GroupConfig",
    "UnknownAlgorithmError",
    "algorithm_class",
    "get_algorithm",
    "list_algorithms",
    "register_algorithm",
]

logger = logging.getLogger(__name__)

#: importlib.metadata entry-point group scanned for third-party algorithms.
ENTRY_POINT_GROUP = "sppo_bench.algorithms"

CriticKind = Literal["none", "token", "prompt"]
_CRITIC_KINDS: tuple[str, ...] = get_args(CriticKind)


class UnknownAlgorithmError(ConfigError, KeyError):
    """No algorithm is registered under that name (a ``KeyError`` *and* a ``ConfigError``)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AlgorithmConfig:
    """Hyper-parameters shared by every clipped-surrogate algorithm.

    Subclasses add their own fields (each with :func:`config_field`) and override defaults by
    re-declaring a field. Validation is automatic: every value is type-checked against its
    annotation (ints are accepted for float fields), numeric bounds come from the field's
    metadata, and subclasses add cross-field checks in ``__post_init__`` (calling ``super()``
    first). Any failure raises :class:`ConfigError` naming the field.
    """

    clip_ratio_low: float = config_field(
        0.2, "PPO clip range below 1: the ratio is clipped at 1 - clip_ratio_low.", gt=0.0, lt=1.0
    )
    clip_ratio_high: float = config_field(
        0.2, "PPO clip range above 1: ratio clipped at 1 + clip_ratio_high (DAPO: 0.28).", gt=0.0
    )
    clip_ratio_c: float | None = config_field(
        None,
        "Dual-clip constant c > 1 bounding the loss of negative-advantage tokens; None disables.",
        gt=1.0,
    )
    loss_agg_mode: LossAggMode = config_field(
        "token-mean", "How per-token losses become one scalar (see algorithms.common.agg_loss)."
    )
    ppo_epochs: int = config_field(1, "Passes of policy updates over each rollout batch.", ge=1)
    kl_loss_coef: float = config_field(
        0.0, "Weight of the KL-to-reference term added to the policy loss; 0 disables it.", ge=0.0
    )
    kl_penalty: KLPenalty = config_field(
        "k3", "KL estimator for the KL term: k1 (logp - ref) or k3 (verl's low_var_kl)."
    )

    def __post_init__(self) -> None:
        owner = type(self).__name__
        for f in dataclasses.fields(self):
            if "help" not in f.metadata or not str(f.metadata["help"]).strip():
                raise TypeError(
                    f"{owner}.{f.name} has no help string: declare it with config_field"
                )
        check_fields(self, owner)

    @classmethod
    def field_help(cls) -> dict[str, str]:
        """``{field: help string}`` in declaration order, for CLI help and docs."""
        return {f.name: f.metadata["help"] for f in dataclasses.fields(cls)}


@dataclass(frozen=True, kw_only=True)
class GroupConfig(AlgorithmConfig):
    """Configuration of algorithms whose baseline comes from G samples of the same prompt."""

    group_size: int = config_field(
        8, "Samples per prompt (G); the group is the baseline, so it must be >= 2.", ge=2
    )


# --------------------------------------------------------------------------------------------
# The algorithm interface
# --------------------------------------------------------------------------------------------


class Algorithm(ABC):
    """One RL algorithm: hyper-parameters plus pure tensor functions the harness calls.

    Subclasses set ``Config`` (and ``critic`` if they train one), implement :meth:`advantages`
    and override whatever else differs. The defaults here are those of a critic-free,
    one-sample-per-prompt PPO-style learner: identity reward shaping, keep every sample, the
    clipped surrogate of :func:`algorithms.common.clipped_surrogate` with an optional KL term.
    :meth:`policy_loss` is written once (check, surrogate, aggregate, KL); an algorithm with
    another objective overrides only :meth:`surrogate`.

    Shapes: ``B`` sequences, ``T`` response tokens; ``response_mask`` is ``(B, T)``.
    """

    name: ClassVar[str] = "<unregistered>"
    Config: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig
    critic: ClassVar[CriticKind] = "none"

    def __init__(self, config: AlgorithmConfig | None = None) -> None:
        if config is None:
            config = self.Config()
        if not isinstance(config, self.Config):
            raise TypeError(
                f"{type(self).__name__} needs a {self.Config.__name__}, got {type(config).__name__}"
            )
        self.config = config

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, config={self.config!r})"

    # --- what the harness must arrange -------------------------------------------------------

    @property
    def samples_per_prompt(self) -> int:
        """Responses sampled per prompt: the config's ``group_size`` or ``n`` field (else 1)."""
        for field_name in ("group_size", "n"):
            if hasattr(self.config, field_name):
                return int(getattr(self.config, field_name))
        return 1

    @property
    def uses_reference(self) -> bool:
        """Whether the harness must compute reference-policy log-probs (a KL term is on)."""
        return self.config.kl_loss_coef > 0 or self.kl_in_reward

    @property
    def kl_in_reward(self) -> bool:
        """Whether ``advantages`` expects ``token_kl`` (a KL penalty folded into the reward)."""
        return False

    @property
    def needs_greedy_baseline(self) -> bool:
        """Whether the harness must also decode one greedy response per prompt and pass its
        reward as ``baseline_rewards`` (ReMax)."""
        return False

    @property
    def max_gen_batches(self) -> int:
        """Most generation rounds per step used to refill a batch after :meth:`filter_groups`."""
        return 1

    @property
    def critic_warmup_steps(self) -> int:
        """Steps at the start during which only the critic is trained."""
        return 0

    @property
    def ppo_epochs(self) -> int:
        """Policy-update passes over each rollout batch."""
        return self.config.ppo_epochs

    @property
    def critic_lr(self) -> float | None:
        """The critic's learning rate (None: no critic)."""
        return None

    # --- state carried from step to step (SPO's per-prompt tracker) ----------------------------
    # Most algorithms are pure functions of each batch and use none of this. One that remembers
    # something across steps keeps it on the object: the harness resets it when a run starts,
    # feeds it once per step through :meth:`observe`, and checkpoints it with
    # :meth:`state_dict`, so a resumed run continues with exactly the state it was killed with.

    @property
    def needs_prompt_keys(self) -> bool:
        """Whether :meth:`advantages` takes ``prompt_keys``: one string per row naming its prompt,
        the same every time that prompt is drawn (the harness passes the problem's id)."""
        return False

    @property
    def needs_updated_log_probs(self) -> bool:
        """Whether :meth:`observe` needs the batch's log-probs under the *updated* policy (one
        more teacher-forced pass per step, which the harness meters like the others)."""
        return False

    def reset_state(self) -> None:
        """Forget what earlier steps left (a new run starts); nothing to forget by default."""
        return None

    def observe(
        self,
        *,
        prompt_keys: Sequence[str],
        rewards: Tensor,
        response_mask: Tensor,
        old_log_probs: Tensor,
        new_log_probs: Tensor | None,
    ) -> dict[str, float]:
        """Called once per step after the policy update, with the step's kept rows.

        Args:
            prompt_keys: ``B`` strings, each row's prompt (see :attr:`needs_prompt_keys`).
            rewards: ``(B,)`` outcome scores before shaping.
            response_mask: ``(B, T)``.
            old_log_probs: ``(B, T)`` log-probs under the policy that sampled the batch.
            new_log_probs: ``(B, T)`` the same under the updated policy when
                :attr:`needs_updated_log_probs`, else ``None``.

        Returns:
            Metrics to log with the step (``train/...``); none by default.
        """
        return {}

    def state_dict(self) -> dict[str, Any]:
        """What the algorithm carries between steps, as tensors and plain containers (empty for
        an algorithm that carries nothing)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state_dict`'s ``state``."""
        if state:
            raise ValueError(
                f"{self.name} carries no state between steps, got state with keys {sorted(state)}"
            )

    # --- tensor functions --------------------------------------------------------------------

    def shape_rewards(self, rewards: Tensor, response_lengths: Tensor) -> Tensor:
        """Turn outcome rewards into the rewards the advantage sees (identity by default).

        Args:
            rewards: ``(B,)`` outcome rewards (R in {0, 1} by default).
            response_lengths: ``(B,)`` long, number of generated tokens per response.

        Returns:
            ``(B,)`` shaped rewards.
        """
        return rewards

    def filter_groups(self, rewards: Tensor, group_ids: Tensor) -> Tensor:
        """Which samples to keep for the update (all, by default).

        Args:
            rewards: ``(B,)`` rewards.
            group_ids: ``(B,)`` integer prompt id per sample.

        Returns:
            ``(B,)`` bool keep-mask.
        """
        return torch.ones_like(rewards, dtype=torch.bool)

    @abstractmethod
    def advantages(
        self,
        rewards: Tensor,
        response_mask: Tensor,
        group_ids: Tensor | None,
        values: Tensor | None = None,
        baseline_rewards: Tensor | None = None,
        token_kl: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Advantages for the policy update, and the critic's regression targets.

        Args:
            rewards: ``(B,)`` shaped outcome rewards.
            response_mask: ``(B, T)`` valid response tokens.
            group_ids: ``(B,)`` integer prompt id per sample, arbitrary order (algorithms
                without a group baseline ignore it and accept ``None``).
            values: critic output: ``(B,)`` logits for a ``"prompt"`` critic, ``(B, T)`` token
                values for a ``"token"`` critic; ``None`` without a critic.
            baseline_rewards: ``(B,)`` reward of the greedy response to the same prompt
                (only when :attr:`needs_greedy_baseline`).
            token_kl: ``(B, T)`` per-token KL to the reference (only when :attr:`kl_in_reward`).

        Returns:
            ``(advantages (B, T), returns)``: advantages on valid tokens and exactly 0 on
            masked positions, detached; ``returns`` are the critic's targets (shape as
            ``values``) or ``None`` without a critic.
        """

    def policy_loss(
        self,
        log_probs: Tensor,
        old_log_probs: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        ref_log_probs: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        """The policy loss, written once for every algorithm: check the inputs, compute the
        :meth:`surrogate`'s losses, aggregate them by ``loss_agg_mode``, and add ``kl_loss_coef``
        times the aggregated KL to the reference.

        Args:
            log_probs: ``(B, T)`` current-policy log-probs of the sampled tokens (with grad).
            old_log_probs: ``(B, T)`` log-probs under the policy that generated the batch.
            advantages: ``(B, T)`` from :meth:`advantages`.
            response_mask: ``(B, T)``; masked positions never affect loss or gradients.
            ref_log_probs: ``(B, T)`` reference-policy log-probs; required when
                ``kl_loss_coef > 0``; when given, ``train/kl`` is logged either way.

        Returns:
            ``(loss, metrics)``: scalar loss and python-float metrics: the surrogate's statistics
            under ``train/`` (by default ``train/clip_frac``, ``train/approx_kl``, and
            ``train/dual_clip_frac`` with dual-clip), ``train/kl`` (token mean) with a reference,
            and ``train/policy_loss``.
        """
        cfg = self.config
        # check: a reference when the KL term needs one, and one (B, T) shape for every input
        if cfg.kl_loss_coef > 0 and ref_log_probs is None:
            raise ValueError(
                f"{self.name}: ref_log_probs is required when kl_loss_coef > 0 "
                f"(kl_loss_coef={cfg.kl_loss_coef})"
            )
        _check_same_shape(
            log_probs=log_probs,
            old_log_probs=old_log_probs,
            advantages=advantages,
            response_mask=response_mask,
            ref_log_probs=ref_log_probs,
        )
        # surrogate and aggregate
        losses, stats = self.surrogate(log_probs, old_log_probs, advantages, response_mask)
        loss = agg_loss(losses, response_mask, cfg.loss_agg_mode)
        metrics = {f"train/{k}": v for k, v in stats.items()}
        # KL to the reference: logged whenever there is one, in the loss when kl_loss_coef > 0
        if ref_log_probs is not None:
            valid = response_mask != 0
            kl = kl_penalty(
                zero_masked(log_probs, valid),
                zero_masked(ref_log_probs.detach(), valid),
                cfg.kl_penalty,
            )
            metrics["train/kl"] = masked_mean(kl.detach(), valid)
            if cfg.kl_loss_coef > 0:
                loss = loss + cfg.kl_loss_coef * agg_loss(kl, valid, cfg.loss_agg_mode)
        metrics["train/policy_loss"] = loss.detach()
        return loss, to_floats(metrics)

    def surrogate(
        self,
        log_probs: Tensor,
        old_log_probs: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The policy surrogate's losses before aggregation: the one piece of
        :meth:`policy_loss` an algorithm overrides (CISPO, GSPO, GMPO).

        By default PPO's clipped surrogate, :func:`algorithms.common.clipped_surrogate`, with
        this config's clip range and dual-clip.

        Args:
            log_probs, old_log_probs, advantages, response_mask: ``(B, T)`` each, as in
                :meth:`policy_loss` (one shape, checked before this is called).

        Returns:
            ``(losses, stats)``: ``(B, T)`` per-token losses, 0 on masked positions, or ``(B,)``
            losses already one per response (averaged over responses whatever the ``seq-mean-*``
            mode); ``stats`` are scalar tensors, logged under ``train/``.
        """
        cfg = self.config
        return clipped_surrogate(
            log_probs,
            old_log_probs,
            advantages,
            response_mask,
            cfg.clip_ratio_low,
            cfg.clip_ratio_high,
            cfg.clip_ratio_c,
        )

    def value_loss(
        self,
        values: Tensor,
        targets: Tensor,
        response_mask: Tensor | None,
        old_values: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        """Critic loss (shapes as in :meth:`advantages`); only for algorithms with a critic."""
        raise NotImplementedError(
            f"{self.name} has no critic (critic={self.critic!r}); value_loss exists only for "
            "algorithms with critic 'token' or 'prompt'"
        )


def _check_same_shape(**tensors: Tensor | None) -> None:
    """Raise a ValueError listing every shape when the given (B, T) tensors disagree."""
    shapes = {k: tuple(v.shape) for k, v in tensors.items() if v is not None}
    if len(set(shapes.values())) > 1 or any(len(s) != 2 for s in shapes.values()):
        raise ValueError(f"expected tensors of one (B, T) shape, got {shapes}")


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------

_REGISTRY: dict[str, type[Algorithm]] = {}
_plugins_loaded = False
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")

_AlgoT = TypeVar("_AlgoT", bound=type[Algorithm])


def register_algorithm(name: str) -> Callable[[_AlgoT], _AlgoT]:
    """Class decorator registering an :class:`Algorithm` subclass under ``name``.

    Sets ``cls.name``. Raises ``ValueError`` if the name is taken (two plugins must not silently
    shadow each other) and ``TypeError`` if the class is not a complete algorithm.
    """
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ValueError(f"algorithm name {name!r} must match {_NAME_RE.pattern}")

    def decorator(cls: _AlgoT) -> _AlgoT:
        if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
            raise TypeError(
                f"@register_algorithm({name!r}) needs an Algorithm subclass, got {cls!r}"
            )
        if cls.__abstractmethods__:
            raise TypeError(f"{cls.__name__} does not implement {sorted(cls.__abstractmethods__)}")
        if not (dataclasses.is_dataclass(cls.Config) and issubclass(cls.Config, AlgorithmConfig)):
            raise TypeError(f"{cls.__name__}.Config must be an AlgorithmConfig dataclass")
        if cls.critic not in _CRITIC_KINDS:
            raise TypeError(f"{cls.__name__}.critic={cls.critic!r} is not one of {_CRITIC_KINDS}")
        if cls.__module__.removeprefix("algorithms.") not in BUILTINS:
            _load_builtins()  # a built-in's name is taken before the registry's first lookup too
        if name in _REGISTRY:
            raise ValueError(
                f"algorithm {name!r} is already registered by {_REGISTRY[name].__module__}."
                f"{_REGISTRY[name].__qualname__}"
            )
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorator


#: The built-in algorithms' modules, imported (and so registered) on the registry's first use.
BUILTINS = (
    "cispo",
    "dapo",
    "dr_grpo",
    "gmpo",
    "grpo",
    "gspo",
    "ppo",
    "reinforce_pp",
    "remax",
    "rloo",
    "spo",
    "sppo",
)
_builtins_loaded = False


def _load_builtins() -> None:
    """Import the built-in algorithms once. Not from a built-in's own registration: one built-in
    imports another (CISPO subclasses GRPO), and loading the rest from inside the first would
    import a module half-initialised."""
    global _builtins_loaded
    if _builtins_loaded:
        return
    _builtins_loaded = True
    for module in BUILTINS:
        importlib.import_module(f"algorithms.{module}")


def _load_plugins() -> None:
    """Load the built-ins, then the ``sppo_bench.algorithms`` entry points, once; a broken
    plugin only warns."""
    global _plugins_loaded
    _load_builtins()
    if _plugins_loaded:
        return
    _plugins_loaded = True
    seen: set[tuple[str, str]] = set()
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if (ep.name, ep.value) in seen:  # the same distribution found twice on sys.path
            continue
        seen.add((ep.name, ep.value))
        try:
            obj = ep.load()
            if (
                isinstance(obj, type)
                and issubclass(obj, Algorithm)
                and obj not in _REGISTRY.values()
            ):
                register_algorithm(ep.name)(obj)
        except Exception as e:  # a third-party bug must not take the suite down
            logger.warning(
                "could not load algorithm plugin %r (%s): %s: %s",
                ep.name,
                ep.value,
                type(e).__name__,
                e,
            )


def list_algorithms() -> list[str]:
    """Registered algorithm names, sorted (built-ins plus entry-point plugins)."""
    _load_plugins()
    return sorted(_REGISTRY)


def algorithm_class(name: str) -> type[Algorithm]:
    """The class registered under ``name`` (e.g. to print ``cls.Config.field_help()``)."""
    _load_plugins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownAlgorithmError(
            f"unknown algorithm {name!r}; registered: {', '.join(sorted(_REGISTRY))}"
        ) from None


def get_algorithm(name: str, **overrides: Any) -> Algorithm:
    """Instantiate algorithm ``name`` with its default config updated by ``overrides``.

    Raises:
        UnknownAlgorithmError: unknown name (lists the registered ones).
        ConfigError: an unknown override key (lists the valid fields) or an invalid value.
    """
    cls = algorithm_class(name)
    valid = [f.name for f in dataclasses.fields(cls.Config)]
    unknown = sorted(set(overrides) - set(valid))
    if unknown:
        raise ConfigError(
            f"unknown {name} config field(s) {', '.join(unknown)}; valid fields: {', '.join(valid)}"
        )
    return cls(cls.Config(**overrides))


# --- test helpers (private) -----------------------------------------------------------------


def _unregister(name: str) -> None:
    """Remove ``name`` from the registry (tests only)."""
    _REGISTRY.pop(name, None)


def _reset_plugins_loaded() -> None:
    """Make the next lookup scan entry points again (tests only)."""
    global _plugins_loaded
    _plugins_loaded = False


@contextmanager
def _restore_registry() -> Iterator[None]:
    """Restore the registry and the plugins-loaded flag on exit (tests only)."""
    global _plugins_loaded
    _load_builtins()  # saved with the built-ins: once loaded, they are never imported again
    saved, saved_loaded = dict(_REGISTRY), _plugins_loaded
    try:
        yield
    finally:
        _REGISTRY.clear()
        _REGISTRY.update(saved)
        _plugins_loaded = saved_loaded
