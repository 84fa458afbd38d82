"""Claims declared before a run: what the report tests, and nothing else.

A suite's ``claims:`` node lists the comparisons its report draws verdicts on. Each entry names
the estimand, the two algorithms, the direction that supports it (with its margin where the
direction needs one), the eval groups it uses, the family it is corrected with (Holm over the
family's declared size: claims x tasks) and the gates that must pass before a verdict is drawn
(:mod:`analysis.claims.gates`)::

    claims:
      - name: horizon
        estimand: horizon_slope          # horizon_slope | area_difference | final_difference
                                         # | compute_ratio
        a: sppo
        b: ppo
        direction: a >= b                # a >= b | a <= b | a ~= b | a > b | a < b;
                                         # ratios: a needs less|more compute
        margin: 0.005                    # a >= b, a <= b, a ~= b: > 0, the estimand's units
        groups: all                      # all | ends | [arith_h1, arith_h4, ...]
        family: {name: headline, size: 4}
        gates:
          start_max: 0.8                 # start accuracy at most this (shortest, longest group)
          gain_min: 0.05                 # best final gain over the start at least this (same)
          final_min:                     # the critics the claim rests on (analysis/claims/gates.py:
                                         # each gated on its prompt-level Pearson, calibrated)
            ppo: {critic/heldout_explained_variance: 0.1}
            sppo: {critic/calibration_pearson: 0.3}

Directions: ``a > b`` / ``a < b`` are superiority claims (the interval must exclude 0 on the
claimed side); ``a >= b`` / ``a <= b`` are non-inferiority claims with a margin m (a is at most m
worse than b: the interval must lie above -m; "superior" when it also lies above 0); ``a ~= b`` is
equivalence with a margin m (the interval inside [-m, m], two one-sided tests). The margin is
declared before the run, in the estimand's units (accuracy per horizon step for the slope, mean
accuracy over the budget for the area, accuracy for the final difference); a claim with one of
these directions and no margin is refused. Compute-ratio claims take no margin.

:func:`parse_claims` checks a node and returns typed :class:`Claim` s; the suite's plan calls it
before any compute (with the registered algorithms and the task's eval datasets), the report
calls it on what the runs logged (their ``claims`` param: :func:`claims_from_param`, which also
reads claims logged before margins existed, a ``>=`` or ``<=`` without one, and tests them as
the superiority claims they were read as then). Every error names the bad field and what is
allowed.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from algorithms.configkit import config_value
from analysis import metrics as M

__all__ = [
    "CLAIMS_PARAM",
    "DIRECTIONS",
    "ESTIMANDS",
    "GATE_KEYS",
    "GATE_METRICS",
    "GROUP_KEYWORDS",
    "MARGIN_DIRECTIONS",
    "Claim",
    "Family",
    "Gates",
    "claims_from_param",
    "parse_claims",
]

#: The run param the flattened config stores the ``claims`` node under (a JSON list).
CLAIMS_PARAM = "claims"
#: Estimands (:mod:`analysis.claims.protocol`): the per-start least-squares slope over the groups'
#: horizons of the paired accuracy difference; the paired difference of the normalised areas
#: under the accuracy-versus-compute curves; the compute ratio to reach b's accuracy at the
#: budget; the paired difference of the final accuracies.
ESTIMANDS = ("horizon_slope", "area_difference", "compute_ratio", "final_difference")
_LINEAR_DIRECTIONS = ("a >= b", "a <= b", "a ~= b", "a > b", "a < b")
#: Per estimand, the directions a claim may take: which sign of the effect supports it.
DIRECTIONS: dict[str, tuple[str, ...]] = {
    "horizon_slope": _LINEAR_DIRECTIONS,
    "area_difference": _LINEAR_DIRECTIONS,
    "final_difference": _LINEAR_DIRECTIONS,
    "compute_ratio": ("a needs less compute", "a needs more compute"),
}
#: Directions that need a margin (non-inferiority and equivalence); the others take none.
MARGIN_DIRECTIONS = ("a >= b", "a <= b", "a ~= b")
#: The margin's units, per estimand (for the claim's sentence).
_UNITS = {
    "horizon_slope": "accuracy per horizon step",
    "area_difference": "mean accuracy over the budget",
    "final_difference": "accuracy",
}
#: ``groups`` keywords: every group of the task (``all``; the whole task for a compute ratio),
#: or its shortest and longest only (``ends``).
GROUP_KEYWORDS = ("all", "ends")
GATE_KEYS = ("start_max", "gain_min", "final_min")
_KEYS = ("name", "estimand", "a", "b", "direction", "margin", "groups", "family", "gates")
_OPTIONAL = ("margin", "gates")
#: Metrics a ``final_min`` gate may read: the critics' quality, logged at the final eval.
GATE_METRICS = (
    M.CRITIC_HELDOUT_EXPLAINED_VAR,
    M.CRITIC_FIRST_VALUE_PEARSON,
    M.CRITIC_CALIBRATION_PEARSON,
    M.CRITIC_CALIBRATION_ECE,
    M.CRITIC_CALIBRATION_BRIER,
    M.CRITIC_EXPLAINED_VAR,
)


@dataclass(frozen=True)
class Family:
    """The family a claim's p-value is corrected in: Holm over ``size`` members (claims x tasks,
    those not in this store counting as p = 1)."""

    name: str
    size: int


@dataclass(frozen=True)
class Gates:
    """A claim's preconditions: per group it uses (its shortest and longest), the start's
    accuracy at most ``start_max`` and the best algorithm's mean gain at least ``gain_min``;
    ``final_min`` names the algorithms whose critics the claim rests on (a critic metric and a
    minimum per algorithm, as declared). :mod:`analysis.claims.gates` gates each named critic on its
    prompt-level Pearson's lower bound over starts against the calibrated threshold, whatever
    metric and minimum were declared: one statistic and one threshold for every critic."""

    start_max: float | None = None
    gain_min: float | None = None
    final_min: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Claim:
    """One declared claim (see the module docstring for the fields)."""

    name: str
    estimand: str
    a: str
    b: str
    direction: str
    #: ``"all"``, ``"ends"``, or the eval datasets by name.
    groups: str | tuple[str, ...]
    family: Family
    gates: Gates
    #: The non-inferiority or equivalence margin (estimand units); None for superiority claims
    #: and for a ``>=``/``<=`` claim logged before margins existed (tested as superiority).
    margin: float | None = None

    @property
    def sentence(self) -> str:
        """The claim in words, with its margin, e.g. "sppo >= ppo as the horizon grows
        (margin 0.005 accuracy per horizon step)"."""
        a, b = self.a, self.b
        if self.estimand == "compute_ratio":
            fewer = "fewer" if self.direction == "a needs less compute" else "more"
            return f"{a} reaches {b}'s accuracy with {fewer} rollouts"
        rel = self.direction.split()[1]
        what = {
            "horizon_slope": "as the horizon grows",
            "area_difference": "in mean accuracy over the rollout budget",
            "final_difference": "at the end of the budget",
        }[self.estimand]
        if self.margin is not None:
            tail = f" (margin {self.margin:g} {_UNITS[self.estimand]})"
        elif self.direction in MARGIN_DIRECTIONS:
            tail = f" (declared without a margin: tested as {a} {rel[0]} {b})"
        else:
            tail = ""
        return f"{a} {rel} {b} {what}{tail}"


