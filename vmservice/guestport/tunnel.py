# -*- test-case-name: tests.agent.test_forwarding,tests.api.test_tunnel_socket -*-
"""
Tunnels to an upstream inside a node's guest (:meth:`vmservice.guestport.guest.IGuest.forward`;
the upstream is a :class:`vmservice.wire.upstream.Upstream`):
the open tunnel and the peer it delivers the guest's bytes to.
"""

from __future__ import annotations

from twisted.internet.interfaces import IPushProducer
from zope.interface import Attribute, Interface

__all__ = ["ITunnel", "ITunnelPeer"]


class ITunnel(IPushProducer):
    """
    An open byte tunnel to an upstream inside the guest (its connect succeeded).

    Join it to a peer with :meth:`join`: the peer's bytes go in through
    :meth:`write`, the guest's bytes come out through the peer's ``write``.  As
    an ``IPushProducer`` (of the guest's bytes) pausing it withholds credit
    from the guest, which stops reading the upstream socket.  There is no
    half-close: :meth:`close` or the upstream's end ends the whole tunnel.
    """

    done = Attribute("A Deferred firing once the tunnel is over (whichever side ended it); it never fails.")

    def join(peer: "ITunnelPeer") -> None:
        """Deliver the guest's bytes to ``peer`` from now on (what came already first)."""

    def write(data: bytes) -> None:
        """Send ``data`` to the upstream."""

    def register_producer(producer: IPushProducer) -> None:
        """Pause ``producer`` (the peer's reading) while the guest's credit is spent."""

    def close() -> None:
        """The peer is done: the guest closes the upstream once what was written reached it."""

    def abort() -> None:
        """Reset the tunnel now (the guest closes the upstream, dropping what waits)."""


class ITunnelPeer(Interface):
    """What a tunnel delivers the guest's bytes to: the peer side's transport, in effect."""

    def write(data: bytes) -> None:
        """Bytes from the upstream."""

    def registerProducer(producer: IPushProducer, streaming: bool) -> None:
        """The tunnel registers itself, so that a full peer pauses it."""

    def unregisterProducer() -> None:
        """The tunnel is over."""

    def loseConnection() -> None:
        """The tunnel is over: close the peer (after what was written)."""
