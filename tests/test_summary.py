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

    def test_runs_are_added(self) -> None:
        """The unit run's and the integration run's counts are added up."""
        text = "PASSED (successes=10)\n...\nFAILED (failures=1, successes=5, skips=2)\n"
        self.assertEqual(summary(text), "15 passed, 1 failed, 2 skipped")

    def test_failed_steps(self) -> None:
        """A step that failed beside the tests (mypy, fuzz) counts as a failure and is named."""
        self.assertEqual(summary("PASSED (successes=3)\n", ("mypy", "fuzz")), "3 passed, 2 failed (failed steps: mypy, fuzz)")