def _where(i: int, key: str | None = None) -> str:
    return f"claims[{i}]" + (f".{key}" if key else "")


def _text(i: int, key: str, value: Any, allowed: Collection[str] | None = None) -> str:
    if not isinstance(value, str) or not value:
        hint = f"; allowed: {list(allowed)}" if allowed is not None else ""
        raise ValueError(f"{_where(i, key)}={value!r}: must be a non-empty string{hint}")
    if allowed is not None and value not in allowed:
        raise ValueError(f"{_where(i, key)}={value!r}: allowed: {list(allowed)}")
    return value


def _number(where: str, value: Any) -> float:
    """A finite number, checked by the config kit every layer uses."""
    return config_value(where, value, float)


def _margin(
    i: int, entry: Mapping[str, Any], estimand: str, direction: str, legacy: bool
) -> float | None:
    value = entry.get("margin")
    if direction in MARGIN_DIRECTIONS:
        if value is None:
            if legacy and direction != "a ~= b":  # ">=", "<=" before margins: superiority
                return None
            raise ValueError(
                f"{_where(i, 'margin')}: missing; direction {direction!r} (non-inferiority or "
                f"equivalence) needs a margin > 0 in the estimand's units "
                f"({_UNITS[estimand]} for {estimand}), declared before the run"
            )
        margin = _number(_where(i, "margin"), value)
        if margin <= 0:
            raise ValueError(
                f"{_where(i, 'margin')}={value!r}: must be a number > 0 ({_UNITS[estimand]})"
            )
        return margin
    if value is not None:
        takes = [d for d in DIRECTIONS[estimand] if d in MARGIN_DIRECTIONS]
        raise ValueError(
            f"{_where(i, 'margin')}={value!r}: direction {direction!r} takes no margin"
            + (f"; a margin goes with {takes}" if takes else f" ({estimand} takes none)")
        )
    return None


