# -*- test-case-name: tests.agent.test_forwarding,tests.api.test_tunnel_socket -*-
"""
Tunnels to an upstream inside a node's guest (:meth:`vmservice.guestport.guest.IGuest.forward`):
the upstream, the open tunnel and the peer it delivers the guest's bytes to.
"""

from __future__ import annotations

from attrs import frozen
from twisted.internet.interfaces import IPushProducer
from zope.interface import Attribute, Interface


#: Longest UNIX socket path in the guest (``sun_path`` holds 108 bytes with its NUL).
MAX_UNIX_SOCKET_PATH = 107


@frozen
class ForwardRequest:
    """
    The upstream of a tunnel inside the guest: ``host``:``port`` over TCP, or
    the UNIX socket ``unix`` (then ``host`` is empty and ``port`` 0).
    """

    host: str = ""
    port: int = 0
    unix: str = ""

    def describe(self) -> str:
        """``host:port`` or ``unix:/path``, as clients write it."""
        if self.unix:
            return f"unix:{self.unix}"
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> "ForwardRequest":
        """
        Read ``host:port`` (``[v6 address]:port`` too) or ``unix:/absolute/path``.

        :raises ValueError: anything else, saying why.
        """
        if text.startswith("unix:"):
            path = text[5:]
            if not path.startswith("/") or "\0" in path:
                raise ValueError(f"a UNIX socket upstream needs an absolute path: {text!r}")
            if len(path.encode("utf-8", "surrogateescape")) > MAX_UNIX_SOCKET_PATH:
                raise ValueError(f"the UNIX socket path is longer than {MAX_UNIX_SOCKET_PATH} bytes")
            return cls(unix=path)
        host, colon, port = text.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not colon or not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"the upstream must be host:port (port 1 to 65535) or unix:/path, not {text!r}")
        if any(c.isspace() or c in "\0/[]" for c in host) or len(host) > 253:
            raise ValueError(f"invalid upstream host {host!r}")
        return cls(host=host, port=int(port))


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
