# -*- test-case-name: tests.cli.test_forwarding -*-
"""
``vmctl forward``'s SPEC grammar and its proxy (:mod:`vmservice.cli.forwarding`),
and the client's tunnel endpoint (:mod:`vmservice.client.tunnel`) over in-memory
connections.
"""

from __future__ import annotations

import io
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ConnectionDone
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import MemoryReactor, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from vmservice.cli.forwarding import ForwardProxy, ForwardSpec, listen, parse_spec
from vmservice.client.tunnel import TunnelEndpoint, TunnelRefused, request_head
from vmservice.wire.upstream import Upstream


class SpecTests(SynchronousTestCase):
    def test_forms(self) -> None:
        """Ports, addresses, brackets and unix: on either side."""
        tcp = Upstream(host="127.0.0.1", port=80)
        self.assertEqual(parse_spec("8080:127.0.0.1:80"), ForwardSpec("", "127.0.0.1", 8080, tcp))
        self.assertEqual(parse_spec("0.0.0.0:8080:127.0.0.1:80"), ForwardSpec("", "0.0.0.0", 8080, tcp))
        self.assertEqual(parse_spec("[::1]:8080:localhost:80"),
                         ForwardSpec("", "::1", 8080, Upstream(host="localhost", port=80)))
        self.assertEqual(parse_spec("8080:unix:/run/a.sock"),
                         ForwardSpec("", "127.0.0.1", 8080, Upstream(unix="/run/a.sock")))
        self.assertEqual(parse_spec("unix:/tmp/l.sock:unix:/run/a.sock"),
                         ForwardSpec("/tmp/l.sock", "", 0, Upstream(unix="/run/a.sock")))
        self.assertEqual(parse_spec("unix:/tmp/l.sock:127.0.0.1:80"), ForwardSpec("/tmp/l.sock", "", 0, tcp))

    def test_bad(self) -> None:
        for bad in ("", "80", "80:host", "x:127.0.0.1:80", "70000:h:80", "8080:h:0", "unix::h:80", ":h:80"):
            self.assertRaises(ValueError, parse_spec, bad)


class FakeDaemon:
    """A client endpoint whose connections are StringTransports the test answers."""

    def __init__(self) -> None:
        self.connections: list[tuple[Protocol, StringTransport]] = []

    def connect(self, factory: Factory) -> "Deferred[Any]":
        protocol = factory.buildProtocol(None)
        transport = StringTransport()
        protocol.makeConnection(transport)
        self.connections.append((protocol, transport))
        return succeed(protocol)


class Recorder(Protocol):
    def __init__(self) -> None:
        self.data = b""
        self.lost = False

    def dataReceived(self, data: bytes) -> None:
        self.data += data

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        self.lost = True


class EndpointTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.daemon = FakeDaemon()
        self.endpoint = TunnelEndpoint(self.daemon, "demo-1", "127.0.0.1:80", "tok")  # type: ignore[arg-type]

    def test_open(self) -> None:
        """The request head, then on 200 the connection is the application's."""
        recorder = Recorder()
        opened = self.endpoint.connect(Factory.forProtocol(lambda: recorder))
        handshake, transport = self.daemon.connections[0]
        self.assertEqual(transport.value(), request_head("demo-1", "127.0.0.1:80", "tok"))
        self.assertIn(b"X-Inlets-Upstream: 127.0.0.1:80\r\n", transport.value())
        self.assertIn(b"Authorization: Bearer tok\r\n", transport.value())
        self.assertNoResult(opened)
        handshake.dataReceived(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nfirst")
        self.assertIs(self.successResultOf(opened), recorder)
        self.assertIs(recorder.transport, transport)
        handshake.dataReceived(b" more")
        self.assertEqual(recorder.data, b"first more")
        handshake.connectionLost(Failure(ConnectionDone()))
        self.assertTrue(recorder.lost)

    def test_refused(self) -> None:
        """Another status fails the connect with the ErrorResponse."""
        opened = self.endpoint.connect(Factory.forProtocol(Recorder))
        handshake, _ = self.daemon.connections[0]
        handshake.dataReceived(b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\n\r\n"
                               b'{"error": "nothing listens", "code": "upstream_refused"}')
        handshake.connectionLost(Failure(ConnectionDone()))
        error = self.failureResultOf(opened, TunnelRefused).value
        self.assertEqual((error.status, error.code, error.message), (502, "upstream_refused", "nothing listens"))


    def test_refused_without_close(self) -> None:
        """
        A refusal whose body is whole by its framing (chunked, or a Content-Length) fails the connect at
        once and closes the connection: a daemon that keeps connections alive need not close it.
        """
        body = b'{"error": "no", "code": "upstream_gone"}'
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:25], body[25:], b""))
        for answer in (b"HTTP/1.1 502 Bad Gateway\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks,
                       b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)):
            daemon = FakeDaemon()
            opened = TunnelEndpoint(daemon, "demo-1", "127.0.0.1:1", None).connect(  # type: ignore[arg-type]
                Factory.forProtocol(Recorder))
            handshake, transport = daemon.connections[0]
            handshake.dataReceived(answer[:60])
            self.assertNoResult(opened)
            handshake.dataReceived(answer[60:])
            error = self.failureResultOf(opened, TunnelRefused).value
            self.assertEqual((error.status, error.code, error.message), (502, "upstream_gone", "no"))
            self.assertTrue(transport.disconnecting)


class ProxyTests(SynchronousTestCase):
    def test_join(self) -> None:
        """An accepted connection waits for its tunnel, then both sides are joined producer-to-consumer."""
        daemon = FakeDaemon()
        endpoint = TunnelEndpoint(daemon, "demo-1", "127.0.0.1:80", None)  # type: ignore[arg-type]
        err = io.StringIO()
        proxy = ForwardProxy(endpoint, parse_spec("0:127.0.0.1:80"), err)
        reactor = MemoryReactor()
        listen(reactor, proxy)
        self.assertEqual(reactor.tcpServers[0][0], 0)
        local = proxy.buildProtocol(None)
        assert local is not None
        here = StringTransport()
        local.makeConnection(here)
        self.assertEqual(here.producerState, "paused")
        handshake, there = daemon.connections[0]
        handshake.dataReceived(b"HTTP/1.1 200 OK\r\n\r\nhello")
        self.assertEqual(here.value(), b"hello")
        self.assertEqual(here.producerState, "producing")
        self.assertIs(here.producer, there)
        self.assertIs(there.producer, here)
        there.clear()
        local.dataReceived(b"up")
        self.assertEqual(there.value(), b"up")
        handshake.connectionLost(Failure(ConnectionDone()))
        self.assertTrue(here.disconnecting)
        self.assertIn("tunnel closed", err.getvalue())

    def test_refused_logged(self) -> None:
        daemon = FakeDaemon()
        endpoint = TunnelEndpoint(daemon, "demo-1", "127.0.0.1:1", None)  # type: ignore[arg-type]
        err = io.StringIO()
        local = ForwardProxy(endpoint, parse_spec("0:127.0.0.1:1"), err).buildProtocol(None)
        assert local is not None
        here = StringTransport()
        local.makeConnection(here)
        handshake, _ = daemon.connections[0]
        handshake.dataReceived(b'HTTP/1.1 502 Bad Gateway\r\n\r\n{"error": "refused", "code": "upstream_refused"}')
        handshake.connectionLost(Failure(ConnectionDone()))
        self.assertTrue(here.disconnecting)
        self.assertIn("no tunnel: 502 upstream_refused: refused", err.getvalue())


