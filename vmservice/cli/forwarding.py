# -*- test-case-name: tests.cli.test_forwarding -*-
"""
``vmctl forward NODE SPEC...``: a native Twisted TCP (or UNIX socket) proxy
whose every accepted connection opens one tunnel through the daemon's plain
byte pipe (:class:`~vmservice.client.tunnel.TunnelEndpoint`) and is joined to
it producer-to-consumer both ways, the pattern of
``twisted.protocols.portforward``: each side's transport is the other's
registered push producer, so a slow reader on either end pauses the other.

A SPEC is ``[LOCAL_ADDR:]LOCAL_PORT:REMOTE_HOST:REMOTE_PORT``, with
``unix:/path`` in place of the local part, the remote part, or both
(:func:`parse_spec`).  The local address defaults to 127.0.0.1.
"""

from __future__ import annotations

import argparse
from typing import Any, Optional, TextIO

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.internet.error import CannotListenError, ConnectionDone
from twisted.internet.interfaces import IListeningPort, IProtocol
from twisted.internet.protocol import Factory, Protocol, ServerFactory
from twisted.python.failure import Failure

from ..client import Client, IClientReactor
from ..client.tunnel import TunnelEndpoint, TunnelRefused
from ..wire.upstream import Upstream
from .commands import Command, add_node_argument
from .context import Context, Failed

#: The local address when a SPEC names none.
DEFAULT_LOCAL_ADDRESS = "127.0.0.1"


@frozen
class ForwardSpec:
    """
    One forwarding: where to listen here, and the upstream in the node.

    :ivar local_unix: a UNIX socket path to listen on, or "".
    :ivar local_address: the TCP address to listen on (when not UNIX).
    :ivar local_port: the TCP port to listen on (0: any free port).
    :ivar remote: the upstream inside the node.
    """

    local_unix: str
    local_address: str
    local_port: int
    remote: Upstream

    def describe_local(self) -> str:
        if self.local_unix:
            return f"unix:{self.local_unix}"
        address = f"[{self.local_address}]" if ":" in self.local_address else self.local_address
        return f"{address}:{self.local_port}"


def parse_spec(text: str) -> ForwardSpec:
    """
    Read ``[LOCAL_ADDR:]LOCAL_PORT:REMOTE_HOST:REMOTE_PORT`` (``unix:/path`` on
    either side; ``[v6]`` addresses in brackets).

    :raises ValueError: anything else, saying why.
    """
    at = text.find(":unix:")
    if at >= 0:
        local, remote_text = text[:at], text[at + 1:]
    else:
        parts = text.rsplit(":", 2)
        if len(parts) != 3 or not parts[0]:
            raise ValueError(f"expected [LOCAL_ADDR:]LOCAL_PORT:REMOTE_HOST:REMOTE_PORT, not {text!r}")
        local, remote_text = parts[0], f"{parts[1]}:{parts[2]}"
        if remote_text.startswith("[") is False and parts[1].endswith("]"):
            raise ValueError(f"unbalanced brackets in {text!r}")
    remote = Upstream.parse(remote_text)
    if local.startswith("unix:"):
        path = local[5:]
        if not path:
            raise ValueError(f"no local UNIX socket path in {text!r}")
        return ForwardSpec(path, "", 0, remote)
    address, colon, port = local.rpartition(":")
    if not colon:
        address = DEFAULT_LOCAL_ADDRESS
    if address.startswith("[") and address.endswith("]"):
        address = address[1:-1]
    if not address or not port.isascii() or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"the local part must be [ADDR:]PORT or unix:/path, not {local!r}")
    return ForwardSpec("", address, int(port), remote)


class _Remote(Protocol):
    """The tunnel's side of one accepted connection."""

    def __init__(self, local: "_Local") -> None:
        self._local = local

    def dataReceived(self, data: bytes) -> None:
        self._local.transport.write(data)  # type: ignore[union-attr]

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        self._local.remote_lost()


class _RemoteFactory(Factory):
    def __init__(self, local: "_Local") -> None:
        self._local = local

    def buildProtocol(self, addr: Any) -> Optional[Protocol]:
        return _Remote(self._local)


