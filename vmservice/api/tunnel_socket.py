# -*- test-case-name: tests.api.test_tunnel_socket -*-
"""
The WebSocket way into a tunnel (``GET /vm/{hostname}/forward`` with
``Upgrade: websocket``, what existing clients dial: CLIENTS.md §3).

The tunnel is opened first (:meth:`.forwarding.ForwardApi.open_tunnel`), so a
refused upstream is an ErrorResponse before the upgrade, never a WebSocket
that opens and dies; then autobahn answers 101 (:func:`.websocket.accept`)
and :class:`TunnelSocket` joins the two: each binary message from the client
goes to the upstream as it is, the upstream's bytes go back as binary
messages (one per chunk the guest sent, any size), text messages are
dropped.  Back-pressure both ways: a full socket buffer toward the client
pauses the tunnel (so the guest stops reading the upstream), and a tunnel
without credit pauses reading from the client.  There is no half-close:
either side's end closes the other (the WebSocket with 1000).
"""

from __future__ import annotations

from typing import Optional

from autobahn.twisted.websocket import WebSocketServerProtocol
from twisted.internet.interfaces import IPushProducer, IReactorTime
from twisted.logger import Logger
from twisted.web.resource import IResource
from twisted.web.server import Request
from zope.interface import implementer

from ..guestport.tunnel import ITunnel, ITunnelPeer
from ..wire.upstream import Upstream
from ..nodes.fleet import Fleet
from .forwarding import WebSocketHandler
from .websocket import accept, check_upgrade, take_transport_producer

log = Logger()

#: The largest message accepted from a client (autobahn closes with 1009 beyond it).
MAX_MESSAGE = 16 * 1024 * 1024


@implementer(ITunnelPeer)
class TunnelSocket(WebSocketServerProtocol):
    """
    One WebSocket joined to one open tunnel (see the module docstring).

    :param tunnel: the tunnel, already connected in the guest.
    """

    def __init__(self, tunnel: ITunnel) -> None:
        super().__init__()
        self._tunnel = tunnel
        self._open = False
        self._producer: Optional[IPushProducer] = None

    def onOpen(self) -> None:
        self._open = True
        assert self.transport is not None
        # The client's messages pause when the guest does not take them.
        self._tunnel.register_producer(IPushProducer(self.transport))
        self._tunnel.join(self)

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        if isBinary:
            self._tunnel.write(payload)

    def onClose(self, wasClean: bool, code: Optional[int], reason: Optional[str]) -> None:
        self._open = False
        self._tunnel.close()

    # -- ITunnelPeer --------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self._open:
            self.sendMessage(data, isBinary=True)  # type: ignore[no-untyped-call]

    def registerProducer(self, producer: IPushProducer, streaming: bool) -> None:
        self._producer = producer
        take_transport_producer(self, producer)

    def unregisterProducer(self) -> None:
        if self._producer is not None and self.transport is not None:
            self._producer = None
            self.transport.unregisterProducer()  # type: ignore[attr-defined]

    def loseConnection(self) -> None:
        if self._open:
            self._open = False
            self.sendClose(code=1000)


def tunnel_socket_handler(fleet: Fleet, reactor: IReactorTime) -> WebSocketHandler:
    """
    The handler :class:`~.forwarding.ForwardApi` gives requests with
    ``Upgrade: websocket``: check the upgrade, open the tunnel in ``fleet``'s
    node (every error an ErrorResponse), then upgrade and join them.
    """

    async def serve(request: Request, hostname: str, upstream: Upstream) -> bytes | IResource:
        check_upgrade(request)
        tunnel = await (await fleet.guest(hostname)).forward(upstream)
        if request.channel is None:
            tunnel.abort()  # the client left while the guest connected
            return b""
        log.info("WebSocket tunnel to {upstream} in {hostname} opened", upstream=upstream.describe(),
                 hostname=hostname)
        return accept(reactor, lambda: TunnelSocket(tunnel), MAX_MESSAGE)

    return serve


__all__ = ["MAX_MESSAGE", "TunnelSocket", "tunnel_socket_handler"]
