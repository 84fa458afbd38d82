"""The config kit: one way to declare a setting and to check a value against it, in every layer.

A config dataclass declares each field with :func:`config_field` (its default, a help string and
numeric bounds); :func:`check_fields` then checks an instance's values against their annotations
and bounds (``AlgorithmConfig`` and ``TrainerConfig`` call it from ``__post_init__``), and
:func:`config_from_node` builds such a dataclass from a config node, refusing a key it does not
declare (:func:`check_keys`). A validator that reads a config node without a dataclass checks one
value with :func:`config_value`, which takes the same annotation and bounds. Every failure raises
:class:`ConfigError` naming the key, the value and what is allowed.

It lives in ``algorithms``, the lowest layer, and imports nothing of the project, so that every
layer (the algorithms' hyper-parameters, the trainer's settings, the suite's plan) checks its
settings with it from below.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import re
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

__all__ = [
    "BOUNDS",
    "ConfigError",
    "allowed",
    "check_bounds",
    "check_fields",
    "check_keys",
    "check_type",
    "config_field",
    "config_from_node",
    "config_value",
    "field_types",
]


class ConfigError(ValueError):
    """A setting is invalid; the message names the field, the value and what is allowed."""


#: ``config_field``'s bound keywords: the symbol a message shows and the test it stands for.
BOUNDS: dict[str, tuple[str, Callable[[float, float], bool]]] = {
    "ge": (">=", operator.ge),
    "gt": (">", operator.gt),
    "le": ("<=", operator.le),
    "lt": ("<", operator.lt),
}


def config_field(
    default: Any,
    help: str,  # shadows the builtin on purpose: it is the metadata key every field carries
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
) -> Any:
    """A dataclass field with its help string and optional numeric bounds.

    The bounds are checked by :func:`check_fields` (``None`` values of optional fields are
    exempt), so a field's range is declared next to it rather than in a hand-written ``if``
    further down.
    """
    metadata: dict[str, Any] = {"help": help}
    metadata.update(_bounds(ge=ge, gt=gt, le=le, lt=lt))
    return dataclasses.field(default=default, metadata=metadata)


def _bounds(**given: float | None) -> dict[str, float]:
    return {key: bound for key, bound in given.items() if bound is not None}


_HINTS: dict[type, dict[str, Any]] = {}


def field_types(cls: type) -> dict[str, Any]:
    """A config dataclass's resolved field annotations, read once per class."""
    if cls not in _HINTS:
        try:
            _HINTS[cls] = get_type_hints(cls)
        except NameError as e:  # e.g. an alias defined inside a function
            raise TypeError(
                f"cannot resolve the field annotations of {cls.__qualname__} ({e}); define the "
                "config and the types it names at module level"
            ) from e
    return _HINTS[cls]


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def check_type(key: str, value: Any, tp: Any) -> Any:
    """Check ``value`` against the annotation ``tp``; return it (ints widened to float).

    Raises :class:`ConfigError` naming ``key`` and the type it expects. ``Any``, and annotations
    this does not know how to check (e.g. a user's generic), are trusted.
    """
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return check_type(key, value, arg)
            except ConfigError:
                continue
        raise ConfigError(f"{key}={value!r} is invalid: expected {_type_name(tp)}")
    if origin is Literal:
        choices = get_args(tp)
        if any(value == a and type(value) is type(a) for a in choices):
            return value
        raise ConfigError(
            f"{key}={value!r} is invalid: must be one of {', '.join(map(repr, choices))}"
        )
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise ConfigError(f"{key}={value!r} is invalid: must be a finite number")
            return float(value)
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is not Any and isinstance(tp, type):
        if isinstance(value, tp):
            return value
    else:
        return value
    raise ConfigError(
        f"{key}={value!r} is invalid: expected {_type_name(tp)}, got {type(value).__name__}"
    )


def allowed(bounds: Mapping[str, Any], nullable: bool = False) -> str:
    """Declared bounds as a reader writes them: ``>= 1``, ``in (0, 1]``, ``... or null``; empty
    without bounds."""
    low = next((k for k in ("ge", "gt") if k in bounds), None)
    high = next((k for k in ("le", "lt") if k in bounds), None)
    if low and high:
        text = (
            f"in {'[' if low == 'ge' else '('}{bounds[low]:g}, "
            f"{bounds[high]:g}{']' if high == 'le' else ')'}"
        )
    elif low or high:
        key = low or high
        text = f"{BOUNDS[key][0]} {bounds[key]:g}"  # type: ignore[index]
    else:
        return ""
    return f"{text} or null" if nullable else text


