# -*- test-case-name: tests.agent.test_tunnelports -*-
"""
Tunnels whose bytes go over a tunnel port (:mod:`.tunnelports`) while their
control stays on the tunnel's multiplexed stream (``docs/agent-protocol.md``,
"The tunnel ports").

:func:`open_forward` claims a free port and opens ``forward-port`` with the
port's name and the link's token; a :class:`PortTunnel` is then the
:class:`~.forwarding.GuestTunnel` it would have been on the stream (the same
lifecycle machine, :mod:`.tunnel_state`), except that

- the guest's bytes come from the link (after the guest's echo of the token)
  and the peer's go to it; pausing the tunnel pauses the link's reading
  (QEMU stops taking what the guest writes to the port), and the peer's
  producer is paused while the link's write buffer is full;
- the stream carries only each side's end: ``{"size": N}`` and HALF_CLOSE
  (:func:`vmservice.wire.bulk.encode_upload_end`), N the bytes it put on the
  port.  The host sends its end when the peer closes; the guest, once it
  delivered the host's N bytes to the upstream or the upstream ended.  The
  host delivers the guest's N bytes to the peer before it half-closes the
  stream in turn, so the tunnel ends as a stream tunnel does;
- the peer's connection ending (its transport's ``stopProducing``, however
  it ended) is the peer's end, not a reset: a reset would reach the guest on
  the stream ahead of the peer's last bytes on the port.  The link is then
  not read any more, and the guest's end closes the tunnel at once (or a
  reset, after :data:`PEER_GONE_GRACE` seconds without it: an upstream that
  does not take what the peer sent, a guest that never ends);
- the tunnel's end or death (a reset, the agent's loss, the link's loss)
  closes the link, which frees the port.

When no port is free, or the guest refuses the operation (``UNKNOWN_OP``: an
older agent, and the node's ports are not tried again; ``REFUSED``: the
guest's port is still held by a tunnel that is ending), the tunnel opens on
its stream as before (:func:`~.forwarding.start_forward`).
"""

from __future__ import annotations

from typing import Any, Optional

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..errors import AgentError, GuestErrorKind
from ..guestport.tunnel import ITunnel
from ..wire import ResetCode
from ..wire.bulk import MAX_END, decode_upload_end, encode_upload_end
from ..wire.openheaders.tunnel import ForwardHeader
from ..wire.tunnelport import port_header
from ..wire.upstream import Upstream
from .bulk import BulkLink
from .channel import Channel
from .errors import AgentRequestFailed
from .forwarding import PEER_GONE_GRACE, GuestTunnel, head_error, start_forward
from .headed import HeadedProtocol
from .stream import StreamReset
from .tunnelports import TunnelPorts

log = Logger()


