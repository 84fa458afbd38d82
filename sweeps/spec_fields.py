"""The readers of a sweep spec's fields, and :func:`parse_spec` and :func:`load_spec`, which
build a :class:`~sweeps.spec.SweepSpec` from them.

Each field of the YAML has one reader here, and a reader refuses a bad value with a
:class:`~sweeps.spec.SpecError` that names the field, the value and what is allowed, so that a
misspelt key or an out-of-range number stops the sweep before a storage, a study or a trial
exists. The checks need only the spec itself; those that compose the suite's config are
:mod:`sweeps.spec_check`'s. The data model the readers build is :mod:`sweeps.spec`'s, which
imports nothing from here.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from sweeps.spec import (
    ALG,
    ALG_PATH,
    CRITIC_GATE,
    DIRECTIONS,
    PARAM_TYPES,
    PRUNERS,
    SAMPLERS,
    ComponentSpec,
    ObjectiveSpec,
    ParamSpec,
    SpecError,
    SweepSpec,
    check_trials,
    fail,
    field_value,
)

__all__ = ["load_spec", "parse_spec"]

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
#: Keys a trial sets itself; a spec may not search over them.
_RESERVED = ("seeds", "algorithm", "tracking", "suite.report", "output_dir", "threads")


def _keys(
    where: str, node: Mapping[Any, Any], keys: Sequence[str], why: str = "unknown key"
) -> None:
    """Refuse a key of ``node`` outside ``keys``: a misspelt setting would otherwise be ignored."""
    for k in node:
        field_value(f"{where}{k}", k, Literal[tuple(keys)], why)


def _str_list(data: Mapping[str, Any], key: str, default: Sequence[str] = ()) -> tuple[str, ...]:
    value = data.get(key, list(default))
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise fail(key, value, "must be a list of strings")
    return tuple(value)


def _number(key: str, value: Any, kind: str, why: str = "", **bounds: float) -> int | float:
    """A range's end or step: a finite number, and a whole one (kept an int) for an int
    parameter, where YAML's ``2.0`` counts as 2."""
    number = field_value(key, value, float, why, **bounds)
    if kind == "int" and number != int(number):
        raise fail(key, value, "an int parameter needs an integer")
    return int(value) if kind == "int" else number


def _check_path(path: Any, algorithms: tuple[str, ...]) -> None:
    if not isinstance(path, str) or not _PATH.match(path):
        raise fail(
            "search_space",
            path,
            "a key must be a dotted config path, e.g. trainer.grad_clip or algorithm.{alg}.actor_lr",
        )
    if path in _RESERVED or path.startswith("tracking."):
        raise fail(
            "search_space", path, "set by the sweep itself", f"any path but {list(_RESERVED)}"
        )
    m = ALG_PATH.match(path)
    if m and m.group(1) != ALG:
        why = "the path names an algorithm the sweep does not run"
        field_value(f"search_space.{path}", m.group(1), Literal[algorithms], why)


def _choices(key: str, choices: Any) -> tuple[Any, ...]:
    if not isinstance(choices, list | tuple) or not choices:
        raise fail(key, choices, "must be a non-empty list")
    for c in choices:
        if c is not None and not isinstance(c, bool | int | float | str):
            raise fail(key, c, "choices must be null, bool, int, float or str")
    if len(set(map(repr, choices))) != len(choices):
        raise fail(key, list(choices), "contains duplicates")
    return tuple(choices)


