# -*- test-case-name: tests.agent.test_transports -*-
"""
How the host reaches a guest agent's channel, and keeps reaching it.

Here: the UNIX socket QEMU serves for the agent's virtio-serial port
(``-chardev socket,path=...,server=on,wait=off``).  The socket file may not exist yet
right after QEMU starts, and the connection drops whenever QEMU exits or the daemon
reconnects, so the channel is a :class:`~twisted.application.internet.ClientService`
that retries with a short exponential backoff on an injected clock.  The socket may
also be renamed while the channel is connected (a spare VM's sockets move into the
directory of the node it becomes): :class:`MovableSocketEndpoint` connects to where
it is now.  The AF_VSOCK endpoint sits beside :func:`virtio_serial_endpoint`
(:mod:`.vsock`, and the choice between them: :mod:`.transport_choice`); everything
above takes any ``IStreamClientEndpoint``.
"""

from __future__ import annotations

from typing import Callable, Optional

from zope.interface import implementer

from twisted.application.internet import ClientService, backoffPolicy
from twisted.internet.endpoints import UNIXClientEndpoint
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import (
    IProtocol,
    IProtocolFactory,
    IReactorTime,
    IReactorUNIX,
    IStreamClientEndpoint,
)

#: First delay before reconnecting, in seconds (doubled per failed attempt).
RETRY_INITIAL_DELAY = 0.05
#: Longest delay between attempts: a guest that boots is noticed within this.
RETRY_MAX_DELAY = 1.0
#: Seconds one connection attempt may take.
CONNECT_TIMEOUT = 5.0


def virtio_serial_endpoint(
    reactor: IReactorUNIX, socket_path: str, *, timeout: float = CONNECT_TIMEOUT
) -> IStreamClientEndpoint:
    """
    The endpoint of QEMU's server socket for a virtio-serial port.

    :param reactor: an ``IReactorUNIX`` provider.
    :param socket_path: the ``path=`` of the ``-chardev socket``.
    :param timeout: seconds a connection attempt may take.
    """
    return UNIXClientEndpoint(reactor, socket_path, timeout=timeout)


@implementer(IStreamClientEndpoint)
class MovableSocketEndpoint:
    """
    :func:`virtio_serial_endpoint` at a path that may change: each connection
    goes to :attr:`socket_path` as it is then.

    :ivar socket_path: the ``path=`` of the ``-chardev socket``, now.
    """

    def __init__(self, reactor: IReactorUNIX, socket_path: str, *, timeout: float = CONNECT_TIMEOUT) -> None:
        self._reactor = reactor
        self._timeout = timeout
        self.socket_path = socket_path

    def connect(self, protocolFactory: IProtocolFactory) -> "Deferred[IProtocol]":
        return virtio_serial_endpoint(self._reactor, self.socket_path, timeout=self._timeout).connect(
            protocolFactory)


def retry_policy(
    initial_delay: float = RETRY_INITIAL_DELAY,
    max_delay: float = RETRY_MAX_DELAY,
    factor: float = 2.0,
) -> Callable[[int], float]:
    """
    An exponential backoff without jitter: one daemon talks to each socket, so there
    is no herd to spread, and tests can predict the delays.

    :return: seconds to wait before attempt ``n`` (counting from 1).
    """
    return backoffPolicy(
        initialDelay=initial_delay, maxDelay=max_delay, factor=factor, jitter=lambda: 0.0
    )


def reconnecting_channel(
    clock: IReactorTime,
    endpoint: IStreamClientEndpoint,
    factory: IProtocolFactory,
    *,
    policy: Optional[Callable[[int], float]] = None,
) -> ClientService:
    """
    A service that connects ``factory`` to ``endpoint`` and reconnects whenever the
    connection fails or drops, until stopped.

    :param clock: schedules the retries.
    :param endpoint: where to connect, e.g. :func:`virtio_serial_endpoint`.
    :param factory: builds the protocol of each connection.
    :param policy: delay before each retry; :func:`retry_policy` by default.
    """
    return ClientService(
        endpoint, factory, retryPolicy=policy or retry_policy(), clock=clock
    )
