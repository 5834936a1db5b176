# -*- test-case-name: tests.agent.test_vsock -*-
"""
Tests for :mod:`vmservice.agent.vsock`, the AF_VSOCK client endpoint, over
UNIX socket pairs standing in for vsock (this host has no vsock): the connect
(its wait for the socket, its errors, timeout and cancel) on a
``MemoryReactorClock``, and the connected transport's bytes, half-close and
loss through the wire codec's HELLO and PING, as the agent client speaks them.
The endpoint against a real guest is in :mod:`tests.integration.test_vsock`.
"""

from __future__ import annotations

import errno
import socket
from typing import Optional

from twisted.internet.error import ConnectError, ConnectingCancelledError, ConnectionDone, TimeoutError as ConnectTimeout
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from vmservice.agent.vsock import AGENT_VSOCK_PORT, CONNECT_TIMEOUT, VsockAddress, VsockClientEndpoint
from vmservice.wire import NEED_DATA, Connection, Hello, Ping, Pong, Role


class Recorder(Protocol):
    """Records what its transport delivers."""

    def __init__(self) -> None:
        self.received = b""
        self.lost: Optional[Failure] = None

    def dataReceived(self, data: bytes) -> None:
        self.received += data

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        self.lost = reason


class EndpointTests(SynchronousTestCase):
    """The endpoint, its far end a UNIX socket pair's other end (the guest's listener stand-in)."""

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        ours, theirs = socket.socketpair()
        theirs.settimeout(5)
        self.ours, self.theirs = ours, theirs
        self.addCleanup(theirs.close)
        self.addCleanup(lambda: ours.fileno() >= 0 and ours.close())
        self.addresses: list[tuple[int, int]] = []
        self.answer = errno.EINPROGRESS

    def endpoint(self, cid: Optional[int] = 42) -> VsockClientEndpoint:
        def connect(skt: socket.socket, address: tuple[int, int]) -> int:
            self.assertIs(skt, self.ours)
            self.addresses.append(address)
            return self.answer

        return VsockClientEndpoint(self.reactor, self.reactor, lambda: cid, make_socket=lambda: self.ours,
                                   connect=connect)

    def connected(self) -> Recorder:
        """Connect, let the socket be writable, and answer the protocol."""
        recorder = Recorder()
        result = self.endpoint().connect(Factory.forProtocol(lambda: recorder))
        self.assertNoResult(result)
        [writer] = self.reactor.getWriters()
        writer.doWrite()
        self.assertIs(self.successResultOf(result), recorder)
        return recorder

    def test_connects_to_cid_and_port(self) -> None:
        """The connect goes to the CID the callable answers now and the agent's port; the timer stops on success."""
        recorder = self.connected()
        self.assertEqual(self.addresses, [(42, AGENT_VSOCK_PORT)])
        self.assertEqual(recorder.transport.getPeer(), VsockAddress(42, AGENT_VSOCK_PORT))  # type: ignore[union-attr]
        self.assertEqual(self.reactor.getDelayedCalls(), [])
        self.assertEqual(self.reactor.getWriters(), [])

    def test_codec_round_trip(self) -> None:
        """The wire codec's HELLO exchange and a PING cross the transport both ways, as with the agent."""
        recorder = self.connected()
        [reader] = self.reactor.getReaders()
        host, guest = Connection(Role.HOST), Connection(Role.GUEST)

        def guest_reads() -> list[object]:
            recorder.transport.doWrite()  # type: ignore[union-attr]
            guest.receive_data(self.theirs.recv(65536))
            return list(iter(guest.next_event, NEED_DATA))

        def host_reads() -> list[object]:
            reader.doRead()  # type: ignore[attr-defined]
            host.receive_data(recorder.received)
            recorder.received = b""
            return list(iter(host.next_event, NEED_DATA))

        recorder.transport.write(host.send(host.hello("host")))  # type: ignore[union-attr]
        [hello] = guest_reads()
        self.assertIsInstance(hello, Hello)
        self.theirs.sendall(guest.send(guest.hello("guest")))
        self.assertEqual([type(event) for event in host_reads()], [Hello])
        if host.hello_wanted:  # the host acknowledges the guest's session in turn
            recorder.transport.write(host.send(host.hello("host")))  # type: ignore[union-attr]
            self.assertEqual([type(event) for event in guest_reads()], [Hello])
        recorder.transport.write(host.send(Ping(b"12345678")))  # type: ignore[union-attr]
        self.assertEqual(guest_reads(), [Ping(b"12345678")])
        self.theirs.sendall(guest.send(Pong(b"12345678")))
        self.assertEqual(host_reads(), [Pong(b"12345678")])

    def test_far_end_closes(self) -> None:
        """The guest's end closing is the protocol's clean loss."""
        recorder = self.connected()
        self.theirs.close()
        [reader] = self.reactor.getReaders()
        self.reactor.removeReader(reader)
        reader.connectionLost(Failure(ConnectionDone()))  # type: ignore[attr-defined]
        self.assertIsNotNone(recorder.lost)
        self.assertTrue(recorder.lost.check(ConnectionDone))  # type: ignore[union-attr]

    def test_read_end_of_file(self) -> None:
        """Reading the end of the guest's stream reports it done."""
        self.connected()
        self.theirs.shutdown(socket.SHUT_WR)
        [reader] = self.reactor.getReaders()
        self.assertTrue(Failure(reader.doRead()).check(ConnectionDone))  # type: ignore[attr-defined]

    def test_refused(self) -> None:
        """A connect the kernel refuses at once (no listener: ECONNRESET) fails with ConnectError."""
        self.answer = errno.ECONNRESET
        self.failureResultOf(self.endpoint().connect(Factory.forProtocol(Recorder)), ConnectError)
        self.assertEqual(self.ours.fileno(), -1)

    def test_refused_later(self) -> None:
        """A connect whose socket reports an error once writable fails with ConnectError and closes it."""
        result = self.endpoint().connect(Factory.forProtocol(Recorder))
        self.theirs.close()
        [writer] = self.reactor.getWriters()
        self.ours = _ErrorSocket(self.ours, errno.ECONNREFUSED)
        writer._socket = self.ours  # type: ignore[attr-defined]
        writer.doWrite()
        self.assertIn("refused", str(self.failureResultOf(result, ConnectError).value))
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_no_cid(self) -> None:
        """A VM with no CID now (not running, or no vsock device) fails the connect at once."""
        self.failureResultOf(self.endpoint(cid=None).connect(Factory.forProtocol(Recorder)), ConnectError)
        self.assertEqual(self.addresses, [])

    def test_timeout(self) -> None:
        """A connect that does not complete in the timeout fails and closes its socket."""
        result = self.endpoint().connect(Factory.forProtocol(Recorder))
        self.reactor.advance(CONNECT_TIMEOUT)
        self.failureResultOf(result, ConnectTimeout)
        self.assertEqual(self.reactor.getWriters(), [])
        self.assertEqual(self.ours.fileno(), -1)

    def test_cancel(self) -> None:
        """Cancelling a connect under way stops it and closes the socket."""
        result = self.endpoint().connect(Factory.forProtocol(Recorder))
        result.cancel()
        self.failureResultOf(result, ConnectingCancelledError)
        self.assertEqual(self.reactor.getWriters(), [])
        self.assertEqual(self.reactor.getDelayedCalls(), [])
        self.assertEqual(self.ours.fileno(), -1)


class _ErrorSocket:
    """A socket whose ``SO_ERROR`` says ``code``."""

    def __init__(self, skt: socket.socket, code: int) -> None:
        self._socket = skt
        self._code = code

    def getsockopt(self, level: int, option: int) -> int:
        return self._code

    def fileno(self) -> int:
        return self._socket.fileno()

    def close(self) -> None:
        self._socket.close()