def _parse_param(path: str, node: Any, algorithms: tuple[str, ...]) -> ParamSpec:
    _check_path(path, algorithms)
    where = f"search_space.{path}"
    if not isinstance(node, Mapping):
        raise fail(
            where, node, "must be a mapping such as {type: float, low: 1e-5, high: 1e-3, log: true}"
        )
    kind = field_value(f"{where}.type", node.get("type"), Literal[PARAM_TYPES])
    _keys(f"{where}.", node, _PARAM_KEYS[kind], f"the keys of a {kind} parameter")
    when = node.get("when_algorithm")
    if when is not None:
        if not isinstance(when, list | tuple) or not when:
            raise fail(f"{where}.when_algorithm", when, "must be a non-empty list of algorithms")
        when = tuple(field_value(f"{where}.when_algorithm", a, Literal[algorithms]) for a in when)
    if kind == "categorical":
        choices = _choices(f"{where}.choices", node.get("choices"))
        return ParamSpec(path, kind, choices=choices, when_algorithm=when)
    log = field_value(f"{where}.log", node.get("log", False), bool)
    low = _number(f"{where}.low", node.get("low"), kind)
    high = _number(f"{where}.high", node.get("high"), kind)
    field_value(f"{where}.low", node["low"], float, "at most the range's high", le=high)
    if log:
        field_value(f"{where}.low", node["low"], float, "a log-scale range", gt=0)
    step = node.get("step")
    if step is not None:
        step = _number(f"{where}.step", step, kind, "a step", gt=0)
        if log:
            raise fail(f"{where}.step", node["step"], "Optuna does not combine step with log=true")
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
        raise fail(key, node, "must be a name or a mapping {type: ..., <option>: ...}", names)
    kind = field_value(
        f"{key}.type" if len(node) > 1 else key, node.get("type"), Literal[tuple(names)]
    )
    options = {k: v for k, v in node.items() if k != "type"}
    cls_name = SAMPLERS[kind][0] if key == "sampler" else PRUNERS[kind]
    if cls_name is None:
        if options:
            k = next(iter(options))
            raise fail(f"{key}.{k}", options[k], f"{kind} takes no options")
        return ComponentSpec(kind)
    module = optuna.pruners if key == "pruner" else optuna.samplers
    sig = inspect.signature(getattr(module, cls_name).__init__)
    allowed = sorted(
        n
        for n, p in sig.parameters.items()
        if n not in ("self", "seed") and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    )
    if "seed" in options:
        raise fail(f"{key}.seed", options["seed"], "set by the spec's top-level `seed`", allowed)
    _keys(f"{key}.", options, allowed, f"the options of {module.__name__}.{cls_name}")
    for k, v in options.items():
        if v is not None and not isinstance(v, bool | int | float | str):
            raise fail(
                f"{key}.{k}", v, "options must be scalars (callables are not expressible in YAML)"
            )
    for mod in SAMPLERS[kind][1] if key == "sampler" else ():
        if importlib.util.find_spec(mod) is None:
            raise fail(
                key,
                kind,
                f"needs the `{mod}` package, which is not installed (pip install {mod})",
                [n for n in names if n != kind],
            )
    return ComponentSpec(kind, tuple(sorted(options.items())))


def _parse_algorithms(data: Mapping[str, Any]) -> tuple[str, ...]:
    algorithms = _str_list(data, "algorithms")
    if not algorithms:
        raise fail("algorithms", list(algorithms), "name at least one algorithm, e.g. [sppo, grpo]")
    if len(set(algorithms)) != len(algorithms):
        raise fail("algorithms", list(algorithms), "contains duplicates")
    for a in algorithms:
        if not _NAME.match(a) or "." in a:
            raise fail("algorithms", a, "not an algorithm name")
    return algorithms


