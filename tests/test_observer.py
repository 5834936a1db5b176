# -*- test-case-name: tests.test_observer -*-
"""Tests for :mod:`vmservice.observer`."""

from __future__ import annotations

from twisted.internet.defer import CancelledError
from twisted.trial.unittest import SynchronousTestCase

from vmservice.observer import OneShotObserver


class OneShotObserverTests(SynchronousTestCase):
    def test_every_waiter_and_late_comers_get_the_result(self) -> None:
        """Waiters before the event and callers after it all get the result, each in its own Deferred."""
        observer: OneShotObserver[int] = OneShotObserver()
        first, second = observer.when_fired(), observer.when_fired()
        self.assertIsNot(first, second)
        self.assertNoResult(first)
        observer.fire(7)
        observer.fire(8)
        self.assertEqual([self.successResultOf(first), self.successResultOf(second)], [7, 7])
        self.assertEqual(self.successResultOf(observer.when_fired()), 7)
        self.assertTrue(observer.fired)

    def test_cancel_is_private(self) -> None:
        """Cancelling one waiter leaves the others waiting, and the event does not reach it."""
        observer: OneShotObserver[int] = OneShotObserver()
        gone, staying = observer.when_fired(), observer.when_fired()
        gone.cancel()
        self.failureResultOf(gone, CancelledError)
        self.assertNoResult(staying)
        observer.fire(1)
        self.assertEqual(self.successResultOf(staying), 1)

    def test_error(self) -> None:
        """A failed event fails every waiter and every later caller."""
        observer: OneShotObserver[int] = OneShotObserver()
        waiting = observer.when_fired()
        observer.error(ValueError("no"))
        self.failureResultOf(waiting, ValueError)
        self.failureResultOf(observer.when_fired(), ValueError)
