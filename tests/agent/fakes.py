# -*- test-case-name: tests.agent.test_protocol,tests.agent.test_stream,tests.agent.test_outbound,tests.agent.test_client -*-
"""
A fake guest agent for the host-side tests: the real codec behind a
``StringTransport``, driven step by step by the test; recording protocols and
producers; a transport that pauses its producer as a socket does; a test case
with a connected :class:`~vmservice.agent.protocol.AgentProtocol`; and one with an
:class:`~vmservice.agent.client.AgentClient` on a memory reactor, whose connection
attempts the test fails or completes with a fake guest behind them (:class:`ClientTestCase`).
"""

from __future__ import annotations

from typing import Any, Optional

from twisted.internet.address import UNIXAddress
from twisted.internet.error import ConnectError, ConnectionDone
from twisted.internet.interfaces import IHalfCloseableProtocol, IProtocol, IPullProducer, IPushProducer
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from tests.wire.pair import drain
from vmservice.agent.client import AgentClient
from vmservice.agent.guest import AgentGuest
from vmservice.agent.protocol import AgentProtocol
from vmservice.agent.stream import AgentStream, StreamReset
from vmservice.errors import AgentError, GuestErrorKind
from vmservice.wire import Connection, Open, Role
from vmservice.wire.events import Event, Hello

GUEST_NONCE = b"FAKEGST1"


class FakeGuest:
    """
    The guest's end of one connection.

    :ivar transport: what the host protocol writes to.
    :ivar protocol: the host protocol (possibly wrapped by an endpoint).
    :ivar conn: the guest's codec.
    """

    def __init__(self, protocol: IProtocol, transport: StringTransport, nonce: bytes = GUEST_NONCE) -> None:
        self.protocol = protocol
        self.transport = transport
        self.conn = Connection(Role.GUEST, nonce=nonce)

    def receive(self) -> list[Event]:
        """
        Parse everything the host wrote since the last call.
        """
        data = self.transport.value()
        self.transport.clear()
        return self.parse(data)

    def parse(self, data: bytes) -> list[Event]:
        """
        Parse ``data``, which the host wrote.
        """
        self.conn.receive_data(data)
        return drain(self.conn)

    def send(self, *events: Event) -> None:
        """
        Send ``events`` to the host.
        """
        self.protocol.dataReceived(b"".join(self.conn.send(e) for e in events))

    def handshake(self, version: str = "9.9.9") -> list[Event]:
        """
        Announce this guest session and answer until both sides are established;
        return the other events the host sent meanwhile.
        """
        others: list[Event] = []
        self.send(self.conn.hello(version))
        for _ in range(4):
            for event in self.receive():
                if not isinstance(event, Hello):
                    others.append(event)
            if self.conn.hello_wanted:
                self.send(self.conn.hello(version))
        assert self.conn.established
        return others

    def restart(self, nonce: bytes) -> None:
        """
        Forget this session, as a restarted agent would (without a disconnect).
        """
        self.conn = Connection(Role.GUEST, nonce=nonce)


class Recorder(Protocol):
    """
    A stream protocol that records what happens to it.

    :ivar data: everything received.
    :ivar reason: the ``connectionLost`` reason, once lost.
    :ivar losses: how many times ``connectionLost`` was called.
    :ivar read_closed: whether ``readConnectionLost`` was called (only when
        declared half-closeable).
    :ivar pause_after: pause the transport from ``dataReceived`` once this many
        bytes have arrived.
    """

    def __init__(self) -> None:
        self.data = b""
        self.reason: Failure | None = None
        self.losses = 0
        self.read_closed = False
        self.pause_after: int | None = None

    def dataReceived(self, data: bytes) -> None:
        self.data += data
        if self.pause_after is not None and len(self.data) >= self.pause_after:
            self.transport.pauseProducing()  # type: ignore[union-attr]

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.reason = reason
        self.losses += 1


@implementer(IPushProducer, IPullProducer)
class RecordingProducer:
    """
    A producer (push or pull) that records the calls a consumer makes.
    """

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pauseProducing(self) -> None:
        self.calls.append("pause")

    def resumeProducing(self) -> None:
        self.calls.append("resume")

    def stopProducing(self) -> None:
        self.calls.append("stop")



@implementer(IHalfCloseableProtocol)
class HalfCloseRecorder(Recorder):
    """
    A :class:`Recorder` that wants to hear of the guest's half-close.
    """

    def readConnectionLost(self) -> None:
        self.read_closed = True

    def writeConnectionLost(self) -> None:
        pass


class SocketTransport(StringTransport):
    """
    A ``StringTransport`` whose buffer behaves like a socket's: once more than
    ``buffer_size`` bytes wait in it, ``write`` pauses the registered streaming
    producer before it returns (as Twisted's ``FileDescriptor.write`` does), and
    :meth:`drain`, the peer reading everything, resumes it.

    :ivar buffer_size: bytes the buffer holds before it pauses the producer.
    :ivar producer_paused: whether this transport paused its producer.
    """

    def __init__(self, buffer_size: int = 64 * 1024) -> None:
        super().__init__()
        self.buffer_size = buffer_size
        self.producer_paused = False

    def write(self, data: bytes) -> None:
        super().write(data)
        if (
            self.producer is not None
            and self.streaming
            and not self.producer_paused
            and len(self.value()) > self.buffer_size
        ):
            self.producer_paused = True
            self.producer.pauseProducing()

    def drain(self) -> bytes:
        """
        The peer reads everything written; a paused producer is resumed.
        """
        data: bytes = self.value()
        self.clear()
        if self.producer_paused:
            self.producer_paused = False
            assert self.producer is not None
            self.producer.resumeProducing()
        return data


