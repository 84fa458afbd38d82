"""Tables of calls and the exact error each raises: a user reads the message to fix a config or a
call, so the tests compare it whole, not by a fragment (mutation testing found fragments let a
changed message through, docs/mutation.md)."""

from __future__ import annotations

from collections.abc import Callable

import pytest


def message_cases(table: list[tuple[Callable[[], object], type[BaseException], str]]):
    """Parametrise a test over ``(call, kind, message)`` rows, each named by its message."""
    return pytest.mark.parametrize("call, kind, message", table, ids=[m[:60] for _, _, m in table])


def assert_raises_exactly(call: Callable[[], object], kind: type[BaseException], message: str):
    """``call()`` raises ``kind`` whose text is exactly ``message``."""
    with pytest.raises(kind) as err:
        call()
    assert str(err.value) == message
