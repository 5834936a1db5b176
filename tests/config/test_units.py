# -*- test-case-name: tests.config.test_units -*-
"""
Tests for :mod:`vmservice.config.units`: sizes read and written.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.config.parsing import GiB, MiB
from vmservice.config import format_size, parse_size


class SizeTests(SynchronousTestCase):
    """
    Tests for :func:`parse_size` and :func:`format_size`.
    """

    def test_examples(self) -> None:
        """
        Units are binary whatever the spelling; bare numbers are bytes.
        """
        examples = {
            "512M": 512 * MiB,
            "2G": 2 * GiB,
            "2g": 2 * GiB,
            "2GB": 2 * GiB,
            "2GiB": 2 * GiB,
            "1.5G": 3 * GiB // 2,
            "1T": 1024 * GiB,
            "4k": 4096,
            "4096": 4096,
            "4096B": 4096,
            " 2 G ": 2 * GiB,
            "0": 0,
        }
        for text, size in examples.items():
            self.assertEqual(parse_size(text), size, text)

    def test_errors(self) -> None:
        """
        Unknown units, signs, missing digits and fractions of a byte are refused.
        """
        for text in ("2X", "-1G", "G", "", "1.G", "2Gb", "2iB", "1e9", "0x10"):
            error = self.assertRaises(ValueError, parse_size, text)
            self.assertEqual(str(error), f"bad size {text!r} (expected e.g. 2G, 512M or bytes)")
        error = self.assertRaises(ValueError, parse_size, "1.5")
        self.assertEqual(str(error), "bad size '1.5' (not a whole number of bytes)")

    def test_format(self) -> None:
        """
        Sizes are written with the largest unit that divides them.
        """
        self.assertEqual(
            [format_size(size) for size in (0, 1, 1024, 1536, 512 * MiB, 2 * GiB, 3 * 1024 * GiB)],
            ["0", "1", "1K", "1536", "512M", "2G", "3T"],
        )
        self.assertRaises(ValueError, format_size, -1)

    @given(st.integers(min_value=0, max_value=2**64))
    def test_roundTrip(self, size: int) -> None:
        """
        Formatting a size and parsing it back gives the same number of bytes.
        """
        self.assertEqual(parse_size(format_size(size)), size)

    @given(
        st.integers(min_value=0, max_value=10**6),
        st.sampled_from([("K", 1024), ("M", MiB), ("G", GiB), ("T", 1024 * GiB)]),
        st.sampled_from(["", "B", "iB"]),
        st.booleans(),
    )
    def test_unitSpellings(self, number: int, unit: tuple[str, int], suffix: str, lower: bool) -> None:
        """
        ``<n><unit>``, ``<n><unit>B`` and ``<n><unit>iB`` in either case all
        mean ``n`` binary units.
        """
        letter, multiplier = unit
        text = f"{number}{letter.lower() if lower else letter}{suffix}"
        self.assertEqual(parse_size(text), number * multiplier)
