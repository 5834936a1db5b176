# -*- test-case-name: tests.agent.test_outbound -*-
"""
Tests for :mod:`vmservice.agent.outbound`: fair turns among the streams that have
data and credit, HALF_CLOSE after the data, producers paused with the socket.
"""

from __future__ import annotations

from typing import Optional

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from tests.agent.fakes import AgentTestCase, RecordingProducer, SocketTransport
from vmservice.agent.outbound import STREAM_WRITE_HIGH_WATER, TURN_SIZE, Outbound, Outbox
from vmservice.wire import INITIAL_WINDOW, Data, HalfClose, WindowUpdate
from vmservice.wire.events import Event

MIB = 1024 * 1024


class FakeSocket:
    """
    What an :class:`Outbound` sends to, recorded; it pauses the outbound after a
    given number of events, as a socket whose buffer fills up would.

    :ivar sent: the events sent, in order.
    :ivar windows: the credit of each stream; DATA uses it up.
    :ivar pause_after: pause the outbound once this many more events are sent.
    """

    def __init__(self) -> None:
        self.sent: list[Event] = []
        self.windows: dict[int, int] = {}
        self.pause_after: Optional[int] = None
        self.outbound = Outbound(Clock(), self.send, self.window)

    def send(self, event: Event) -> None:
        self.sent.append(event)
        if isinstance(event, Data):
            assert len(event.data) <= self.windows[event.stream_id]
            self.windows[event.stream_id] -= len(event.data)
        if self.pause_after is not None:
            self.pause_after -= 1
            if self.pause_after == 0:
                self.pause_after = None
                self.outbound.pauseProducing()

    def window(self, stream_id: int) -> int:
        return self.windows.get(stream_id, 0)

    def attach(self, stream_id: int, window: int = 10 * MIB) -> tuple[Outbox, list[int]]:
        """
        An outbox with ``window`` bytes of credit, and the list its HALF_CLOSE
        notifications are recorded in.
        """
        self.windows[stream_id] = window
        closed: list[int] = []
        return self.outbound.attach(stream_id, lambda: closed.append(stream_id)), closed

    def take(self) -> list[tuple[int, int]]:
        """
        What was sent since the last call, as (stream id, DATA size); a
        HALF_CLOSE is (stream id, -1).
        """
        sent, self.sent = self.sent, []
        return [(e.stream_id, len(e.data)) if isinstance(e, Data) else (e.stream_id, -1) for e in sent]  # type: ignore[union-attr]


class EagerProducer(RecordingProducer):
    """
    A producer that writes to its outbox (and pumps, as a stream does) as soon as
    it is resumed.
    """

    def __init__(self, outbound: Outbound, box: Outbox) -> None:
        super().__init__()
        self._outbound = outbound
        self._box = box

    def resumeProducing(self) -> None:
        super().resumeProducing()
        self._box.write(b"more")
        self._outbound.pump()


