"""
Tests for :mod:`vmservice.agent.metrics`, the host side of the metrics channel: the codec, and one
exchange on a memory reactor (connection, answer, a stale answer skipped, deadline, refused connection).
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.trial.unittest import SynchronousTestCase

from vmservice.agent.metrics import MetricsClient, MetricsUnavailable, parse_answer, request_line


class CodecTests(SynchronousTestCase):
    def test_request(self) -> None:
        self.assertEqual(request_line("12"), b"snapshot 12\n")

    def test_answer(self) -> None:
        """The fields without the id; another request's answer is None; errors and garbage raise."""
        self.assertEqual(parse_answer(b'{"id":"3","totalCpus":1}', "3"), {"totalCpus": 1})
        self.assertIsNone(parse_answer(b'{"id":"2","totalCpus":1}', "3"))
        with self.assertRaisesRegex(MetricsUnavailable, "failed: no /proc"):
            parse_answer(b'{"id":"3","error":"no /proc"}', "3")
        with self.assertRaisesRegex(MetricsUnavailable, "JSON"):
            parse_answer(b"garbage", "3")
        with self.assertRaisesRegex(MetricsUnavailable, "object"):
            parse_answer(b"[1]", "3")


class ClientTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.client = MetricsClient(self.reactor)

    def ask(self, deadline: float = 2.0) -> Deferred[dict[str, Any]]:
        return Deferred.fromCoroutine(self.client.snapshot("/s/demo-1/stats.sock", deadline))

    def connect(self) -> tuple[Any, StringTransport]:
        path, factory, _timeout, _pid = self.reactor.unixClients[-1]
        self.assertEqual(path, "/s/demo-1/stats.sock")
        protocol = factory.buildProtocol(None)
        transport = StringTransport()
        protocol.makeConnection(transport)
        return protocol, transport

    def test_answer(self) -> None:
        """The request is written; an earlier connection's answer is skipped; the answer ends the connection."""
        d = self.ask()
        protocol, transport = self.connect()
        self.assertEqual(transport.value(), b"snapshot 1\n")
        protocol.dataReceived(b'{"id":"0","totalCpus":9}\n{"id":"1",')
        self.assertNoResult(d)
        protocol.dataReceived(b'"totalCpus":1}\n')
        self.assertEqual(self.successResultOf(d), {"totalCpus": 1})
        self.assertTrue(transport.disconnecting)
        self.assertFalse(self.reactor.getDelayedCalls())

    def test_deadline(self) -> None:
        """No answer within the deadline: MetricsUnavailable, the connection closed."""
        d = self.ask(2.0)
        _protocol, transport = self.connect()
        self.reactor.advance(1.9)
        self.assertNoResult(d)
        self.reactor.advance(0.2)
        self.assertIn("did not answer within 2 s", str(self.failureResultOf(d, MetricsUnavailable).value))
        self.assertTrue(transport.disconnecting)

    def test_deadline_while_connecting(self) -> None:
        """A connection that never completes is given up at the deadline."""
        d = self.ask(2.0)
        self.reactor.advance(2.0)
        self.failureResultOf(d, MetricsUnavailable)

    def test_refused(self) -> None:
        """No VM behind the socket: MetricsUnavailable saying so."""
        d = self.ask()
        _path, factory, _timeout, _pid = self.reactor.unixClients[-1]
        factory.clientConnectionFailed(None, ConnectionRefusedError("nobody"))  # type: ignore[arg-type]
        self.assertIn("cannot reach", str(self.failureResultOf(d, MetricsUnavailable).value))

    def test_closed_before_answer(self) -> None:
        """The guest side hangs up first."""
        d = self.ask()
        protocol, _transport = self.connect()
        protocol.connectionLost(None)
        self.assertIn("closed before an answer", str(self.failureResultOf(d, MetricsUnavailable).value))

    def test_error_answer(self) -> None:
        d = self.ask()
        protocol, _transport = self.connect()
        protocol.dataReceived(b'{"id":"1","error":"sampling failed: x"}\n')
        self.assertIn("sampling failed", str(self.failureResultOf(d, MetricsUnavailable).value))

    def test_turns(self) -> None:
        """Two requests to one node take turns on one connection at a time; the wait counts in the deadline."""
        first, second = self.ask(2.0), self.ask(2.0)
        self.assertEqual(len(self.reactor.unixClients), 1)
        protocol, _transport = self.connect()
        self.reactor.advance(1.5)
        protocol.dataReceived(b'{"id":"1","n":1}\n')
        self.assertEqual(self.successResultOf(first), {"n": 1})
        self.assertEqual(len(self.reactor.unixClients), 2)
        protocol, transport = self.connect()
        self.assertEqual(transport.value(), b"snapshot 2\n")
        self.reactor.advance(0.5)
        self.assertIn("did not answer within 2 s", str(self.failureResultOf(second, MetricsUnavailable).value))
        self.assertEqual(self.client._locks, {})
        self.assertFalse(self.reactor.getDelayedCalls())

    def test_no_turn_in_time(self) -> None:
        """A request still waiting for its turn at its deadline fails without connecting."""
        first, second = self.ask(5.0), self.ask(1.0)
        self.reactor.advance(1.0)
        self.failureResultOf(second, MetricsUnavailable)
        self.assertEqual(len(self.reactor.unixClients), 1)
        protocol, _transport = self.connect()
        protocol.dataReceived(b'{"id":"1","n":1}\n')
        self.assertEqual(self.successResultOf(first), {"n": 1})
        self.assertEqual(len(self.reactor.unixClients), 1)
        self.assertEqual(self.client._locks, {})
