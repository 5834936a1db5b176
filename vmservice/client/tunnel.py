# -*- test-case-name: tests.cli.test_forwarding -*-
"""
The client's end of ``GET /vm/{hostname}/forward`` as a plain byte pipe: a
Twisted client endpoint (:class:`TunnelEndpoint`) whose connections are
tunnels to an upstream inside a node.

``connect(factory)`` connects to the daemon (TCP or its UNIX socket), sends
the request head, reads the response head and, on ``200``, hands the very
connection to the factory's protocol: from then on what the protocol writes
reaches the upstream and what the upstream sends arrives in its
``dataReceived``; its transport is the daemon connection itself (so it is
also the push producer and consumer to join with, as
``twisted.protocols.portforward`` does).  Any other status fails the
connect with :class:`TunnelRefused`, carrying the daemon's ErrorResponse.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import quote, urlsplit

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import HostnameEndpoint, UNIXClientEndpoint
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IProtocol, IProtocolFactory, IStreamClientEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

from .. import __version__
from .addresses import is_unix_socket, socket_path

if TYPE_CHECKING:
    from .reactors import IClientReactor

#: Largest response head read from the daemon.
MAX_HEAD = 64 * 1024
#: Largest error body read after a refusal.
MAX_ERROR_BODY = 64 * 1024


class TunnelRefused(Exception):
    """
    The daemon answered something else than ``200``: no tunnel.

    :ivar status: the HTTP status (0 when the answer was no HTTP at all).
    :ivar code: the ErrorResponse ``code``, if any.
    :ivar message: the ErrorResponse ``error``, or what went wrong.
    """

    def __init__(self, status: int, code: Optional[str], message: str) -> None:
        super().__init__(f"{status} {code}: {message}" if status else message)
        self.status = status
        self.code = code
        self.message = message


def request_head(hostname: str, upstream: str, token: Optional[str]) -> bytes:
    """The request that opens a plain-pipe tunnel."""
    lines = [
        f"GET /vm/{quote(hostname, safe='')}/forward HTTP/1.1",
        "Host: localhost",
        f"User-Agent: vmservice-client/{__version__}",
        f"X-Inlets-Upstream: {upstream}",
    ]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")


def parse_error(status: int, body: bytes) -> TunnelRefused:
    """The refusal an error answer is (its ErrorResponse when it has one)."""
    try:
        reply = json.loads(body)
    except ValueError:
        reply = None
    if isinstance(reply, dict) and isinstance(reply.get("error"), str):
        code = reply.get("code")
        return TunnelRefused(status, code if isinstance(code, str) else None, reply["error"])
    return TunnelRefused(status, None, body.decode("utf-8", "replace")[:200] or "no tunnel")


class _Handshake(Protocol):
    """
    Sends the request head and reads the response head; on ``200`` the
    application's protocol takes the connection (this one only passes on
    what arrives), otherwise the connect fails.
    """

    def __init__(self, head: bytes, factory: IProtocolFactory, opened: "Deferred[IProtocol]") -> None:
        self._head = head
        self._factory = factory
        self._opened = opened
        self._buffer = b""
        self._status = 0
        self._framing: tuple[Optional[int], bool] = (None, False)
        self._app: Optional[IProtocol] = None

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.write(self._head)

    def dataReceived(self, data: bytes) -> None:
        if self._app is not None:
            self._app.dataReceived(data)
            return
        self._buffer += data
        if self._status:
            return self._collect_error()
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > MAX_HEAD:
                self._fail(TunnelRefused(0, None, "the daemon's answer head is too long"))
            return
        head, self._buffer = self._buffer[:end], self._buffer[end + 4:]
        status_line = head.split(b"\r\n", 1)[0].split(b" ", 2)
        try:
            self._status = int(status_line[1])
        except (IndexError, ValueError):
            self._fail(TunnelRefused(0, None, f"the daemon answered no HTTP: {status_line!r}"[:200]))
            return
        if self._status != 200:
            self._framing = _framing(head)
            return self._collect_error()
        app = self._factory.buildProtocol(self.transport.getPeer())  # type: ignore[union-attr]
        if app is None:
            self._fail(TunnelRefused(0, None, "the factory built no protocol"))
            return
        self._app = app
        assert self.transport is not None
        app.makeConnection(self.transport)
        opened, self._opened = self._opened, Deferred()
        opened.callback(app)
        rest, self._buffer = self._buffer, b""
        if rest:
            app.dataReceived(rest)

    def _collect_error(self) -> None:
        """
        Gather the refusal's body: once it is whole (by its ``Content-Length``
        or its last chunk; a keep-alive daemon need not close), or too long,
        the connect fails and the connection is closed.
        """
        body = _whole_body(self._buffer, *self._framing)
        if body is not None:
            self._fail(parse_error(self._status, body))
        elif len(self._buffer) > MAX_ERROR_BODY:
            self.transport.loseConnection()  # type: ignore[union-attr]

    def _fail(self, error: TunnelRefused) -> None:
        if not self._opened.called:
            self._opened.errback(Failure(error))
        self.transport.loseConnection()  # type: ignore[union-attr]

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        if self._app is not None:
            self._app.connectionLost(reason)
            return
        if self._opened.called:
            return
        if self._status:
            self._opened.errback(Failure(parse_error(self._status, self._buffer)))
        else:
            self._opened.errback(Failure(TunnelRefused(0, None, f"the daemon closed the connection: "
                                                                f"{reason.getErrorMessage()}")))


def _framing(head: bytes) -> tuple[Optional[int], bool]:
    """A response head's body framing: its ``Content-Length`` (or ``None``) and whether it is chunked."""
    length: Optional[int] = None
    chunked = False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == b"content-length" and value.isdigit():
            length = int(value)
        elif name == b"transfer-encoding" and value.endswith(b"chunked"):
            chunked = True
    return (None, True) if chunked else (length, False)


