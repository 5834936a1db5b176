"""
Tests for :mod:`vmservice.api.connection_limits`: connections counted in
total and by client address until they close, and the ones beyond a bound
answered 429 or 503 (an ErrorResponse, once the request head is in), then
half-closed, drained and timed out; on ``StringTransport``\\ s and a memory
clock, with a real ``Site`` behind.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.protocols.policies import ProtocolWrapper
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.resource import Resource
from twisted.web.server import Site

from vmservice.api.connection_limits import MAX_REFUSING, REFUSAL_TIMEOUT, ConnectionLimits, peer_of
from vmservice.metrics import Metrics
from vmservice.buffer_budget import BufferBudget

REQUEST = b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"


class _Ok(Resource):
    isLeaf = True

    def render_GET(self, request: Any) -> bytes:
        return b"ok"


class _Transport(StringTransport):
    """A TCP-like transport that records a half-close and tells its protocol when it is lost."""

    def __init__(self, peer: Any) -> None:
        super().__init__(peerAddress=peer)
        self.write_closed = False

    def loseWriteConnection(self) -> None:
        self.write_closed = True


def ip(host: str) -> IPv4Address:
    return IPv4Address("TCP", host, 40000)


class ConnectionLimitsTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = MemoryReactorClock()
        self.limits = ConnectionLimits(Site(_Ok()), self.clock, most=4, most_per_peer=2)
        self.open: list[tuple[Any, _Transport]] = []

    def connect(self, peer: Any) -> tuple[Any, _Transport]:
        """A new connection from ``peer``: its protocol (``None`` when closed at once) and transport."""
        protocol = self.limits.buildProtocol(peer)
        transport = _Transport(peer)
        if protocol is not None:
            protocol.makeConnection(transport)
            self.open.append((protocol, transport))
        return protocol, transport

    def close(self, protocol: Any) -> None:
        protocol.connectionLost(Failure(ConnectionDone()))

    def answer(self, transport: _Transport) -> tuple[int, dict[bytes, bytes], Any]:
        head, _, body = transport.value().partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
        return int(lines[0].split()[1]), headers, json.loads(body) if body.startswith(b"{") else body

    def tearDown(self) -> None:
        for protocol, transport in self.open:
            if not getattr(protocol, "_gone", False):
                try:
                    protocol.connectionLost(Failure(ConnectionDone()))
                except Exception:
                    pass

    def test_within_bounds(self) -> None:
        """A connection within the bounds is the site's protocol behind a ProtocolWrapper, and answers."""
        protocol, transport = self.connect(ip("10.0.0.1"))
        self.assertIsInstance(protocol, ProtocolWrapper)
        protocol.dataReceived(REQUEST)
        self.assertEqual(self.answer(transport)[0], 200)
        self.assertEqual(self.limits.open, 1)

    def test_per_peer(self) -> None:
        """
        A third connection from one address is answered 429
        too_many_connections once its request head is in (not before),
        with Connection: close, then half-closed; another address is not
        concerned; once one of the first closes, the address may connect again.
        """
        first, _ = self.connect(ip("10.0.0.1"))
        self.connect(ip("10.0.0.1"))
        refused, transport = self.connect(ip("10.0.0.1"))
        self.assertNotIsInstance(refused, ProtocolWrapper)
        refused.dataReceived(REQUEST[:20])
        self.assertEqual(transport.value(), b"")
        refused.dataReceived(REQUEST[20:-1])
        self.assertEqual(transport.value(), b"")
        refused.dataReceived(REQUEST[-1:])
        status, headers, body = self.answer(transport)
        self.assertEqual((status, body["code"]), (429, "too_many_connections"))
        self.assertIn("limits.max_connections_per_peer", body["error"])
        self.assertEqual((headers[b"connection"], headers[b"content-type"]), (b"close", b"application/json"))
        self.assertEqual(int(headers[b"content-length"]), len(json.dumps(body)) + 1)
        self.assertTrue(transport.write_closed)
        other, _ = self.connect(ip("10.0.0.2"))
        self.assertIsInstance(other, ProtocolWrapper)
        self.close(first)
        again, _ = self.connect(ip("10.0.0.1"))
        self.assertIsInstance(again, ProtocolWrapper)
        self.assertEqual((self.limits.open, self.limits.refused), (3, {"peer": 1, "total": 0}))

    def test_total(self) -> None:
        """Past the total, a connection from any address is answered 503 connection_limit_reached."""
        for host in ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"):
            self.assertIsInstance(self.connect(ip(host))[0], ProtocolWrapper)
        refused, transport = self.connect(ip("10.0.0.5"))
        refused.dataReceived(REQUEST)
        status, _, body = self.answer(transport)
        self.assertEqual((status, body["code"]), (503, "connection_limit_reached"))
        self.assertEqual(self.limits.refused, {"peer": 0, "total": 1})

    def test_unix_socket_clients(self) -> None:
        """The clients of a UNIX socket count in the total only."""
        for _ in range(4):
            self.assertIsInstance(self.connect(UNIXAddress(None))[0], ProtocolWrapper)
        refused, transport = self.connect(UNIXAddress(None))
        refused.dataReceived(REQUEST)
        self.assertEqual(self.answer(transport)[0], 503)

    def test_refusal_drains_and_times_out(self) -> None:
        """
        After its answer a refused connection reads the rest into nothing; it
        is aborted once REFUSAL_TIMEOUT passed, whether it sent its head or not,
        and a refusal closed by the client cancels its timer.
        """
        self.connect(ip("10.0.0.1"))
        self.connect(ip("10.0.0.1"))
        answered, transport = self.connect(ip("10.0.0.1"))
        silent, quiet = self.connect(ip("10.0.0.1"))
        closing, _ = self.connect(ip("10.0.0.1"))
        answered.dataReceived(b"POST /x HTTP/1.1\r\nContent-Length: 99999\r\n\r\n")
        size = len(transport.value())
        answered.dataReceived(b"x" * 99999)
        self.assertEqual(len(transport.value()), size)
        self.close(closing)
        self.clock.advance(REFUSAL_TIMEOUT)
        self.assertTrue(transport.disconnected)
        self.assertTrue(quiet.disconnected)
        self.assertEqual(quiet.value(), b"")
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_head_too_long(self) -> None:
        """A refused connection that sends 16 KiB without the end of a head is answered anyway."""
        self.connect(ip("10.0.0.1"))
        self.connect(ip("10.0.0.1"))
        refused, transport = self.connect(ip("10.0.0.1"))
        refused.dataReceived(b"G" * 20_000)
        self.assertEqual(self.answer(transport)[0], 429)

    def test_refusals_bounded(self) -> None:
        """
        At most MAX_REFUSING refusals are under way; past that a connection over
        a bound is closed at once (no protocol); once one refusal ends, the next
        is answered again.
        """
        self.connect(ip("10.0.0.1"))
        self.connect(ip("10.0.0.1"))
        refusals = [self.connect(ip("10.0.0.1"))[0] for _ in range(MAX_REFUSING)]
        self.assertNotIn(None, refusals)
        self.assertIsNone(self.connect(ip("10.0.0.1"))[0])
        self.close(refusals[0])
        self.assertIsNotNone(self.connect(ip("10.0.0.1"))[0])

    def test_counts_for_metrics(self) -> None:
        """/metrics shows the connections open and refused, and the buffer budget."""
        metrics = Metrics()
        budget = BufferBudget(1000)
        budget.reservation("x").grow(10)
        metrics.watch_limits(budget, self.limits)
        self.connect(ip("10.0.0.1"))
        self.connect(ip("10.0.0.1"))
        self.connect(ip("10.0.0.1"))
        text = metrics.render()[0].decode()
        for line in ('vmservice_api_connections 2.0', 'vmservice_api_connections_refused_total{limit="peer"} 1.0',
                     'vmservice_buffer_budget_bytes 1000.0', 'vmservice_buffer_budget_held_bytes 10.0',
                     'vmservice_buffer_budget_refusals_total 0.0'):
            self.assertIn(line, text)


class PeerTests(SynchronousTestCase):
    def test_peer_of(self) -> None:
        """An IPv4 address is itself; an IPv6 one its /64 (a mapped IPv4 its IPv4); a UNIX client none."""
        cases: list[tuple[Any, Optional[str]]] = [
            (ip("192.0.2.7"), "192.0.2.7"),
            (IPv6Address("TCP", "2001:db8::1", 1), "2001:db8::/64"),
            (IPv6Address("TCP", "2001:db8::ffff:2", 1), "2001:db8::/64"),
            (IPv6Address("TCP", "2001:db8:0:1::2", 1), "2001:db8:0:1::/64"),
            (IPv6Address("TCP", "::ffff:192.0.2.7", 1), "192.0.2.7"),
            (IPv6Address("TCP", "fe80::1%eth0", 1), "fe80::/64"),
            (UNIXAddress(b"/run/x.sock"), None),
            (None, None),
        ]
        for address, peer in cases:
            self.assertEqual(peer_of(address), peer, address)
