# -*- test-case-name: tests.api.test_forwarding -*-
"""
``GET /vm/{hostname}/forward``: a tunnel to a TCP or UNIX socket in the
guest, as a plain byte pipe.

The upstream is the ``X-Inlets-Upstream`` header (what existing clients
send) or the ``upstream`` query parameter: ``host:port`` or ``unix:/path``.
Everything that can go wrong is answered before the tunnel opens, as an
ErrorResponse: a bad upstream (400), an unknown node (404), a paused node
(409), a refused or unreachable upstream (502), a connect timeout (504), an
agent that is not connected (503).  Once the guest connected, the daemon
answers ``200`` with no body length and ``Connection: close``, and from then
on the HTTP connection *is* the tunnel: no framing, bytes both ways,
producer-to-consumer (:class:`PipeProtocol`), until either side closes.

The connection is taken from twisted.web in :func:`take_over`, the one
place that knows how ``HTTPChannel`` holds it.

A request with ``Upgrade: websocket`` is the other way in (CLIENTS.md §3);
:class:`ForwardApi` hands it to its ``websocket`` handler, the one dispatch
point, which opens its tunnel with :meth:`ForwardApi.open_tunnel`.  Without
one it is answered 501 ``not_supported``.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Optional

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IPushProducer, ITransport
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.resource import IResource
from twisted.web.server import Request
from zope.interface import implementer

from ..errors import BadRequest, NotSupported
from ..guestport.tunnel import ITunnel, ITunnelPeer
from ..wire.upstream import Upstream
from ..nodes.fleet import Fleet
from .models.meta import ErrorResponse
from .query import Text, param
from .routing import Reply, Route

log = Logger()

#: What an upstream may be, as the document says it (and ``Upstream.parse`` reads it):
#: ``unix:/path`` (at most 107 bytes), or a host (a name, an address, ``[v6]``; never ``unix``, whose
#: ``unix:`` begins a socket path) and a port from 1 to 65535.
UPSTREAM_PATTERN = (r"unix:/[^\x00]{0,106}|(?!unix:)(?:\[[^\s\x00/\[\]]+\]|[^\s\x00/\[\]]{1,253})"
                    r":(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])")

#: The header existing clients name the upstream with.
UPSTREAM_HEADER = b"x-inlets-upstream"

#: What the daemon answers before the connection becomes the tunnel.
PIPE_HEAD = (
    b"HTTP/1.1 200 OK\r\n"
    b"Content-Type: application/octet-stream\r\n"
    b"Cache-Control: no-store\r\n"
    b"Connection: close\r\n"
    b"\r\n"
)

#: ``async (request, hostname, upstream) -> bytes | IResource``: serves a WebSocket upgrade.
WebSocketHandler = Callable[[Request, str, Upstream], Awaitable["bytes | IResource"]]


@frozen
class ForwardQuery:
    """The query of a tunnel (see docs/api.md)."""

    upstream: Optional[str] = param(Text(1, UPSTREAM_PATTERN, "host:port (port 1 to 65535) or unix:/path",
                                         code="invalid_upstream"), "The upstream in the guest, host:port or unix:/path, when the "
                                             "X-Inlets-Upstream header does not name it")


def upstream_of(request: Request, query: ForwardQuery) -> Upstream:
    """
    The upstream a request names: its ``X-Inlets-Upstream`` header, else the
    ``upstream`` query parameter.

    :raise BadRequest: neither, or not ``host:port`` / ``unix:/path`` (code ``invalid_upstream``).
    """
    raw = request.getHeader(UPSTREAM_HEADER)
    try:
        text = raw.decode("utf-8") if raw is not None else query.upstream
    except UnicodeDecodeError:
        raise BadRequest("the X-Inlets-Upstream header is not UTF-8", code="invalid_upstream") from None
    if not text:
        raise BadRequest("name the upstream with the X-Inlets-Upstream header or the upstream query parameter",
                         code="invalid_upstream")
    try:
        return Upstream.parse(text.strip())
    except ValueError as e:
        raise BadRequest(str(e), code="invalid_upstream") from None


def is_websocket(request: Request) -> bool:
    """Whether the request asks for a WebSocket upgrade."""
    upgrade = request.getHeader(b"upgrade") or b""
    return b"websocket" in [word.strip().lower() for word in upgrade.split(b",")]


@implementer(ITunnelPeer)
class PipeProtocol(Protocol):
    """
    The protocol of an HTTP connection taken over as a tunnel: the client's
    bytes go to the tunnel, the tunnel's to the client; each side's transport
    pauses the other's producer.  The client closing closes the tunnel; the
    tunnel ending closes the connection.

    :param tunnel: the open tunnel.
    :param early: bytes the client sent after its request head, before the
        takeover (twisted.web held them).
    """

    def __init__(self, tunnel: ITunnel, early: bytes) -> None:
        self._tunnel = tunnel
        self._early = early

    def connectionMade(self) -> None:
        transport = self.transport
        assert transport is not None
        self._tunnel.register_producer(IPushProducer(transport))
        self._tunnel.join(self)
        if self._early:
            early, self._early = self._early, b""
            self._tunnel.write(early)

    def dataReceived(self, data: bytes) -> None:
        self._tunnel.write(data)

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        self._tunnel.close()

    # -- ITunnelPeer ------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def registerProducer(self, producer: IPushProducer, streaming: bool) -> None:
        if self.transport is not None:
            self.transport.registerProducer(producer, streaming)  # type: ignore[attr-defined]

    def unregisterProducer(self) -> None:
        if self.transport is not None:
            self.transport.unregisterProducer()  # type: ignore[attr-defined]

    def loseConnection(self) -> None:
        if self.transport is not None:
            self.transport.loseConnection()


def take_over(request: Request, tunnel: ITunnel) -> Deferred[None]:
    """
    Answer ``200`` and make ``request``'s connection the tunnel: the one place
    that reaches into twisted.web's ``HTTPChannel``.

    The channel stops being the transport's producer and protocol; what it
    buffered after the request head goes into the tunnel.  When the tunnel is
    over, the channel hears that its connection was lost, which ends the
    request (its handler's wait is cancelled, as for any client that left).

    :return: a Deferred that never fires: the request handler waits on it.
    """
    channel: Any = request.channel
    transport: Any = channel.transport
    early = b"".join(channel._dataBuffer)
    channel._dataBuffer = []
    transport.unregisterProducer()
    transport.write(PIPE_HEAD)
    pipe = PipeProtocol(tunnel, early)
    if hasattr(transport, "wrappedProtocol"):
        transport.wrappedProtocol = pipe
    else:
        transport.protocol = pipe
    pipe.makeConnection(transport)  # type: ignore[no-untyped-call]  # Twisted's Protocol is not annotated
    # The channel may have paused reading while the request was handled.
    transport.resumeProducing()

    def over(_: object) -> None:
        channel.connectionLost(Failure(ConnectionDone("the tunnel is over")))

    tunnel.done.addCallback(over)
    return Deferred()


class ForwardApi:
    """
    :param fleet: the nodes of this daemon.
    :param websocket: serves requests with ``Upgrade: websocket``; ``None``:
        they are answered 501.
    """

    def __init__(self, fleet: Fleet, websocket: Optional[WebSocketHandler] = None) -> None:
        self._fleet = fleet
        self._websocket = websocket

    def routes(self) -> list[Route]:
        return [
            Route(
                "GET", "/vm/{hostname}/forward", self.forward, "Open a tunnel to a TCP or UNIX socket in the node",
                "forward",
                {200: Reply("The connection is now the tunnel: raw bytes both ways, no framing, until either side "
                            "closes", media="application/octet-stream"),
                 400: Reply("No upstream, or not host:port / unix:/path", ErrorResponse),
                 404: Reply("No such node", ErrorResponse),
                 409: Reply("The node is paused, stopped or suspended", ErrorResponse),
                 101: Reply("With Upgrade: websocket: the WebSocket carries the tunnel, raw bytes in binary messages "
                            "both ways (text messages are dropped); either side's end closes it with 1000"),
                 502: Reply("The guest cannot connect to the upstream: refused, unreachable, no such UNIX socket",
                            ErrorResponse),
                 503: Reply("The node's agent is not connected", ErrorResponse),
                 504: Reply("Connecting to the upstream in the guest timed out", ErrorResponse)},
                query=ForwardQuery,
                stream="tunnel",
                refusal_closes=True,
            ),
        ]

    async def open_tunnel(self, hostname: str, upstream: Upstream) -> ITunnel:
        """
        Open a tunnel to ``upstream`` in node ``hostname``: what any way in
        (the plain pipe, a WebSocket) starts with.

        :raise NotFound, Conflict, AgentNotConnected: see :meth:`Fleet.guest`.
        """
        return await (await self._fleet.guest(hostname)).forward(upstream)

    async def forward(self, request: Request, query: ForwardQuery, hostname: str) -> bytes | IResource:
        upstream = upstream_of(request, query)
        if is_websocket(request):
            if self._websocket is None:
                raise NotSupported("WebSocket tunnels are not served yet: send the request without Upgrade for a "
                                   "plain byte pipe", code="not_supported")
            return await self._websocket(request, hostname, upstream)
        tunnel = await self.open_tunnel(hostname, upstream)
        if request.channel is None:
            tunnel.abort()  # the client left while the guest connected
            return b""
        log.info("tunnel to {upstream} in {hostname} opened", upstream=upstream.describe(), hostname=hostname)
        await take_over(request, tunnel)
        return b""


__all__ = ["ForwardApi", "ForwardQuery", "PIPE_HEAD", "PipeProtocol", "WebSocketHandler", "is_websocket",
           "take_over", "upstream_of"]
