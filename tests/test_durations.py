# -*- test-case-name: tests.test_durations -*-
"""
Tests for :mod:`vmservice.durations`: reading and writing Go duration strings.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.durations import format_go_duration, parse_go_duration


class ParseGoDurationTests(SynchronousTestCase):
    """
    Tests for :func:`parse_go_duration`.
    """

    def test_examples(self) -> None:
        """
        Every unit and the combined forms Go accepts give the number of
        seconds they mean.
        """
        examples = {
            "30s": 30.0,
            "2m": 120.0,
            "1m30s": 90.0,
            "2m0s": 120.0,
            "1.5h": 5400.0,
            "300ms": 0.3,
            "1h2m3.5s": 3723.5,
            "5ns": 5e-9,
            "7us": 7e-6,
            "7\u00b5s": 7e-6,
            "7\u03bcs": 7e-6,
            "0": 0.0,
            "0s": 0.0,
            "+5s": 5.0,
            ".5s": 0.5,
            "5.s": 5.0,
            "1h1h": 7200.0,
            "100ms": 0.1,
        }
        for text, seconds in examples.items():
            self.assertEqual(parse_go_duration(text), seconds, text)

    def test_errors(self) -> None:
        """
        Empty, negative and malformed strings raise ``ValueError`` whose
        message quotes the text and names the problem.
        """
        examples = {
            "": "invalid duration '' (empty; expected e.g. 30s, 2m, 1h30m or 300ms)",
            "-1s": "invalid duration '-1s' (negative durations are not allowed)",
            "5": "invalid duration '5' (missing unit; expected e.g. 30s, 2m, 1h30m or 300ms)",
            "1m5": "invalid duration '1m5' (missing unit; expected e.g. 30s, 2m, 1h30m or 300ms)",
            "5x": "invalid duration '5x' (unknown unit 'x'; units are ns, us, \u00b5s, ms, s, m, h)",
            "5 s": "invalid duration '5 s' (unknown unit ' s'; units are ns, us, \u00b5s, ms, s, m, h)",
            "1h-2m": "invalid duration '1h-2m' (unknown unit 'h-'; units are ns, us, \u00b5s, ms, s, m, h)",
            "s": "invalid duration 's' (expected a number; expected e.g. 30s, 2m, 1h30m or 300ms)",
            ".s": "invalid duration '.s' (expected a number; expected e.g. 30s, 2m, 1h30m or 300ms)",
            " 5s": "invalid duration ' 5s' (expected a number; expected e.g. 30s, 2m, 1h30m or 300ms)",
            "1..5s": "invalid duration '1..5s' (missing unit; expected e.g. 30s, 2m, 1h30m or 300ms)",
            "+": "invalid duration '+' (empty; expected e.g. 30s, 2m, 1h30m or 300ms)",
        }
        for text, message in examples.items():
            error = self.assertRaises(ValueError, parse_go_duration, text)
            self.assertEqual(str(error), message, text)

    def test_notString(self) -> None:
        """
        A value that is not a string (such as a bare YAML integer) is refused
        with ``ValueError`` rather than ``TypeError``, so callers need one
        ``except`` clause.
        """
        error = self.assertRaises(ValueError, parse_go_duration, 30)  # type: ignore[no-untyped-call]
        self.assertIn("not a string", str(error))

    @given(
        hours=st.integers(0, 1000),
        minutes=st.integers(0, 59),
        seconds=st.integers(0, 59),
        millis=st.integers(0, 999),
    )
    def test_componentsAdd(self, hours: int, minutes: int, seconds: int, millis: int) -> None:
        """
        A string of ``h``, ``m``, ``s`` and ``ms`` components parses to the sum
        of its parts.
        """
        text = f"{hours}h{minutes}m{seconds}s{millis}ms"
        expected = (hours * 3600 + minutes * 60 + seconds) + millis / 1000
        self.assertAlmostEqual(parse_go_duration(text), expected, places=9)


class FormatGoDurationTests(SynchronousTestCase):
    """
    Tests for :func:`format_go_duration`.
    """

    def test_examples(self) -> None:
        """
        Durations are spelled as Go's ``Duration.String`` spells them.
        """
        examples = {
            0.0: "0s",
            5e-9: "5ns",
            1.5e-6: "1.5\u00b5s",
            0.3: "300ms",
            0.0015: "1.5ms",
            1.5: "1.5s",
            30.0: "30s",
            90.0: "1m30s",
            120.0: "2m0s",
            3600.0: "1h0m0s",
            3723.5: "1h2m3.5s",
            259200.25: "72h0m0.25s",
        }
        for seconds, text in examples.items():
            self.assertEqual(format_go_duration(seconds), text, seconds)

    def test_refused(self) -> None:
        """
        Negative and non-finite values cannot be formatted.
        """
        for value in (-1.0, float("inf"), float("nan")):
            self.assertRaises(ValueError, format_go_duration, value)

    @given(nanoseconds=st.integers(0, 2**52 - 1))
    def test_roundTrip(self, nanoseconds: int) -> None:
        """
        Formatting any whole number of nanoseconds as Go would and parsing the
        result gives back the same number of seconds.
        """
        seconds = nanoseconds / 10**9
        self.assertEqual(parse_go_duration(format_go_duration(seconds)), seconds)
