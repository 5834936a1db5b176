# -*- test-case-name: tests.config.test_units -*-
"""
Sizes as the configuration writes them: ``2G``, ``512M``, ``1.5G``, ``4096``
(binary multiples, as in Slicer and QEMU), read and written back.
"""

from __future__ import annotations

import re

__all__ = ["GiB", "KiB", "MiB", "SIZE_HINT", "TiB", "format_size", "parse_size"]

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4

_SIZE = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]+)?)\s*(?:(?P<unit>[KMGTkmgt])(?:i?B)?|B)?")
_SIZE_UNITS = {"k": KiB, "m": MiB, "g": GiB, "t": TiB}
#: What a size looks like, for messages.
SIZE_HINT = "expected e.g. 2G, 512M or bytes"


def parse_size(text: str) -> int:
    """
    Parse a size such as ``2G``, ``512M``, ``1.5G``, ``2GiB`` or ``4096``.

    Units are binary multiples, whatever their spelling: ``K``, ``M``, ``G``
    and ``T`` (either case), optionally followed by ``B`` or ``iB``, so
    ``1G``, ``1GB`` and ``1GiB`` all mean 1073741824 bytes, as in Slicer and
    QEMU. A bare number, or a number followed by ``B``, is bytes. A decimal
    fraction is accepted when it comes to a whole number of bytes (``1.5G``
    is, ``0.1K`` is not).

    :param text: The size as written in the configuration.
    :return: The size in bytes.
    :raises ValueError: With a one-line message quoting ``text``.
    """
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"bad size {text!r} ({SIZE_HINT})")
    unit: str | None = match.group("unit")
    multiplier = _SIZE_UNITS[unit.lower()] if unit else 1
    number: str = match.group("number")
    whole, _, fraction = number.partition(".")
    numerator = int(whole + fraction) * multiplier
    denominator: int = 10 ** len(fraction)
    if numerator % denominator:
        raise ValueError(f"bad size {text!r} (not a whole number of bytes)")
    return numerator // denominator


def format_size(size: int) -> str:
    """
    Format a byte count the short way this configuration writes it.

    The largest binary unit that divides ``size`` exactly is used (``2G``,
    ``512M``); otherwise the plain number of bytes. :func:`parse_size` reads
    the result back to the same number.

    :param size: A non-negative number of bytes.
    :raises ValueError: If ``size`` is negative.
    """
    if size < 0:
        raise ValueError(f"cannot format negative size {size}")
    if size:
        for suffix, multiplier in (("T", TiB), ("G", GiB), ("M", MiB), ("K", KiB)):
            if size % multiplier == 0:
                return f"{size // multiplier}{suffix}"
    return str(size)
