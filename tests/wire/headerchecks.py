"""
What the tests of :mod:`vmservice.wire.openheaders` share: the refusal a
reader gives, a header as the peer reads it, the strategies of plain fields,
and the check that a reader returns a record or raises ``BadHeader``.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable

from hypothesis import strategies as st

from vmservice.wire.openheaders.fields import BadHeader

texts = st.text(max_size=20)
ids = st.integers(min_value=0, max_value=2**32 - 1)
#: Strings with lone surrogates too (JSON's ``\\ud800`` escapes decode to them).
any_texts = st.text(st.characters(blacklist_categories=()), max_size=10)


def refusal(read: Callable[[object], object], header: object) -> str:
    """The message ``read`` refuses ``header`` with (an AssertionError if it takes it)."""
    try:
        read(header)
    except BadHeader as e:
        return str(e)
    raise AssertionError(f"{header!r} was taken")


def through_json(value: dict[str, Any]) -> Any:
    """``value`` as the peer reads it: encoded and decoded."""
    return json.loads(json.dumps(value))


def read_all(readers: Iterable[Callable[[object], object]], value: object) -> None:
    """Each of ``readers`` returns a record for ``value`` or raises ``BadHeader``; anything else fails the test."""
    for read in readers:
        try:
            read(value)
        except BadHeader:
            pass


__all__ = ["any_texts", "ids", "read_all", "refusal", "texts", "through_json"]
