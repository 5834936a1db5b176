# -*- test-case-name: tests.api.test_shell -*-
"""
WebSocket routes: checks before the upgrade, then autobahn takes the connection.

A WebSocket route is an ordinary :class:`~.routing.Route` whose handler:

1. calls :func:`check_upgrade` (a request that is not a WebSocket upgrade is
   a 400 ErrorResponse, code ``websocket_required``);
2. does its own checks and whatever must succeed before the client is told
   yes (the node exists and runs, the agent answers, the guest accepted the
   request): any error raised here is rendered by the app as an
   ErrorResponse with its status, like any route's; the request gate
   (:mod:`.gate`: Host, Origin and Sec-Fetch-Site of the upgrade, the
   token) has already let it through, when its headers arrived and again in
   the app's view, so autobahn's own origin check (which allows every
   origin) is never what keeps a web page out;
3. returns :func:`accept` ``(reactor, protocol, max_message)``, an ``IResource`` that Klein renders:
   autobahn's :class:`~autobahn.twisted.resource.WebSocketResource` answers
   ``101 Switching Protocols`` and hands the connection (taken from
   twisted.web) to the protocol that ``protocol()`` makes for this request.

Only HTTP/1.1 connections can be upgraded.  The messages are limited to
``max_message`` bytes each way (autobahn closes with 1009 on a larger one);
no compression, no subprotocol.  The HTTP channel stops being the
transport's producer once the protocol runs (:func:`take_transport_producer`),
so the protocol can register its own for back-pressure.
"""

from __future__ import annotations

from typing import Callable

from autobahn.twisted.resource import WebSocketResource
from autobahn.twisted.websocket import WebSocketServerFactory, WebSocketServerProtocol
from twisted.internet.interfaces import IConsumer, IPushProducer, IReactorTime
from twisted.web.iweb import IRequest
from twisted.web.resource import IResource

from ..errors import BadRequest

#: Seconds autobahn waits for the client's close handshake before dropping it.
CLOSE_TIMEOUT = 5.0


def _header(request: IRequest, name: bytes) -> str:
    value = request.getHeader(name)
    return value.decode("latin-1") if isinstance(value, bytes) else (value or "")


def check_upgrade(request: IRequest) -> None:
    """
    :raise BadRequest: ``request`` is not a WebSocket upgrade (RFC 6455 §4.2.1:
        GET, ``Upgrade: websocket``, ``Connection: Upgrade``, a
        ``Sec-WebSocket-Key``, ``Sec-WebSocket-Version: 13``).
    """
    problems = []
    if request.method != b"GET":
        problems.append("the method must be GET")
    if "websocket" not in [t.strip().lower() for t in _header(request, b"upgrade").split(",")]:
        problems.append("no 'Upgrade: websocket'")
    if "upgrade" not in [t.strip().lower() for t in _header(request, b"connection").split(",")]:
        problems.append("no 'Connection: Upgrade'")
    if not _header(request, b"sec-websocket-key").strip():
        problems.append("no Sec-WebSocket-Key")
    if _header(request, b"sec-websocket-version").strip() != "13":
        problems.append("Sec-WebSocket-Version must be 13")
    if problems:
        raise BadRequest("this route needs a WebSocket upgrade: " + "; ".join(problems), code="websocket_required")


def take_transport_producer(protocol: WebSocketServerProtocol, producer: IPushProducer) -> None:
    """
    Make ``producer`` the producer of ``protocol``'s transport (in place of
    the HTTP channel the connection came from), so that a full socket
    buffer pauses it.  Call it from ``onOpen``.
    """
    transport = IConsumer(protocol.transport)
    transport.unregisterProducer()
    transport.registerProducer(producer, True)


def accept(reactor: IReactorTime, protocol: Callable[[], WebSocketServerProtocol], max_message: int) -> IResource:
    """
    The resource that upgrades the current request and runs ``protocol()`` on it.

    :param reactor: the reactor of the connection (autobahn's factory takes it).
    :param protocol: makes the protocol of this one connection.
    :param max_message: the largest message (and frame) payload accepted.

    The opening handshake has no timeout: twisted.web has read the whole
    request before the route runs, so autobahn completes it at once.
    """
    factory = WebSocketServerFactory(reactor=reactor)  # type: ignore[no-untyped-call]
    factory.protocol = protocol  # type: ignore[assignment]  # autobahn calls it with no arguments
    factory.setProtocolOptions(  # type: ignore[no-untyped-call]
        maxMessagePayloadSize=max_message,
        maxFramePayloadSize=max_message,
        openHandshakeTimeout=0,
        closeHandshakeTimeout=CLOSE_TIMEOUT,
        perMessageCompressionAccept=lambda offers: None,
    )
    resource: IResource = WebSocketResource(factory)  # type: ignore[no-untyped-call]
    return resource


__all__ = ["CLOSE_TIMEOUT", "accept", "check_upgrade", "take_transport_producer"]
