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
credit is spent.  The peer's connection ending (its transport stops
producing, whether the client closed or vanished) is the peer's end, as its
``close``: what it sent reaches the upstream before the guest closes it; the
guest's end is waited for at most :data:`PEER_GONE_GRACE` seconds, then the
tunnel is reset.  Nothing here knows HTTP.
"""

from __future__ import annotations

from typing import Any, Optional

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IPushProducer, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from ..errors import AgentError, GuestErrorKind
from ..guestport.tunnel import ITunnel, ITunnelPeer
from ..wire.upstream import Upstream
from ..wire.openheaders.tunnel import ForwardHeader
from ..wire import ResetCode
from .channel import Channel
from .errors import AgentRequestFailed
from .headed import HeadedProtocol
from .relay import CreditRelay
from .stream import AgentStream
from .tunnel_state import TUNNEL_MACHINE, TunnelCore

log = Logger()

#: Seconds a tunnel whose peer is gone waits for the guest's end (what the peer sent reaching the
#: upstream) before it is reset.
PEER_GONE_GRACE = 30.0

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


@implementer(ITunnel)
class GuestTunnel(CreditRelay):
    """
    One tunnel through the agent channel (see the module's description); its
    lifecycle is the machine of :mod:`.tunnel_state`.

    :ivar opened: fires with the tunnel once the guest connected, or fails
        with an :class:`~vmservice.errors.AgentError`.
    :ivar done: fires once the tunnel is over; never fails.
    :ivar received: bytes the guest sent through the tunnel so far.
    """

    def __init__(self, upstream: str, clock: IReactorTime) -> None:
        super().__init__()
        self._upstream = upstream
        self._clock = clock
        self._grace: Optional[IDelayedCall] = None
        self.received = 0
        self.opened: Deferred[ITunnel] = Deferred(lambda d: self.abort())
        self._core = TunnelCore(tunnel=self, relay=self, opened=self.opened)
        self._inputs = TUNNEL_MACHINE(self._core)
        self.done = self._core.done

    # -- from the protocol (a HeadReceiver) -----------------------------------------

    def connected(self, stream: AgentStream) -> None:
        self._stream = self._core.stream = stream

    def head_malformed(self, error: ValueError) -> None:
        self._inputs.refused(AgentRequestFailed(f"the guest's tunnel head is malformed: {error}",
                                                kind=GuestErrorKind.MALFORMED))
        assert self._stream is not None
        self._stream.abortConnection(ResetCode.PROTOCOL_ERROR, "bad head")

    def read_ended(self) -> None:
        # No half-close: the upstream's end (or a refusal) ends the tunnel.
        assert self._stream is not None
        self._stream.loseConnection()

    def headed(self, reply: Any, rest: bytes) -> None:
        error = head_error(reply, self._upstream)
        if error is None:
            self._inputs.head_ok(rest)
        else:
            self._inputs.refused(error)

    def body(self, data: bytes) -> None:
        self.received += len(data)
        self._inputs.content(data)

    def ended(self, reason: Failure) -> None:
        grace, self._grace = self._grace, None
        if grace is not None and grace.active():
            grace.cancel()
        self._inputs.ended(reason)

    # -- ITunnel --------------------------------------------------------------------------

    def join(self, peer: ITunnelPeer) -> None:
        """Deliver the guest's bytes to ``peer`` from now on (what came already first)."""
        self._inputs.join(peer)

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
        self._inputs.close()

    def abort(self) -> None:
        """Reset the tunnel now."""
        self._inputs.abort()

    def stopProducing(self) -> None:
        """The peer's connection is gone: its end (see the module's description)."""
        self._consumer_paused = False
        self._inputs.peer_gone()
        self._await_end()

    def _await_end(self) -> None:
        """Reset the tunnel if the guest's end does not come within :data:`PEER_GONE_GRACE` seconds."""
        if self._grace is None and not self.done.called:
            self._grace = self._clock.callLater(PEER_GONE_GRACE, self._give_up)

    def _give_up(self) -> None:
        """The guest's end did not come in time after the peer left: reset the tunnel."""
        self._grace = None
        if not self.done.called:
            log.info("tunnel to {upstream}: no end from the guest {grace:g} s after its client left",
                     upstream=self._upstream, grace=PEER_GONE_GRACE)
            self.abort()

    def _regulate(self) -> None:
        self._inputs.credit()


def start_forward(agent: Channel, request: Upstream, clock: IReactorTime) -> "Deferred[ITunnel]":
    """
    Open a tunnel: fires with it once the guest connected to the upstream.

    :param clock: bounds the wait for the guest's end once the peer is gone.
    :raises vmservice.agent.errors.AgentUnavailable: the agent is not connected.
    """
    tunnel = GuestTunnel(request.describe(), clock)
    agent.open_stream(ForwardHeader(request).to_json(), HeadedProtocol(tunnel))
    return tunnel.opened


__all__ = ["GuestTunnel", "PEER_GONE_GRACE", "UPSTREAM_ERRORS", "head_error", "start_forward"]
