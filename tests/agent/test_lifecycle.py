# -*- test-case-name: tests.agent.test_lifecycle -*-
"""
Tests for :mod:`vmservice.agent.lifecycle`: the stream's state machine against a
model of its two directions, and its diagram against the machine.
"""

from __future__ import annotations

from typing import Callable

from automat import NoTransition
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.error import ConnectionAborted, ConnectionDone, ConnectionLost
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.agent.fakes import HalfCloseRecorder, RecordingProducer
from tests.diagrams import drawn_transitions, machine_transitions
from vmservice.agent.inbound import Inbox
from vmservice.agent.lifecycle import StreamCore, StreamInputs, StreamLifecycle
from vmservice.agent.outbound import Outbound
from vmservice.agent.stream import StreamReset
from vmservice.wire.events import Event

class Harness:
    """
    One machine whose core records what the outputs do: frames sent, RESETs,
    forgotten streams, and what the protocol hears.
    """

    def __init__(self) -> None:
        self.sent: list[Event] = []
        self.resets: list[tuple[int, int, str]] = []
        self.forgotten: list[int] = []
        self.producers: list[RecordingProducer] = []
        self.protocol = HalfCloseRecorder()
        self.outbound = Outbound(Clock(), self.sent.append, lambda stream_id: 1 << 20)
        outbox = self.outbound.attach(1, lambda: None)
        self.core = StreamCore(
            1,
            self.protocol,
            self.outbound,
            outbox,
            Inbox(self.protocol.dataReceived, lambda: None),
            lambda *reset: self.resets.append(reset),
            self.forgotten.append,
        )
        self.machine = StreamLifecycle(self.core)


class Model:
    """
    What the machine should do: the two directions as plain flags, the way the
    stream kept them before it had a machine.
    """

    def __init__(self) -> None:
        self.writing = "open"  # "open", "closing" (HALF_CLOSE queued) or "closed" (sent)
        self.reading = "open"  # "open" or "closed" (the guest's HALF_CLOSE delivered)
        self.ended = False
        self.buffered = 0
        self.read_closed = False
        self.reason: type[Exception] | None = None
        self.resets = 0
        self.producer = False
        self.stops = 0

    def end(self, reason: type[Exception]) -> None:
        self.ended = True
        self.reason = reason
        self.buffered = 0
        self.stops += self.producer
        self.producer = False

    def done_if_both(self) -> None:
        if self.writing == "closed" and self.reading == "closed":
            self.end(ConnectionDone)

    def allows(self, name: str) -> bool:
        """
        Whether ``name`` can happen at all now.
        """
        if name == "half_close_sent":
            return not self.ended and self.writing == "closing"
        if name == "half_close_received":
            return not self.ended and self.reading == "open"
        return True

    def apply(self, name: str) -> None:
        if name == "register_producer":
            if self.ended:
                self.stops += 1
            self.producer = not self.ended
        if self.ended:
            return
        if name == "write" and self.writing == "open":
            self.buffered += 3
        elif name == "lose_connection" and self.writing == "open":
            self.writing = "closing"
        elif name == "half_close_sent":
            self.writing = "closed"
            self.done_if_both()
        elif name == "half_close_received":
            self.reading = "closed"
            self.read_closed = True
            self.done_if_both()
        elif name == "abort":
            self.resets += 1
            self.end(ConnectionAborted)
        elif name == "reset_received":
            self.end(StreamReset)
        elif name == "channel_lost":
            self.end(ConnectionLost)


def _register(machine: StreamInputs, harness: Harness) -> None:
    """
    Register a new producer (after unregistering the last, as a protocol must).
    """
    harness.core.outbox.unregister()
    harness.producers.append(RecordingProducer())
    machine.register_producer(harness.producers[-1], True)


#: Each input, sent with some arguments.
INPUTS: dict[str, Callable[[StreamInputs, Harness], None]] = {
    "write": lambda m, h: m.write(b"abc"),
    "lose_connection": lambda m, h: m.lose_connection(),
    "abort": lambda m, h: m.abort(8, "test"),
    "register_producer": _register,
    "half_close_sent": lambda m, h: m.half_close_sent(),
    "half_close_received": lambda m, h: m.half_close_received(),
    "reset_received": lambda m, h: m.reset_received(Failure(StreamReset(1, "by the guest"))),
    "channel_lost": lambda m, h: m.channel_lost(Failure(ConnectionLost("gone"))),
}


class MachineTests(SynchronousTestCase):
    """
    Every sequence of inputs.
    """

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.sampled_from(sorted(INPUTS)), max_size=12))
    def test_any_sequence(self, names: list[str]) -> None:
        """
        Each input either moves the machine as the model of the two directions
        says, or, when it cannot happen (a second HALF_CLOSE either way, ours before
        ``lose_connection``), is refused with ``NoTransition`` and changes nothing.
        The protocol hears ``connectionLost`` at most once, after
        ``readConnectionLost`` if at all; a RESET is sent only on ``abort``; the
        stream is forgotten exactly when it ends; the producer registered then is
        stopped, and so is each one registered later.
        """
        harness = Harness()
        model = Model()
        for name in names:
            if model.allows(name):
                INPUTS[name](harness.machine, harness)
                model.apply(name)
            else:
                self.assertRaises(NoTransition, INPUTS[name], harness.machine, harness)
            self.assertEqual(harness.core.outbox.buffered, model.buffered)
            self.assertEqual(harness.core.disconnecting, model.writing != "open")
            self.assertEqual(harness.protocol.read_closed, model.read_closed)
            self.assertEqual(len(harness.resets), model.resets)
            self.assertEqual(harness.forgotten, [1] if model.ended else [])
            self.assertEqual(harness.protocol.losses, 1 if model.ended else 0)
            if model.reason is None:
                self.assertIsNone(harness.protocol.reason)
            else:
                assert harness.protocol.reason is not None
                self.assertTrue(harness.protocol.reason.check(model.reason))
            self.assertEqual(sum(p.calls.count("stop") for p in harness.producers), model.stops)
            self.assertEqual(sum(len(p.calls) for p in harness.producers), model.stops)

    def test_ended_stops_producer(self) -> None:
        """
        Ending stops the registered producer once; one registered afterwards is
        stopped at once.
        """
        harness = Harness()
        producer, late = RecordingProducer(), RecordingProducer()
        harness.machine.register_producer(producer, True)
        harness.machine.channel_lost(Failure(ConnectionLost("gone")))
        harness.machine.register_producer(late, True)
        self.assertEqual((producer.calls, late.calls), (["stop"], ["stop"]))

    def test_reentrant_close(self) -> None:
        """
        A protocol that answers and closes from ``readConnectionLost`` (an input
        sent from inside an output) is served once the current input is done: its
        data is queued and its HALF_CLOSE follows it.
        """
        harness = Harness()
        machine = harness.machine

        def answer() -> None:
            machine.write(b"late")
            machine.lose_connection()

        harness.protocol.readConnectionLost = answer  # type: ignore[method-assign]
        machine.half_close_received()
        self.assertEqual(harness.core.outbox.buffered, 4)
        self.assertTrue(harness.core.disconnecting)
        harness.outbound.pump()
        self.assertEqual(len(harness.sent), 2)


class DiagramTests(SynchronousTestCase):
    """
    ``docs/state-machines/agent-stream.dot`` against the machine.
    """

    def test_every_transition(self) -> None:
        """
        The diagram has an edge for exactly the machine's transitions, loops
        included (an edge's label lists its inputs, one a line, then what happens
        in parentheses).
        """
        self.assertEqual(drawn_transitions("agent-stream.dot"), machine_transitions(StreamLifecycle))
