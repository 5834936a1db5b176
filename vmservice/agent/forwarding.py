# -*- test-case-name: tests.agent.test_forwarding -*-
"""
The host's end of tunnels: ``forward`` streams (the guest side and the
stream's contents are described in :mod:`vmservice.guest.forwarding` and
``docs/agent-protocol.md``).

:func:`start_forward` opens the stream and fires with a :class:`GuestTunnel`
once the guest connected to the upstream, or fails with an
:class:`~vmservice.errors.AgentError` (``UPSTREAM_REFUSED`` ...) before any
byte flowed.  The tunnel is then joined to a peer
(:class:`~vmservice.guestport.tunnel.ITunnelPeer`: an HTTP connection taken over,
a WebSocket, a test) producer-to-consumer both ways: the peer's transport
pauses the tunnel (credit is withheld from the guest, which stops reading
the upstream), and the tunnel pauses the peer's producer while the guest's
credit is spent.  Nothing here knows HTTP.
"""

from __future__ import annotations

from typing import Any, Optional, cast

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IHalfCloseableProtocol, IPushProducer
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

from ..errors import AgentError, GuestErrorKind
from ..guestport.tunnel import ITunnel, ITunnelPeer
from ..wire.upstream import Upstream
from ..wire.openheaders.tunnel import ForwardHeader
from ..wire import ResetCode
from ..wire.payloads import decode_head
from .channel import Channel
from .errors import AgentRequestFailed, stream_error
from .stream import AgentStream

#: The guest's error names in a forward head, and what they are.
UPSTREAM_ERRORS = {
    "refused": GuestErrorKind.UPSTREAM_REFUSED,
    "unreachable": GuestErrorKind.UPSTREAM_UNREACHABLE,
    "timeout": GuestErrorKind.UPSTREAM_TIMEOUT,
    "not_found": GuestErrorKind.UPSTREAM_NOT_FOUND,
    "invalid": GuestErrorKind.UPSTREAM_INVALID,
}


def head_error(reply: Any, upstream: str) -> Optional[AgentError]:
    """
    What a forward head says: ``None`` for ``ok``, else the error.
    """
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        return AgentRequestFailed("the guest's tunnel head is malformed", kind=GuestErrorKind.MALFORMED)
    if reply["ok"]:
        return None
    kind = UPSTREAM_ERRORS.get(str(reply.get("error")), GuestErrorKind.UPSTREAM_UNREACHABLE)
    message = reply.get("message")
    return AgentError(kind, f"cannot connect to {upstream} in the guest: {message if isinstance(message, str) else kind.value}")


@implementer(IHalfCloseableProtocol)
class _TunnelProtocol(Protocol):
    """Parses the head, then passes the guest's bytes to the tunnel."""

    def __init__(self, owner: "GuestTunnel") -> None:
        self._owner = owner
        self._buffer = bytearray()
        self._headed = False

    def dataReceived(self, data: bytes) -> None:
        if self._headed:
            self._owner._content(data)
            return
        self._buffer += data
        try:
            decoded = decode_head(bytes(self._buffer))
        except ValueError as e:
            self._owner._failed(AgentRequestFailed(f"the guest's tunnel head is malformed: {e}",
                                                   kind=GuestErrorKind.MALFORMED))
            cast(AgentStream, self.transport).abortConnection(ResetCode.PROTOCOL_ERROR, "bad head")
            return
        if decoded is None:
            return
        reply, used = decoded
        rest = bytes(self._buffer[used:])
        self._buffer.clear()
        self._headed = True
        self._owner._headed(reply, rest)

    def readConnectionLost(self) -> None:
        # No half-close: the upstream's end (or a refusal) ends the tunnel.
        cast(AgentStream, self.transport).loseConnection()

    def writeConnectionLost(self) -> None:
        pass

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        self._owner._ended(reason)