def _groups(i: int, value: Any, datasets: Collection[str] | None) -> str | tuple[str, ...]:
    if isinstance(value, str):
        if value in GROUP_KEYWORDS:
            return value
        value = [value]
    if not isinstance(value, Sequence) or not value or not all(isinstance(v, str) for v in value):
        raise ValueError(
            f"{_where(i, 'groups')}={value!r}: allowed: {list(GROUP_KEYWORDS)} or a list of "
            "eval datasets" + (f" from {sorted(datasets)}" if datasets else "")
        )
    if datasets is not None:
        bad = [v for v in value if v not in datasets]
        if bad:
            raise ValueError(
                f"{_where(i, 'groups')}: {bad[0]!r} is not an eval dataset of the task; "
                f"allowed: {list(GROUP_KEYWORDS)} or datasets from {sorted(datasets)}"
            )
    return tuple(value)


def _family(i: int, value: Any) -> Family:
    if not isinstance(value, Mapping) or set(value) != {"name", "size"}:
        raise ValueError(
            f"{_where(i, 'family')}={value!r}: must be {{name: <family>, size: <members>}}"
        )
    name = value["name"]
    if not isinstance(name, str) or not name:
        raise ValueError(f"{_where(i, 'family.name')}={name!r}: must be a non-empty string")
    return Family(name, config_value(_where(i, "family.size"), value["size"], int, ge=1))


def _gates(i: int, value: Any, algorithms: Collection[str] | None) -> Gates:
    if value is None:
        return Gates()
    if not isinstance(value, Mapping):
        raise ValueError(f"{_where(i, 'gates')}={value!r}: must be a mapping of {list(GATE_KEYS)}")
    bad = sorted(set(value) - set(GATE_KEYS))
    if bad:
        raise ValueError(f"{_where(i, 'gates')}.{bad[0]}: unknown key; allowed: {list(GATE_KEYS)}")
    out: dict[str, Any] = {}
    for key in ("start_max", "gain_min"):
        v = value.get(key)
        if v is not None:
            out[key] = _number(f"{_where(i, 'gates')}.{key}", v)
    final = value.get("final_min") or {}
    if not isinstance(final, Mapping):
        raise ValueError(
            f"{_where(i, 'gates.final_min')}={final!r}: must map algorithm -> {{metric: minimum}}"
        )
    parsed: dict[str, dict[str, float]] = {}
    for alg, metrics in final.items():
        where = f"{_where(i, 'gates.final_min')}.{alg}"
        if algorithms is not None and alg not in algorithms:
            raise ValueError(f"{where}: unknown algorithm; allowed: {sorted(algorithms)}")
        if not isinstance(metrics, Mapping) or not metrics:
            raise ValueError(f"{where}={metrics!r}: must map metric -> minimum")
        for metric, minimum in metrics.items():
            if metric not in GATE_METRICS:
                raise ValueError(f"{where}.{metric}: unknown metric; allowed: {list(GATE_METRICS)}")
            parsed.setdefault(str(alg), {})[str(metric)] = _number(f"{where}.{metric}", minimum)
    return Gates(out.get("start_max"), out.get("gain_min"), parsed)