def _parse_overrides(data: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The base and budget overrides; each trial sets its own algorithm, so neither may."""
    base = _str_list(data, "base_overrides")
    for o in base:
        if o.lstrip("+~").split("=", 1)[0] == "algorithm":
            raise fail(
                "base_overrides", o, "each trial selects its own algorithm", "`algorithms: [...]`"
            )
    budget = _str_list(data, "budget")
    for o in budget:
        if not o.lstrip("+~").startswith("budget"):
            raise fail(
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
        raise fail("search_space", space, "must be a non-empty mapping of config path -> range")
    params = tuple(_parse_param(k, v, algorithms) for k, v in space.items())
    for a in algorithms:
        if not any(p.applies_to(a) for p in params) and (len(algorithms) == 1 or equal_effort):
            raise fail(
                "search_space",
                sorted(space),
                f"no parameter applies to {a}: its study would search nothing",
            )
    return params


def _parse_objective(obj: Any) -> ObjectiveSpec:
    if not isinstance(obj, Mapping):
        raise fail("objective", obj, "must be a mapping {metric: ..., direction: ...}")
    _keys("objective.", obj, ("metric", "direction"))
    metric = obj.get("metric")
    if not isinstance(metric, str) or not (
        metric == "auc" or re.match(r"^eval/[^/]+/accuracy$", metric)
    ):
        raise fail("objective.metric", metric, "unknown metric", ["eval/<task>/accuracy", "auc"])
    direction = obj.get("direction", "maximize")
    return ObjectiveSpec(metric, field_value("objective.direction", direction, Literal[DIRECTIONS]))


def parse_spec(data: Mapping[str, Any], *, name: str = "sweep") -> SweepSpec:
    """Check a spec's structure and build the :class:`SweepSpec` without composing a config, so
    that a bad spec is refused before a storage, a study or a trial exists."""
    if not isinstance(data, Mapping):
        raise fail("spec", type(data).__name__, "a sweep spec is a YAML mapping", list(_TOP_KEYS))
    _keys("", data, _TOP_KEYS)
    name = data.get("name", name)
    if not isinstance(name, str) or not _NAME.match(name):
        raise fail("name", name, "must be letters, digits, '_', '.' or '-'")
    algorithms = _parse_algorithms(data)
    equal_effort = field_value("equal_effort", data.get("equal_effort", True), bool)
    base, budget = _parse_overrides(data)
    params = _parse_space(data.get("search_space"), algorithms, equal_effort)
    objective = _parse_objective(data.get("objective"))
    trials = check_trials(data.get("trials"), algorithms, equal_effort, "trials")
    sampler = _parse_component(data, "sampler", "tpe")
    pruner = _parse_component(data, "pruner", "median")
    seed = field_value("seed", data.get("seed", 0), int, ge=0)
    starts = field_value("starts", data.get("starts", 1), int, ge=1)
    if starts > 1 and pruner.type != "none":
        raise fail(
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
        raise fail("admissible", data, "must map algorithm -> {metric: minimum}")
    _keys("admissible.", data, algorithms, "not one of the spec's algorithms")
    return tuple(
        (str(alg), _parse_rules(f"admissible.{alg}", rules)) for alg, rules in data.items()
    )


def _parse_rules(where: str, rules: Any) -> tuple[tuple[str, float | str], ...]:
    """One algorithm's rules: a minimum per metric, or the claims' critic gate for a critic's
    Pearson, so that a critic is screened by one statistic and one threshold everywhere."""
    from analysis.claims.gates import PROMPT_PEARSON

    if not isinstance(rules, Mapping) or not rules:
        raise fail(where, rules, "must map metric -> minimum")
    pearsons = sorted(set(PROMPT_PEARSON.values()))
    checked: list[tuple[str, float | str]] = []
    for metric, minimum in rules.items():
        if not isinstance(metric, str) or not _METRIC.match(metric):
            raise fail(where, metric, "not a metric name, e.g. critic/x")
        key = f"{where}.{metric}"
        if minimum == CRITIC_GATE:
            if metric not in pearsons:
                raise fail(key, minimum, "the critic gate reads a prompt-level Pearson", pearsons)
            checked.append((metric, CRITIC_GATE))
            continue
        if metric in PROMPT_PEARSON:
            raise fail(
                key,
                minimum,
                "a critic is screened by the claims' critic gate, one statistic and one "
                f"threshold for every critic: write {{{PROMPT_PEARSON[metric]}: {CRITIC_GATE}}}",
            )
        checked.append((metric, field_value(key, minimum, float, f"or {CRITIC_GATE!r}")))
    return tuple(checked)


def _parse_enqueue(entries: Any, spec: SweepSpec) -> tuple[tuple[tuple[str, Any], ...], ...]:
    if not isinstance(entries, list | tuple):
        raise fail("enqueue", entries, "must be a list of {parameter: value} mappings")
    out = []
    for i, entry in enumerate(entries):
        where = f"enqueue[{i}]"
        if not isinstance(entry, Mapping) or not entry:
            raise fail(where, entry, "must be a non-empty mapping {parameter: value}")
        alg = entry.get("algorithm")
        if alg is None and len(spec.algorithms) == 1:
            alg = spec.algorithms[0]
        field_value(f"{where}.algorithm", alg, Literal[spec.algorithms], "the trial's algorithm")
        names = {p.name(alg): p for p in spec.params_for(alg)}
        point = {k: v for k, v in entry.items() if k != "algorithm"}
        _keys(f"{where}.", point, sorted(names), f"the parameters of {alg}'s search space")
        for k, v in point.items():
            if not names[k].contains(v):
                raise fail(f"{where}.{k}", v, "outside the parameter's range or choices")
        out.append(tuple(sorted({**entry, "algorithm": alg}.items())))
    limit = spec.trials // len(spec.algorithms) if spec.equal_effort else spec.trials
    for alg, n in Counter(dict(e)["algorithm"] for e in out).items():
        if n > limit:
            raise fail(
                "enqueue", n, f"more queued trials for {alg} than its share of trials ({limit})"
            )
    return tuple(out)


def load_spec(path: str | Path) -> SweepSpec:
    """Read and structurally validate a spec file (see :func:`~sweeps.spec_check.check_spec` for the
    config pass).

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
            raise fail("spec", str(path), "no such file", f"a path or a shipped spec {available}")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise SpecError(f"spec={str(p)!r}: not valid YAML: {e}") from e
    return parse_spec(data or {}, name=p.stem)
