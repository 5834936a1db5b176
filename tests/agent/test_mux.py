# -*- test-case-name: tests.agent.test_mux -*-
"""
Tests for :mod:`vmservice.agent.mux`: the host's protocol and its streams, against a
fake guest made of the real codec.
"""

from __future__ import annotations

from twisted.internet.error import ConnectionAborted, ConnectionDone, ConnectionLost
from twisted.internet.interfaces import IHalfCloseableProtocol, IPushProducer, ITransport, IConsumer
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer
from zope.interface.verify import verifyObject

from tests.agent.fakes import FakeGuest, Recorder, RecordingProducer
from vmservice.agent.mux import (
    STREAM_WRITE_HIGH_WATER,
    AgentProtocol,
    AgentStream,
    AgentStreamAddress,
    ChannelNotReady,
    StreamReset,
)
from vmservice.wire import (
    INITIAL_WINDOW,
    MAX_PAYLOAD,
    NO_NONCE,
    Data,
    HalfClose,
    Hello,
    Open,
    Ping,
    Pong,
    Reset,
    ResetCode,
    WindowUpdate,
)
from vmservice.wire.frames import encode_event


@implementer(IHalfCloseableProtocol)
class HalfCloseRecorder(Recorder):
    """
    A :class:`Recorder` that wants to hear of the guest's half-close.
    """

    def readConnectionLost(self) -> None:
        self.read_closed = True

    def writeConnectionLost(self) -> None:
        pass


