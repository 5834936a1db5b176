# -*- test-case-name: tests.agent.test_stream -*-
"""
Tests for :mod:`vmservice.agent.stream`: streams as transports, producers and
consumers, against a fake guest made of the real codec.
"""

from __future__ import annotations

from twisted.internet.error import ConnectionAborted, ConnectionDone
from twisted.internet.interfaces import IConsumer, IPushProducer, ITransport
from zope.interface.verify import verifyObject

from tests.agent.fakes import AgentTestCase, HalfCloseRecorder, RecordingProducer
from vmservice.agent.outbound import STREAM_WRITE_HIGH_WATER
from vmservice.agent.stream import AgentStreamAddress, StreamReset
from vmservice.wire import (
    INITIAL_WINDOW,
    MAX_PAYLOAD,
    Data,
    HalfClose,
    Reset,
    ResetCode,
    WindowUpdate,
)


class StreamTests(AgentTestCase):
    """
    Streams as transports.
    """

    def setUp(self) -> None:
        super().setUp()
        self.ready()

    def test_interfaces(self) -> None:
        """
        A stream is a transport, a push producer and a consumer; its addresses name
        the stream.
        """
        stream, _ = self.open()
        verifyObject(ITransport, stream)
        verifyObject(IPushProducer, stream)
        verifyObject(IConsumer, stream)
        self.assertEqual(stream.getPeer(), AgentStreamAddress(1))
        self.assertEqual(stream.getHost(), AgentStreamAddress(1))

    def test_exchange(self) -> None:
        """
        Data flows both ways; after both half-closes the protocol's connection is
        done, cleanly.
        """
        stream, protocol = self.open()
        self.assertIs(protocol.transport, stream)
        stream.write(b"hello")
        stream.writeSequence([b" ", b"agent"])
        stream.loseConnection()
        self.assertEqual(self.guest.receive(), [Data(1, b"hello"), Data(1, b" agent"), HalfClose(1)])
        self.guest.send(Data(1, b"reply"))
        self.assertEqual(protocol.data, b"reply")
        self.assertIsNone(protocol.reason)
        self.guest.send(HalfClose(1))
        assert protocol.reason is not None
        self.assertTrue(protocol.reason.check(ConnectionDone))
        stream.write(b"ignored")
        self.assertEqual(self.guest.receive(), [])

    def test_half_closeable(self) -> None:
        """
        A half-closeable protocol hears of the guest's half-close before its own
        side is closed.
        """
        stream, protocol = self.open(HalfCloseRecorder())
        self.guest.send(HalfClose(1))
        self.assertTrue(protocol.read_closed)
        self.assertIsNone(protocol.reason)
        stream.write(b"late answer")
        stream.loseConnection()
        self.assertEqual(self.guest.receive(), [Data(1, b"late answer"), HalfClose(1)])
        assert protocol.reason is not None
        self.assertTrue(protocol.reason.check(ConnectionDone))

    def test_reset_by_guest(self) -> None:
        """
        A RESET from the guest ends that stream with :class:`StreamReset` and
        leaves the others open.
        """
        _, first = self.open()
        second_stream, second = self.open()
        self.guest.send(Reset(1, ResetCode.UNKNOWN_OP, "what"))
        assert first.reason is not None
        error = first.reason.value
        assert isinstance(error, StreamReset)
        self.assertEqual((error.code, error.reason), (ResetCode.UNKNOWN_OP, "what"))
        self.assertIn("UNKNOWN_OP", str(error))
        self.assertIsNone(second.reason)
        second_stream.write(b"still here")
        self.assertEqual(self.guest.receive(), [Data(3, b"still here")])

    def test_abort(self) -> None:
        """
        Aborting sends RESET and ends the protocol with ConnectionAborted.
        """
        stream, protocol = self.open()
        stream.write(b"x" * (INITIAL_WINDOW + 5))
        self.guest.receive()
        stream.abortConnection(ResetCode.CANCEL, "bye")
        self.assertEqual(self.guest.receive(), [Reset(1, ResetCode.CANCEL, "bye")])
        assert protocol.reason is not None
        self.assertTrue(protocol.reason.check(ConnectionAborted))
        stream.abortConnection()
        self.assertEqual(self.guest.receive(), [])


