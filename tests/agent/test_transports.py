# -*- test-case-name: tests.agent.test_transports -*-
"""
Tests for :mod:`vmservice.agent.transports`.
"""

from __future__ import annotations

from twisted.internet.address import UNIXAddress
from twisted.internet.error import ConnectionDone
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from vmservice.agent.transports import (
    CONNECT_TIMEOUT,
    MovableSocketEndpoint,
    reconnecting_channel,
    retry_policy,
    virtio_serial_endpoint,
)


class EndpointTests(SynchronousTestCase):
    """
    The endpoint of QEMU's socket.
    """

    def test_connects_to_path(self) -> None:
        """
        The endpoint connects to the socket path with the connect timeout.
        """
        reactor = MemoryReactorClock()
        virtio_serial_endpoint(reactor, "/run/x/agent.sock").connect(Factory.forProtocol(Protocol))
        [(path, _, timeout, _)] = reactor.unixClients
        self.assertEqual((path, timeout), ("/run/x/agent.sock", CONNECT_TIMEOUT))


class MovableSocketEndpointTests(SynchronousTestCase):
    """
    The endpoint of a socket that may be renamed.
    """

    def test_connects_where_it_is_now(self) -> None:
        """Each connection goes to the path the endpoint holds then, with the connect timeout."""
        reactor = MemoryReactorClock()
        endpoint = MovableSocketEndpoint(reactor, "/run/spare-1/agent.sock")
        endpoint.connect(Factory.forProtocol(Protocol))
        endpoint.socket_path = "/run/node-1/agent.sock"
        endpoint.connect(Factory.forProtocol(Protocol))
        self.assertEqual([(path, timeout) for path, _, timeout, _ in reactor.unixClients],
                         [("/run/spare-1/agent.sock", CONNECT_TIMEOUT), ("/run/node-1/agent.sock", CONNECT_TIMEOUT)])


class RetryPolicyTests(SynchronousTestCase):
    """
    The reconnection backoff.
    """

    def test_default(self) -> None:
        """
        Delays double from 0.1 s and stop growing at 1 s, without jitter.
        """
        policy = retry_policy()
        self.assertEqual([policy(n) for n in range(1, 8)], [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])

    def test_custom(self) -> None:
        """
        The initial delay, the cap and the factor can be chosen.
        """
        policy = retry_policy(1.0, 5.0, 3.0)
        self.assertEqual([policy(n) for n in range(0, 4)], [1.0, 3.0, 5.0, 5.0])


class ChannelTests(SynchronousTestCase):
    """
    The reconnecting service.
    """

    def test_reconnects_on_clock(self) -> None:
        """
        After a connection is lost, the service connects again when the injected
        clock reaches the policy's delay.
        """
        reactor = MemoryReactorClock()
        service = reconnecting_channel(
            reactor,
            virtio_serial_endpoint(reactor, "/s"),
            Factory.forProtocol(Protocol),
            policy=lambda attempt: 2.5,
        )
        service.startService()
        self.assertEqual(len(reactor.unixClients), 1)
        protocol = reactor.unixClients[0][1].buildProtocol(UNIXAddress("/s"))
        protocol.makeConnection(StringTransport())
        protocol.connectionLost(Failure(ConnectionDone()))
        reactor.advance(2.4)
        self.assertEqual(len(reactor.unixClients), 1)
        reactor.advance(0.1)
        self.assertEqual(len(reactor.unixClients), 2)
        service.stopService()
