# -*- test-case-name: tests.cli.test_main -*-
"""
The types of ``vmctl``'s option values: each reads one word and raises
:class:`argparse.ArgumentTypeError` with the reason (a usage error, exit 2).
"""

from __future__ import annotations

import argparse

from ..config import parse_size
from ..durations import parse_go_duration

__all__ = ["duration", "env", "mode", "non_negative_int", "positive_float", "positive_int", "size", "uint32"]


def positive_float(text: str) -> float:
    """A number greater than 0 (and finite)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _whole(text: str, low: int, high: int | None, bounds: str) -> int:
    """A decimal integer from ``low`` to ``high`` (no upper bound: ``None``); ``bounds`` says them."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < low or (high is not None and value > high):
        raise argparse.ArgumentTypeError(f"{bounds}: {text!r}")
    return value


def positive_int(text: str) -> int:
    """A whole number from 1."""
    return _whole(text, 1, None, "must be positive")


def non_negative_int(text: str) -> int:
    """A whole number from 0."""
    return _whole(text, 0, None, "must not be negative")


def size(text: str) -> int:
    """A size such as ``512M`` or ``1G``, in bytes, greater than 0."""
    try:
        value = parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def duration(text: str) -> str:
    """A Go duration, checked here but sent as written (the daemon parses it)."""
    try:
        seconds = parse_go_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return text


def uint32(text: str) -> int:
    """A user or group id: a whole number from 0 to 2**32-1."""
    return _whole(text, 0, 0xFFFFFFFF, "must be 0 to 4294967295")


def mode(text: str) -> str:
    """An octal permission mode (``0755``, ``755``), sent as four octal digits."""
    try:
        value = int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an octal mode: {text!r}") from None
    if not 0 <= value <= 0o7777:
        raise argparse.ArgumentTypeError(f"not a permission mode: {text!r}")
    return f"{value:04o}"


def env(text: str) -> str:
    """An environment variable as ``KEY=VALUE`` (a name before the ``=``), kept as written."""
    name, equals, _ = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"not KEY=VALUE: {text!r}")
    return text
