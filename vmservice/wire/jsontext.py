# -*- test-case-name: tests.wire.test_jsontext -*-
"""
JSON text read and written with the interpreter's C accelerator (``_json``) alone.

``json`` compiles regular expressions as it is imported, so it brings ``re`` (and
``re`` brings ``enum``, ``functools``, ``copyreg``): a cold guest under TCG pays for
them on its way to its first answer (docs/performance.md, "The agent's imports").
:func:`loads` and :func:`dumps` are what ``json.loads`` and ``json.dumps`` do with the
C scanner and encoder that ``json`` itself uses, for the forms the codec and the
guest's start need: text in, compact text out.  Stdlib only: the guest imports this
module.
"""

from __future__ import annotations

from _json import make_encoder, make_scanner
from _json import encode_basestring, encode_basestring_ascii

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: What JSON counts as whitespace between values (``json.decoder.WHITESPACE``).
_WHITESPACE = " \t\n\r"

_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class JSONTextError(ValueError):
    """
    The text is not one JSON value (``json.loads`` raises its own
    :class:`ValueError` subclass, ``json.JSONDecodeError``, for the same texts, or
    for the errors the C scanner finds inside a value).
    """


class _ScannerContext:
    """
    The settings the C scanner reads from a ``json.JSONDecoder`` (its defaults).
    """

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__
    memo: dict[str, str] = {}


# typeshed types the scanner's context as a scanner; it is any object with these attributes.
_scan_once = make_scanner(_ScannerContext())  # type: ignore[arg-type]


def _skip_whitespace(text: str, index: int) -> int:
    end = len(text)
    while index < end and text[index] in _WHITESPACE:
        index += 1
    return index


def loads(text: str) -> Any:
    """
    The value of the JSON ``text``, as ``json.loads(text)`` gives it.

    :raises ValueError: if ``text`` is not one JSON value with only whitespace
        around it (:class:`JSONTextError`, or ``json.JSONDecodeError`` from the
        scanner).
    """
    start = _skip_whitespace(text, 0)
    try:
        value, end = _scan_once(text, start)
    except StopIteration as e:
        raise JSONTextError(f"expecting a value at {e.value}") from None
    if _skip_whitespace(text, end) != len(text):
        raise JSONTextError(f"extra data at {end}")
    return value


def _not_serializable(value: object) -> Any:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def dumps(value: object, *, ensure_ascii: bool = True, allow_nan: bool = True) -> str:
    """
    ``value`` as compact JSON text, as ``json.dumps(value, separators=(",", ":"),
    ensure_ascii=ensure_ascii, allow_nan=allow_nan)`` writes it.

    :raises TypeError: for a value JSON cannot carry.
    :raises ValueError: for a circular reference, or NaN or an infinity when
        ``allow_nan`` is false.
    """
    encode = make_encoder(
        {},
        _not_serializable,
        encode_basestring_ascii if ensure_ascii else encode_basestring,
        None,
        ":",
        ",",
        False,
        False,
        allow_nan,
    )
    return "".join(encode(value, 0))
