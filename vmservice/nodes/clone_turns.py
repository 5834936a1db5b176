# -*- test-case-name: tests.nodes.test_cloning -*-
"""
Turns for clones' guests: at most one clone per host CPU loads its state and
adopts its identity at a time.

A clone's load and adoption are its guest's work (under TCG, mostly
translating the guest's code anew), one vCPU busy for its length.  Clones
that all run it at once share the host's cores: four on two cores each get
half a core and *all* answer after about twice the work of one.  Taking
turns, two answer after the work of one and the other two after twice that:
the last answers no later (the same work on the same cores), the others
sooner.  A clone that waited :data:`LONGEST_WAIT` seconds for a turn goes
ahead without one (a guest that hangs in its adoption until its timeout
delays the others by that at most).
"""

from __future__ import annotations

import os

from twisted.internet.defer import CancelledError, DeferredSemaphore
from twisted.internet.interfaces import IReactorTime

#: Seconds a clone waits for a turn at most, then goes ahead without one.
LONGEST_WAIT = 2.0


class CloneTurns:
    """
    :param clock: times the longest wait.
    :param slots: clones at once; the host's CPUs when not given.
    """

    def __init__(self, clock: IReactorTime, slots: int | None = None) -> None:
        self._clock = clock
        self.slots = slots or os.cpu_count() or 1
        self._semaphore = DeferredSemaphore(self.slots)

    async def take(self) -> bool:
        """Wait for a turn (:data:`LONGEST_WAIT` at most): whether one was taken (then :meth:`give_back` it)."""
        turn = self._semaphore.acquire()
        timer = self._clock.callLater(LONGEST_WAIT, turn.cancel)
        try:
            await turn
        except CancelledError:
            return False
        if timer.active():
            timer.cancel()
        return True

    def give_back(self) -> None:
        """End a turn :meth:`take` gave."""
        self._semaphore.release()


__all__ = ["LONGEST_WAIT", "CloneTurns"]