def parse_claims(
    node: Any,
    *,
    algorithms: Collection[str] | None = None,
    datasets: Collection[str] | None = None,
    legacy: bool = False,
) -> list[Claim]:
    """Check a ``claims`` node (a list of mappings; None or empty: no claims) and type it.

    Args:
        node: the node, as plain containers.
        algorithms: the names ``a``, ``b`` and the gates' algorithms may take (the registered
            algorithms); None: not checked.
        datasets: the eval datasets ``groups`` may name (the task's); None: not checked.
        legacy: accept a ``>=``/``<=`` claim without a margin (claims logged before margins
            existed; :func:`claims_from_param`); it is tested as superiority. A new declaration
            is never read this way.

    Raises:
        ValueError: naming the bad field (``claims[1].direction``) and its allowed values. Names
            must be unique; every claim of a family declares the same size, at least the
            number of claims in it.
    """
    if node is None:
        return []
    if not isinstance(node, Sequence) or isinstance(node, str):
        raise ValueError(f"claims={node!r}: must be a list of claims (mappings of {list(_KEYS)})")
    claims: list[Claim] = []
    for i, entry in enumerate(node):
        if not isinstance(entry, Mapping):
            raise ValueError(f"{_where(i)}={entry!r}: must be a mapping of {list(_KEYS)}")
        unknown = sorted(set(entry) - set(_KEYS))
        if unknown:
            raise ValueError(f"{_where(i, unknown[0])}: unknown key; allowed: {list(_KEYS)}")
        needed = [k for k in _KEYS if k not in _OPTIONAL]
        missing = [k for k in needed if k not in entry]
        if missing:
            raise ValueError(f"{_where(i, missing[0])}: missing; a claim needs {needed}")
        estimand = _text(i, "estimand", entry["estimand"], ESTIMANDS)
        a = _text(i, "a", entry["a"], algorithms)
        b = _text(i, "b", entry["b"], algorithms)
        if a == b:
            raise ValueError(f"{_where(i, 'b')}={b!r}: must differ from a")
        direction = _text(i, "direction", entry["direction"], DIRECTIONS[estimand])
        claims.append(
            Claim(
                name=_text(i, "name", entry["name"]),
                estimand=estimand,
                a=a,
                b=b,
                direction=direction,
                groups=_groups(i, entry["groups"], datasets),
                family=_family(i, entry["family"]),
                gates=_gates(i, entry.get("gates"), algorithms),
                margin=_margin(i, entry, estimand, direction, legacy),
            )
        )
    names = [c.name for c in claims]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ValueError(f"{_where(i, 'name')}={name!r}: already used by another claim")
    families: dict[str, list[int]] = {}
    for i, c in enumerate(claims):
        families.setdefault(c.family.name, []).append(i)
    for name, members in families.items():
        sizes = {claims[i].family.size for i in members}
        if len(sizes) > 1:
            raise ValueError(
                f"{_where(members[-1], 'family.size')}: family {name!r} is declared with sizes "
                f"{sorted(sizes)}; one family has one size"
            )
        if sizes.pop() < len(members):
            raise ValueError(
                f"{_where(members[-1], 'family.size')}={claims[members[-1]].family.size}: family "
                f"{name!r} has {len(members)} claims here; its size counts every member"
            )
    return claims


def claims_from_param(value: str | None) -> list[Claim] | None:
    """The claims a run logged (its ``claims`` param, the node as JSON); None when the run
    logged none (a store written before claims were declared). Claims logged before margins
    existed (a ``>=``/``<=`` without one) are read as declared: tested as superiority, and their
    sentence says so; no margin is added after the run."""
    if value is None:
        return None
    return parse_claims(json.loads(value), legacy=True)