class AgentTestCase(SynchronousTestCase):
    """
    A connected :class:`AgentProtocol` and a fake guest.
    """

    def make_transport(self) -> StringTransport:
        """
        The transport under the protocol.
        """
        return StringTransport()

    def setUp(self) -> None:
        self.clock = Clock()
        self.established: list[AgentProtocol] = []
        self.lost: list[AgentProtocol] = []
        self.proto = AgentProtocol(
            self.clock, on_established=self.established.append, on_lost=self.lost.append, hello_timeout=5.0,
            agent_version="host-1",
        )
        self.transport = self.make_transport()
        self.proto.makeConnection(self.transport)
        self.guest = FakeGuest(self.proto, self.transport)

    def ready(self) -> None:
        """
        Finish the HELLO exchange.
        """
        self.guest.handshake()
        self.assertTrue(self.proto.established)

    def open(self, protocol: Recorder | None = None, header: dict[str, Any] | None = None) -> tuple[AgentStream, Recorder]:
        """
        Open a stream and let the guest see the OPEN.
        """
        protocol = protocol or Recorder()
        stream = self.proto.open_stream(header or {"op": "test"}, protocol)
        self.assertEqual(self.guest.receive(), [Open(stream.stream_id, header or {"op": "test"})])
        return stream, protocol


class FakeStream:
    """An AgentStream stand-in that records what the host does to it."""

    stream_id = 1

    def __init__(self, header: Any, protocol: IProtocol) -> None:
        self.header = header
        self.protocol = protocol
        self.written = bytearray()
        self.half_closed = False
        self.aborted: Optional[tuple[int, str]] = None
        self.paused = False
        self.producer: Any = None
        self.ended = False

    def write(self, data: bytes) -> None:
        self.written += data

    def loseConnection(self) -> None:
        self.half_closed = True

    def abortConnection(self, code: int = 0, reason: str = "") -> None:
        if not self.ended:
            self.aborted = (code, reason)
            self.end(Failure(StreamReset(code, reason)))

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        self.producer = producer

    def unregisterProducer(self) -> None:
        self.producer = None

    def deliver(self, *records: bytes) -> None:
        """The guest sends ``records`` (in one DATA)."""
        self.protocol.dataReceived(b"".join(records))

    def end(self, reason: Failure = Failure(ConnectionDone())) -> None:
        if not self.ended:
            self.ended = True
            self.protocol.connectionLost(reason)


class Peer:
    """A tunnel's peer (an ``ITunnelPeer``) that keeps what it is given."""

    def __init__(self) -> None:
        self.data = b""
        self.producer: Any = None
        self.lost = False

    def write(self, data: bytes) -> None:
        self.data += data

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        self.producer = producer

    def unregisterProducer(self) -> None:
        self.producer = None

    def loseConnection(self) -> None:
        self.lost = True


def complete_port_connection(reactor: MemoryReactorClock) -> tuple[Any, StringTransport]:
    """Complete the newest connection to a raw port's socket (a BulkLink): the link and its transport."""
    factory = reactor.unixClients[-1][1]
    protocol = factory.buildProtocol(None)
    transport = StringTransport()
    protocol.makeConnection(transport)
    return protocol._wrappedProtocol, transport


class FakeExecAgent(AgentGuest):
    """A guest whose agent's streams are :class:`FakeStream` objects."""

    def __init__(self) -> None:
        self.streams: list[FakeStream] = []
        self.clock = Clock()

    def open_stream(self, header: Any, protocol: IProtocol) -> Any:
        stream = FakeStream(header, protocol)
        self.streams.append(stream)
        protocol.makeConnection(stream)  # type: ignore[arg-type]
        return stream

    async def request(self, header: Any, limit: int) -> bytes:
        raise AgentError(GuestErrorKind.UNAVAILABLE, "no requests here")


#: The agent socket of the client of :class:`ClientTestCase`.
SOCKET = "/run/vmservice/node-1/agent.sock"


class ClientTestCase(SynchronousTestCase):
    """
    An :class:`AgentClient` on a memory reactor.
    """

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.client = AgentClient(self.reactor, SOCKET, hello_timeout=5.0)

    def attempts(self) -> int:
        """
        How many connection attempts were made so far.
        """
        return len(self.reactor.unixClients)

    def fail_attempt(self) -> None:
        """
        Make the latest connection attempt fail, as when the socket is missing.
        """
        _, factory, _, _ = self.reactor.unixClients[-1]
        factory.clientConnectionFailed(self.reactor.connectors[-1], Failure(ConnectError("ENOENT")))

    def accept(self) -> FakeGuest:
        """
        Complete the latest connection attempt with a fake guest behind it.
        """
        address, factory, _, _ = self.reactor.unixClients[-1]
        self.assertEqual(address, SOCKET)
        protocol = factory.buildProtocol(UNIXAddress(SOCKET))
        transport = StringTransport()
        protocol.makeConnection(transport)
        return FakeGuest(protocol, transport)

    def connect(self) -> FakeGuest:
        """
        Start the client and bring it to the established state.
        """
        self.client.start()
        guest = self.accept()
        guest.handshake()
        self.assertTrue(self.client.connected)
        return guest
