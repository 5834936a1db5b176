# -*- test-case-name: tests.agent.test_protocol -*-
"""
The PINGs of one agent connection waiting for their PONG: each one's opaque
bytes, when it was sent, and the Deferred its round trip fires.
"""

from __future__ import annotations

import struct

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure


class Pings:
    """
    Outstanding PINGs.

    :param clock: what round trips are measured with.
    """

    def __init__(self, clock: IReactorTime) -> None:
        self._clock = clock
        self._waiting: dict[bytes, tuple[Deferred[float], float]] = {}
        self._counter = 0

    def sent(self) -> tuple[bytes, Deferred[float]]:
        """
        A new PING's opaque bytes, and a Deferred that fires with its round trip
        in seconds once :meth:`answered` is called with them.
        """
        self._counter += 1
        opaque = struct.pack(">Q", self._counter)

        def cancel(d: Deferred[float]) -> None:
            self._waiting.pop(opaque, None)

        d: Deferred[float] = Deferred(cancel)
        self._waiting[opaque] = (d, self._clock.seconds())
        return opaque, d

    def answered(self, opaque: bytes) -> None:
        """The PONG of ``opaque`` arrived (one that is not ours is ignored)."""
        waiting = self._waiting.pop(opaque, None)
        if waiting is not None:
            d, sent = waiting
            d.callback(self._clock.seconds() - sent)

    def fail(self, reason: Failure) -> None:
        """Every outstanding PING fails with ``reason``."""
        waiting, self._waiting = self._waiting, {}
        for d, _ in waiting.values():
            d.errback(reason)


__all__ = ["Pings"]
