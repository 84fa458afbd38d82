"""Sweep specs: a YAML file validated into a frozen dataclass before any trial runs.

A spec names the algorithms to tune, the Hydra overrides every trial starts from, the search
space (Hydra override paths, ``{alg}`` standing for the trial's algorithm), the objective, the
number of trials, the per-trial budget, the sampler and the pruner. Validation happens in two
passes, both before the Optuna storage or MLflow are touched: :func:`parse_spec` checks the
structure, its scalars (types, ranges, allowed names) through the config kit that checks the
trainer's and the plan's settings (:mod:`algorithms.configkit`); :func:`check_spec` composes the
suite config once per algorithm and checks every path, the metric and one point of the search
space against the suite's own validation. Every error names the field, the bad value and what is
allowed.

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

import importlib.util
import inspect
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from algorithms.configkit import ConfigError, check_type, config_value

__all__ = [
    "ALG",
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
    "check_spec",
    "load_spec",
    "parse_spec",
    "trial_overrides",
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
_TOP_KEYS = (
    "name",
    "algorithms",
    "equal_effort",
    "base_overrides",
    "budget",
    "search_space",
    "objective",
    "trials",
    "sampler",
    "pruner",
    "seed",
    "enqueue",
    "starts",
    "admissible",
)
#: Parameter type -> the keys its range may have.
_PARAM_KEYS = {
    "float": ("type", "low", "high", "log", "step", "when_algorithm"),
    "int": ("type", "low", "high", "log", "step", "when_algorithm"),
    "categorical": ("type", "choices", "when_algorithm"),
}
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.([A-Za-z_][A-Za-z0-9_]*|\{alg\}))*$")
_METRIC = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+$")
_ALG_PATH = re.compile(r"^algorithm\.([A-Za-z0-9_]+)\.")
#: ``admissible``'s value for a critic: the claims' critic gate (statistic and threshold theirs).
CRITIC_GATE = "critic_gate"
#: Keys a trial sets itself; a spec may not search over them.
_RESERVED = ("seeds", "algorithm", "tracking", "suite.report", "output_dir", "threads")


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
        m = _ALG_PATH.match(self.path)
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
    """A validated sweep. Build it with :func:`load_spec` or :func:`parse_spec`."""

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
        _check_trials(trials, self.algorithms, self.equal_effort, "--trials")
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


def _fail(field_name: str, value: Any, problem: str, allowed: Any = None) -> SpecError:
    msg = f"{field_name}={value!r}: {problem}"
    if allowed is not None:
        msg += f"; allowed: {allowed}"
    return SpecError(msg)


def _value(key: str, value: Any, tp: Any, why: str = "", **bounds: float) -> Any:
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


def _keys(
    where: str, node: Mapping[Any, Any], keys: Sequence[str], why: str = "unknown key"
) -> None:
    """Refuse a key of ``node`` outside ``keys``: a misspelt setting would otherwise be ignored."""
    for k in node:
        _value(f"{where}{k}", k, Literal[tuple(keys)], why)


def _check_trials(trials: Any, algorithms: Sequence[str], equal_effort: bool, where: str) -> int:
    _value(where, trials, int, ge=1)
    k = len(algorithms)
    if equal_effort and k > 1 and trials % k:
        raise _fail(
            where,
            trials,
            f"equal_effort splits the trials equally over {k} algorithms {list(algorithms)}",
            f"a multiple of {k}",
        )
    return trials


def _str_list(data: Mapping[str, Any], key: str, default: Sequence[str] = ()) -> tuple[str, ...]:
    value = data.get(key, list(default))
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise _fail(key, value, "must be a list of strings")
    return tuple(value)


def _number(key: str, value: Any, kind: str, why: str = "", **bounds: float) -> int | float:
    """A range's end or step: a finite number, and a whole one (kept an int) for an int
    parameter, where YAML's ``2.0`` counts as 2."""
    number = _value(key, value, float, why, **bounds)
    if kind == "int" and number != int(number):
        raise _fail(key, value, "an int parameter needs an integer")
    return int(value) if kind == "int" else number


def _check_path(path: Any, algorithms: tuple[str, ...]) -> None:
    if not isinstance(path, str) or not _PATH.match(path):
        raise _fail(
            "search_space",
            path,
            "a key must be a dotted config path, e.g. trainer.grad_clip or algorithm.{alg}.actor_lr",
        )
    if path in _RESERVED or path.startswith("tracking."):
        raise _fail(
            "search_space", path, "set by the sweep itself", f"any path but {list(_RESERVED)}"
        )
    m = _ALG_PATH.match(path)
    if m and m.group(1) != ALG:
        why = "the path names an algorithm the sweep does not run"
        _value(f"search_space.{path}", m.group(1), Literal[algorithms], why)


