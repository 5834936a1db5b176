# -*- test-case-name: tests.agent.test_headed -*-
"""
One way to read a stream that starts with a head: a length-prefixed JSON
object (:func:`vmservice.wire.payloads.decode_head`), then a body of raw bytes
or frames.  Downloads, tunnels, bulk uploads and log readings start so
(``docs/agent-protocol.md``); each gives :class:`HeadedProtocol` a
:class:`HeadReceiver` that says what the head means and where the body goes.

The protocol only cuts the stream in two: what a malformed head, an error
head, an early end or a reset mean (which error, whether the stream is reset,
what a sink is told) is the receiver's to say, as each stream says it
differently.
"""

from __future__ import annotations

from typing import Any, Protocol as Interface, cast

from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IHalfCloseableProtocol
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

from ..wire.payloads import decode_head
from .stream import AgentStream


class HeadReceiver(Interface):
    """What a :class:`HeadedProtocol` tells, in this order: connected, then the head (or that it is
    malformed), then the body, the guest's half-close and the end."""

    def connected(self, stream: AgentStream) -> None:
        """The stream is open (before any byte came): to reset it, pause it, half-close it."""

    def head_malformed(self, error: ValueError) -> None:
        """The head does not decode (too long, not a JSON object); nothing more is read of the body."""

    def headed(self, head: dict[str, Any], rest: bytes) -> None:
        """The head, and what came after it in the same data (perhaps nothing)."""

    def body(self, data: bytes) -> None:
        """More of the body."""

    def read_ended(self) -> None:
        """The guest half-closed, after all it sent."""

    def ended(self, reason: Failure) -> None:
        """The stream is over: ``ConnectionDone`` when both sides closed, else why."""


@implementer(IHalfCloseableProtocol)
class HeadedProtocol(Protocol):
    """
    Parses the head of a stream (it may arrive cut anywhere), then passes the
    body on.

    :ivar receiver: what is told.
    """

    def __init__(self, receiver: HeadReceiver) -> None:
        self.receiver = receiver
        self._buffer = bytearray()
        self._headed = False
        self._broken = False

    def connectionMade(self) -> None:
        self.receiver.connected(cast(AgentStream, self.transport))

    def dataReceived(self, data: bytes) -> None:
        if self._headed:
            self.receiver.body(data)
            return
        if self._broken:
            return
        self._buffer += data
        try:
            decoded = decode_head(bytes(self._buffer))
        except ValueError as e:
            self._broken = True
            self._buffer.clear()
            self.receiver.head_malformed(e)
            return
        if decoded is None:
            return
        head, used = decoded
        rest = bytes(self._buffer[used:])
        self._buffer.clear()
        self._headed = True
        self.receiver.headed(head, rest)

    def readConnectionLost(self) -> None:
        self.receiver.read_ended()

    def writeConnectionLost(self) -> None:
        pass

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        self.receiver.ended(reason)


__all__ = ["HeadReceiver", "HeadedProtocol"]
