# -*- test-case-name: tests.api.test_tunnel_socket -*-
"""
Tests for :mod:`vmservice.api.tunnel_socket` on a fake tunnel; the WebSocket
way into a real guest is tested in :mod:`tests.integration.test_tunnel_socket`.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.test.proto_helpers import StringTransport
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer
from zope.interface.verify import verifyObject

from vmservice.api.tunnel_socket import TunnelSocket
from vmservice.guestport.tunnel import ITunnel, ITunnelPeer


@implementer(ITunnel)
class FakeTunnel:
    def __init__(self) -> None:
        self.done: Deferred[None] = Deferred()
        self.peer: Any = None
        self.written: list[bytes] = []
        self.producer: Any = None
        self.closed = False

    def join(self, peer: Any) -> None:
        self.peer = peer

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def register_producer(self, producer: Any) -> None:
        self.producer = producer

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        pass


class TunnelSocketTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.tunnel = FakeTunnel()
        self.socket = TunnelSocket(self.tunnel)
        self.sent: list[tuple[bytes, bool]] = []
        self.closes: list[int] = []
        self.socket.sendMessage = lambda payload, isBinary=False: self.sent.append((payload, isBinary))  # type: ignore[method-assign]
        self.socket.sendClose = lambda code=None, reason=None: self.closes.append(code)  # type: ignore[method-assign,assignment]
        self.socket.transport = StringTransport()
        self.socket.onOpen()

    def test_joined(self) -> None:
        """On open the socket is the tunnel's peer, and the client's reading pauses with the tunnel."""
        self.assertTrue(verifyObject(ITunnelPeer, self.socket))
        self.assertIs(self.tunnel.peer, self.socket)
        self.assertIs(self.tunnel.producer, self.socket.transport)

    def test_messages(self) -> None:
        """Binary messages go to the upstream as they are; text ones are dropped; the guest's bytes go back binary."""
        self.socket.onMessage(b"\x00abc", True)
        self.socket.onMessage(b"text", False)
        self.assertEqual(self.tunnel.written, [b"\x00abc"])
        self.socket.write(b"back")
        self.assertEqual(self.sent, [(b"back", True)])

    def test_ends(self) -> None:
        """The tunnel's end closes the WebSocket with 1000 (once); the client's end closes the tunnel."""
        self.socket.loseConnection()
        self.socket.loseConnection()
        self.assertEqual(self.closes, [1000])
        self.socket.write(b"late")
        self.assertEqual(self.sent, [])
        self.socket.onClose(True, 1000, None)
        self.assertTrue(self.tunnel.closed)
