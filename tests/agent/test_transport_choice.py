# -*- test-case-name: tests.agent.test_transport_choice -*-
"""
Tests for :mod:`vmservice.agent.transport_choice`: the machine against its
diagram, and :class:`TransportChoice` on a ``MemoryReactorClock`` with two
recording endpoints.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IProtocol, IProtocolFactory, IStreamClientEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from tests.diagrams import drawn_transitions, machine_transitions
from tests.log_capture import captured_log, logged_text
from vmservice.agent.transport_choice import CHOICE_MACHINE, FALLBACK_AFTER, TransportChoice


@implementer(IStreamClientEndpoint)
class Recording:
    """An endpoint that counts its connects."""

    def __init__(self) -> None:
        self.connects = 0

    def connect(self, protocolFactory: IProtocolFactory) -> Deferred[IProtocol]:
        self.connects += 1
        return succeed(Protocol())


class DiagramTests(SynchronousTestCase):
    def test_diagram_is_the_machine(self) -> None:
        """docs/state-machines/transport-choice.dot draws exactly the machine's transitions."""
        self.assertEqual(drawn_transitions("transport-choice.dot"), machine_transitions(CHOICE_MACHINE))


class ChoiceTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = MemoryReactorClock()
        self.vsock, self.serial = Recording(), Recording()
        self.choice = TransportChoice(self.clock, self.vsock, self.serial, "demo-1")
        self.factory = Factory.forProtocol(Protocol)

    def connects(self) -> tuple[int, int]:
        return self.vsock.connects, self.serial.connects

    def test_vsock_first(self) -> None:
        """Connects go to vsock while trying; the timer starts with the first and is not doubled by retries."""
        self.choice.connect(self.factory)
        self.choice.connect(self.factory)
        self.assertEqual(self.connects(), (2, 0))
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)

    def test_answer_keeps_vsock(self) -> None:
        """An answer while trying ends the timer; reconnects go on over vsock past the fallback time."""
        self.choice.connect(self.factory)
        self.choice.answered()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.clock.advance(FALLBACK_AFTER * 2)
        self.choice.connect(self.factory)
        self.assertEqual(self.connects(), (2, 0))

    def test_falls_back_after_silence(self) -> None:
        """No answer in 20 s: later connects go to the serial port, and the log says why, once."""
        events = captured_log(self)
        self.choice.connect(self.factory)
        self.clock.advance(FALLBACK_AFTER - 0.1)
        self.choice.connect(self.factory)
        self.assertNotIn("no agent answered", logged_text(events))
        self.clock.advance(0.1)
        self.choice.connect(self.factory)
        self.choice.answered()
        self.choice.connect(self.factory)
        self.assertEqual(self.connects(), (2, 2))
        self.assertEqual(logged_text(events).count("demo-1: no agent answered over vsock in 20 s"), 1)

    def test_stop_ends_timer(self) -> None:
        """A stopped client leaves no timer behind, and never falls back."""
        self.choice.connect(self.factory)
        self.choice.stop()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.choice.connect(self.factory)
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