def _choices(key: str, choices: Any) -> tuple[Any, ...]:
    if not isinstance(choices, list | tuple) or not choices:
        raise _fail(key, choices, "must be a non-empty list")
    for c in choices:
        if c is not None and not isinstance(c, bool | int | float | str):
            raise _fail(key, c, "choices must be null, bool, int, float or str")
    if len(set(map(repr, choices))) != len(choices):
        raise _fail(key, list(choices), "contains duplicates")
    return tuple(choices)


def _parse_param(path: str, node: Any, algorithms: tuple[str, ...]) -> ParamSpec:
    _check_path(path, algorithms)
    where = f"search_space.{path}"
    if not isinstance(node, Mapping):
        raise _fail(
            where, node, "must be a mapping such as {type: float, low: 1e-5, high: 1e-3, log: true}"
        )
    kind = _value(f"{where}.type", node.get("type"), Literal[PARAM_TYPES])
    _keys(f"{where}.", node, _PARAM_KEYS[kind], f"the keys of a {kind} parameter")
    when = node.get("when_algorithm")
    if when is not None:
        if not isinstance(when, list | tuple) or not when:
            raise _fail(f"{where}.when_algorithm", when, "must be a non-empty list of algorithms")
        when = tuple(_value(f"{where}.when_algorithm", a, Literal[algorithms]) for a in when)
    if kind == "categorical":
        choices = _choices(f"{where}.choices", node.get("choices"))
        return ParamSpec(path, kind, choices=choices, when_algorithm=when)
    log = _value(f"{where}.log", node.get("log", False), bool)
    low = _number(f"{where}.low", node.get("low"), kind)
    high = _number(f"{where}.high", node.get("high"), kind)
    _value(f"{where}.low", node["low"], float, "at most the range's high", le=high)
    if log:
        _value(f"{where}.low", node["low"], float, "a log-scale range", gt=0)
    step = node.get("step")
    if step is not None:
        step = _number(f"{where}.step", step, kind, "a step", gt=0)
        if log:
            raise _fail(f"{where}.step", node["step"], "Optuna does not combine step with log=true")
    return ParamSpec(path, kind, low, high, log, step, None, when)


def _parse_component(data: Mapping[str, Any], key: str, default: str) -> ComponentSpec:
    """A sampler or pruner, its options checked against the Optuna class's own signature, so a
    misspelt option fails here rather than when the study is created."""
    import optuna

    names = list(SAMPLERS if key == "sampler" else PRUNERS)
    node = data.get(key, default)
    if isinstance(node, str) or node is None:
        node = {"type": node}
    if not isinstance(node, Mapping):
        raise _fail(key, node, "must be a name or a mapping {type: ..., <option>: ...}", names)
    kind = _value(f"{key}.type" if len(node) > 1 else key, node.get("type"), Literal[tuple(names)])
    options = {k: v for k, v in node.items() if k != "type"}
    cls_name = SAMPLERS[kind][0] if key == "sampler" else PRUNERS[kind]
    if cls_name is None:
        if options:
            k = next(iter(options))
            raise _fail(f"{key}.{k}", options[k], f"{kind} takes no options")
        return ComponentSpec(kind)
    module = optuna.pruners if key == "pruner" else optuna.samplers
    sig = inspect.signature(getattr(module, cls_name).__init__)
    allowed = sorted(
        n
        for n, p in sig.parameters.items()
        if n not in ("self", "seed") and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    )
    if "seed" in options:
        raise _fail(f"{key}.seed", options["seed"], "set by the spec's top-level `seed`", allowed)
    _keys(f"{key}.", options, allowed, f"the options of {module.__name__}.{cls_name}")
    for k, v in options.items():
        if v is not None and not isinstance(v, bool | int | float | str):
            raise _fail(
                f"{key}.{k}", v, "options must be scalars (callables are not expressible in YAML)"
            )
    for mod in SAMPLERS[kind][1] if key == "sampler" else ():
        if importlib.util.find_spec(mod) is None:
            raise _fail(
                key,
                kind,
                f"needs the `{mod}` package, which is not installed (pip install {mod})",
                [n for n in names if n != kind],
            )
    return ComponentSpec(kind, tuple(sorted(options.items())))


