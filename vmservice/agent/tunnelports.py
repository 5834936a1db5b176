# -*- test-case-name: tests.agent.test_tunnelports -*-
"""
A node's tunnel ports: raw virtio-serial ports ``tunnel0``..``tunnel{N-1}``
(QEMU serves each on ``tunK.sock`` beside the agent's socket) that carry
one tunnel's bytes each without frames (``docs/agent-protocol.md``, "The
tunnel ports").  Each is a :class:`~.bulk.BulkChannel`, claimed as the bulk
port is (:mod:`.port_claim`); :class:`TunnelPorts` hands a tunnel the first
free one, or ``None`` (all taken, none there, or the agent does not serve
them): the tunnel then takes its multiplexed stream.  The ports are tried in
turn from the one after the last taken, so that a port just freed here is the
last one a new tunnel takes: its guest side may still be letting go of it (a
tunnel reset a moment ago), which would make the new tunnel wait for it.
"""

from __future__ import annotations

import os
from typing import Optional

from twisted.internet.interfaces import IReactorUNIX

from ..wire.tunnelport import MAX_TUNNEL_PORTS, port_name, socket_name
from .bulk import BulkChannel, BulkLink


def tunnel_socket(directory: str, index: int) -> str:
    """QEMU's socket of tunnel port ``index`` in a node's directory."""
    return os.path.join(directory, socket_name(index))


class TunnelPorts:
    """
    One node's tunnel ports (those whose sockets exist are used).

    :ivar supported: ``False`` once the agent refused a tunnel on a port as an
        operation it does not know (an older agent): this client tries no
        port again.
    """

    def __init__(self, reactor: IReactorUNIX, directory: str) -> None:
        self.channels = [BulkChannel(reactor, tunnel_socket(directory, index), port_name(index))
                         for index in range(MAX_TUNNEL_PORTS)]
        self.supported = True
        self._next = 0

    def moved_to(self, directory: str) -> None:
        """The node's sockets were renamed into ``directory``."""
        for index, channel in enumerate(self.channels):
            channel.socket_path = tunnel_socket(directory, index)

    @property
    def present(self) -> bool:
        """Whether the node has tunnel ports its agent may serve (free or not)."""
        return self.supported and any(os.path.exists(channel.socket_path) for channel in self.channels)

    async def claim(self) -> Optional[BulkLink]:
        """A link on a free port (its channel's ``name`` is the port's), or ``None``."""
        if not self.supported:
            return None
        count = len(self.channels)
        for step in range(count):
            index = (self._next + step) % count
            channel = self.channels[index]
            if channel.available:
                link = await channel.connect()
                if link is not None:
                    self._next = (index + 1) % count
                    return link
        return None


__all__ = ["TunnelPorts", "tunnel_socket"]
