# -*- test-case-name: tests.agent.test_adoption -*-
"""
:meth:`vmservice.agent.client.AgentClient.adopt` on a memory reactor with a
fake guest: the request, the guest's answers, and the switch to the guest's new
session, which the adopt call waits for and which is not an agent restart for
the client's owner.  The real guest's half is in :mod:`tests.guest.test_identity`;
both together in :mod:`tests.integration.test_identity`.
"""

from __future__ import annotations

from twisted.internet.address import UNIXAddress
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from tests.agent.fakes import ClientTestCase
from tests.guest.identity_fakes import FakeSteps
from vmservice.guest import agentlog
from vmservice.guest.loop import Loop
from vmservice.guest.session import Session
from vmservice.agent.errors import AgentRequestFailed, AgentUnavailable
from vmservice.errors import GuestErrorKind
from vmservice.guestport.identity import GuestIdentity, GuestNet
from vmservice.wire import Data, HalfClose, Open, Reset, ResetCode
from vmservice.wire.events import Hello

IDENTITY = GuestIdentity("clone-1", "0123456789abcdef0123456789abcdef", b"\x07" * 64, 1_700_000_000_000_000_000,
                         GuestNet("52:54:00:0A:00:05", "10.0.0.5/24", "10.0.0.1"))


class AdoptTests(ClientTestCase):
    """adopt()."""

    def setUp(self) -> None:
        super().setUp()
        self.guest = self.connect()
        self.events: list[str] = []
        self.client.on_ready(lambda: self.events.append("ready"))
        self.client.on_lost(lambda: self.events.append("lost"))

    def start(self, identity: GuestIdentity = IDENTITY) -> Deferred[None]:
        result = Deferred.fromCoroutine(self.client.adopt(identity))
        self.assertNoResult(result)
        return result

    def answer(self, body: bytes) -> None:
        """Check the request the host sent and answer ``body``."""
        opened, data, end = self.guest.receive()
        assert isinstance(opened, Open) and isinstance(data, Data)
        self.assertEqual(opened.header, {
            "op": "adopt", "hostname": "clone-1", "machine_id": "0123456789abcdef0123456789abcdef",
            "wall_clock_ns": 1_700_000_000_000_000_000, "entropy_size": 64,
            "net": {"mac": "52:54:00:0a:00:05", "address": "10.0.0.5/24", "gateway": "10.0.0.1"},
        })
        self.assertEqual((data.data, end), (b"\x07" * 64, HalfClose(1)))
        self.guest.send(Data(1, body), HalfClose(1))

    def test_waits_for_the_new_session(self) -> None:
        """
        After the answer, adopt waits until the guest's new session acknowledged
        the connection; neither on_lost nor on_ready run for the switch, and the
        guest's nonce is the new one.
        """
        self.assertEqual(self.client.guest_nonce, b"FAKEGST1")
        result = self.start()
        self.answer(b'{"previous_ns":5}')
        self.assertNoResult(result)
        self.guest.restart(b"NEWNONCE")
        self.guest.send(self.guest.conn.hello("9.9.9"))
        self.assertNoResult(result)
        self.assertFalse(self.client.connected)
        self.assertIsNone(self.client.guest_nonce)
        hellos = self.guest.receive()
        self.assertEqual([type(e) for e in hellos], [Hello])
        self.guest.send(self.guest.conn.hello("9.9.9"))
        self.assertIsNone(self.successResultOf(result))
        self.assertTrue(self.client.connected)
        self.assertEqual(self.client.guest_nonce, b"NEWNONCE")
        self.assertEqual(self.events, [])
        # The connection works in the new session; a later restart is one again.
        ping = Deferred.fromCoroutine(self.client.ping())
        self.assertNoResult(ping)
        self.guest.restart(b"RESTART!")
        self.guest.send(self.guest.conn.hello("9.9.9"))
        self.assertEqual(self.events, ["lost"])
        self.failureResultOf(ping, AgentUnavailable)

    def test_new_session_in_one_batch(self) -> None:
        """The answer and the new session's HELLO may arrive in one read."""
        result = self.start()
        self.guest.receive()
        old = self.guest.conn
        answer = old.send(Data(1, b'{"previous_ns":5}')) + old.send(HalfClose(1))
        self.guest.restart(b"NEWNONCE")
        self.guest.protocol.dataReceived(answer + self.guest.conn.send(self.guest.conn.hello("9.9.9")))
        self.guest.receive()
        self.guest.send(self.guest.conn.hello("9.9.9"))
        self.assertIsNone(self.successResultOf(result))
        self.assertEqual(self.client.guest_nonce, b"NEWNONCE")

    def test_failed_step(self) -> None:
        """A step that failed in the guest is ADOPTION_FAILED, naming it; the session goes on."""
        result = self.start()
        self.answer(b'{"error":"adoption_failed","step":"network","message":"ip failed"}')
        failure = self.failureResultOf(result, AgentRequestFailed)
        self.assertEqual(failure.value.kind, GuestErrorKind.ADOPTION_FAILED)
        self.assertIn("step network", str(failure.value))
        self.assertIn("ip failed", str(failure.value))
        # Not waiting for a new session any more: another adopt may go.
        self.start()

    def test_malformed(self) -> None:
        """An answer that does not parse is MALFORMED."""
        for index, body in enumerate((b"nope", b"[]", b"{}", b'{"previous_ns":"1"}')):
            result = self.start()
            opened, _, _ = self.guest.receive()
            assert isinstance(opened, Open)
            self.guest.send(Data(opened.stream_id, body), HalfClose(opened.stream_id))
            self.assertEqual(self.failureResultOf(result, AgentRequestFailed).value.kind, GuestErrorKind.MALFORMED)

    def test_older_agent(self) -> None:
        """An agent without the operation: UNSUPPORTED."""
        result = self.start()
        self.guest.receive()
        self.guest.send(Reset(1, ResetCode.UNKNOWN_OP, "unknown op 'adopt'"))
        self.assertEqual(self.failureResultOf(result, AgentRequestFailed).value.kind, GuestErrorKind.UNSUPPORTED)

    def test_lost_before_the_new_session(self) -> None:
        """A connection lost between the answer and the new session: UNAVAILABLE, and on_lost runs."""
        result = self.start()
        self.answer(b'{"previous_ns":5}')
        self.guest.protocol.connectionLost(Failure(ConnectionDone()))
        self.failureResultOf(result, AgentUnavailable)
        self.assertEqual(self.events, ["lost"])

    def test_new_session_never_answers(self) -> None:
        """A new session that never acknowledges us: the HELLO timeout drops the connection."""
        result = self.start()
        self.answer(b'{"previous_ns":5}')
        self.guest.restart(b"NEWNONCE")
        self.guest.send(self.guest.conn.hello("9.9.9"))
        self.reactor.advance(5.0)
        self.assertTrue(self.guest.transport.disconnecting or self.guest.transport.disconnected)

    def test_invalid_identity(self) -> None:
        """An invalid identity raises ValueError before anything is sent."""
        bad = GuestIdentity("-x", "0" * 32, b"", 0, None)
        self.failureResultOf(Deferred.fromCoroutine(self.client.adopt(bad)), ValueError)
        self.assertEqual(self.guest.receive(), [])

    def test_prepare(self) -> None:
        """prepare_adoption sends the header alone and checks the answer."""
        result = Deferred.fromCoroutine(self.client.prepare_adoption())
        self.assertEqual(self.guest.receive(), [Open(1, {"op": "adopt", "prepare": True}), HalfClose(1)])
        self.guest.send(Data(1, b'{"prepared":true}'), HalfClose(1))
        self.assertIsNone(self.successResultOf(result))
        result = Deferred.fromCoroutine(self.client.prepare_adoption())
        self.guest.receive()
        self.guest.send(Data(3, b'{"previous_ns":1}'), HalfClose(3))
        self.assertEqual(self.failureResultOf(result, AgentRequestFailed).value.kind, GuestErrorKind.MALFORMED)
        self.assertEqual(self.events, [])

    def test_not_connected(self) -> None:
        """Without a connection: UNAVAILABLE."""
        self.guest.protocol.connectionLost(Failure(ConnectionDone()))
        self.failureResultOf(Deferred.fromCoroutine(self.client.adopt(IDENTITY)), AgentUnavailable)