class MuxTestCase(SynchronousTestCase):
    """
    A connected :class:`AgentProtocol` and a fake guest.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.established: list[AgentProtocol] = []
        self.proto = AgentProtocol(
            self.clock, on_established=self.established.append, hello_timeout=5.0,
            agent_version="host-1",
        )
        self.transport = StringTransport()
        self.proto.makeConnection(self.transport)
        self.guest = FakeGuest(self.proto, self.transport)

    def ready(self) -> None:
        """
        Finish the HELLO exchange.
        """
        self.guest.handshake()
        self.assertTrue(self.proto.established)

    def open(self, protocol: Recorder | None = None, header: dict | None = None) -> tuple[AgentStream, Recorder]:
        """
        Open a stream and let the guest see the OPEN.
        """
        protocol = protocol or Recorder()
        stream = self.proto.open_stream(header or {"op": "test"}, protocol)
        self.assertEqual(self.guest.receive(), [Open(stream.stream_id, header or {"op": "test"})])
        return stream, protocol


class HelloTests(MuxTestCase):
    """
    The HELLO exchange and its timeout.
    """

    def test_hello_first(self) -> None:
        """
        The protocol sends its HELLO as soon as it connects, echoing no one, and
        registers itself as the socket's producer.
        """
        [hello] = self.guest.receive()
        assert isinstance(hello, Hello)
        self.assertEqual((hello.echo, hello.agent_version), (NO_NONCE, "host-1"))
        self.assertIs(self.transport.producer, self.proto)
        self.assertFalse(self.proto.established)

    def test_established(self) -> None:
        """
        Once the agent acknowledges, ``on_established`` runs once and the agent's
        version is known.
        """
        self.ready()
        self.assertEqual(self.established, [self.proto])
        self.assertEqual(self.proto.agent_version, "9.9.9")
        self.clock.advance(60)
        self.assertFalse(self.transport.disconnected)

    def test_guest_answers_late(self) -> None:
        """
        A guest that was not announcing itself answers the host's HELLO; the host
        acknowledges and is established.
        """
        self.guest.receive()
        self.guest.send(self.guest.conn.hello("g"))
        self.assertTrue(self.proto.established)
        [ack] = self.guest.receive()
        self.assertEqual(ack, Hello(self.proto._conn.nonce, self.guest.conn.nonce, "host-1"))

    def test_hello_timeout(self) -> None:
        """
        Without an acknowledgement within the timeout the connection is dropped,
        so that the next one starts afresh.
        """
        self.clock.advance(4.9)
        self.assertFalse(self.transport.disconnected)
        self.clock.advance(0.2)
        self.assertTrue(self.transport.disconnected)

    def test_nothing_before_ready(self) -> None:
        """
        Streams and pings need an established channel.
        """
        self.assertRaises(ChannelNotReady, self.proto.open_stream, {"op": "x"}, Recorder())
        self.assertRaises(ChannelNotReady, self.proto.ping)

    def test_protocol_error(self) -> None:
        """
        Bytes that break the protocol drop the connection.
        """
        self.ready()
        self.proto.dataReceived(encode_event(Data(99, b"x")))
        self.assertTrue(self.transport.disconnected)


class StreamTests(MuxTestCase):
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

    def test_connection_lost(self) -> None:
        """
        Losing the channel ends every stream with ConnectionLost and fails pending
        pings.
        """
        _, first = self.open()
        _, second = self.open()
        ping = self.proto.ping()
        self.proto.connectionLost(Failure(ConnectionDone()))
        for protocol in (first, second):
            assert protocol.reason is not None
            self.assertTrue(protocol.reason.check(ConnectionLost))
        self.failureResultOf(ping, ConnectionLost)
        self.assertFalse(self.proto.established)

    def test_agent_restart(self) -> None:
        """
        A new agent session (without a disconnect) resets every stream with
        PEER_RESTARTED and fails pings; after a new exchange the channel is
        established again.
        """
        _, protocol = self.open()
        ping = self.proto.ping()
        self.guest.restart(b"FAKEGST2")
        self.guest.send(self.guest.conn.hello("9.9.10"))
        assert protocol.reason is not None
        error = protocol.reason.value
        assert isinstance(error, StreamReset)
        self.assertEqual(error.code, ResetCode.PEER_RESTARTED)
        self.failureResultOf(ping, ConnectionLost)
        self.assertFalse(self.proto.established)
        self.guest.handshake("9.9.10")
        self.assertEqual(self.established, [self.proto, self.proto])
        self.assertEqual(self.proto.agent_version, "9.9.10")
        stream, _ = self.open()
        self.assertEqual(stream.stream_id, 3)

    def test_agent_restart_timeout(self) -> None:
        """
        After an agent restart the HELLO timeout runs again.
        """
        self.guest.restart(b"FAKEGST2")
        self.guest.send(self.guest.conn.hello("x"))
        self.clock.advance(5.1)
        self.assertTrue(self.transport.disconnected)

    def test_ping(self) -> None:
        """
        A ping's Deferred fires with the round trip on the injected clock.
        """
        ping = self.proto.ping()
        [event] = self.guest.receive()
        assert isinstance(event, Ping)
        self.clock.advance(0.25)
        self.guest.send(Pong(b"unknown!"))
        self.assertNoResult(ping)
        self.guest.send(Pong(event.opaque))
        self.assertEqual(self.successResultOf(ping), 0.25)

    def test_ping_cancel(self) -> None:
        """
        A cancelled ping is forgotten; its late pong is ignored.
        """
        ping = self.proto.ping()
        [event] = self.guest.receive()
        ping.cancel()
        self.failureResultOf(ping)
        assert isinstance(event, Ping)
        self.guest.send(Pong(event.opaque))

    def test_guest_ping(self) -> None:
        """
        The guest's pings are answered.
        """
        self.guest.send(Ping(b"12345678"))
        self.assertEqual(self.guest.receive(), [Pong(b"12345678")])

    def test_guest_stream_refused(self) -> None:
        """
        Without ``on_stream``, streams the guest opens are refused.
        """
        self.guest.send(Open(2, {"op": "report"}))
        [reset] = self.guest.receive()
        assert isinstance(reset, Reset)
        self.assertEqual((reset.stream_id, reset.code), (2, ResetCode.REFUSED))

    def test_guest_stream_served(self) -> None:
        """
        With ``on_stream``, a stream the guest opens is served by the protocol it
        returns.
        """
        recorder = Recorder()
        headers = []

        def on_stream(header: dict) -> Recorder:
            headers.append(header)
            return recorder

        self.proto._on_stream = on_stream
        self.guest.send(Open(2, {"op": "report"}), Data(2, b"done"))
        self.assertEqual(headers, [{"op": "report"}])
        self.assertEqual(recorder.data, b"done")
        assert isinstance(recorder.transport, AgentStream)
        self.assertEqual(recorder.transport.stream_id, 2)


class FlowControlTests(MuxTestCase):
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

    def test_socket_backpressure(self) -> None:
        """
        When the socket pauses the protocol, streams keep their data and pause
        their producers; when it resumes, they send.
        """
        stream, _ = self.open()
        producer = RecordingProducer()
        stream.registerProducer(producer, True)
        self.proto.pauseProducing()
        self.assertEqual(producer.calls, ["pause"])
        stream.write(b"held")
        self.assertEqual(self.guest.receive(), [])
        self.proto.resumeProducing()
        self.assertEqual(self.guest.receive(), [Data(1, b"held")])
        self.assertEqual(producer.calls, ["pause", "resume"])

    def test_closing_while_paused(self) -> None:
        """
        If the socket resumes us while it is being closed, we unregister from it so
        that it can finish closing (a transport waits for a paused producer).
        """
        self.proto.pauseProducing()
        self.transport.loseConnection()
        self.proto.resumeProducing()
        self.assertIsNone(self.transport.producer)

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


class AgentRestartTests(MuxTestCase):
    """
    A HELLO from a new guest agent session on an established connection: the VM
    rebooted or the agent was respawned while the host stayed connected.
    """

    def setUp(self) -> None:
        super().setUp()
        self.ready()

    def restart(self, nonce: bytes = b"REBOOTED", version: str = "9.9.10") -> None:
        """
        The guest starts over and sends the HELLO of its new session.
        """
        self.guest.restart(nonce)
        self.guest.send(self.guest.conn.hello(version))

    def test_every_stream_fails(self) -> None:
        """
        Every stream ends with PEER_RESTARTED, whatever its state: one half-closed
        by the host with data waiting for credit, one half-closed by the guest, one
        the guest opened; their producers are stopped.  Pings fail.
        """
        read_closed, read_closed_protocol = self.open(HalfCloseRecorder())
        self.guest.send(Data(read_closed.stream_id, b"partial"), HalfClose(read_closed.stream_id))
        waiting, waiting_protocol = self.open()
        waiting.write(b"w" * (INITIAL_WINDOW + 10))
        waiting.loseConnection()
        producer = RecordingProducer()
        waiting.registerProducer(producer, True)
        self.assertEqual(waiting.buffered, 10)
        self.assertTrue(read_closed_protocol.read_closed)
        served = Recorder()
        self.proto._on_stream = lambda header: served
        self.guest.send(Open(2, {"op": "report"}))
        ping = self.proto.ping()
        self.guest.receive()

        self.restart()
        for protocol in (waiting_protocol, read_closed_protocol, served):
            assert protocol.reason is not None
            error = protocol.reason.value
            assert isinstance(error, StreamReset)
            self.assertEqual(error.code, ResetCode.PEER_RESTARTED)
        self.assertEqual(producer.calls[-1], "stop")
        self.failureResultOf(ping, ConnectionLost)
        self.assertEqual(self.proto._streams, {})
        self.assertFalse(self.proto.established)
        self.assertRaises(ChannelNotReady, self.proto.open_stream, {"op": "x"}, Recorder())
        # Only the answer to the new HELLO went out: no DATA or HALF_CLOSE of the
        # old streams, no RESET for them (the new agent never heard of them).
        [answer] = self.guest.receive()
        self.assertEqual(answer, Hello(self.proto._conn.nonce, b"REBOOTED", "host-1"))

    def test_ready_again(self) -> None:
        """
        Once the new agent acknowledges, ``on_established`` runs again (the client's
        ``when_ready``), and new streams work on the same connection.
        """
        self.open()
        self.restart()
        self.assertEqual(self.established, [self.proto])
        self.guest.receive()
        self.guest.send(self.guest.conn.hello("9.9.10"))
        self.assertTrue(self.proto.established)
        self.assertEqual(self.established, [self.proto, self.proto])
        self.assertEqual(self.proto.agent_version, "9.9.10")
        self.assertEqual(self.guest.receive(), [])
        stream, protocol = self.open(header={"op": "echo"})
        stream.write(b"again")
        self.assertEqual(self.guest.receive(), [Data(stream.stream_id, b"again")])
        self.guest.send(Data(stream.stream_id, b"again"))
        self.assertEqual(protocol.data, b"again")
        self.assertFalse(self.transport.disconnected)

    def test_no_hello_loop(self) -> None:
        """
        HELLOs that show the guest knows our session are not answered: a repeated
        HELLO of the current guest session changes nothing, one with a stale echo
        is answered once, and the exchange after a restart ends after one answer.
        """
        sent = self.guest.conn.hello("9.9.9")
        self.guest.send(sent)
        self.assertEqual(self.guest.receive(), [])
        self.assertTrue(self.proto.established)
        self.proto.dataReceived(encode_event(Hello(self.guest.conn.nonce, b"OLDHOST!", "9.9.9")))
        [answer] = self.guest.receive()
        self.assertEqual(answer.echo, self.guest.conn.nonce)  # type: ignore[union-attr]
        self.assertTrue(self.proto.established)
        self.restart()
        for _ in range(3):
            if self.guest.conn.hello_wanted:
                self.guest.send(self.guest.conn.hello("9.9.10"))
            self.guest.receive()
        self.assertTrue(self.proto.established)
        self.assertFalse(self.guest.conn.hello_wanted)
        self.guest.send(self.guest.conn.hello("9.9.10"))
        self.assertEqual(self.guest.receive(), [])
        self.assertEqual(self.established, [self.proto, self.proto])