def check_bounds(
    key: str,
    value: Any,
    bounds: Mapping[str, Any],
    *,
    nullable: bool = False,
    given: Any = None,
    note: str = "",
) -> None:
    """Raise :class:`ConfigError` if the number ``value`` breaks ``bounds`` (``ge``/``gt``/``le``/
    ``lt``), naming ``key``, the value as ``given`` (``value`` itself by default), the allowed
    range and an optional ``note`` (a field's help). ``None``, bools and non-numbers pass: the
    type check owns them."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return
    if all(holds(value, bounds[k]) for k, (_, holds) in BOUNDS.items() if k in bounds):
        return
    shown = value if given is None else given
    raise ConfigError(
        f"{key}={shown!r} must be {allowed(bounds, nullable)}" + (f". {note}" if note else "")
    )


def check_fields(config: Any, prefix: str) -> None:
    """Check every field of the dataclass instance ``config`` against its annotation and its
    declared bounds, storing the checked value (ints widened to float); errors name
    ``<prefix>.<field>`` and end with the field's help."""
    hints = field_types(type(config))
    for f in dataclasses.fields(config):
        given, tp = getattr(config, f.name), hints[f.name]
        value = check_type(f"{prefix}.{f.name}", given, tp)
        object.__setattr__(config, f.name, value)
        check_bounds(
            f"{prefix}.{f.name}",
            value,
            f.metadata,
            nullable=type(None) in get_args(tp),
            given=given,
            note=f.metadata.get("help", ""),
        )


def check_keys(prefix: str, node: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """Refuse a key of ``node`` that ``allowed`` does not name, before its value is read: a
    misspelt setting would otherwise keep its default without a word."""
    known = list(allowed)
    unknown = sorted(set(node) - set(known))
    if unknown:
        raise ConfigError(f"{prefix}.{unknown[0]}: unknown key; allowed: {known}")


_C = TypeVar("_C")


def config_from_node(cls: type[_C], node: Mapping[str, Any], prefix: str) -> _C:
    """The config dataclass ``cls`` from the node at ``prefix``: its keys checked against the
    fields ``cls`` declares, then every value against its annotation and bounds; a field the node
    leaves out keeps its default."""
    check_keys(prefix, node, [f.name for f in dataclasses.fields(cls) if f.init])  # type: ignore[arg-type]
    config = cls(**node)
    check_fields(config, prefix)
    return config


_KIND = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
_WHOLE = re.compile(r"[+-]?\d+")


def _from_text(value: Any, tp: Any) -> Any:
    """Text that is a number (an environment variable's, or a quoted override) as that number,
    when ``tp`` takes one; anything else as it is."""
    if not isinstance(value, str):
        return value
    kinds = set(get_args(tp)) or {tp}
    text = value.strip()
    if int in kinds and _WHOLE.fullmatch(text):
        return int(text)
    if float in kinds:
        try:
            return float(text)
        except ValueError:
            return value
    return value


def config_value(
    key: str,
    value: Any,
    tp: Any,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
) -> Any:
    """One value of a config node, checked as :func:`check_fields` checks a declared field:
    against the annotation ``tp`` (``int``, ``float``, ``X | None``, a ``Literal``...) and the
    bounds; text that is a number counts as that number. Returns the value (ints widened to
    float for ``float``); a ConfigError says ``<key>=<value>: must be <kind> <bounds>``."""
    bounds = _bounds(ge=ge, gt=gt, le=le, lt=lt)
    nullable = type(None) in get_args(tp)
    base = next((a for a in get_args(tp) if a is not type(None)), tp) if nullable else tp
    try:
        checked = check_type(key, _from_text(value, tp), tp)
    except ConfigError as e:
        if base not in _KIND:  # a Literal or a class: check_type's own message names it
            raise
        finite = "finite " if "finite" in str(e) else ""
        kind = _KIND[base].replace("a number", f"a {finite}number")
        what = " ".join(filter(None, [kind, allowed(bounds)])) + (" or null" if nullable else "")
        raise ConfigError(f"{key}={value!r}: must be {what}") from None
    check_bounds(key, checked, bounds, nullable=nullable, given=value)
    return checked