class TurnTests(SynchronousTestCase):
    """
    :class:`Outbound` on its own, sending to a :class:`FakeSocket`.
    """

    def setUp(self) -> None:
        self.socket = FakeSocket()
        self.outbound = self.socket.outbound

    def test_queue_until_pumped(self) -> None:
        """
        Writing to an outbox only queues; a pump sends it.
        """
        box, _ = self.socket.attach(1)
        box.write(b"x" * 10)
        self.assertEqual(self.socket.sent, [])
        self.assertEqual(box.buffered, 10)
        self.outbound.pump()
        self.assertEqual(self.socket.sent, [Data(1, b"x" * 10)])
        self.assertEqual(box.buffered, 0)

    def test_round_robin(self) -> None:
        """
        Outboxes with data take turns of at most one :data:`TURN_SIZE` each, in the
        order they became ready, each going to the back of the line after its turn.
        """
        a, _ = self.socket.attach(1)
        b, _ = self.socket.attach(3)
        c, _ = self.socket.attach(5)
        a.write(b"a" * (3 * TURN_SIZE))
        b.write(b"b" * 10)
        c.write(b"c" * (TURN_SIZE + 1))
        self.outbound.pump()
        self.assertEqual(
            self.socket.take(),
            [(1, TURN_SIZE), (3, 10), (5, TURN_SIZE), (1, TURN_SIZE), (5, 1), (1, TURN_SIZE)],
        )

    def test_pause_stops_turns(self) -> None:
        """
        When the socket pauses us inside a turn, no further turn is taken; on
        resume, the outbox after the one that filled the socket goes first.
        """
        a, _ = self.socket.attach(1)
        b, _ = self.socket.attach(3)
        a.write(b"a" * (4 * TURN_SIZE))
        self.socket.pause_after = 1
        self.outbound.pump()
        self.assertEqual(self.socket.take(), [(1, TURN_SIZE)])
        self.assertTrue(self.outbound.paused)
        b.write(b"b" * 5)
        self.outbound.pump()
        self.assertEqual(self.socket.take(), [])
        self.socket.pause_after = 2
        self.outbound.resumeProducing()
        self.assertEqual(self.socket.take(), [(1, TURN_SIZE), (3, 5)])
        self.outbound.resumeProducing()
        self.assertEqual(self.socket.take(), [(1, TURN_SIZE), (1, TURN_SIZE)])

    def test_credit(self) -> None:
        """
        An outbox without credit leaves the line and sends nothing; credit brings
        it back.
        """
        box, _ = self.socket.attach(1, window=100)
        box.write(b"x" * 150)
        self.outbound.pump()
        self.assertEqual(self.socket.take(), [(1, 100)])
        self.outbound.pump()
        self.assertEqual(self.socket.take(), [])
        self.socket.windows[1] = 30
        self.outbound.credit(1)
        self.outbound.pump()
        self.assertEqual(self.socket.take(), [(1, 30)])
        self.assertEqual(box.buffered, 20)

    def test_half_close_after_data(self) -> None:
        """
        HALF_CLOSE follows the data written before it, and its sending is reported.
        """
        box, closed = self.socket.attach(1, window=100)
        box.write(b"x" * 150)
        box.end()
        self.outbound.pump()
        self.assertEqual((self.socket.take(), closed), ([(1, 100)], []))
        self.socket.windows[1] = 100
        self.outbound.credit(1)
        self.outbound.pump()
        self.assertEqual((self.socket.take(), closed), ([(1, 50), (1, -1)], [1]))
        self.assertEqual(self.socket.sent, [])

    def test_half_close_while_paused(self) -> None:
        """
        A HALF_CLOSE with no data before it goes out even while the socket is
        paused (it takes no credit and no turn).
        """
        box, closed = self.socket.attach(1)
        self.outbound.pauseProducing()
        box.end()
        self.outbound.pump()
        self.assertEqual((self.socket.sent, closed), ([HalfClose(1)], [1]))

    def test_detach(self) -> None:
        """
        A detached outbox's data and HALF_CLOSE are dropped, and its producer
        handed back (not stopped: the caller does that).
        """
        box, closed = self.socket.attach(1)
        producer = RecordingProducer()
        box.register(producer, True)
        self.outbound.pauseProducing()
        box.write(b"x" * 10)
        box.end()
        self.assertIs(self.outbound.detach(box), producer)
        self.assertEqual(box.buffered, 0)
        self.outbound.resumeProducing()
        self.assertEqual((self.socket.sent, closed), ([], []))
        self.assertEqual(producer.calls, ["pause"])

    def test_producers_paused_with_socket(self) -> None:
        """
        While the socket is paused, every registered streaming producer is paused;
        on resume, those whose outboxes are empty are resumed.
        """
        a, _ = self.socket.attach(1)
        b, _ = self.socket.attach(3, window=0)
        pa, pb = RecordingProducer(), RecordingProducer()
        a.register(pa, True)
        b.register(pb, True)
        b.write(b"y")
        self.outbound.pump()
        self.outbound.pauseProducing()
        self.assertEqual((pa.calls, pb.calls), (["pause"], ["pause"]))
        self.outbound.resumeProducing()
        self.assertEqual((pa.calls, pb.calls), (["pause", "resume"], ["pause"]))

    def test_high_water(self) -> None:
        """
        A streaming producer is paused once :data:`STREAM_WRITE_HIGH_WATER` bytes
        wait in its outbox, and resumed once the outbox is empty.
        """
        box, _ = self.socket.attach(1, window=0)
        producer = RecordingProducer()
        box.register(producer, True)
        box.write(b"x" * (STREAM_WRITE_HIGH_WATER - 1))
        self.outbound.pump()
        self.assertEqual(producer.calls, [])
        box.write(b"x")
        self.outbound.pump()
        self.assertEqual(producer.calls, ["pause"])
        self.socket.windows[1] = STREAM_WRITE_HIGH_WATER
        self.outbound.credit(1)
        self.outbound.pump()
        self.assertEqual(producer.calls, ["pause", "resume"])

    def test_writes_from_resumed_producer(self) -> None:
        """
        A producer that writes as soon as it is resumed (from inside the pump) is
        sent by the same pump.
        """
        box, _ = self.socket.attach(1)
        producer = EagerProducer(self.outbound, box)
        box.register(producer, True)
        self.outbound.pauseProducing()
        self.outbound.resumeProducing()
        self.assertEqual(producer.calls, ["pause", "resume"])
        self.assertEqual(self.socket.sent, [Data(1, b"more")])

    def test_pull_producer(self) -> None:
        """
        A pull producer is asked for more on the next turn of the clock while its
        outbox is empty and the socket is not paused; a detached one is not.
        """
        clock = Clock()
        outbound = Outbound(clock, self.socket.send, self.socket.window)
        box = outbound.attach(1, lambda: None)
        producer = RecordingProducer()
        box.register(producer, False)
        outbound.pauseProducing()
        outbound.pump()
        clock.advance(0)
        self.assertEqual(producer.calls, [])
        outbound.resumeProducing()
        clock.advance(0)
        self.assertEqual(producer.calls, ["resume"])
        outbound.resumeProducing()
        outbound.detach(box)
        clock.advance(0)
        self.assertEqual(producer.calls, ["resume"])
        self.assertEqual(clock.getDelayedCalls(), [])


