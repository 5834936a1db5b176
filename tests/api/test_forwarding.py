# -*- test-case-name: tests.api.test_forwarding -*-
"""
``GET /vm/{hostname}/forward`` (:mod:`vmservice.api.forwarding`) through the
real Api on a :class:`~vmservice.api.streaming.StreamingSite` and an HTTP/1.1
channel over a ``StringTransport``, with a fake agent whose ``forward``
stream the test drives: the errors answered before any tunnel, the takeover
of the connection, bytes both ways, back-pressure and the ends.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.api.connections import parse_response
from tests.fakes import OneNodeFleet
from vmservice.api.app import Api
from vmservice.api.forwarding import PIPE_HEAD, ForwardApi
from vmservice.api.streaming import StreamingSite
from vmservice.metrics import Metrics
from vmservice.wire.payloads import encode_head


class ForwardApiTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.fleet = OneNodeFleet()
        routes = ForwardApi(self.fleet).routes()  # type: ignore[arg-type]
        api = Api(self.reactor, routes, Metrics(), None)
        self.site = StreamingSite(api.resource(), api.plan_body, reactor=self.reactor)
        self.channel = self.site.buildProtocol(None)
        self.transport = StringTransport()
        self.channel.makeConnection(self.transport)

    def get(self, path: str = "/vm/demo-1/forward", headers: str = "X-Inlets-Upstream: 127.0.0.1:8000\r\n",
            extra: bytes = b"") -> None:
        self.channel.dataReceived(f"GET {path} HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode() + extra)
        self.reactor.advance(0)

    @property
    def stream(self) -> Any:
        return self.fleet.agent.streams[-1]

    def assertError(self, status: int, code: str) -> None:
        got, headers, body = parse_response(self.transport.value())
        self.assertEqual((got, headers[b"content-type"]), (status, b"application/json"), body)
        self.assertEqual(json.loads(body)["code"], code)

    def test_bad_upstream(self) -> None:
        """No upstream, or one that is not host:port / unix:/path: 400 and no stream."""
        for headers in ("", "X-Inlets-Upstream: nowhere\r\n", "X-Inlets-Upstream: unix:relative\r\n",
                        "X-Inlets-Upstream: h:0\r\n"):
            self.setUp()
            self.get(headers=headers)
            self.assertError(400, "invalid_upstream")
            self.assertEqual(self.fleet.agent.streams, [])

    def test_query_parameter(self) -> None:
        """The ``upstream`` query parameter when there is no header; UNIX sockets."""
        self.get("/vm/demo-1/forward?upstream=unix%3A%2Frun%2Fa.sock", headers="")
        self.assertEqual(self.stream.header, {"op": "forward", "unix": "/run/a.sock"})

    def test_node_errors(self) -> None:
        """Unknown node 404, paused 409, agent down 503."""
        self.get("/vm/demo-9/forward")
        self.assertError(404, "node_not_found")
        for state, status in (("paused", 409), ("down", 503)):
            self.setUp()
            self.fleet.state = state
            self.get()
            self.assertEqual(parse_response(self.transport.value())[0], status)

    def test_websocket_not_yet(self) -> None:
        """An upgrade to WebSocket is answered 501 for now, with no stream."""
        self.get(headers="X-Inlets-Upstream: 127.0.0.1:80\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n")
        self.assertError(501, "not_supported")
        self.assertEqual(self.fleet.agent.streams, [])

    def test_refused(self) -> None:
        """The guest's refusal is an error answer, before any tunnel."""
        for error, status, code in (("refused", 502, "upstream_refused"), ("timeout", 504, "upstream_timeout"),
                                    ("not_found", 502, "upstream_not_found"),
                                    ("unreachable", 502, "upstream_unreachable")):
            self.setUp()
            self.get()
            self.assertEqual(self.stream.header, {"op": "forward", "host": "127.0.0.1", "port": 8000})
            self.assertEqual(self.transport.value(), b"")
            self.stream.deliver(encode_head({"ok": False, "error": error, "message": "no"}))
            self.stream.end()
            self.assertError(status, code)
            self.assertEqual(parse_response(self.transport.value())[1][b"connection"], b"close")
            self.assertTrue(self.transport.disconnecting)

    def test_refusal_not_reused(self) -> None:
        """
        A refused tunnel's connection is closed after its answer: the tunnel's first bytes the client sent
        after the head are not taken for a request.
        """
        self.get(headers="X-Inlets-Upstream: nowhere\r\n", extra=b"GET /vm/demo-1/forward HTTP/1.1\r\n\r\n")
        self.assertError(400, "invalid_upstream")
        self.assertTrue(self.transport.disconnecting)
        self.assertEqual(self.transport.value().count(b"HTTP/1.1 "), 1)

    def test_takeover(self) -> None:
        """Once the guest connected: the 200 head, then raw bytes both ways; early bytes are kept."""
        self.get(extra=b"early")
        self.stream.deliver(encode_head({"ok": True}) + b"first")
        self.assertEqual(self.transport.value(), PIPE_HEAD + b"first")
        self.assertEqual(bytes(self.stream.written), b"early")
        protocol = self.transport.protocol  # type: ignore[attr-defined]
        protocol.dataReceived(b"GET / HTTP/1.1\r\n\r\n")
        self.assertEqual(bytes(self.stream.written), b"earlyGET / HTTP/1.1\r\n\r\n")
        self.stream.deliver(b"HTTP/1.0 200 OK\r\n\r\nbody")
        self.assertTrue(self.transport.value().endswith(b"\r\n\r\nbody"))
        # Back-pressure: the stream pauses the client's reading; the client's transport pauses the stream.
        self.assertIs(self.stream.producer, self.transport)
        self.assertIs(self.transport.producer, self.fleet.agent.streams[-1].protocol.receiver)
        self.transport.producer.pauseProducing()
        self.assertTrue(self.stream.paused)
        self.transport.producer.resumeProducing()
        self.assertFalse(self.stream.paused)
        # The guest's end closes the connection.
        self.stream.end()
        self.assertTrue(self.transport.disconnecting)

    def test_client_end(self) -> None:
        """The client closing half-closes the stream (the guest closes the upstream)."""
        self.get()
        self.stream.deliver(encode_head({"ok": True}))
        self.transport.protocol.connectionLost(Failure(ConnectionDone()))  # type: ignore[attr-defined]
        self.assertTrue(self.stream.half_closed)

    def test_client_gone_before_connect(self) -> None:
        """A client that leaves while the guest connects resets the stream."""
        self.get()
        self.channel.connectionLost(Failure(ConnectionLost()))
        self.assertIsNotNone(self.stream.aborted)
