# -*- test-case-name: tests.agent.test_link -*-
"""Tests for :mod:`vmservice.agent.link`: what the owner hears, and where writes go."""

from __future__ import annotations

from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from tests.diagrams import drawn_transitions, machine_transitions
from vmservice.agent.link import LINK_MACHINE, LinkCore


class LinkTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.heard: list[str] = []
        self.core = LinkCore(
            lambda: self.heard.append("established"),
            lambda: self.heard.append("lost"),
            lambda: self.heard.append("timer"),
        )
        self.link = LINK_MACHINE(self.core)
        self.socket = StringTransport()

    def test_diagram(self) -> None:
        """docs/state-machines/agent-link.dot draws exactly the machine's transitions."""
        self.assertEqual(drawn_transitions("agent-link.dot"), machine_transitions(LINK_MACHINE))

    def test_socket_while_up(self) -> None:
        """The socket is the link's from ``connected`` until ``lost``."""
        self.assertIsNone(self.core.socket)
        self.link.connected(self.socket)
        self.assertIs(self.core.socket, self.socket)
        self.link.lost()
        self.assertIsNone(self.core.socket)

    def test_established_then_lost_once(self) -> None:
        """The owner hears of the session once, and of its end once."""
        self.link.connected(self.socket)
        self.link.acknowledged()
        self.link.acknowledged()
        self.link.lost()
        self.link.lost()
        self.assertEqual(self.heard, ["established", "lost"])

    def test_restart(self) -> None:
        """An unacknowledging HELLO after the session was up ends it and runs the timer; the next acknowledgement is a new session."""
        self.link.connected(self.socket)
        self.link.unacknowledged()
        self.link.acknowledged()
        self.link.unacknowledged()
        self.link.acknowledged()
        self.assertEqual(self.heard, ["timer", "established", "lost", "timer", "established"])

    def test_never_ready_no_loss(self) -> None:
        """A link lost before the agent acknowledged us is no loss to the owner; nothing after it counts."""
        self.link.connected(self.socket)
        self.link.lost()
        self.link.acknowledged()
        self.assertEqual(self.heard, [])
