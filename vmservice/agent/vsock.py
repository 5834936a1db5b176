# -*- test-case-name: tests.agent.test_vsock -*-
"""
An ``IStreamClientEndpoint`` that connects over AF_VSOCK to a guest
(:class:`VsockClientEndpoint`): the agent's vsock port
(:data:`AGENT_VSOCK_PORT`) on the CID its QEMU was started with.

Twisted has no vsock endpoint, and ``adoptStreamConnection`` takes only the
IP and UNIX families, so the connect is done here: a non-blocking
``connect()``, the reactor told to wait until the socket is writable, then
``SO_ERROR`` read; the connected socket becomes a
:class:`twisted.internet.tcp.Connection` (the same reads, writes, half-close
and abort a TCP or UNIX connection has), and the protocol is connected to it.

The CID is looked up at each connect (``cid``), not once: a node's QEMU is
started again by a restore, a fork or a clone, each with a CID of its own
(:mod:`vmservice.hypervisors.qemu.cids`, :mod:`vmservice.hypervisors.cid_file`), and the agent client's reconnecting
service connects to whichever runs now.
"""

from __future__ import annotations

import errno
import os
import socket
from typing import Callable, Optional

from attrs import frozen
from twisted.internet import tcp
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectError, ConnectingCancelledError, TimeoutError as ConnectTimeout
from twisted.internet.interfaces import (
    IAddress,
    IDelayedCall,
    IProtocol,
    IProtocolFactory,
    IReactorFDSet,
    IReactorTime,
    IStreamClientEndpoint,
)
from twisted.python.failure import Failure
from zope.interface import implementer

#: The agent's vsock port in the guest (:data:`vmservice.guest.listeners.VSOCK_PORT`).
AGENT_VSOCK_PORT = 700
#: Seconds one connection attempt may take.
CONNECT_TIMEOUT = 5.0
#: ``connect()``'s answers that mean "under way".
_IN_PROGRESS = (errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK)


@implementer(IAddress)
@frozen
class VsockAddress:
    """
    One end of a vsock connection.

    :ivar cid: the context id (2: the host; 1: the guest's own loopback).
    :ivar port: the vsock port.
    """

    cid: int
    port: int


def vsock_socket() -> socket.socket:
    """A new non-blocking AF_VSOCK stream socket (``OSError`` where the host has no vsock)."""
    return socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)


def _connect(skt: socket.socket, address: tuple[int, int]) -> int:
    return skt.connect_ex(address)


class VsockConnection(tcp.Connection):
    """A connected vsock socket as a transport: a TCP connection's reads and writes, vsock addresses."""

    def __init__(self, skt: socket.socket, protocol: IProtocol, reactor: IReactorFDSet,
                 host: VsockAddress, peer: VsockAddress) -> None:
        super().__init__(skt, protocol, reactor)
        self._host = host
        self._peer = peer
        self.logstr = f"vsock {peer.cid}:{peer.port}"

    def getHost(self) -> VsockAddress:
        """Our end."""
        return self._host

    def getPeer(self) -> VsockAddress:
        """The guest's end."""
        return self._peer