class FlowControlTests(AgentTestCase):
    """
    Credit and producers.
    """

    def setUp(self) -> None:
        super().setUp()
        self.ready()

    def test_credit_granted_after_delivery(self) -> None:
        """
        Data delivered to the protocol is acknowledged: the guest gets its credit
        back in WINDOW frames.
        """
        self.open()
        self.guest.send(Data(1, b"x" * INITIAL_WINDOW))
        self.assertEqual(self.guest.conn.send_window(1), 0)
        updates = self.guest.receive()
        self.assertEqual(sum(e.increment for e in updates if isinstance(e, WindowUpdate)), INITIAL_WINDOW)
        self.assertEqual(self.guest.conn.send_window(1), INITIAL_WINDOW)

    def test_pause_withholds_credit(self) -> None:
        """
        While the stream is paused, data is held back and no credit is granted, so
        the guest stops after one window; resuming delivers it and grants credit.
        """
        stream, protocol = self.open()
        stream.pauseProducing()
        self.assertTrue(stream.paused)
        self.guest.send(Data(1, b"a" * (INITIAL_WINDOW // 2)), Data(1, b"b" * (INITIAL_WINDOW // 2)))
        self.guest.send(HalfClose(1))
        self.assertEqual(protocol.data, b"")
        self.assertEqual(self.guest.receive(), [])
        self.assertEqual(self.guest.conn.send_window(1), 0)
        stream.loseConnection()
        self.guest.receive()
        self.assertIsNone(protocol.reason)
        stream.resumeProducing()
        self.assertEqual(len(protocol.data), INITIAL_WINDOW)
        assert protocol.reason is not None
        self.assertTrue(protocol.reason.check(ConnectionDone))

    def test_pause_from_data_received(self) -> None:
        """
        A protocol that pauses inside ``dataReceived`` gets nothing more until it
        resumes, and the guest only the credit for what was delivered.
        """
        stream, protocol = self.open()
        protocol.pause_after = 1
        self.guest.send(Data(1, b"x" * MAX_PAYLOAD), Data(1, b"y" * MAX_PAYLOAD))
        self.assertEqual(protocol.data, b"x" * MAX_PAYLOAD)
        self.assertEqual(self.guest.receive(), [WindowUpdate(1, MAX_PAYLOAD)])
        protocol.pause_after = None
        stream.resumeProducing()
        self.assertEqual(protocol.data, b"x" * MAX_PAYLOAD + b"y" * MAX_PAYLOAD)

    def test_write_within_credit(self) -> None:
        """
        Writes beyond the guest's credit wait in the stream until credit comes.
        """
        stream, _ = self.open()
        stream.write(b"z" * (INITIAL_WINDOW + 10))
        sent = self.guest.receive()
        self.assertEqual(sum(len(e.data) for e in sent if isinstance(e, Data)), INITIAL_WINDOW)
        self.assertEqual(stream.buffered, 10)
        stream.loseConnection()
        self.assertEqual(self.guest.receive(), [])
        self.guest.send(WindowUpdate(1, 100))
        self.assertEqual(self.guest.receive(), [Data(1, b"z" * 10), HalfClose(1)])

    def test_streaming_producer(self) -> None:
        """
        A registered streaming producer is paused while data waits for credit and
        resumed once it is all sent.
        """
        stream, _ = self.open()
        producer = RecordingProducer()
        stream.registerProducer(producer, True)
        stream.write(b"p" * (INITIAL_WINDOW + STREAM_WRITE_HIGH_WATER))
        self.assertEqual(producer.calls, ["pause"])
        self.guest.receive()
        self.guest.send(WindowUpdate(1, STREAM_WRITE_HIGH_WATER))
        self.assertEqual(producer.calls, ["pause", "resume"])
        stream.unregisterProducer()
        stream.registerProducer(producer, True)
        self.assertRaises(RuntimeError, stream.registerProducer, RecordingProducer(), True)

    def test_pull_producer(self) -> None:
        """
        A pull producer is asked for more on the next turn of the clock whenever
        the stream has sent everything.
        """
        stream, _ = self.open()
        producer = RecordingProducer()
        stream.registerProducer(producer, False)
        self.assertEqual(producer.calls, [])
        self.clock.advance(0)
        self.assertEqual(producer.calls, ["resume"])

    def test_producer_stopped_when_stream_ends(self) -> None:
        """
        When the stream ends, its producer is stopped; a producer registered on an
        ended stream is stopped at once.
        """
        stream, _ = self.open()
        producer = RecordingProducer()
        stream.registerProducer(producer, True)
        self.guest.send(Reset(1))
        self.assertEqual(producer.calls, ["stop"])
        late = RecordingProducer()
        stream.registerProducer(late, True)
        self.assertEqual(late.calls, ["stop"])

    def test_stop_producing_resets(self) -> None:
        """
        ``stopProducing`` on a stream (its consumer went away) resets it.
        """
        stream, _ = self.open()
        stream.stopProducing()
        self.assertEqual(self.guest.receive(), [Reset(1, ResetCode.CANCEL, "")])


class AnsweringRecorder(HalfCloseRecorder):
    """
    A protocol that answers and closes its side as soon as the guest half-closes.
    """

    def readConnectionLost(self) -> None:
        super().readConnectionLost()
        self.transport.write(b"answer")  # type: ignore[union-attr]
        self.transport.loseConnection()  # type: ignore[union-attr]


class HalfCloseTests(AgentTestCase):
    """
    Half-closes in either order.
    """

    def setUp(self) -> None:
        super().setUp()
        self.ready()

    def test_disconnecting(self) -> None:
        """
        ``disconnecting`` says whether the protocol half-closed; writes after that
        are ignored.
        """
        stream, _ = self.open()
        self.assertFalse(stream.disconnecting)
        stream.loseConnection()
        self.assertTrue(stream.disconnecting)
        stream.write(b"too late")
        stream.loseConnection()
        self.assertEqual(self.guest.receive(), [HalfClose(1)])

    def test_answer_from_read_connection_lost(self) -> None:
        """
        A protocol that writes and half-closes from ``readConnectionLost`` has its
        answer sent, then its HALF_CLOSE, and is done.
        """
        stream, protocol = self.open(AnsweringRecorder())
        self.guest.send(Data(1, b"question"), HalfClose(1))
        self.assertEqual(self.guest.receive(), [Data(1, b"answer"), HalfClose(1)])
        assert protocol.reason is not None
        self.assertTrue(protocol.reason.check(ConnectionDone))
        self.assertEqual(protocol.losses, 1)

    def test_answer_waits_for_credit(self) -> None:
        """
        When the guest half-closes while our HALF_CLOSE waits for credit, the
        protocol hears ``readConnectionLost`` at once and is done once our data
        and HALF_CLOSE are out.
        """
        stream, protocol = self.open(HalfCloseRecorder())
        stream.write(b"w" * (INITIAL_WINDOW + 1))
        stream.loseConnection()
        self.guest.receive()
        self.guest.send(HalfClose(1))
        self.assertTrue(protocol.read_closed)
        self.assertIsNone(protocol.reason)
        self.guest.send(WindowUpdate(1, 1))
        self.assertEqual(self.guest.receive(), [Data(1, b"w"), HalfClose(1)])
        assert protocol.reason is not None
        self.assertTrue(protocol.reason.check(ConnectionDone))