@implementer(ITunnel)
class GuestTunnel:
    """
    One tunnel through the agent channel (see the module's description).

    :ivar opened: fires with the tunnel once the guest connected, or fails
        with an :class:`~vmservice.errors.AgentError`.
    :ivar done: fires once the tunnel is over; never fails.
    :ivar received: bytes the guest sent through the tunnel so far.
    """

    def __init__(self, upstream: str) -> None:
        self._upstream = upstream
        self._stream: Optional[AgentStream] = None
        self._peer: Optional[ITunnelPeer] = None
        self._pending: list[bytes] = []
        self._peer_paused = False
        self._ok = False
        self._over = False
        self.received = 0
        self.opened: Deferred[ITunnel] = Deferred(lambda d: self.abort())
        self.done: Deferred[None] = Deferred()

    # -- from the protocol ------------------------------------------------------------

    def _failed(self, error: AgentError) -> None:
        if not self.opened.called:
            self.opened.errback(Failure(error))

    def _headed(self, reply: Any, rest: bytes) -> None:
        if self.opened.called:
            return  # cancelled meanwhile: the stream is being reset
        error = head_error(reply, self._upstream)
        if error is not None:
            self._failed(error)
            return
        self._ok = True
        if rest:
            self._pending.append(rest)
        self._regulate()
        self.opened.callback(self)

    def _content(self, data: bytes) -> None:
        self.received += len(data)
        if self._peer is None:
            self._pending.append(data)
            self._regulate()
        else:
            self._peer.write(data)

    def _ended(self, reason: Failure) -> None:
        self._over = True
        if not self.opened.called:
            clean = reason.check(ConnectionDone) is not None
            error = (AgentRequestFailed("the guest ended the tunnel without a head", kind=GuestErrorKind.MALFORMED)
                     if clean else stream_error(reason, "the tunnel"))
            self._failed(error)
        peer, self._peer = self._peer, None
        if peer is not None:
            peer.unregisterProducer()
            peer.loseConnection()
        if not self.done.called:
            self.done.callback(None)

    # -- ITunnel --------------------------------------------------------------------------

    def join(self, peer: ITunnelPeer) -> None:
        """Deliver the guest's bytes to ``peer`` from now on (what came already first)."""
        if self._over:
            peer.loseConnection()
            return
        self._peer = peer
        peer.registerProducer(self, True)
        pending, self._pending = self._pending, []
        for chunk in pending:
            peer.write(chunk)
        self._regulate()

    def write(self, data: bytes) -> None:
        """Send ``data`` to the upstream."""
        if self._stream is not None:
            self._stream.write(data)

    def register_producer(self, producer: IPushProducer) -> None:
        """Pause ``producer`` while the guest's credit is spent."""
        if self._stream is not None:
            self._stream.registerProducer(producer, True)

    def close(self) -> None:
        """The peer is done: half-close; the guest closes the upstream and ends the stream."""
        if self._stream is not None and not self._over:
            self._stream.loseConnection()

    def abort(self) -> None:
        """Reset the tunnel now."""
        if self._stream is not None and not self._over:
            self._stream.abortConnection(ResetCode.CANCEL, "tunnel closed")

    def _regulate(self) -> None:
        stream = self._stream
        if stream is None or self._over:
            return
        if self._peer_paused or (self._ok and self._peer is None):
            stream.pauseProducing()
        else:
            stream.resumeProducing()

    def pauseProducing(self) -> None:
        """The peer is full: withhold credit (the guest stops reading the upstream)."""
        self._peer_paused = True
        self._regulate()

    def resumeProducing(self) -> None:
        """The peer has room again."""
        self._peer_paused = False
        self._regulate()

    def stopProducing(self) -> None:
        """The peer went away: abort."""
        self.abort()


def start_forward(agent: Channel, request: Upstream) -> "Deferred[ITunnel]":
    """
    Open a tunnel: fires with it once the guest connected to the upstream.

    :raises vmservice.agent.errors.AgentUnavailable: the agent is not connected.
    """
    tunnel = GuestTunnel(request.describe())
    tunnel._stream = agent.open_stream(ForwardHeader(request).to_json(), _TunnelProtocol(tunnel))
    return tunnel.opened


__all__ = ["GuestTunnel", "UPSTREAM_ERRORS", "head_error", "start_forward"]
