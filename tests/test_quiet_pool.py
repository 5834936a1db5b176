"""Tests for :mod:`vmservice.quiet_pool`."""

from __future__ import annotations

from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.client import HTTPConnectionPool

from vmservice.quiet_pool import QuietPool


class QuietPoolTests(SynchronousTestCase):
    def test_persistent_and_quiet(self) -> None:
        """Connections are kept for reuse, and their factory logs nothing (Twisted still names it ``_factory``)."""
        pool = QuietPool(MemoryReactorClock())
        self.assertIsInstance(pool, HTTPConnectionPool)
        self.assertTrue(pool.persistent)
        self.assertTrue(issubclass(pool._factory, HTTPConnectionPool._factory))
        self.assertFalse(pool._factory.noisy)
