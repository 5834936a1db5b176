# -*- test-case-name: tests.cluster.test_capacity -*-
"""
:class:`Backoff`: capped exponential back-off with jitter, for calls of the
API that failed (a registration, a watch); the random source is passed in,
so tests decide it.
"""

from __future__ import annotations

from typing import Callable


class Backoff:
    """
    The delays before the next attempts: ``initial``, then ``factor`` times
    the one before, at most ``cap``; each drawn from its upper half
    (``delay * (0.5 + random() / 2)``) so that many nodes do not come back
    at once.

    :param random: gives a number in [0, 1).
    """

    def __init__(self, random: Callable[[], float], initial: float = 1.0, cap: float = 30.0,
                 factor: float = 2.0) -> None:
        self._random, self._initial, self._cap, self._factor = random, initial, cap, factor
        self._next = initial

    def delay(self) -> float:
        """The delay before the next attempt; the one after is longer (up to the cap)."""
        delay = self._next
        self._next = min(self._cap, self._next * self._factor)
        return delay * (0.5 + min(max(self._random(), 0.0), 1.0) / 2)

    def reset(self) -> None:
        """An attempt went through: the next failure waits ``initial`` again."""
        self._next = self._initial


__all__ = ["Backoff"]