def _parse_algorithms(data: Mapping[str, Any]) -> tuple[str, ...]:
    algorithms = _str_list(data, "algorithms")
    if not algorithms:
        raise _fail(
            "algorithms", list(algorithms), "name at least one algorithm, e.g. [sppo, grpo]"
        )
    if len(set(algorithms)) != len(algorithms):
        raise _fail("algorithms", list(algorithms), "contains duplicates")
    for a in algorithms:
        if not _NAME.match(a) or "." in a:
            raise _fail("algorithms", a, "not an algorithm name")
    return algorithms


def _parse_overrides(data: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The base and budget overrides; each trial sets its own algorithm, so neither may."""
    base = _str_list(data, "base_overrides")
    for o in base:
        if o.lstrip("+~").split("=", 1)[0] == "algorithm":
            raise _fail(
                "base_overrides", o, "each trial selects its own algorithm", "`algorithms: [...]`"
            )
    budget = _str_list(data, "budget")
    for o in budget:
        if not o.lstrip("+~").startswith("budget"):
            raise _fail(
                "budget",
                o,
                "holds only budget overrides",
                "budget=<kind>, budget.limit=..., budget.eval_fractions=[...]",
            )
    return base, budget


def _parse_space(
    space: Any, algorithms: tuple[str, ...], equal_effort: bool
) -> tuple[ParamSpec, ...]:
    if not isinstance(space, Mapping) or not space:
        raise _fail("search_space", space, "must be a non-empty mapping of config path -> range")
    params = tuple(_parse_param(k, v, algorithms) for k, v in space.items())
    for a in algorithms:
        if not any(p.applies_to(a) for p in params) and (len(algorithms) == 1 or equal_effort):
            raise _fail(
                "search_space",
                sorted(space),
                f"no parameter applies to {a}: its study would search nothing",
            )
    return params


def _parse_objective(obj: Any) -> ObjectiveSpec:
    if not isinstance(obj, Mapping):
        raise _fail("objective", obj, "must be a mapping {metric: ..., direction: ...}")
    _keys("objective.", obj, ("metric", "direction"))
    metric = obj.get("metric")
    if not isinstance(metric, str) or not (
        metric == "auc" or re.match(r"^eval/[^/]+/accuracy$", metric)
    ):
        raise _fail("objective.metric", metric, "unknown metric", ["eval/<task>/accuracy", "auc"])
    direction = obj.get("direction", "maximize")
    return ObjectiveSpec(metric, _value("objective.direction", direction, Literal[DIRECTIONS]))


def parse_spec(data: Mapping[str, Any], *, name: str = "sweep") -> SweepSpec:
    """Check a spec's structure and build the :class:`SweepSpec` without composing a config, so
    that a bad spec is refused before a storage, a study or a trial exists."""
    if not isinstance(data, Mapping):
        raise _fail("spec", type(data).__name__, "a sweep spec is a YAML mapping", list(_TOP_KEYS))
    _keys("", data, _TOP_KEYS)
    name = data.get("name", name)
    if not isinstance(name, str) or not _NAME.match(name):
        raise _fail("name", name, "must be letters, digits, '_', '.' or '-'")
    algorithms = _parse_algorithms(data)
    equal_effort = _value("equal_effort", data.get("equal_effort", True), bool)
    base, budget = _parse_overrides(data)
    params = _parse_space(data.get("search_space"), algorithms, equal_effort)
    objective = _parse_objective(data.get("objective"))
    trials = _check_trials(data.get("trials"), algorithms, equal_effort, "trials")
    sampler = _parse_component(data, "sampler", "tpe")
    pruner = _parse_component(data, "pruner", "median")
    seed = _value("seed", data.get("seed", 0), int, ge=0)
    starts = _value("starts", data.get("starts", 1), int, ge=1)
    if starts > 1 and pruner.type != "none":
        raise _fail(
            "pruner",
            pruner.type,
            f"starts={starts}: a trial's value is the mean over its starts, known only at the "
            "end, so nothing can be pruned",
            ["none"],
        )
    spec = SweepSpec(
        name=name,
        algorithms=algorithms,
        search_space=params,
        objective=objective,
        trials=trials,
        equal_effort=equal_effort,
        base_overrides=base,
        budget=budget,
        sampler=sampler,
        pruner=pruner,
        seed=seed,
        starts=starts,
        admissible=_parse_admissible(data.get("admissible") or {}, algorithms),
    )
    return replace(spec, enqueue=_parse_enqueue(data.get("enqueue") or [], spec))


def _parse_admissible(
    data: Any, algorithms: tuple[str, ...]
) -> tuple[tuple[str, tuple[tuple[str, float | str], ...]], ...]:
    if not isinstance(data, Mapping):
        raise _fail("admissible", data, "must map algorithm -> {metric: minimum}")
    _keys("admissible.", data, algorithms, "not one of the spec's algorithms")
    return tuple(
        (str(alg), _parse_rules(f"admissible.{alg}", rules)) for alg, rules in data.items()
    )


def _parse_rules(where: str, rules: Any) -> tuple[tuple[str, float | str], ...]:
    """One algorithm's rules: a minimum per metric, or the claims' critic gate for a critic's
    Pearson, so that a critic is screened by one statistic and one threshold everywhere."""
    from analysis.claims.gates import PROMPT_PEARSON

    if not isinstance(rules, Mapping) or not rules:
        raise _fail(where, rules, "must map metric -> minimum")
    pearsons = sorted(set(PROMPT_PEARSON.values()))
    checked: list[tuple[str, float | str]] = []
    for metric, minimum in rules.items():
        if not isinstance(metric, str) or not _METRIC.match(metric):
            raise _fail(where, metric, "not a metric name, e.g. critic/x")
        key = f"{where}.{metric}"
        if minimum == CRITIC_GATE:
            if metric not in pearsons:
                raise _fail(key, minimum, "the critic gate reads a prompt-level Pearson", pearsons)
            checked.append((metric, CRITIC_GATE))
            continue
        if metric in PROMPT_PEARSON:
            raise _fail(
                key,
                minimum,
                "a critic is screened by the claims' critic gate, one statistic and one "
                f"threshold for every critic: write {{{PROMPT_PEARSON[metric]}: {CRITIC_GATE}}}",
            )
        checked.append((metric, _value(key, minimum, float, f"or {CRITIC_GATE!r}")))
    return tuple(checked)


def _parse_enqueue(entries: Any, spec: SweepSpec) -> tuple[tuple[tuple[str, Any], ...], ...]:
    if not isinstance(entries, list | tuple):
        raise _fail("enqueue", entries, "must be a list of {parameter: value} mappings")
    out = []
    for i, entry in enumerate(entries):
        where = f"enqueue[{i}]"
        if not isinstance(entry, Mapping) or not entry:
            raise _fail(where, entry, "must be a non-empty mapping {parameter: value}")
        alg = entry.get("algorithm")
        if alg is None and len(spec.algorithms) == 1:
            alg = spec.algorithms[0]
        _value(f"{where}.algorithm", alg, Literal[spec.algorithms], "the trial's algorithm")
        names = {p.name(alg): p for p in spec.params_for(alg)}
        point = {k: v for k, v in entry.items() if k != "algorithm"}
        _keys(f"{where}.", point, sorted(names), f"the parameters of {alg}'s search space")
        for k, v in point.items():
            if not names[k].contains(v):
                raise _fail(f"{where}.{k}", v, "outside the parameter's range or choices")
        out.append(tuple(sorted({**entry, "algorithm": alg}.items())))
    limit = spec.trials // len(spec.algorithms) if spec.equal_effort else spec.trials
    for alg, n in Counter(dict(e)["algorithm"] for e in out).items():
        if n > limit:
            raise _fail(
                "enqueue", n, f"more queued trials for {alg} than its share of trials ({limit})"
            )
    return tuple(out)


def load_spec(path: str | Path) -> SweepSpec:
    """Read and structurally validate a spec file (see :func:`check_spec` for the config pass).

    A bare name (``lr_per_algorithm``) finds a spec shipped in this package.
    """
    import yaml

    p = Path(path)
    if not p.exists():
        shipped = Path(__file__).parent / f"{p.stem}.yaml"
        if p.suffix in ("", ".yaml") and shipped.exists() and len(p.parts) == 1:
            p = shipped
        else:
            available = sorted(s.stem for s in Path(__file__).parent.glob("*.yaml"))
            raise _fail("spec", str(path), "no such file", f"a path or a shipped spec {available}")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise SpecError(f"spec={str(p)!r}: not valid YAML: {e}") from e
    return parse_spec(data or {}, name=p.stem)


def trial_overrides(
    spec: SweepSpec, algorithm: str, sampled: Sequence[str], fixed: Sequence[str] = ()
) -> list[str]:
    """The overrides of one trial: the spec's base and budget, the sampled point, then the
    sweep's own (``fixed``). Overrides aimed at another algorithm are dropped: Hydra would
    otherwise add that algorithm back to the trial's config."""
    out = []
    for o in [*spec.base_overrides, *spec.budget, *sampled]:
        m = _ALG_PATH.match(o.lstrip("+~"))
        if m and m.group(1) != algorithm:
            continue
        out.append(o)
    starts = [f"seeds={spec.starts}"]
    if spec.starts > 1:  # independent starts: each seed trains its own
        starts.append("warmstart.per_seed=true")
    return [*out, *starts, f"algorithm=[{algorithm}]", "suite.report=false", *fixed]


def _has_path(cfg: Any, path: str) -> tuple[bool, str, list[str]]:
    """Whether ``path`` exists in ``cfg``; else the deepest existing prefix and its keys."""
    from omegaconf import DictConfig

    node, seen = cfg, []
    for part in path.split("."):
        if not isinstance(node, DictConfig) or part not in node:
            keys = sorted(str(k) for k in node.keys()) if isinstance(node, DictConfig) else []
            return False, ".".join(seen) or "<root>", keys
        node, seen = node[part], [*seen, part]
    return True, path, []


def task_eval_name(task: Any) -> str:
    """The name the built task's whole eval set has in metric keys (``eval/<name>/accuracy``),
    read from the task's config node alone: the spec is checked before any trial, without
    generating or loading the task's problems. Each task's own default: the task's name for
    arith, the dataset's for Reasoning Gym, the first eval set's for a real dataset."""
    if task.get("eval_name"):
        return str(task["eval_name"])
    if task["name"] == "reasoning_gym":
        return str(task["dataset"])
    if task["name"] == "arith":
        return "arith"
    return str((list(task.get("eval_datasets") or []) or [task["name"]])[0])


def _sampled_paths(spec: SweepSpec, alg: str, cfg: Any) -> list[str]:
    """The overrides of the search space's representative point for ``alg``, once each path is
    found in the composed config, or is a field of the algorithm's config (an algorithm YAML
    lists only what it changes, so ``algorithm.<alg>.params.*`` may be absent)."""
    import dataclasses

    from algorithms import algorithm_class

    sampled = []
    for p in spec.params_for(alg):
        path = p.name(alg)
        ok, prefix, keys = _has_path(cfg, path)
        m = re.match(rf"^algorithm\.{re.escape(alg)}\.params\.([A-Za-z0-9_]+)$", path)
        if not ok and m:
            fields = [f.name for f in dataclasses.fields(algorithm_class(alg).Config)]
            if m.group(1) not in fields:
                raise _fail(f"search_space.{p.path}", path, f"{alg} has no such parameter", fields)
            ok = True
        if not ok:
            raise _fail(
                f"search_space.{p.path}",
                path,
                f"no such key in {alg}'s composed config (under {prefix})",
                keys,
            )
        sampled.append(p.override(alg, p.representative()))
    return sampled


def check_spec(spec: SweepSpec, fixed: Sequence[str] = ()) -> dict[str, Any]:
    """Compose each algorithm's trial config and check the spec against it, before any trial.

    Checks every search-space path exists (or is a field of the algorithm's config, for
    ``algorithm.<alg>.params.*``), the metric is the task's, and the search space's
    representative point (each low end, each first choice) passes the suite's own validation.
    Returns the composed config per algorithm (at that point).
    """
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from benchmarks.config import compose_config
    from benchmarks.suite.plan import validate

    errors = (HydraException, OmegaConfBaseException, ValueError, KeyError)
    configs: dict[str, Any] = {}
    for alg in spec.algorithms:
        try:
            cfg = compose_config(trial_overrides(spec, alg, [], fixed))
        except errors as e:
            raise SpecError(
                f"base_overrides/budget/algorithms (composing {alg}'s config): {_short(e)}"
            ) from e
        sampled = _sampled_paths(spec, alg, cfg)
        allowed = ["auc", f"eval/{task_eval_name(cfg.task)}/accuracy"]
        if spec.objective.metric not in allowed:
            raise _fail(
                "objective.metric",
                spec.objective.metric,
                f"unknown metric for task {str(cfg.task.name)!r}",
                allowed,
            )
        try:
            point = compose_config(trial_overrides(spec, alg, sampled, fixed))
            validate(point)
        except errors as e:
            raise SpecError(
                f"search_space: the point {sampled} fails the suite's validation for {alg}: "
                f"{_short(e)} (restrict a parameter with when_algorithm, or change its range)"
            ) from e
        configs[alg] = point
    return configs


def _short(e: Exception) -> str:
    msg = str(e).strip().splitlines()
    return msg[0] if msg else type(e).__name__
