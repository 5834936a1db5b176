# -*- test-case-name: tests.nodes.test_console_rotation -*-
"""
One timer for every node's console log: each :data:`CHECK_INTERVAL` seconds,
off the reactor, a ``fstat`` of each log and a :func:`.console.rotate` of those
past half of ``console_log_size``.

A guest writes its console without limit and QEMU appends it to a file, so
what bounds the file is how often it is checked: at most the configured size
plus what the guest writes in one interval (0.5-0.75 MB/s measured under TCG
here: see docs/security.md).  The first round runs as the daemon starts, once
the fleet has registered the nodes it found, so a log that grew while no
daemon ran (its VM adopted now) is cut down at once.  Rounds never overlap: the
next is timed from the end of the last.
"""

from __future__ import annotations

from typing import Callable

from twisted.application.internet import TimerService
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from .console import rotate
from .parts import Blocking

log = Logger()

#: Seconds between two checks of every console log.
CHECK_INTERVAL = 1.0


def rotate_all(paths: list[str], size: int) -> dict[str, OSError]:
    """Rotate each log of ``paths`` that needs it (blocking): the ones that could not be, and why."""
    failed = {}
    for path in paths:
        try:
            rotate(path, size)
        except OSError as error:
            failed[path] = error
    return failed


class ConsoleRotation(TimerService):
    """
    Keeps every node's console log within ``size`` bytes.

    :param clock: times the rounds.
    :param consoles: the console logs to check at each round (every node's).
    :param blocking: runs a round off the reactor.
    :param size: ``console_log_size``.
    :param interval: seconds between the end of one round and the next.
    """

    name = "console-rotation"

    def __init__(self, clock: IReactorTime, consoles: Callable[[], list[str]], blocking: Blocking, size: int,
                 interval: float = CHECK_INTERVAL) -> None:
        super().__init__(interval, self._round)  # type: ignore[no-untyped-call]  # Twisted's services are not annotated
        self.clock = clock
        self._consoles = consoles
        self._blocking = blocking
        self._size = size
        #: The logs whose last rotation failed (reported once, until one succeeds).
        self._failing: set[str] = set()

    def _round(self) -> Deferred[None]:
        # A Deferred: the next round is timed from its end (LoopingCall), so rounds never overlap.
        paths = self._consoles()
        return Deferred.fromCoroutine(self._check(paths))

    async def _check(self, paths: list[str]) -> None:
        try:
            failed = await self._blocking(lambda: rotate_all(paths, self._size))
        except Exception:
            log.failure("checking the console logs failed")
            return
        for path, error in failed.items():
            if path not in self._failing:
                log.warn("cannot bound the console log {path}: {error}", path=path, error=error)
        self._failing = set(failed)


__all__ = ["CHECK_INTERVAL", "ConsoleRotation", "rotate_all"]
