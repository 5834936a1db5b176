# -*- test-case-name: tests.agent.test_bulk -*-
"""
The host's end of a guest's raw virtio-serial ports: the port ``bulk`` that
carries one copy's file bytes at a time without frames
(``docs/agent-protocol.md``, "The bulk port"), and the tunnel ports
``tunnel0``.. (:mod:`.tunnelports`), which work the same way.

:class:`BulkChannel` is one node's port (QEMU's server socket for it), its
claim the machine of :mod:`.port_claim`: a copy (or a tunnel)
:meth:`~BulkChannel.connect`\\ s for itself and gets a :class:`BulkLink`, or
``None`` when the node has no such port, another copy holds it, or its agent
is too old to serve it (then the copy takes its multiplexed stream).  The
link is the copy's: it writes the transfer's token first, then (an upload)
the body, or (a download) hunts for the guest's echo of the token and passes
what follows on to the copy.  Closing the link frees the channel.

Flow control is the socket's: a paused link stops reading, QEMU stops
filling the guest's port and the guest's ``sendfile`` waits; an upload's
producer is paused while the socket's buffer is full.
"""

from __future__ import annotations

import os
from typing import Callable, Optional

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.endpoints import UNIXClientEndpoint
from twisted.internet.error import ConnectingCancelledError
from twisted.internet.interfaces import IPushProducer, IReactorUNIX, ITransport
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..wire.bulk import TokenHunt, new_token
from .port_claim import PORT_CLAIM_MACHINE, PortClaimCore

log = Logger()

#: The port's socket's name, in the directory of the agent's.
BULK_SOCKET = "bulk.sock"
#: Seconds a connection to the port's socket may take.
CONNECT_TIMEOUT = 2.0
#: Bytes a link holds for a copy that has no writer yet before it stops reading.
PENDING_HIGH_WATER = 1024 * 1024


class BulkChannel:
    """
    One node's raw port (``bulk`` or a tunnel port), one user at a time.

    :ivar socket_path: QEMU's server socket for the port.
    :ivar name: the port's name in the guest.
    :ivar supported: ``False`` once the agent refused a bulk copy as an
        operation it does not know (an older agent): no more are tried.
    """

    def __init__(self, reactor: IReactorUNIX, socket_path: str, name: str = "bulk") -> None:
        self._reactor = reactor
        self.socket_path = socket_path
        self.name = name
        self.supported = True
        self.claim = PORT_CLAIM_MACHINE(PortClaimCore(name))

    @property
    def busy(self) -> bool:
        """Whether a user holds the port (or is connecting to it)."""
        return self.claim.busy()

    @property
    def available(self) -> bool:
        """Whether a user may try the port now."""
        return self.supported and not self.busy and os.path.exists(self.socket_path)

    async def connect(self) -> Optional["BulkLink"]:
        """A link for one user, or ``None`` (no port, busy, or no connection)."""
        if not self.supported or not os.path.exists(self.socket_path) or not self.claim.claim():
            return None
        link = BulkLink(self)
        endpoint = UNIXClientEndpoint(self._reactor, self.socket_path, timeout=CONNECT_TIMEOUT)
        factory = Factory.forProtocol(lambda: link)
        factory.noisy = False
        try:
            await endpoint.connect(factory)
        except (CancelledError, ConnectingCancelledError):
            self.claim.released()  # the user was cancelled: it takes no other way either
            raise
        except Exception as e:
            self.claim.released()
            log.warn("cannot connect to the port {path}: {error}", path=self.socket_path, error=str(e))
            return None
        if link.up:
            self.claim.connected()
        return link


WRITE_BUFFER = 1 << 20
"""What a copy's connection buffers before it pauses what writes to it."""


class BulkLink(Protocol):
    """
    One user's connection to a raw port (a copy's, a tunnel's).

    :ivar name: the port's name in the guest.
    :ivar token: the transfer's token (named in the copy's OPEN header as hex).
    :ivar lost: fires (with ``None``) once the connection is gone.
    """

    transport: ITransport

    def __init__(self, channel: BulkChannel) -> None:
        self._channel = channel
        self.name = channel.name
        self.token = new_token()
        self._hunt = TokenHunt(self.token)
        self._sink: Optional[Callable[[bytes], None]] = None
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._paused = False
        self._connected = False
        self.lost: Deferred[None] = Deferred()

    @property
    def up(self) -> bool:
        """Whether the connection is up."""
        return self._connected

    def connectionMade(self) -> None:
        self._connected = True
        # The transport pauses its producer (an upload's body) past this many buffered bytes: at the
        # default 64 KiB a 1 GiB upload paused and resumed its body thousands of times.
        self.transport.bufferSize = WRITE_BUFFER  # type: ignore[attr-defined]

    def start(self, sink: Optional[Callable[[bytes], None]] = None) -> None:
        """
        Send the token (the guest waits for it before it reads or writes);
        with ``sink``, the bytes after the guest's echo of it go there.
        """
        if sink is not None:
            self._sink = sink
            pending, self._pending, self._pending_size = self._pending, [], 0
            for chunk in pending:
                sink(chunk)
        if self._connected:
            self.transport.write(self.token)

    def write(self, data: bytes) -> None:
        """Body bytes (an upload)."""
        if self._connected:
            self.transport.write(data)

    def register_producer(self, producer: IPushProducer) -> None:
        """Pause ``producer`` while the connection's write buffer is full."""
        if self._connected:
            self.transport.registerProducer(producer, True)  # type: ignore[attr-defined]

    def dataReceived(self, data: bytes) -> None:
        try:
            content = self._hunt.feed(data)
        except ValueError as e:
            log.warn("port {path}: {error}", path=self._channel.socket_path, error=str(e))
            self.close()
            return
        if not content:
            return
        if self._sink is not None:
            self._sink(content)
            return
        self._pending.append(content)
        self._pending_size += len(content)
        if self._pending_size > PENDING_HIGH_WATER:
            self.pause()

    def pause(self) -> None:
        """Stop reading (the guest's writes wait)."""
        if self._connected and not self._paused:
            self._paused = True
            self.transport.pauseProducing()  # type: ignore[attr-defined]

    def resume(self) -> None:
        """Read again."""
        if self._connected and self._paused:
            self._paused = False
            self.transport.resumeProducing()  # type: ignore[attr-defined]

    def close(self) -> None:
        """Drop the connection (the channel is free once it is gone)."""
        self._sink = None
        if self._connected:
            self.transport.abortConnection()  # type: ignore[attr-defined]

    def connectionLost(self, reason: Failure = Failure(ConnectionError())) -> None:
        self._connected = False
        self._sink = None
        self._channel.claim.released()
        if not self.lost.called:
            self.lost.callback(None)


__all__ = ["BULK_SOCKET", "BulkChannel", "BulkLink", "CONNECT_TIMEOUT"]
