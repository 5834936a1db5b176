"""Tests for the CI summary line made from trial's result (tests/summary.py)."""

from twisted.trial.unittest import SynchronousTestCase

from tests.summary import summary


class SummaryTests(SynchronousTestCase):
    def test_passed(self) -> None:
        """A passing run gives its successes and no failures."""
        self.assertEqual(summary("...\nPASSED (successes=120)\n"), "120 passed, 0 failed")

    def test_failed(self) -> None:
        """Failures, errors and unexpected successes count as failed; skips are said."""
        text = "FAILED (failures=1, errors=2, unexpectedSuccesses=1, successes=40, skips=3, expectedFailures=1)\n"
        self.assertEqual(summary(text), "41 passed, 4 failed, 3 skipped")

    def test_none(self) -> None:
        """Output without a result line (trial crashed) gives None."""
        self.assertIsNone(summary("Traceback ...\n"))
