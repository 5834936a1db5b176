# -*- test-case-name: tests.agent.test_mux -*-
"""
A fake guest agent for the host-side tests: the real codec behind a
``StringTransport``, driven step by step by the test.
"""

from __future__ import annotations

from twisted.internet.interfaces import IProtocol
from twisted.internet.protocol import Protocol
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from tests.wire.pair import drain
from vmservice.wire import Connection, Role
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
        others = []
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
    :ivar read_closed: whether ``readConnectionLost`` was called (only when
        declared half-closeable).
    """

    def __init__(self) -> None:
        self.data = b""
        self.reason: Failure | None = None
        self.read_closed = False
        self.pause_after: int | None = None

    def dataReceived(self, data: bytes) -> None:
        self.data += data
        if self.pause_after is not None and len(self.data) >= self.pause_after:
            self.transport.pauseProducing()  # type: ignore[attr-defined]

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.reason = reason


class RecordingProducer:
    """
    A producer that records the calls a consumer makes.
    """

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pauseProducing(self) -> None:
        self.calls.append("pause")

    def resumeProducing(self) -> None:
        self.calls.append("resume")

    def stopProducing(self) -> None:
        self.calls.append("stop")