class _Local(Protocol):
    """An accepted local connection: one tunnel, joined producer-to-consumer."""

    def __init__(self, proxy: "ForwardProxy") -> None:
        self._proxy = proxy
        self._remote: Optional[IProtocol] = None
        self._gone = False

    def connectionMade(self) -> None:
        transport: Any = self.transport
        transport.pauseProducing()  # nothing is read until the tunnel is open
        self._peer = str(transport.getPeer())
        self._proxy.log(f"connection from {self._peer}: opening a tunnel to {self._proxy.spec.remote.describe()}")
        self._proxy.endpoint.connect(_RemoteFactory(self)).addCallbacks(self._opened, self._failed)

    def _opened(self, remote: IProtocol) -> None:
        if self._gone:
            remote.transport.loseConnection()  # type: ignore[attr-defined]
            return
        self._remote = remote
        local: Any = self.transport
        tunnel: Any = remote.transport  # type: ignore[attr-defined]
        tunnel.registerProducer(local, True)
        local.registerProducer(tunnel, True)
        local.resumeProducing()

    def _failed(self, reason: Failure) -> None:
        error = reason.value
        message = str(error) if isinstance(error, TunnelRefused) else reason.getErrorMessage()
        self._proxy.log(f"connection from {self._peer}: no tunnel: {message}")
        if self.transport is not None:
            self.transport.loseConnection()

    def dataReceived(self, data: bytes) -> None:
        if self._remote is not None:
            self._remote.transport.write(data)  # type: ignore[attr-defined]

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        self._gone = True
        if self._remote is not None:
            self._remote.transport.loseConnection()  # type: ignore[attr-defined]

    def remote_lost(self) -> None:
        if not self._gone:
            self._proxy.log(f"connection from {self._peer}: tunnel closed")
        if self.transport is not None:
            self.transport.loseConnection()


class ForwardProxy(ServerFactory):
    """
    The factory of one listening port: each connection is one tunnel.

    :param endpoint: opens tunnels to the spec's upstream.
    :param spec: what is forwarded.
    :param err: where connections are logged.
    """

    def __init__(self, endpoint: TunnelEndpoint, spec: ForwardSpec, err: TextIO) -> None:
        self.endpoint = endpoint
        self.spec = spec
        self._err = err

    def log(self, message: str) -> None:
        self._err.write(f"{self.spec.describe_local()}: {message}\n")
        self._err.flush()

    def buildProtocol(self, addr: Any) -> Optional[Protocol]:
        return _Local(self)


def listen(reactor: IClientReactor, proxy: ForwardProxy) -> IListeningPort:
    """Start listening for ``proxy``'s spec (a TCP port or a UNIX socket)."""
    spec = proxy.spec
    if spec.local_unix:
        port: IListeningPort = reactor.listenUNIX(spec.local_unix, proxy)
    else:
        port = reactor.listenTCP(spec.local_port, proxy, interface=spec.local_address)
    return port


def listening_on(port: IListeningPort, spec: ForwardSpec) -> str:
    """What a port listens on, with the port the system chose for port 0."""
    if spec.local_unix:
        return f"unix:{spec.local_unix}"
    host = port.getHost()
    address = f"[{host.host}]" if ":" in host.host else host.host  # type: ignore[attr-defined]
    return f"{address}:{host.port}"  # type: ignore[attr-defined]


__all__ = ["DEFAULT_LOCAL_ADDRESS", "FORWARD", "ForwardProxy", "ForwardSpec", "listen", "listening_on", "parse_spec"]


async def _forward(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl forward``: forward local ports or UNIX sockets to ports or UNIX sockets in a node, through the
    daemon (until Ctrl-C).
    """
    try:
        specs = [parse_spec(text) for text in options.specs]
    except ValueError as error:
        raise Failed(str(error)) from None
    ports = []
    try:
        for spec in specs:
            try:
                endpoint = client.tunnel_endpoint(options.hostname, spec.remote.describe())
            except ValueError as error:
                raise Failed(str(error)) from None
            proxy = ForwardProxy(endpoint, spec, context.err)
            try:
                port = listen(context.reactor, proxy)
            except CannotListenError as error:
                raise Failed(f"cannot listen on {spec.describe_local()}: {error.socketError}") from None
            ports.append(port)
            context.out.write(f"forwarding {listening_on(port, spec)} -> {options.hostname} "
                              f"{spec.remote.describe()}\n")
        context.out.flush()
        stopped: Deferred[None] = Deferred()
        core: Any = context.reactor
        core.addSystemEventTrigger("before", "shutdown", stopped.callback, None)  # Ctrl-C stops the reactor
        await stopped
    finally:
        for port in ports:
            port.stopListening()
    context.err.write("forwarding stopped\n")
    return 0


def _forward_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl forward``."""
    add_node_argument(parser, "NODE")
    parser.add_argument("specs", nargs="+", metavar="SPEC",
                        help="[LOCAL_ADDR:]LOCAL_PORT:REMOTE_HOST:REMOTE_PORT, unix:/path on either side "
                             "(LOCAL_ADDR defaults to 127.0.0.1; LOCAL_PORT 0 picks a free port)")


FORWARD = Command("forward", "forward local ports or UNIX sockets to ports or UNIX sockets in a node, "
        "through the daemon (until Ctrl-C)", _forward_arguments, _forward)
