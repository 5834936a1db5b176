# -*- test-case-name: tests.hypervisors.test_qmp -*-
"""Tests for the QMP client protocol over a StringTransport."""

from __future__ import annotations

import json
import os

from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from tests.hypervisors.descriptor_transport import DescriptorTransport
from vmservice.hypervisors.qmp import QMPError, QMPProtocol

GREETING = b'{"QMP": {"version": {"qemu": {"major": 7, "minor": 2, "micro": 0}}, "capabilities": []}}\r\n'


class QMPTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.events: list[dict] = []
        self.protocol = QMPProtocol(self.events.append)
        self.transport = StringTransport()
        self.protocol.makeConnection(self.transport)

    def sent(self) -> list[dict]:
        lines = [json.loads(line) for line in self.transport.value().splitlines() if line]
        self.transport.clear()
        return lines

    def negotiate(self) -> None:
        self.protocol.dataReceived(GREETING)
        self.assertEqual(self.sent(), [{"execute": "qmp_capabilities"}])
        self.protocol.dataReceived(b'{"return": {}}\r\n')

    def test_negotiation(self) -> None:
        """The greeting is answered with qmp_capabilities; ready fires after its reply."""
        self.assertNoResult(self.protocol.ready)
        self.negotiate()
        self.assertEqual(self.successResultOf(self.protocol.ready)["QMP"]["version"]["qemu"]["major"], 7)

    def test_commands_in_order_and_events(self) -> None:
        """Replies go to commands in order; events interleaved go to on_event."""
        self.negotiate()
        first = self.protocol.execute("query-status")
        second = self.protocol.execute("stop")
        self.assertEqual(self.sent(), [{"execute": "query-status"}, {"execute": "stop"}])
        self.protocol.dataReceived(b'{"return": {"status": "running", "running": true}}\r\n{"event": "STOP", "timestamp": {}}\r\n')
        self.protocol.dataReceived(b'{"return": {}}\r\n')
        self.assertEqual(self.successResultOf(first)["status"], "running")
        self.assertEqual(self.successResultOf(second), {})
        self.assertEqual([e["event"] for e in self.events], ["STOP"])

    def test_arguments(self) -> None:
        """Arguments are sent under 'arguments'."""
        self.negotiate()
        self.protocol.execute("migrate", uri="exec:cat > x")
        self.assertEqual(self.sent(), [{"execute": "migrate", "arguments": {"uri": "exec:cat > x"}}])

    def test_error(self) -> None:
        """An error reply fails the command with QMPError naming class and description."""
        self.negotiate()
        d = self.protocol.execute("nope")
        self.protocol.dataReceived(b'{"error": {"class": "CommandNotFound", "desc": "The command nope has not been found"}}\r\n')
        self.assertIn("CommandNotFound", str(self.failureResultOf(d, QMPError).value))

    def test_connection_lost(self) -> None:
        """Commands waiting when the connection drops fail; later ones fail at once."""
        self.negotiate()
        d = self.protocol.execute("query-status")
        self.protocol.connectionLost()
        self.failureResultOf(d, QMPError)
        self.failureResultOf(self.protocol.execute("stop"), QMPError)


class DescriptorPassingTests(SynchronousTestCase):
    def test_descriptor_goes_with_the_next_command(self) -> None:
        """A descriptor is sent with the next command's bytes (for QEMU's getfd)."""
        protocol = QMPProtocol()
        transport = DescriptorTransport()
        protocol.makeConnection(transport)
        protocol.dataReceived(GREETING + b'{"return": {}}\n')
        before = len(transport.value())
        with open(__file__, "rb") as f:
            protocol.send_fd(f.fileno())
            answer = protocol.execute("getfd", fdname="state")
        self.assertEqual(transport.descriptors, [(before, os.path.abspath(__file__))])
        self.assertEqual(json.loads(transport.value()[before:]), {"execute": "getfd", "arguments": {"fdname": "state"}})
        protocol.dataReceived(b'{"return": {}}\n')
        self.assertEqual(self.successResultOf(answer), {})

    def test_no_unix_socket(self) -> None:
        """A transport that cannot carry descriptors refuses at once."""
        protocol = QMPProtocol()
        protocol.makeConnection(StringTransport())
        self.assertRaises(QMPError, protocol.send_fd, 0)

    def test_lost(self) -> None:
        """No descriptor goes out on a lost connection."""
        protocol = QMPProtocol()
        protocol.makeConnection(DescriptorTransport())
        protocol.connectionLost()
        self.failureResultOf(protocol.ready, QMPError)
        self.assertRaises(QMPError, protocol.send_fd, 0)