class JoinedTests(ClientTestCase):
    """
    adopt() against the real guest session in memory (its steps faked, as in
    :mod:`tests.guest.test_identity`): the guest's new session and the client's
    switch meet.
    """

    def setUp(self) -> None:
        super().setUp()
        self.patch(agentlog, "log", lambda message: None)
        steps = FakeSteps(self)
        self.steps = steps
        self.loop = Loop()
        self.addCleanup(self.loop.close)
        self.client.start()
        address, factory, _, _ = self.reactor.unixClients[-1]
        self.protocol = factory.buildProtocol(UNIXAddress(address))
        self.transport = StringTransport()
        self.protocol.makeConnection(self.transport)
        self.to_host = bytearray()
        self.session = Session(self.loop, steps.context, self.to_host.extend)
        self.session.start()
        self.pump()
        self.assertTrue(self.client.connected)

    def pump(self) -> None:
        """Move bytes both ways (the guest's loop writing its pipe) until the wire is quiet."""
        for _ in range(20):
            to_guest, to_host = self.transport.value(), bytes(self.to_host)
            if not to_guest and not to_host:
                return
            self.transport.clear()
            self.to_host.clear()
            self.session.data_received(to_guest)
            self.protocol.dataReceived(to_host)
        raise AssertionError("the wire never went quiet")

    def test_adopt(self) -> None:
        """The guest adopts, starts a new session, and the client carries on in it."""
        nonce = self.client.guest_nonce
        ready: list[str] = []
        self.client.on_ready(lambda: ready.append("ready"))
        self.client.on_lost(lambda: ready.append("lost"))
        result = Deferred.fromCoroutine(self.client.adopt(IDENTITY))
        self.pump()
        self.assertIsNone(self.successResultOf(result))
        self.assertEqual(self.client.guest_nonce, self.session.conn.nonce)
        self.assertNotEqual(self.client.guest_nonce, nonce)
        self.assertEqual([call[0] for call in self.steps.calls[:3]], ["ioctl", "ioctl", "clock"])
        self.assertEqual(ready, [])
        # Requests work in the new session at once.
        health = Deferred.fromCoroutine(self.client.health())
        self.pump()
        self.assertEqual(self.successResultOf(health).agent_version, "t")
