# -*- test-case-name: tests.cluster.test_pod_spec -*-
"""
Kubernetes resource quantities (``500m``, ``2``, ``512Mi``, ``1G``,
``1e9``) as exact numbers (pure).  A quantity is bounded in length and in
size, so a hostile pod cannot make the daemon compute with huge numbers.
"""

from __future__ import annotations

import re
from fractions import Fraction

#: The most characters of a quantity read.
MAX_QUANTITY = 64
#: The largest quantity taken (2^63: Kubernetes' own bound).
MAX_VALUE = Fraction(2**63)

_QUANTITY = re.compile(r"\+?(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
                       r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<decimal>[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]{1,2}))?")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


class QuantityError(ValueError):
    """Not a quantity this daemon takes."""


def parse_quantity(text: str) -> Fraction:
    """
    ``text`` as an exact, non-negative number.

    :raise QuantityError: it is not a quantity, is negative, or larger than :data:`MAX_VALUE`.
    """
    if len(text) > MAX_QUANTITY:
        raise QuantityError(f"a quantity has at most {MAX_QUANTITY} characters")
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(f"{text!r} is not a quantity (e.g. 500m, 2, 512Mi, 1G)")
    value = Fraction(match["number"])
    if match["binary"]:
        value *= _BINARY[match["binary"]]
    elif match["decimal"] or match["exponent"]:
        value *= Fraction(10) ** (_DECIMAL[match["decimal"]] if match["decimal"] else int(match["exponent"]))
    if value > MAX_VALUE:
        raise QuantityError(f"{text!r} is too large")
    return value


__all__ = ["MAX_QUANTITY", "QuantityError", "parse_quantity"]
