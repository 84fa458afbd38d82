"""Sweep specs: a YAML file validated into a frozen dataclass before any trial runs.

A spec names the algorithms to tune, the Hydra overrides every trial starts from, the search
space (Hydra override paths, ``{alg}`` standing for the trial's algorithm), the objective, the
number of trials, the per-trial budget, the sampler and the pruner. Validation happens in two
passes, both before the Optuna storage or MLflow are touched:
:func:`~sweeps.spec_fields.parse_spec` checks the structure, its scalars (types, ranges, allowed
names) through the config kit that checks the trainer's and the plan's settings
(:mod:`algorithms.configkit`); :func:`~sweeps.spec_check.check_spec` composes the suite config
once per algorithm and checks every path, the metric and one point of the search space against
the suite's own validation. Every error names the field, the bad value and what is allowed.

This module is the spec's data model, which every other sweep module reads. The readers of its
fields (:mod:`sweeps.spec_fields`, which has :func:`~sweeps.spec_fields.load_spec`) and its check
against the composed config (:mod:`sweeps.spec_check`) import it and it imports neither, so the
imports run one way.

    algorithms: [sppo, ppo, grpo, dapo]
    equal_effort: true                 # a study per algorithm, trials split equally
    trials: 32                         # in all (a multiple of the algorithms with equal_effort)
    base_overrides: [task.horizon=3]   # Hydra overrides of the suite config
    budget: [budget.limit=4096]        # budget overrides of each trial
    search_space:
      algorithm.{alg}.actor_lr: {type: float, low: 1.0e-5, high: 3.0e-3, log: true}
      algorithm.{alg}.critic_lr: {type: float, low: 1.0e-5, high: 3.0e-3, log: true,
                                  when_algorithm: [sppo, ppo]}
      trainer.mini_batches: {type: categorical, choices: [1, 2, 4]}
    objective: {metric: eval/arith/accuracy, direction: maximize}   # or metric: auc
    sampler: tpe                       # tpe | cmaes | gp | random, or {type: tpe, <option>: ...}
    pruner: median                     # median | hyperband | none, or {type: median, ...}
    seed: 0
    enqueue: [{algorithm: sppo, algorithm.sppo.actor_lr: 1.0e-4}]   # run these points first
    starts: 2                          # independent warm starts per trial (seeds with
                                       # warmstart.per_seed); the value is their mean
    admissible:                        # a trial counts only if every start reaches these:
      ppo: {critic/first_value_pearson: critic_gate}   # the claims' critic gate, weakest start
      sppo: {compute/rollout_samples: 64}              # any other metric: a minimum of its final

With ``starts`` > 1 the trial's value is the mean of its starts' values, known only at the end,
so ``pruner`` must be ``none``; that also spares a critic warm-up, which spends budget before the
actor moves, a comparison at equal budget fractions. ``admissible`` is a precondition, not an
objective: a trial that misses it still completes and is shown, but is never the best, and the
TPE and GP samplers treat it as infeasible (Optuna's ``constraints_func``).

A critic is screened as the claims gate it (``critic_gate``, :data:`CRITIC_GATE`): its
prompt-level Pearson (``critic/first_value_pearson`` for a token critic,
``critic/calibration_pearson`` for a prompt critic), per run the mean over the second half of its
evals, per start the mean over its runs, against the threshold calibrated on the inert critic
(:func:`analysis.claims.gates.critic_gate`), at the weakest of the trial's starts. A number for a
critic metric is refused: a critic has one statistic and one threshold, wherever it is read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from algorithms.configkit import ConfigError, check_type, config_value

__all__ = [
    "ALG",
    "ALG_PATH",
    "CRITIC_GATE",
    "DIRECTIONS",
    "PARAM_TYPES",
    "PRUNERS",
    "SAMPLERS",
    "ComponentSpec",
    "ObjectiveSpec",
    "ParamSpec",
    "SpecError",
    "SweepSpec",
    "check_trials",
    "fail",
    "field_value",
    "format_value",
]

#: Placeholder in a search-space path for the trial's algorithm: ``algorithm.{alg}.actor_lr``.
ALG = "{alg}"
PARAM_TYPES = ("float", "int", "categorical")
DIRECTIONS = ("maximize", "minimize")
#: Sampler name -> (Optuna class name, modules it needs at sampling time).
SAMPLERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "tpe": ("TPESampler", ()),
    "cmaes": ("CmaEsSampler", ("cmaes",)),
    "gp": ("GPSampler", ("scipy", "torch")),
    "random": ("RandomSampler", ()),
}
#: Pruner name -> Optuna class name (None: no pruning).
PRUNERS: dict[str, str | None] = {
    "median": "MedianPruner",
    "hyperband": "HyperbandPruner",
    "none": None,
}
#: An override or parameter path aimed at one algorithm; group 1 is its name (or ``{alg}``).
ALG_PATH = re.compile(r"^algorithm\.([A-Za-z0-9_]+)\.")
#: ``admissible``'s value for a critic: the claims' critic gate (statistic and threshold theirs).
CRITIC_GATE = "critic_gate"


class SpecError(ConfigError):
    """A sweep spec is invalid; the message names the field, the value and what is allowed.

    A :class:`ConfigError` (so a ``ValueError``) of the config kit that checks the spec's values,
    so a caller that catches the kit's errors catches the spec's too.
    """


@dataclass(frozen=True)
class ParamSpec:
    """One dimension of the search space.

    ``path`` is a Hydra override path and may contain ``{alg}``; the Optuna parameter name is the
    path with the algorithm substituted (``algorithm.sppo.actor_lr``), so each algorithm's
    learning rate is its own dimension.
    """

    path: str
    type: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] | None = None
    when_algorithm: tuple[str, ...] | None = None

    def applies_to(self, algorithm: str) -> bool:
        """Whether a trial of ``algorithm`` samples this parameter."""
        if self.when_algorithm is not None and algorithm not in self.when_algorithm:
            return False
        m = ALG_PATH.match(self.path)
        return m is None or m.group(1) in (algorithm, ALG)

    def name(self, algorithm: str) -> str:
        """The Optuna parameter name (and config path) for a trial of ``algorithm``."""
        return self.path.replace(ALG, algorithm)

    def override(self, algorithm: str, value: Any) -> str:
        """The Hydra override that sets this parameter to ``value``.

        Algorithm ``params`` fields use ``++``: an algorithm YAML lists only what it changes from
        the paper's defaults, so the key may not be in the composed config yet.
        """
        path = self.name(algorithm)
        prefix = "++" if re.match(r"^algorithm\.[A-Za-z0-9_]+\.params\.", path) else ""
        return f"{prefix}{path}={format_value(value)}"

    def suggest(self, trial: Any, algorithm: str) -> Any:
        """Sample this parameter from an Optuna trial."""
        name = self.name(algorithm)
        if self.type == "categorical":
            return trial.suggest_categorical(name, list(self.choices or ()))
        if self.type == "int":
            return trial.suggest_int(
                name, int(self.low), int(self.high), step=int(self.step or 1), log=self.log
            )
        return trial.suggest_float(name, self.low, self.high, step=self.step, log=self.log)

    def representative(self) -> Any:
        """One point of the range (the low end, the first choice), checked before any trial."""
        if self.type == "categorical":
            return (self.choices or (None,))[0]
        return int(self.low) if self.type == "int" else float(self.low)

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is a point of this dimension (used for enqueued trials)."""
        if self.type == "categorical":
            return value in (self.choices or ())
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.type == "int" and int(value) != value:
            return False
        return self.low <= value <= self.high