class FairnessTests(AgentTestCase):
    """
    Streams of a connected protocol share a socket that pauses like a real one.
    """

    def make_transport(self) -> StringTransport:
        return SocketTransport(buffer_size=64 * 1024)

    def setUp(self) -> None:
        super().setUp()
        self.ready()

    def test_fair_turns(self) -> None:
        """
        While stream A has megabytes waiting, stream B's few bytes go out after at
        most two turns of A's, not after all of A's data: each time the socket
        drains, the streams with data and credit take turns of one bounded DATA
        each, and the turns stop as soon as the socket pauses.
        """
        transport = self.transport
        assert isinstance(transport, SocketTransport)
        a, _ = self.open()
        b, _ = self.open()
        self.guest.send(WindowUpdate(a.stream_id, 8 * MIB))
        self.guest.receive()

        a.write(b"a" * (4 * MIB))
        self.assertTrue(self.proto.transport_paused)
        b.write(b"b" * 100)

        wire: list[Data] = []
        while not any(e.stream_id == b.stream_id for e in wire):
            wire += [e for e in self.guest.parse(transport.drain()) if isinstance(e, Data)]
        first_b = next(i for i, e in enumerate(wire) if e.stream_id == b.stream_id)
        a_before_b = [len(e.data) for e in wire[:first_b]]
        self.assertLessEqual(sum(a_before_b), 2 * TURN_SIZE)
        self.assertLessEqual(max(a_before_b), TURN_SIZE)
        self.assertGreater(a.buffered, 3 * MIB)

        while a.buffered or transport.value():
            wire += [e for e in self.guest.parse(transport.drain()) if isinstance(e, Data)]
        self.assertEqual(b"".join(e.data for e in wire if e.stream_id == a.stream_id), b"a" * (4 * MIB))
        self.assertEqual(b"".join(e.data for e in wire if e.stream_id == b.stream_id), b"b" * 100)

    def test_producers_pause_with_socket(self) -> None:
        """
        When a stream's write fills the socket, every stream's producer is paused
        until the socket drained and takes data again.
        """
        transport = self.transport
        assert isinstance(transport, SocketTransport)
        a, _ = self.open()
        b, _ = self.open()
        pa, pb = RecordingProducer(), RecordingProducer()
        a.registerProducer(pa, True)
        b.registerProducer(pb, True)
        a.write(b"a" * (INITIAL_WINDOW // 2))
        self.assertEqual((pa.calls, pb.calls), (["pause"], ["pause"]))
        transport.drain()
        self.assertEqual((pa.calls, pb.calls), (["pause"], ["pause"]))
        transport.drain()
        self.assertEqual((pa.calls, pb.calls), (["pause", "resume"], ["pause", "resume"]))
        self.assertFalse(self.proto.transport_paused)
