# -*- test-case-name: tests.service.test_agents -*-
"""
Tests for :mod:`vmservice.service.agents`: which link a node's agent client
connects over, seen on a ``MemoryReactorClock`` as the UNIX connects (the
serial port's socket) it makes or does not make.
"""

from __future__ import annotations

import os

from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from vmservice.agent.transport_choice import FALLBACK_AFTER
from vmservice.hypervisors.cid_file import cid_path, write_cid
from vmservice.service.agents import agent_client


class AgentClientTests(SynchronousTestCase):
    def setUp(self) -> None:
        directory = self.mktemp()
        os.makedirs(directory)
        self.socket_path = os.path.join(directory, "agent.sock")
        self.reactor = MemoryReactorClock()

    def serial_connects(self, transport: str, seconds: float = 0.0) -> int:
        client = agent_client(self.reactor, self.socket_path, transport, None)  # type: ignore[arg-type]
        client.start()
        self.addCleanup(client.stop)
        self.reactor.advance(0)
        for _ in range(int(seconds)):
            self.reactor.advance(1)
        return len([c for c in self.reactor.unixClients if c[0] == self.socket_path])

    def test_no_cid_is_serial(self) -> None:
        """A VM started without a vsock device (no CID file) is reached over the serial port whatever the group says."""
        for transport in ("auto", "vsock", "virtio-serial"):
            self.reactor = MemoryReactorClock()
            self.assertEqual(self.serial_connects(transport), 1, transport)

    def test_serial_wins(self) -> None:
        """virtio-serial connects to the serial port even where the VM has a CID."""
        write_cid(self.socket_path, 1234)
        self.assertEqual(self.serial_connects("virtio-serial"), 1)

    def test_vsock_only(self) -> None:
        """vsock never connects to the serial port, however long the agent is silent."""
        write_cid(self.socket_path, 1234)
        self.assertEqual(self.serial_connects("vsock", FALLBACK_AFTER * 2), 0)

    def test_auto_falls_back(self) -> None:
        """auto tries vsock first, and the serial port once 20 s passed without an answer."""
        write_cid(self.socket_path, 1234)
        client = agent_client(self.reactor, self.socket_path, "auto", None)  # type: ignore[arg-type]
        client.start()
        self.addCleanup(client.stop)
        self.reactor.advance(0)
        for _ in range(int(FALLBACK_AFTER) - 1):
            self.reactor.advance(1)
        self.assertEqual(self.reactor.unixClients, [])
        for _ in range(10):
            self.reactor.advance(1)
        self.assertGreaterEqual(len(self.reactor.unixClients), 1)

    def test_auto_follows_a_hand_over(self) -> None:
        """A spare's client handed over to a node falls back to the node's socket, where the files were moved."""
        write_cid(self.socket_path, 1234)
        client = agent_client(self.reactor, self.socket_path, "auto", None)  # type: ignore[arg-type]
        client.start()
        self.addCleanup(client.stop)
        node_dir = self.mktemp()
        os.makedirs(node_dir)
        moved = os.path.join(node_dir, "agent.sock")
        os.replace(cid_path(self.socket_path), cid_path(moved))
        client.moved_to(moved)
        for _ in range(int(FALLBACK_AFTER) + 10):
            self.reactor.advance(1)
        self.assertEqual({c[0] for c in self.reactor.unixClients}, {moved})
