# -*- test-case-name: tests.nodes.test_fleet,tests.nodes.test_lifecycle -*-
"""
The hypervisor driver, decided once in the background (:class:`DriverChoice`)
and handed to every part of the node layer that starts or asks about VMs.
"""

from __future__ import annotations

from typing import Callable

from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..hypervisors.base import IHypervisor
from ..observer import OneShotObserver

log = Logger()


class DriverChoice:
    """
    The hypervisor driver, decided once (the KVM probe takes seconds) and
    handed to everyone who asks, each with a Deferred of their own.

    :param decide: starts the decision; fires with the driver.  Cancelling
        it must end what it started (the probe's QEMU) before it fires.
    """

    def __init__(self, decide: Callable[[], Deferred[IHypervisor]]) -> None:
        self._decide = decide
        self._decided: OneShotObserver[IHypervisor] | None = None
        #: The decision once started (it may be under way or over).
        self._deciding: Deferred[IHypervisor] | None = None

    def get(self) -> Deferred[IHypervisor]:
        """The driver, once it is decided."""
        if self._decided is None:
            decided: OneShotObserver[IHypervisor] = OneShotObserver()
            self._decided = decided
            self._deciding = self._decide()
            self._deciding.addCallbacks(decided.fire, decided.error)
        return self._decided.when_fired()

    def start(self) -> None:
        """
        Begin the decision in the background, so that the first VM to start
        need not wait for all of it.  Whoever needs the driver sees a failure
        for themselves; a daemon stopped before it is over is logged.
        """
        self.get().addErrback(_undecided)

    def stop(self) -> Deferred[None]:
        """
        The daemon stops: cancel a decision under way (the KVM probe's QEMU
        is killed and reaped) and fire once it is over, whichever way it
        ended.  A decision not started yet never starts: every :meth:`get`
        then fails with ``CancelledError``.
        """
        if self._decided is None:
            self._decided = OneShotObserver()
            self._decided.error(CancelledError("the daemon stopped before the hypervisor was decided"))
            return succeed(None)
        over = self._decided.when_fired().addCallbacks(lambda _: None, lambda _: None)
        if self._deciding is not None:
            self._deciding.cancel()  # nothing when it is over
        return over


def _undecided(failure: Failure) -> None:
    if failure.check(CancelledError):
        log.info("the daemon stopped before the hypervisor was decided")


__all__ = ["DriverChoice"]
