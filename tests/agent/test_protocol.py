# -*- test-case-name: tests.agent.test_protocol -*-
"""
Tests for :mod:`vmservice.agent.protocol`: the HELLO exchange, pings, streams the
guest opens, the socket's back-pressure and agent restarts, against a fake guest
made of the real codec.
"""

from __future__ import annotations

from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.python.failure import Failure

from tests.agent.fakes import AgentTestCase, HalfCloseRecorder, Recorder, RecordingProducer
from vmservice.agent.protocol import ChannelNotReady
from vmservice.agent.stream import AgentStream, StreamReset
from vmservice.errors import AgentError, GuestErrorKind
from vmservice.wire import (
    INITIAL_WINDOW,
    NO_NONCE,
    Data,
    HalfClose,
    Hello,
    Open,
    Ping,
    Pong,
    Reset,
    ResetCode,
)
from vmservice.wire.frames import encode_event


class HelloTests(AgentTestCase):
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


class ChannelTests(AgentTestCase):
    """
    Pings, streams the guest opens, losing the connection and agent restarts.
    """

    def setUp(self) -> None:
        super().setUp()
        self.ready()

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
        self.assertEqual(self.lost, [self.proto])

    def test_cut_off(self) -> None:
        """
        A connection this side cuts off is aborted, and every stream and
        ping ends with the error it was cut off with, not as a loss; the
        session is lost (``on_lost``) once.
        """
        _, first = self.open()
        ping = self.proto.ping()
        error = AgentError(GuestErrorKind.HOST_NO_ROOM, "no room")
        self.proto.cut_off(error)
        self.assertTrue(self.transport.disconnecting)
        self.proto.connectionLost(Failure(ConnectionLost()))
        assert first.reason is not None
        self.assertIs(first.reason.value, error)
        self.assertIs(self.failureResultOf(ping, AgentError).value, error)
        self.assertEqual(self.lost, [self.proto])
        self.proto.cut_off(AgentError(GuestErrorKind.HOST_NO_ROOM, "again"))  # gone already: nothing

    def test_lost_only_once_ready(self) -> None:
        """``on_lost`` runs when an established session ends, once; a connection never ready is no loss."""
        self.proto.connectionLost(Failure(ConnectionDone()))
        self.proto.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(self.lost, [self.proto])

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
        self.assertEqual(self.lost, [self.proto])
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


class SocketBackpressureTests(AgentTestCase):
    """
    The socket pauses and resumes the protocol.
    """

    def setUp(self) -> None:
        super().setUp()
        self.ready()

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


class AgentRestartTests(AgentTestCase):
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