@dataclass(frozen=True)
class ObjectiveSpec:
    """``metric``: ``eval/<task>/accuracy`` at the end of the budget, or ``auc``."""

    metric: str
    direction: str = "maximize"


@dataclass(frozen=True)
class ComponentSpec:
    """A sampler or pruner: its name and keyword options (a tuple of pairs: hashable, picklable)."""

    type: str
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.options)


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep. Build it with :func:`~sweeps.spec_fields.load_spec` or
    :func:`~sweeps.spec_fields.parse_spec`."""

    name: str
    algorithms: tuple[str, ...]
    search_space: tuple[ParamSpec, ...]
    objective: ObjectiveSpec
    trials: int
    equal_effort: bool = True
    base_overrides: tuple[str, ...] = ()
    budget: tuple[str, ...] = ()
    sampler: ComponentSpec = ComponentSpec("tpe")
    pruner: ComponentSpec = ComponentSpec("median")
    seed: int = 0
    #: Trials queued before sampling starts: parameter name -> value (``algorithm`` picks the
    #: algorithm). Each runs once, in its algorithm's study.
    enqueue: tuple[tuple[tuple[str, Any], ...], ...] = field(default=())
    #: Independent warm starts per trial: seeds 0..starts-1, each with its own start.
    starts: int = 1
    #: Algorithm -> metric -> minimum of the metric's final value at every start (its runs
    #: averaged), or :data:`CRITIC_GATE` for a critic's prompt-level Pearson.
    admissible: tuple[tuple[str, tuple[tuple[str, float | str], ...]], ...] = ()

    def admissible_for(self, algorithm: str) -> dict[str, float | str]:
        """The metric minimums (or :data:`CRITIC_GATE`) a trial of ``algorithm`` must reach to
        count (empty: none)."""
        return dict(dict(self.admissible).get(algorithm, ()))

    def params_for(self, algorithm: str) -> list[ParamSpec]:
        """The dimensions a trial of ``algorithm`` samples."""
        return [p for p in self.search_space if p.applies_to(algorithm)]

    @property
    def studies(self) -> dict[str, str | None]:
        """Study name suffix -> the algorithm it is fixed to (None: the algorithm is sampled).

        With ``equal_effort`` (and more than one algorithm) each algorithm has its own study:
        the same number of trials each, a sampler and a median pruner that compare a trial only
        with trials of its own algorithm, and importances per algorithm. Without it, one study
        samples the algorithm as a categorical parameter and the sampler decides the split.
        """
        if len(self.algorithms) == 1:
            return {"": self.algorithms[0]}
        if self.equal_effort:
            return {f"-{a}": a for a in self.algorithms}
        return {"": None}

    def with_trials(self, trials: int) -> SweepSpec:
        """A copy with another trial count (``--trials``), validated like the spec's own."""
        check_trials(trials, self.algorithms, self.equal_effort, "--trials")
        return replace(self, trials=trials)


