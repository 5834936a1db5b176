# -*- test-case-name: tests.service.test_agents -*-
"""
The agent client of a node or template (:func:`agent_client`), over the link
its group's ``agent_transport`` and its QEMU allow (``docs/vsock.md``).
"""

from __future__ import annotations

import os

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IProtocol, IProtocolFactory, IStreamClientEndpoint
from zope.interface import implementer

from ..agent.client import AgentClient
from ..agent.transport_choice import TransportChoice
from ..agent.transports import virtio_serial_endpoint
from ..agent.vsock import VsockClientEndpoint
from ..buffer_budget import BufferBudget
from ..hypervisors.cid_file import read_cid
from .reactor import IDaemonReactor


def agent_client(reactor: IDaemonReactor, socket_path: str, transport: str, budget: BufferBudget | None) -> AgentClient:
    """
    The agent client of the VM whose agent socket is ``socket_path``.

    A VM started without a vhost-vsock device (no CID recorded beside its
    socket: the host has none, or the group says ``virtio-serial``, or it was
    started so by an earlier configuration) is reached over the serial port
    whatever ``transport`` says; else ``vsock`` connects over vsock only and
    ``auto`` tries vsock and falls back (:class:`TransportChoice`).  The CID
    is read at each connect: a restore or a clone's QEMU has a new one.
    """
    if transport == "virtio-serial" or read_cid(socket_path) is None:
        return AgentClient(reactor, socket_path, budget=budget)
    clients: list[AgentClient] = []
    # The CID file sits beside the socket, which a spare's hand-over renames (AgentClient.moved_to).
    vsock = VsockClientEndpoint(reactor, reactor, lambda: read_cid(clients[0].socket_path))
    if transport == "vsock":
        client = AgentClient(reactor, socket_path, endpoint=vsock, budget=budget)
    else:
        name = os.path.basename(os.path.dirname(socket_path))
        choice = TransportChoice(reactor, vsock, _SerialOf(reactor, clients), name)
        client = AgentClient(reactor, socket_path, endpoint=choice, budget=budget, on_stop=choice.stop)
        client.on_ready(choice.answered)
    clients.append(client)
    return client


@implementer(IStreamClientEndpoint)
class _SerialOf:
    """The serial endpoint of the client in ``clients``, as it is at each connect (it follows a spare's hand-over)."""

    def __init__(self, reactor: IDaemonReactor, clients: list[AgentClient]) -> None:
        self._reactor = reactor
        self._clients = clients

    def connect(self, protocolFactory: IProtocolFactory) -> Deferred[IProtocol]:
        return virtio_serial_endpoint(self._reactor, self._clients[0].socket_path).connect(protocolFactory)


__all__ = ["agent_client"]