def _whole_body(data: bytes, length: Optional[int], chunked: bool) -> Optional[bytes]:
    """
    The body in ``data`` once all of it arrived (by ``length``, or the last
    chunk of a chunked one), else ``None`` (also for a body delimited by the
    connection's end, or chunks that do not parse).
    """
    if length is not None:
        return data[:length] if len(data) >= length else None
    if not chunked:
        return None
    body, position = b"", 0
    while True:
        end = data.find(b"\r\n", position)
        if end < 0:
            return None
        try:
            size = int(data[position:end].split(b";", 1)[0], 16)
        except ValueError:
            return None
        if size == 0:
            return body
        if len(data) < end + 2 + size + 2:
            return None
        body += data[end + 2:end + 2 + size]
        position = end + 2 + size + 2


@implementer(IStreamClientEndpoint)
class TunnelEndpoint:
    """
    Connections to ``upstream`` inside node ``hostname`` through a daemon.

    :param daemon: how to reach the daemon (a TCP or UNIX client endpoint).
    :param hostname: the node.
    :param upstream: ``host:port`` or ``unix:/path`` inside the node.
    :param token: the bearer token, if the daemon wants one.
    """

    def __init__(self, daemon: IStreamClientEndpoint, hostname: str, upstream: str, token: Optional[str]) -> None:
        self._daemon = daemon
        self.hostname = hostname
        self.upstream = upstream
        self._head = request_head(hostname, upstream, token)

    def connect(self, protocolFactory: IProtocolFactory) -> "Deferred[IProtocol]":
        """Connect; fires with the factory's protocol once the tunnel is open."""
        opened: Deferred[IProtocol] = Deferred()
        handshake = _Handshake(self._head, protocolFactory, opened)

        def failed(reason: Failure) -> None:
            if not opened.called:
                opened.errback(reason)

        self._daemon.connect(_OneProtocol(handshake)).addErrback(failed)
        return opened


class _OneProtocol(Factory):
    """Builds the one handshake of a connect."""

    def __init__(self, protocol: Protocol) -> None:
        self._protocol = protocol

    def buildProtocol(self, addr: Any) -> Optional[Protocol]:
        return self._protocol


def daemon_endpoint(reactor: IClientReactor, url: str) -> IStreamClientEndpoint:
    """
    The client endpoint of a daemon ``url``: its UNIX socket, or ``http://host:port``.

    :raise ValueError: an ``https`` URL (plain pipes are not offered over TLS here).
    """
    if is_unix_socket(url):
        return UNIXClientEndpoint(reactor, socket_path(url))
    parts = urlsplit(url if "://" in url else "http://" + url)
    if parts.scheme != "http":
        raise ValueError(f"tunnels need an http:// URL or a UNIX socket, not {url!r}")
    return HostnameEndpoint(reactor, parts.hostname or "127.0.0.1", parts.port or 80)


__all__ = ["TunnelEndpoint", "TunnelRefused", "daemon_endpoint", "parse_error", "request_head"]
