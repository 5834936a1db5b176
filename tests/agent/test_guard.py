# -*- test-case-name: tests.agent.test_guard -*-
"""
Tests for :mod:`vmservice.agent.guard` on its own, and for the rules it
holds in :class:`~vmservice.agent.protocol.AgentProtocol` against a fake guest.
"""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.agent.fakes import AgentTestCase
from vmservice.agent.guard import (
    MAX_RESTARTS,
    MAX_UNREAD_ANSWERS,
    PENALTY_FORGET,
    RESTART_WINDOW,
    ChannelGuard,
    GuestFault,
    ReconnectPenalty,
)
from vmservice.wire import NO_NONCE, Hello, Open, Ping, Pong, Reset
from vmservice.wire.frames import encode_event


class ChannelGuardTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.guard = ChannelGuard(self.clock)

    def test_unread_answers(self) -> None:
        """Answers count only while the socket is paused; a drained socket starts the count again."""
        for _ in range(MAX_UNREAD_ANSWERS * 2):
            self.guard.answering(paused=False)
        for _ in range(MAX_UNREAD_ANSWERS):
            self.guard.answering(paused=True)
        self.guard.drained()
        for _ in range(MAX_UNREAD_ANSWERS):
            self.guard.answering(paused=True)
        error = self.assertRaises(GuestFault, self.guard.answering, True)
        self.assertIn("not reading", str(error))

    def test_restarts(self) -> None:
        """At most MAX_RESTARTS within RESTART_WINDOW; older ones are forgotten."""
        for _ in range(MAX_RESTARTS):
            self.guard.restarted()
            self.clock.advance(RESTART_WINDOW / MAX_RESTARTS / 2)
        self.assertRaises(GuestFault, self.guard.restarted)
        self.clock.advance(RESTART_WINDOW)
        for _ in range(MAX_RESTARTS):
            self.guard.restarted()


class ReconnectPenaltyTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.penalty = ReconnectPenalty(self.clock)
        self.delay = self.penalty.policy(lambda attempt: 0.1 * attempt)

    def test_none_due(self) -> None:
        """Without a fault the base policy decides."""
        self.assertEqual([self.delay(1), self.delay(3)], [0.1, 0.1 * 3])

    def test_doubles_then_forgets(self) -> None:
        """1, 2, 4 … 30 s for faults in a row, each paid once; a fault long after the last starts at 1 s."""
        seen = []
        for _ in range(7):
            self.penalty.fault()
            seen.append(self.delay(1))
            self.assertEqual(self.delay(1), 0.1)
        self.assertEqual(seen, [1, 2, 4, 8, 16, 30, 30])
        self.clock.advance(PENALTY_FORGET + 1)
        self.assertEqual(self.penalty.fault(), 1)


class ProtocolRulesTests(AgentTestCase):
    """The guard's rules in the protocol: a guest that breaks them has its connection dropped and reported."""

    def setUp(self) -> None:
        super().setUp()
        self.faults: list[object] = []
        self.proto._on_fault = self.faults.append
        self.ready()

    def test_pings_unread(self) -> None:
        """Pings are answered while the guest reads; while the socket is paused, only MAX_UNREAD_ANSWERS."""
        self.guest.send(*[Ping(b"%08d" % i) for i in range(MAX_UNREAD_ANSWERS * 2)])
        self.assertEqual(len(self.guest.receive()), MAX_UNREAD_ANSWERS * 2)
        self.proto.pauseProducing()
        self.guest.send(*[Ping(b"%08d" % i) for i in range(MAX_UNREAD_ANSWERS)])
        self.assertFalse(self.transport.disconnected)
        self.proto.resumeProducing()
        self.proto.pauseProducing()
        self.guest.send(*[Ping(b"%08d" % i) for i in range(MAX_UNREAD_ANSWERS + 1)])
        self.assertTrue(self.transport.disconnected)
        self.assertEqual(self.faults, [self.proto])
        self.assertEqual(self.guest.receive()[-1], Pong(b"%08d" % (MAX_UNREAD_ANSWERS - 1)))

    def test_opens_unread(self) -> None:
        """Refusals of the streams the guest opens count as answers."""
        self.proto.pauseProducing()
        self.guest.send(*[Open(2 * (i + 1), {"op": "x"}) for i in range(MAX_UNREAD_ANSWERS + 1)])
        self.assertTrue(self.transport.disconnected)
        self.assertIsInstance(self.guest.receive()[-1], Reset)
        self.assertEqual(self.faults, [self.proto])

    def test_restarts(self) -> None:
        """A guest that starts more than MAX_RESTARTS sessions within the window is dropped."""
        for i in range(MAX_RESTARTS):
            self.guest.restart(b"%08d" % i)
            self.guest.handshake()
            self.assertFalse(self.transport.disconnected)
        self.proto.dataReceived(encode_event(Hello(b"evil0000", NO_NONCE, "evil")))
        self.assertTrue(self.transport.disconnected)
        self.assertEqual(self.faults, [self.proto])