class PortTunnel(GuestTunnel):
    """
    One tunnel over a tunnel port (see the module's description).

    :ivar link: the tunnel's port link.
    :ivar declined: the guest refused the port (the caller opens the tunnel
        on its stream instead); ``opened`` has failed.
    :ivar unsupported: ... because its agent does not know the operation.
    :ivar sent: bytes written to the port.
    """

    def __init__(self, upstream: str, link: BulkLink, clock: IReactorTime) -> None:
        super().__init__(upstream, clock)
        self.link = link
        self.declined = False
        self.unsupported = False
        self.sent = 0
        self._headed = False
        self._closing = False
        self._over = False
        self._end = b""
        self._expected: Optional[int] = None
        self._read_ended = False
        self._drained = False
        self._peer_gone = False
        self._carried = False
        link.lost.addCallback(self._link_lost)

    # -- the stream ---------------------------------------------------------------------

    def headed(self, reply: Any, rest: bytes) -> None:
        self._headed = True
        if head_error(reply, self._upstream) is None and reply.get("port") is not True:
            self.head_malformed(ValueError("an ok head without the port"))
            return
        if head_error(reply, self._upstream) is None:
            # The token first: the guest hunts for it before it moves a byte, and echoes it.
            self._carried = True
            self.link.start(self._from_port)
        self._body(rest)
        super().headed(reply, b"")

    def body(self, data: bytes) -> None:
        self._body(data)

    def _body(self, data: bytes) -> None:
        """The stream carries only the guest's end after the head."""
        if not data:
            return
        self._end += data
        if len(self._end) > MAX_END:
            self._protocol_error("the guest's tunnel end is too long")

    def read_ended(self) -> None:
        if not self._headed or self._read_ended:
            super().read_ended()
            return
        self._read_ended = True
        try:
            self._expected = decode_upload_end(self._end)
        except ValueError as e:
            self._protocol_error(f"bad tunnel end from the guest: {e}")
            return
        self._maybe_drained()

    def ended(self, reason: Failure) -> None:
        self._over = True
        error = reason.value
        if (not self._headed and isinstance(error, StreamReset)
                and error.code in (ResetCode.REFUSED, ResetCode.UNKNOWN_OP)):
            self.declined = True
            self.unsupported = error.code == ResetCode.UNKNOWN_OP
        self.link.close()
        if self._carried:
            log.info("tunnel to {upstream} over {port} is over", upstream=self._upstream, port=self.link.name)
        super().ended(reason)

    def _protocol_error(self, reason: str) -> None:
        log.warn("tunnel to {upstream}: {reason}", upstream=self._upstream, reason=reason)
        if self._stream is not None:
            self._stream.abortConnection(ResetCode.PROTOCOL_ERROR, reason[:100])

    # -- the port -----------------------------------------------------------------------

    def _from_port(self, data: bytes) -> None:
        if self._expected is not None:
            data = data[:max(0, self._expected - self.received)]
        if not data:
            return
        self.received += len(data)
        self._inputs.content(data)
        self._maybe_drained()

    def _maybe_drained(self) -> None:
        """
        Once the guest's N bytes came (or its end, when the peer is gone: they have no one to go to):
        half-close in turn (the tunnel is then over).
        """
        if (self._expected is not None and (self.received >= self._expected or self._peer_gone)
                and self._stream is not None):
            self._expected = None
            self._drained = True
            self.link.close()
            super().read_ended()

    def _link_lost(self, _: object) -> None:
        """The port's connection is gone before the guest's bytes were all through: the tunnel is dead."""
        if not self._over and not self._drained:
            self.abort()

    # -- ITunnel ------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Send ``data`` to the upstream, over the port."""
        if self._closing or self._over:
            return
        self.sent += len(data)
        self.link.write(data)

    def register_producer(self, producer: IPushProducer) -> None:
        """Pause ``producer`` while the link's write buffer is full."""
        self.link.register_producer(producer)

    def close(self) -> None:
        """The peer is done: say how many bytes it sent, then half-close."""
        if self._closing:
            return
        self._closing = True
        if self._stream is not None and not self._over:
            self._stream.write(encode_upload_end(self.sent))
        self._inputs.close()

    def stopProducing(self) -> None:
        """
        The peer's connection is gone: its end, as on the stream (:class:`GuestTunnel`'s ``PeerGone``),
        with the count of what it put on the port said first, so that the guest delivers it before it
        closes the upstream.  What the guest sends has no one to go to: the link is not read any more,
        and the guest's count is not waited for (an upstream that keeps sending cannot keep the tunnel).
        """
        if self._peer_gone:
            return
        self._peer_gone = True
        self.link.pause()
        if not self._closing and self._stream is not None and not self._over:
            self._closing = True
            self._stream.write(encode_upload_end(self.sent))
        super().stopProducing()
        self._maybe_drained()

    def give_credit(self, holding: bool) -> None:
        """Pause or resume the link (the stream's credit is left alone: it carries no content)."""
        if self._peer_gone or self.withheld(holding):
            self.link.pause()
        else:
            self.link.resume()


async def open_forward(agent: Channel, request: Upstream, ports: Optional[TunnelPorts],
                       clock: IReactorTime) -> ITunnel:
    """
    Open a tunnel over a free tunnel port, else on its stream (see the module's
    description); fires once the guest connected to the upstream.

    :param clock: bounds the wait for the guest's end once the peer is gone.
    """
    upstream = request.describe()
    link = await ports.claim() if ports is not None else None
    if ports is not None and link is None:
        log.info("tunnel to {upstream}: every tunnel port is taken, its stream carries it", upstream=upstream)
    if ports is not None and link is not None:
        tunnel = PortTunnel(upstream, link, clock)
        header = port_header(ForwardHeader(request).to_json(), link.name, link.token)
        try:
            agent.open_stream(header, HeadedProtocol(tunnel))
        except AgentError:
            link.close()
            raise
        try:
            opened = await tunnel.opened
        except AgentError as error:
            if not tunnel.declined:
                raise
            if tunnel.unsupported:
                ports.supported = False
            log.info("tunnel to {upstream}: the guest refused port {port} ({error}), its stream carries it",
                     upstream=upstream, port=link.name, error=str(error))
        else:
            log.info("tunnel to {upstream}: port {port}", upstream=upstream, port=link.name)
            return opened
    return await start_forward(agent, request, clock)


__all__ = ["PEER_GONE_GRACE", "PortTunnel", "open_forward"]
