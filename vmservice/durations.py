# -*- test-case-name: tests.test_durations -*-
"""
Go-style duration strings (``30s``, ``2m0s``, ``1h2m3.5s``, ``300ms``).

The API this service implements was first written in Go, so its clients send
timeouts such as ``wait_timeout=5m`` in Go's ``time.ParseDuration`` syntax.
This module reads and writes that syntax so that scripts written against the
original service keep working unchanged.

Arithmetic is done on exact fractions and only the final result becomes a
float, so ``1h2m3.5s`` is exactly ``3723.5`` and ``100ms`` is the float
nearest to 0.1 (not an accumulated rounding error).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = ["format_go_duration", "parse_go_duration"]

#: Nanoseconds per unit, as Go's ``time`` package spells the units. Both the
#: micro sign (U+00B5) and the Greek mu (U+03BC) are accepted, as in Go.
_UNITS: dict[str, int] = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,
    "\u03bcs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}

#: One ``<number><unit>`` component; the unit is everything up to the next
#: digit or dot, like Go's parser, so an unknown unit is reported whole.
_COMPONENT = re.compile(r"(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?(?P<unit>[^0-9.]*)")

_EXPECTED = "expected e.g. 30s, 2m, 1h30m or 300ms"


def parse_go_duration(text: str) -> float:
    """
    Parse a Go duration string into seconds.

    The syntax is Go's ``time.ParseDuration``: one or more decimal numbers,
    each with an optional fraction and a unit (``ns``, ``us``/``µs``, ``ms``,
    ``s``, ``m``, ``h``), e.g. ``1m30s`` or ``1.5h``; a bare ``0`` is also
    accepted. Unlike Go, a negative duration is refused, because every
    duration this service takes is a timeout or an interval.

    :param text: The duration as sent by a client or written in a file.
    :return: The duration in seconds.
    :raises ValueError: If ``text`` is empty, malformed, uses an unknown unit
        or is negative; the message quotes the text and says what is wrong.
    """
    if not isinstance(text, str):
        raise ValueError(f"invalid duration {text!r} (not a string; {_EXPECTED})")
    rest = text
    if rest.startswith("-"):
        raise ValueError(f"invalid duration {text!r} (negative durations are not allowed)")
    if rest.startswith("+"):
        rest = rest[1:]
    if rest == "0":
        return 0.0
    if rest == "":
        raise ValueError(f"invalid duration {text!r} (empty; {_EXPECTED})")
    total = Fraction(0)
    position = 0
    while position < len(rest):
        match = _COMPONENT.match(rest, position)
        # Every part of the pattern is optional, so it always matches; an
        # empty number is caught below, which also guarantees progress.
        assert match is not None
        whole, fraction, unit = match.group("int"), match.group("frac"), match.group("unit")
        if not whole and not fraction:
            raise ValueError(f"invalid duration {text!r} (expected a number; {_EXPECTED})")
        if not unit:
            raise ValueError(f"invalid duration {text!r} (missing unit; {_EXPECTED})")
        if unit not in _UNITS:
            raise ValueError(
                f"invalid duration {text!r} (unknown unit {unit!r}; "
                "units are ns, us, \u00b5s, ms, s, m, h)"
            )
        number = Fraction(int(whole or "0"))
        if fraction:
            number += Fraction(int(fraction), 10 ** len(fraction))
        total += number * _UNITS[unit]
        position = match.end()
    return float(total / _UNITS["s"])


def _decimal(value: int, digits: int) -> str:
    """
    Render ``value / 10**digits`` in decimal without trailing zeros.

    :param value: A non-negative integer count of small units.
    :param digits: How many of its trailing decimal digits are the fraction.
    """
    whole, rest = divmod(value, 10**digits)
    if rest == 0:
        return str(whole)
    return f"{whole}.{rest:0{digits}d}".rstrip("0")


def format_go_duration(seconds: float) -> str:
    """
    Format seconds the way Go's ``time.Duration.String`` does.

    Responses and logs that echo a timeout back then read as a Go client
    expects: ``0s``, ``300ms``, ``1.5µs``, ``2m0s``, ``1h2m3.5s``. The value is
    first rounded to whole nanoseconds, Go's resolution.

    :param seconds: A non-negative, finite number of seconds.
    :return: The Go spelling, which :func:`parse_go_duration` reads back.
    :raises ValueError: If ``seconds`` is negative or not finite.
    """
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"cannot format duration {seconds!r} (must be finite and >= 0)")
    nanoseconds = round(Fraction(seconds) * _UNITS["s"])
    if nanoseconds == 0:
        return "0s"
    if nanoseconds < _UNITS["us"]:
        return f"{nanoseconds}ns"
    if nanoseconds < _UNITS["ms"]:
        return _decimal(nanoseconds, 3) + "\u00b5s"
    if nanoseconds < _UNITS["s"]:
        return _decimal(nanoseconds, 6) + "ms"
    text = _decimal(nanoseconds % _UNITS["m"], 9) + "s"
    minutes = nanoseconds // _UNITS["m"]
    if minutes == 0:
        return text
    hours, minutes = divmod(minutes, 60)
    if hours == 0:
        return f"{minutes}m{text}"
    return f"{hours}h{minutes}m{text}"
