# -*- test-case-name: tests.api.test_connection_limits -*-
"""
The bound on the API's connections: at most ``most`` open at once, and at
most ``most_per_peer`` from one client address (an IPv4 address, or an IPv6
/64: one host's addresses).  The clients of a UNIX socket cannot be told
apart by address (and the socket's mode already says who may connect): they
count in the total only.

:class:`ConnectionLimits` wraps the site's factory
(:class:`~twisted.protocols.policies.WrappingFactory`): a connection within
the bounds gets the site's protocol behind a ``ProtocolWrapper``, which the
routes that take the connection over (WebSockets, tunnels) find and rewire
as they would TCP's own transport; it counts until it closes, however long a
stream, shell or tunnel keeps it.  A connection beyond a bound is answered
rather than reset: :class:`_Refusal` waits for the request head (so the
client has sent it and reads the answer), writes a complete ``429
too_many_connections`` (this address) or ``503 connection_limit_reached``
(all of them) ErrorResponse with ``Connection: close``, half-closes, and
reads whatever else the client sends into nothing until it closes, all
within :data:`REFUSAL_TIMEOUT` seconds.  At most :data:`MAX_REFUSING`
refusals are under way at once; past that, a new connection over a bound is
closed at once without an answer.  A refusal buffers nothing.

The answer is written here, before any HTTP request exists for the API to
render an error on: it is the error's own status and code
(:class:`~vmservice.errors.TooManyConnections`,
:class:`~vmservice.errors.ConnectionLimitReached`) as an ErrorResponse.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Optional, Union

from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.interfaces import IAddress, IDelayedCall, IProtocolFactory, IReactorTime
from twisted.internet.protocol import Protocol
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory
from twisted.python.failure import Failure
from twisted.web.http import RESPONSES

from ..config import DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS_PER_PEER
from ..errors import ConnectionLimitReached, ServiceError, TooManyConnections
from .models.meta import ErrorResponse
from .rendering import to_json

#: Seconds a refused connection may take to send its request head and then to close.
REFUSAL_TIMEOUT = 5.0
#: Refusals under way at once; past it a connection over a bound is closed without an answer.
MAX_REFUSING = 64
#: Bytes read of a refused connection before it is answered even without a complete head.
MAX_REFUSED_HEAD = 16 * 1024

#: What counts as one client: an address, an IPv6 /64.
Peer = Union[str, None]


def peer_of(address: Optional[IAddress]) -> Peer:
    """
    The client ``address`` counts as: its IPv4 address, its IPv6 /64 (an
    IPv4-mapped one is its IPv4 address), or ``None`` (a UNIX socket's
    client, or anything else: counted in the total only).
    """
    if isinstance(address, IPv4Address):
        return address.host
    if isinstance(address, IPv6Address):
        try:
            parsed = ipaddress.IPv6Address(address.host.split("%", 1)[0])
        except ValueError:
            return address.host
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network((parsed, 64), strict=False))
    return None


def refusal_bytes(error: ServiceError) -> bytes:
    """The whole HTTP answer of a refused connection: ``error`` as an ErrorResponse."""
    body = json.dumps(to_json(ErrorResponse(error.message, error.code))).encode() + b"\n"
    reason = RESPONSES.get(error.status, b"Error")
    return (
        b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
        b"Connection: close\r\nCache-Control: no-store\r\n\r\n" % (error.status, reason, len(body))
    ) + body


class _Refusal(Protocol):
    """
    A connection beyond a bound: answered once its request head is in (or
    :data:`MAX_REFUSED_HEAD` bytes are), then half-closed and drained until
    the client closes; aborted when :data:`REFUSAL_TIMEOUT` passes first.
    """

    def __init__(self, limits: "ConnectionLimits", answer: bytes) -> None:
        self._limits = limits
        self._answer = answer
        self._answered = False
        self._seen = 0
        self._tail = b""
        self._timer: Optional[IDelayedCall] = None

    def connectionMade(self) -> None:
        self._timer = self._limits.clock.callLater(REFUSAL_TIMEOUT, self._give_up)

    def dataReceived(self, data: bytes) -> None:
        if self._answered:
            return
        self._seen += len(data)
        window = self._tail + data[:MAX_REFUSED_HEAD]
        self._tail = window[-3:]
        if b"\r\n\r\n" in window or self._seen >= MAX_REFUSED_HEAD:
            self._answered = True
            assert self.transport is not None
            self.transport.write(self._answer)
            lose_write = getattr(self.transport, "loseWriteConnection", None)
            if lose_write is not None:
                lose_write()
            else:
                self.transport.loseConnection()

    def _give_up(self) -> None:
        self._timer = None
        if self.transport is not None:
            self.transport.abortConnection()  # type: ignore[attr-defined]

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        self._limits.refusal_over()


class ConnectionLimits(WrappingFactory):
    """
    The site's factory, with the API's connections bounded.

    :param site: the factory of the API's protocol.
    :param clock: for the refusals' timeout.
    :param most: connections open at once (refusals under way not counted).
    :param most_per_peer: connections open at once from one client (see :func:`peer_of`).
    :ivar open: connections open now.
    :ivar refused: connections refused so far, by reason (``peer``, ``total``).
    """

    protocol = ProtocolWrapper

    def __init__(self, site: IProtocolFactory, clock: IReactorTime, most: int = DEFAULT_MAX_CONNECTIONS,
                 most_per_peer: int = DEFAULT_MAX_CONNECTIONS_PER_PEER) -> None:
        super().__init__(site)  # type: ignore[no-untyped-call]  # Twisted's WrappingFactory is not annotated
        self.clock = clock
        self.most = most
        self.most_per_peer = most_per_peer
        self.open = 0
        self.refused = {"peer": 0, "total": 0}
        self._by_peer: dict[str, int] = {}
        self._peer_of: dict[ProtocolWrapper, Peer] = {}
        self._refusing = 0

    def buildProtocol(self, addr: IAddress | None) -> Optional[Protocol]:  # type: ignore[override]
        peer = peer_of(addr)
        if self.open >= self.most:
            self.refused["total"] += 1
            return self._refusal(ConnectionLimitReached(
                f"the API has {self.open} connections open, the most it allows (limits.max_connections): "
                "retry later"
            ))
        if peer is not None and self._by_peer.get(peer, 0) >= self.most_per_peer:
            self.refused["peer"] += 1
            return self._refusal(TooManyConnections(
                f"{peer} has {self._by_peer[peer]} connections open to the API, the most one client may "
                "(limits.max_connections_per_peer): close some first"
            ))
        wrapper = super().buildProtocol(addr)
        self.open += 1
        self._peer_of[wrapper] = peer
        if peer is not None:
            self._by_peer[peer] = self._by_peer.get(peer, 0) + 1
        return wrapper

    def _refusal(self, error: ServiceError) -> Optional[Protocol]:
        if self._refusing >= MAX_REFUSING:
            return None  # too many to answer: closed at once
        self._refusing += 1
        return _Refusal(self, refusal_bytes(error))

    def refusal_over(self) -> None:
        """A refused connection closed."""
        self._refusing -= 1

    def unregisterProtocol(self, p: ProtocolWrapper) -> None:
        super().unregisterProtocol(p)  # type: ignore[no-untyped-call]  # (as above)
        if p not in self._peer_of:
            return
        peer = self._peer_of.pop(p)
        self.open -= 1
        if peer is not None:
            left = self._by_peer[peer] - 1
            if left:
                self._by_peer[peer] = left
            else:
                del self._by_peer[peer]


__all__ = [
    "ConnectionLimits",
    "MAX_REFUSING",
    "REFUSAL_TIMEOUT",
    "peer_of",
    "refusal_bytes",
]
