# -*- test-case-name: tests.test_observer -*-
"""
A one-shot observer: many callers wait for one event, each with a Deferred of
its own (the shape of magic-wormhole's ``OneShotObserver``).

Handing out one shared Deferred lets the first caller's callbacks change
what the others see, and lets one caller's cancellation cancel everyone;
lists of waiters written by hand for each event get cancellation and
late-comers wrong in different ways.  Here each :meth:`OneShotObserver.when_fired`
caller gets its own Deferred, which it may cancel without touching the
others, and a caller that comes after the event gets the result at once.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from twisted.internet.defer import Deferred, fail, succeed
from twisted.python.failure import Failure

_T = TypeVar("_T")


class OneShotObserver(Generic[_T]):
    """One event (a result or a failure) and everyone who waits for it."""

    def __init__(self) -> None:
        self._waiters: list[Deferred[_T]] = []
        self._result: tuple[_T] | None = None
        self._failure: Failure | None = None

    @property
    def fired(self) -> bool:
        """Whether the event has happened."""
        return self._result is not None or self._failure is not None

    def when_fired(self) -> Deferred[_T]:
        """
        A new Deferred that fires with the event's result (at once if it has
        happened); cancelling it stops only this caller's wait.
        """
        if self._result is not None:
            return succeed(self._result[0])
        if self._failure is not None:
            return fail(self._failure)

        def cancel(waiter: Deferred[_T]) -> None:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

        waiter: Deferred[_T] = Deferred(cancel)
        self._waiters.append(waiter)
        return waiter

    def fire(self, result: _T) -> None:
        """The event happened with ``result``; later calls are ignored."""
        if self.fired:
            return
        self._result = (result,)
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.callback(result)

    def error(self, reason: Failure | BaseException) -> None:
        """The event failed with ``reason``; later calls are ignored."""
        if self.fired:
            return
        self._failure = reason if isinstance(reason, Failure) else Failure(reason)
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.errback(self._failure)


__all__ = ["OneShotObserver"]