class _Connecting:
    """
    One connect under way: waits for the socket to become writable (an
    ``IWriteDescriptor`` for the reactor), then hands the connected socket to
    a protocol of ``factory``.
    """

    def __init__(self, reactor: IReactorFDSet, clock: IReactorTime, skt: socket.socket, peer: VsockAddress,
                 factory: IProtocolFactory, timeout: float) -> None:
        self._reactor = reactor
        self._socket = skt
        self._peer = peer
        self._factory = factory
        self.result: Deferred[IProtocol] = Deferred(self._cancel)
        self._timer: Optional[IDelayedCall] = clock.callLater(timeout, self._timed_out)

    def fileno(self) -> int:
        return self._socket.fileno()

    def logPrefix(self) -> str:
        return f"vsock connect {self._peer.cid}:{self._peer.port}"

    def start(self) -> None:
        self._reactor.addWriter(self)  # type: ignore[arg-type]

    def doWrite(self) -> None:
        self._reactor.removeWriter(self)  # type: ignore[arg-type]
        code = self._socket.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            self._fail(ConnectError(string=f"vsock {self._peer.cid}:{self._peer.port}: {os.strerror(code)}"))
            return
        self._stop_timer()
        try:
            host_cid, host_port = self._socket.getsockname()
        except (OSError, ValueError, TypeError):
            host_cid, host_port = -1, -1
        protocol = self._factory.buildProtocol(self._peer)
        if protocol is None:
            self._socket.close()
            self.result.errback(ConnectError(string="the factory built no protocol"))
            return
        transport = VsockConnection(self._socket, protocol, self._reactor, VsockAddress(host_cid, host_port), self._peer)
        transport.connected = True
        transport.startReading()  # type: ignore[no-untyped-call]
        protocol.makeConnection(transport)
        self.result.callback(protocol)

    def connectionLost(self, reason: Failure) -> None:
        self._fail(ConnectError(string=str(reason.value)))

    def _stop_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _fail(self, error: Exception) -> None:
        self._stop_timer()
        self._reactor.removeWriter(self)  # type: ignore[arg-type]
        self._socket.close()
        if not self.result.called:
            self.result.errback(error)

    def _timed_out(self) -> None:
        self._timer = None
        self._fail(ConnectTimeout(string=f"vsock {self._peer.cid}:{self._peer.port}"))

    def _cancel(self, result: Deferred[IProtocol]) -> None:
        self._stop_timer()
        self._reactor.removeWriter(self)  # type: ignore[arg-type]
        self._socket.close()
        result.errback(ConnectingCancelledError(self._peer))


@implementer(IStreamClientEndpoint)
class VsockClientEndpoint:
    """
    Connects to vsock port ``port`` of the guest whose CID ``cid()`` answers now.

    :param reactor: the reactor the connection runs on.
    :param clock: times the connect.
    :param cid: the guest's CID at the time of a connect, or ``None`` when it has none (its QEMU is not
        running, or was started without a vsock device): the connect fails at once.
    :param port: the guest's vsock port.
    :param timeout: seconds a connect may take.
    :param make_socket: makes the socket (tests give one end of a socket pair).
    :param connect: starts the connect (``socket.connect_ex``); an ``errno`` answer.
    """

    def __init__(
        self,
        reactor: IReactorFDSet,
        clock: IReactorTime,
        cid: Callable[[], Optional[int]],
        port: int = AGENT_VSOCK_PORT,
        *,
        timeout: float = CONNECT_TIMEOUT,
        make_socket: Callable[[], socket.socket] = vsock_socket,
        connect: Callable[[socket.socket, tuple[int, int]], int] = _connect,
    ) -> None:
        self._reactor = reactor
        self._clock = clock
        self._cid = cid
        self._port = port
        self._timeout = timeout
        self._make_socket = make_socket
        self._connect = connect

    def connect(self, protocolFactory: IProtocolFactory) -> Deferred[IProtocol]:
        """Connect a protocol of ``protocolFactory`` to the guest's port."""
        cid = self._cid()
        if cid is None:
            return _failed(ConnectError(string="the guest has no vsock CID now"))
        try:
            skt = self._make_socket()
        except OSError as error:
            return _failed(ConnectError(string=f"no vsock socket: {error}"))
        skt.setblocking(False)
        code = self._connect(skt, (cid, self._port))
        if code not in (0, *_IN_PROGRESS):
            skt.close()
            return _failed(ConnectError(string=f"vsock {cid}:{self._port}: {os.strerror(code)}"))
        connecting = _Connecting(self._reactor, self._clock, skt, VsockAddress(cid, self._port), protocolFactory, self._timeout)
        connecting.start()
        return connecting.result


def _failed(error: Exception) -> Deferred[IProtocol]:
    result: Deferred[IProtocol] = Deferred()
    result.errback(error)
    return result


__all__ = [
    "AGENT_VSOCK_PORT", "CONNECT_TIMEOUT", "VsockAddress", "VsockClientEndpoint", "VsockConnection",
    "vsock_socket",
]
