# -*- test-case-name: tests.test_codehost -*-
"""
:class:`BoundedBody`: an HTTP response's body read up to a bound, for the
daemon's HTTP clients (the code host's key pages, the Kubernetes API).
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.protocol import Protocol, connectionDone
from twisted.python.failure import Failure
from twisted.web.client import ResponseDone
from twisted.web.http import PotentialDataLoss


class BodyTooLarge(Exception):
    """The body is larger than the reader takes."""


class BoundedBody(Protocol):
    """
    Reads a response's body up to ``limit`` bytes; past them it closes the
    connection and :attr:`done` fails with :class:`BodyTooLarge`.  Cancelling
    :attr:`done` closes it too, so a server that trickles its answer past a
    timeout holds no connection.  A connection lost before the body's end
    fails :attr:`done` with its reason.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._chunks: list[bytes] = []
        self._size = 0
        self.done: Deferred[bytes] = Deferred(lambda _: self._close())

    def dataReceived(self, data: bytes) -> None:
        if self.done.called:
            return
        self._size += len(data)
        if self._size > self._limit:
            self._close()
            self.done.errback(BodyTooLarge(f"the answer is larger than {self._limit} bytes"))
            return
        self._chunks.append(data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self.done.called:
            return
        if reason.check(ResponseDone, PotentialDataLoss):
            self.done.callback(b"".join(self._chunks))
        else:
            self.done.errback(reason)

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.loseConnection()


__all__ = ["BodyTooLarge", "BoundedBody"]