def format_value(value: Any) -> str:
    """A Python value as a Hydra override value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    s = str(value)
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def fail(field_name: str, value: Any, problem: str, allowed: Any = None) -> SpecError:
    """The error for a bad field, in the one form every spec error has (field, value, problem,
    what is allowed); the caller raises it, so a checker reads as ``raise fail(...)``."""
    msg = f"{field_name}={value!r}: {problem}"
    if allowed is not None:
        msg += f"; allowed: {allowed}"
    return SpecError(msg)


def field_value(key: str, value: Any, tp: Any, why: str = "", **bounds: float) -> Any:
    """The kit's :func:`config_value`, raising :class:`SpecError`.

    YAML types its scalars, so text where a number is due (``trials: "4"``) is a slip the spec
    refuses, though the kit, which also reads environment variables, would take it for the number.
    """
    try:
        if isinstance(value, str) and tp in (int, float):
            check_type(key, value, tp)  # raises: text is not a number in a spec
        return config_value(key, value, tp, **bounds)
    except ConfigError as e:
        raise SpecError(f"{e} ({why})" if why else str(e)) from None


def check_trials(trials: Any, algorithms: Sequence[str], equal_effort: bool, where: str) -> int:
    """The trial count, checked where the spec reads it and where ``--trials`` replaces it
    (:meth:`SweepSpec.with_trials`): equal effort needs a multiple of the algorithms. Here, with
    the two helpers above, because the data model needs it and imports none of the readers."""
    field_value(where, trials, int, ge=1)
    k = len(algorithms)
    if equal_effort and k > 1 and trials % k:
        raise fail(
            where,
            trials,
            f"equal_effort splits the trials equally over {k} algorithms {list(algorithms)}",
            f"a multiple of {k}",
        )
    return trials
