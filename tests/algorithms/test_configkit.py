"""The config kit (``algorithms/configkit.py``): a value checked against an annotation and
declared bounds, each refusal naming the key, the value as given and what is allowed; cases worked
by hand."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pytest

from algorithms.configkit import (
    ConfigError,
    allowed,
    check_bounds,
    check_fields,
    config_field,
    config_value,
)


@pytest.mark.parametrize(
    ("bounds", "nullable", "text"),
    [
        ({"ge": 1}, False, ">= 1"),
        ({"gt": 0}, True, "> 0 or null"),
        ({"le": 10}, False, "<= 10"),
        ({"lt": 1.0}, False, "< 1"),
        ({"ge": 0, "le": 1}, False, "in [0, 1]"),
        ({"gt": 0, "lt": 1}, False, "in (0, 1)"),
        ({"gt": 0, "le": 1}, True, "in (0, 1] or null"),
        ({"ge": 0.5, "lt": 2.5}, False, "in [0.5, 2.5)"),
        ({}, False, ""),
        ({}, True, ""),
    ],
)
def test_allowed_reads_as_a_reader_writes_it(bounds, nullable, text):
    assert allowed(bounds, nullable) == text


@pytest.mark.parametrize(
    ("value", "tp", "bounds", "expected"),
    [
        (3, int, {"ge": 0}, 3),
        (0, int, {"ge": 0}, 0),
        ("2", int, {"ge": 1}, 2),  # an environment variable's text
        (" 7 ", int, {}, 7),
        ("-1", int, {}, -1),
        (64, float, {"gt": 0}, 64.0),
        ("64", float, {"gt": 0}, 64.0),
        ("1e-5", float, {"gt": 0}, 1e-5),
        (None, float | None, {"gt": 0}, None),
        (0.5, float | None, {"gt": 0}, 0.5),
        ("auto", Literal["auto", "never"], {}, "auto"),
        (True, bool, {}, True),
    ],
)
def test_a_value_that_fits_is_returned_converted(value, tp, bounds, expected):
    got = config_value("k", value, tp, **bounds)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(
    ("value", "tp", "bounds", "message"),
    [
        (-1, int, {"ge": 0}, "seed=-1 must be >= 0"),
        (0, int, {"ge": 1}, "seed=0 must be >= 1"),
        ("abc", int, {"ge": 0}, "seed='abc': must be an integer >= 0"),
        (1.5, int, {"ge": 1}, "seed=1.5: must be an integer >= 1"),
        ("2.0", int, {}, "seed='2.0': must be an integer"),
        (True, int, {"ge": 1}, "seed=True: must be an integer >= 1"),
        (1e9, int, {}, "seed=1000000000.0: must be an integer"),
        ("abc", float, {"gt": 0}, "seed='abc': must be a number > 0"),
        (True, float, {"gt": 0}, "seed=True: must be a number > 0"),
        (float("inf"), float, {"gt": 0}, "seed=inf: must be a finite number > 0"),
        ("nan", float, {}, "seed='nan': must be a finite number"),
        (0, float, {"gt": 0}, "seed=0 must be > 0"),
        (2, float, {"ge": 0, "le": 1}, "seed=2 must be in [0, 1]"),
        ("abc", float | None, {"gt": 0}, "seed='abc': must be a number > 0 or null"),
        ("x", int | None, {}, "seed='x': must be an integer or null"),
        (0, float | None, {"gt": 0}, "seed=0 must be > 0 or null"),
        ("maybe", bool, {}, "seed='maybe': must be true or false"),
        ("x", Literal["a", "b"], {}, "seed='x' is invalid: must be one of 'a', 'b'"),
    ],
)
def test_a_value_that_does_not_fit_is_named_with_what_is_allowed(value, tp, bounds, message):
    with pytest.raises(ConfigError) as e:
        config_value("seed", value, tp, **bounds)
    assert str(e.value) == message


def test_check_bounds_names_the_value_as_given_and_a_note():
    check_bounds("k", None, {"ge": 1})  # None, bools and text are the type check's
    check_bounds("k", True, {"le": 0})
    check_bounds("k", "x", {"ge": 1})
    check_bounds("k", 1, {"ge": 1, "lt": 2})
    with pytest.raises(ConfigError) as e:
        check_bounds("k", 2.0, {"ge": 1, "lt": 2}, given=2, note="Why it matters.")
    assert str(e.value) == "k=2 must be in [1, 2). Why it matters."


@dataclass(frozen=True)
class _Settings:
    count: int = config_field(1, "How many.", ge=1)
    rate: float = config_field(0.5, "How fast.", gt=0, le=1)
    cap: int | None = config_field(None, "Most at once; null: no cap.", ge=1)
    anything: Any = config_field(None, "Trusted: checked elsewhere.")

    def __post_init__(self) -> None:
        check_fields(self, "settings")


def test_check_fields_checks_each_field_and_widens_ints():
    s = _Settings(count=3, rate=1, cap=None, anything=object())
    assert s.rate == 1.0 and type(s.rate) is float
    with pytest.raises(ConfigError, match=r"^settings\.count=0 must be >= 1\. How many\.$"):
        _Settings(count=0)
    with pytest.raises(ConfigError, match=r"^settings\.rate=2 must be in \(0, 1\]\. How fast\.$"):
        _Settings(rate=2)
    with pytest.raises(ConfigError, match=r"^settings\.cap=0 must be >= 1 or null\. Most"):
        _Settings(cap=0)
    with pytest.raises(ConfigError, match=r"^settings\.count='2' is invalid: expected int"):
        _Settings(count="2")  # a dataclass takes values, not text: only config_value converts
