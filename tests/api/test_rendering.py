"""Tests for :mod:`vmservice.api.rendering`: how values look on the wire."""

from __future__ import annotations

from datetime import datetime, timezone

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.api.rendering import format_mode, rfc3339


class ModeTests(SynchronousTestCase):
    """The mode text shared by fs and cp (format_mode)."""

    @given(st.integers(0, 0o7777))
    def test_format_mode_round_trip(self, bits: int) -> None:
        """Mode text is at least four octal digits and parses back to the same bits."""
        text = format_mode(bits)
        self.assertGreaterEqual(len(text), 4)
        self.assertEqual(int(text, 8), bits)

    def test_examples(self) -> None:
        """Usual modes look as ls users expect; file-type bits are dropped."""
        self.assertEqual(format_mode(0o644), "0644")
        self.assertEqual(format_mode(0o4755), "4755")
        self.assertEqual(format_mode(0o40755), "0755")


class TimeTests(SynchronousTestCase):
    def test_rfc3339(self) -> None:
        """Times are UTC with a Z and only the fraction digits they need."""
        self.assertEqual(rfc3339(datetime(2026, 11, 22, 10, 59, 26, tzinfo=timezone.utc)), "2026-11-22T10:59:26Z")
        self.assertEqual(rfc3339(datetime(2026, 11, 22, 10, 59, 26, 500000, tzinfo=timezone.utc)),
                         "2026-11-22T10:59:26.5Z")
