# -*- test-case-name: tests.agent.test_client -*-
"""
Unit tests for :mod:`vmservice.agent.client` on a memory reactor: connecting,
reconnecting with backoff, readiness, and the operations' errors.  The same client
against a real agent process is tested in :mod:`tests.integration.guest.test_agent`.
"""

from __future__ import annotations

import json

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure

from tests.agent.fakes import SOCKET, ClientTestCase, FakeGuest, Recorder
from vmservice.agent.client import AgentClient
from vmservice.agent.errors import AgentRequestFailed, AgentUnavailable
from vmservice.buffer_budget import FREE_REPLY, BufferBudget
from vmservice.errors import GuestErrorKind, http_error
from vmservice.guestport.guest import AgentHealth
from vmservice.wire import Data, HalfClose, Open, Ping, Pong, Reset, ResetCode
from vmservice.wire.frames import encode_event

HEALTH = {
    "agent_uptime": 1_500_000_000,
    "agent_version": "0.1.0",
    "system_uptime": 3_000_000_000,
    "userdata_ran": False,
}


class ConnectionTests(ClientTestCase):
    """
    Connecting, readiness and reconnection.
    """

    def test_idle_until_started(self) -> None:
        """
        Nothing happens before start(); start() connects to the socket path.
        """
        self.assertEqual(self.attempts(), 0)
        self.assertFalse(self.client.connected)
        self.client.start()
        self.client.start()
        self.assertEqual(self.attempts(), 1)

    def test_backoff(self) -> None:
        """
        Failed attempts (the socket does not exist yet) are retried after 0.1,
        0.2, 0.4, 0.8 and then every 1 s.
        """
        self.client.start()
        delays = []
        for attempt in range(1, 7):
            self.fail_attempt()
            [retry] = self.reactor.getDelayedCalls()
            delay = retry.getTime() - self.reactor.seconds()
            delays.append(round(delay, 6))
            self.reactor.advance(delay - 0.001)
            self.assertEqual(self.attempts(), attempt)
            self.reactor.advance(0.001)
            self.assertEqual(self.attempts(), attempt + 1)
        self.assertEqual(delays, [0.1, 0.2, 0.4, 0.8, 1.0, 1.0])

    def test_when_ready(self) -> None:
        """
        when_ready fires once the agent acknowledged a connection, not when the
        socket merely connects; afterwards it fires at once.
        """
        ready = self.client.when_ready()
        self.client.start()
        guest = self.accept()
        self.assertNoResult(ready)
        self.assertFalse(self.client.connected)
        guest.handshake("7.7.7")
        self.assertIsNone(self.successResultOf(ready))
        self.assertIsNone(self.successResultOf(self.client.when_ready()))
        self.assertEqual(self.client.agent_version, "7.7.7")

    def test_on_lost(self) -> None:
        """on_lost callbacks run when a connection that was ready drops, until their stop is called."""
        lost: list[str] = []
        stop = self.client.on_lost(lambda: lost.append("lost"))
        guest = self.connect()
        guest.protocol.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(lost, ["lost"])
        stop()
        self.reactor.advance(1)
        guest = self.accept()
        guest.handshake()
        guest.protocol.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(lost, ["lost"])

    def test_when_ready_cancel(self) -> None:
        """
        A cancelled when_ready is forgotten.
        """
        ready = self.client.when_ready()
        ready.cancel()
        self.failureResultOf(ready)
        self.connect()

    def test_reconnect_after_drop(self) -> None:
        """
        When the connection drops, the client reconnects after a short delay and is
        ready again once the agent answers.
        """
        guest = self.connect()
        guest.protocol.connectionLost(Failure(ConnectionDone()))
        self.assertFalse(self.client.connected)
        ready = self.client.when_ready()
        self.reactor.advance(0.1)
        self.assertEqual(self.attempts(), 2)
        guest = self.accept()
        self.assertNoResult(ready)
        guest.handshake()
        self.successResultOf(ready)

    def test_moved(self) -> None:
        """
        After :meth:`AgentClient.moved_to`, the connection stays; the next one
        goes to the new path, and the bulk port is looked for beside it.
        """
        guest = self.connect()
        self.client.moved_to("/run/node-1/agent.sock")
        self.assertTrue(self.client.connected)
        self.assertEqual(self.client.socket_path, "/run/node-1/agent.sock")
        bulk = self.client.bulk_channel
        assert bulk is not None
        self.assertEqual(bulk.socket_path, "/run/node-1/bulk.sock")
        guest.protocol.connectionLost(Failure(ConnectionDone()))
        self.reactor.advance(0.1)
        paths = [client[0] for client in self.reactor.unixClients]
        self.assertEqual(paths, [SOCKET, "/run/node-1/agent.sock"])

    def test_hello_timeout_reconnects(self) -> None:
        """
        A connection on which the agent never answers is dropped after the HELLO
        timeout and a new one is tried.
        """
        self.client.start()
        guest = self.accept()
        self.reactor.advance(5.0)
        self.assertTrue(guest.transport.disconnected)
        guest.protocol.connectionLost(Failure(ConnectionDone()))
        self.reactor.advance(0.1)
        self.assertEqual(self.attempts(), 2)

    def test_stop(self) -> None:
        """
        stop() drops the connection, fails waiters with AgentUnavailable and makes
        no further attempts.
        """
        self.client.start()
        self.fail_attempt()
        ready = self.client.when_ready()
        stopped = self.client.stop()
        self.failureResultOf(ready, AgentUnavailable)
        self.successResultOf(stopped)
        self.reactor.advance(10)
        self.assertEqual(self.attempts(), 1)
        self.successResultOf(self.client.stop())

    def test_stop_connected(self) -> None:
        """
        Stopping a connected client closes its connection; the Deferred fires once
        it is closed.
        """
        guest = self.connect()
        stopped = self.client.stop()
        self.assertTrue(guest.transport.disconnecting)
        self.assertNoResult(stopped)
        guest.protocol.connectionLost(Failure(ConnectionDone()))
        self.successResultOf(stopped)
        self.assertFalse(self.client.connected)


class HealthTests(ClientTestCase):
    """
    ``health()``.
    """

    def answer(self, guest: FakeGuest, body: bytes) -> None:
        """
        Serve the health stream the host opened with ``body``.
        """
        events = guest.receive()
        self.assertEqual(events, [Open(1, {"op": "health"}), HalfClose(1)])
        guest.send(Data(1, body), HalfClose(1))

    def test_health(self) -> None:
        """
        The agent's JSON reply becomes an :class:`AgentHealth`.
        """
        guest = self.connect()
        result = Deferred.fromCoroutine(self.client.health())
        self.assertNoResult(result)
        self.answer(guest, json.dumps(HEALTH).encode())
        self.assertEqual(self.successResultOf(result), AgentHealth(**HEALTH))

    def test_not_connected(self) -> None:
        """
        Without a connection, health raises :class:`AgentUnavailable` at once.
        """
        self.failureResultOf(Deferred.fromCoroutine(self.client.health()), AgentUnavailable)
        self.client.start()
        self.accept()
        self.failureResultOf(Deferred.fromCoroutine(self.client.health()), AgentUnavailable)

    def test_lost_midway(self) -> None:
        """
        If the connection drops before the reply, health raises
        :class:`AgentUnavailable`.
        """
        guest = self.connect()
        result = Deferred.fromCoroutine(self.client.health())
        guest.protocol.connectionLost(Failure(ConnectionDone()))
        self.failureResultOf(result, AgentUnavailable)

    def test_agent_restarted_midway(self) -> None:
        """
        If the agent restarts before the reply, health raises
        :class:`AgentUnavailable`.
        """
        guest = self.connect()
        result = Deferred.fromCoroutine(self.client.health())
        guest.restart(b"RESTART!")
        guest.send(guest.conn.hello("x"))
        self.failureResultOf(result, AgentUnavailable)
        self.assertFalse(self.client.connected)

    def test_refused(self) -> None:
        """
        A reset from the agent raises :class:`AgentRequestFailed` with its code.
        """
        guest = self.connect()
        result = Deferred.fromCoroutine(self.client.health())
        guest.receive()
        guest.send(Reset(1, ResetCode.UNKNOWN_OP, "unknown op 'health'"))
        failure = self.failureResultOf(result, AgentRequestFailed)
        self.assertEqual(failure.value.code, ResetCode.UNKNOWN_OP)

    def test_malformed(self) -> None:
        """
        Replies that are not the expected JSON object raise
        :class:`AgentRequestFailed`.
        """
        guest = self.connect()
        bad = [
            b"not json",
            b"[1]",
            json.dumps({**HEALTH, "agent_uptime": "1"}).encode(),
            json.dumps({**HEALTH, "system_uptime": True}).encode(),
            json.dumps({k: v for k, v in HEALTH.items() if k != "userdata_ran"}).encode(),
        ]
        for stream_id, body in zip(range(1, 100, 2), bad):
            result = Deferred.fromCoroutine(self.client.health())
            guest.receive()
            guest.send(Data(stream_id, body), HalfClose(stream_id))
            self.failureResultOf(result, AgentRequestFailed)

    def test_too_large(self) -> None:
        """
        A reply beyond the limit is refused and the stream reset.
        """
        guest = self.connect()
        result = Deferred.fromCoroutine(self.client.request({"op": "health"}, 10))
        guest.receive()
        guest.send(Data(1, b"x" * 11))
        self.failureResultOf(result, AgentRequestFailed)
        self.assertEqual(guest.receive(), [Reset(1, ResetCode.CANCEL, "reply too large")])

    def test_cancel(self) -> None:
        """
        Cancelling a request resets its stream.
        """
        guest = self.connect()
        result = Deferred.fromCoroutine(self.client.health())
        guest.receive()
        result.cancel()
        self.failureResultOf(result)
        [reset] = guest.receive()
        self.assertIsInstance(reset, Reset)


class BudgetTests(ClientTestCase):
    """
    One-shot replies with a cap above FREE_REPLY held in the daemon's buffer
    budget while they are collected.
    """

    LIMIT = 4 * 1024 * 1024

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.budget = BufferBudget(1000)
        self.client = AgentClient(self.reactor, SOCKET, hello_timeout=5.0, budget=self.budget)

    def ask(self) -> tuple[FakeGuest, Deferred[bytes]]:
        guest = self.connect()
        result = Deferred.fromCoroutine(self.client.request({"op": "fs"}, self.LIMIT))
        guest.receive()
        return guest, result

    def test_held_while_collected(self) -> None:
        """What a reply has sent so far is held; the complete reply gives it back."""
        guest, result = self.ask()
        guest.send(Data(1, b"x" * 300))
        guest.send(Data(1, b"y" * 300))
        self.assertEqual(self.budget.held, 600)
        guest.send(HalfClose(1))
        self.assertEqual(self.successResultOf(result), b"x" * 300 + b"y" * 300)
        self.assertEqual(self.budget.held, 0)

    def test_refused(self) -> None:
        """
        A reply the budget has no room for fails with kind OVER_BUDGET (503
        buffer_budget_exhausted), its stream reset, what it held given back.
        """
        other = self.budget.reservation("another")
        other.grow(500)
        guest, result = self.ask()
        guest.send(Data(1, b"x" * 400))
        guest.send(Data(1, b"y" * 200))
        failure = self.failureResultOf(result, AgentRequestFailed)
        self.assertEqual(failure.value.kind, GuestErrorKind.OVER_BUDGET)
        self.assertEqual(http_error(failure.value)[:1], (503,))
        self.assertEqual(http_error(failure.value)[1]["code"], "buffer_budget_exhausted")
        self.assertEqual(guest.receive(), [Reset(1, ResetCode.CANCEL, "no room for the reply in the host's buffer budget")])
        self.assertEqual(self.budget.held, 500)

    def test_given_back_on_every_failure(self) -> None:
        """A reply lost midway, reset by the agent, too large, or cancelled gives back what it held."""
        guest, result = self.ask()
        guest.send(Data(1, b"x" * 100))
        guest.send(Reset(1, ResetCode.INTERNAL_ERROR, "boom"))
        self.failureResultOf(result, AgentRequestFailed)
        self.assertEqual(self.budget.held, 0)
        result = Deferred.fromCoroutine(self.client.request({"op": "fs"}, self.LIMIT))
        guest.receive()
        guest.send(Data(3, b"x" * 100))
        result.cancel()
        self.failureResultOf(result)
        self.assertEqual(self.budget.held, 0)
        result = Deferred.fromCoroutine(self.client.request({"op": "fs"}, 100 * 1024))
        guest.receive()
        guest.send(Data(5, b"x" * 100))
        guest.send(Data(5, b"x" * 102_400))
        self.failureResultOf(result, AgentRequestFailed)
        self.assertEqual(self.budget.held, 0)
        result = Deferred.fromCoroutine(self.client.request({"op": "fs"}, self.LIMIT))
        guest.receive()
        guest.send(Data(7, b"x" * 100))
        guest.protocol.connectionLost(Failure(ConnectionDone()))
        self.failureResultOf(result, AgentUnavailable)
        self.assertEqual(self.budget.held, 0)

    def test_small_replies_free(self) -> None:
        """Replies capped at FREE_REPLY or less (health, clock, provisioning) take nothing, even from a full budget."""
        self.budget.reservation("another").grow(1000)
        guest = self.connect()
        result = Deferred.fromCoroutine(self.client.request({"op": "health"}, FREE_REPLY))
        guest.receive()
        guest.send(Data(1, b"x" * 2000), HalfClose(1))
        self.assertEqual(self.successResultOf(result), b"x" * 2000)
        self.assertEqual(self.budget.held, 1000)


class PingAndStreamTests(ClientTestCase):
    """
    ``ping()`` and ``open_stream()``.
    """

    def test_ping(self) -> None:
        """
        ping() returns the round trip in seconds.
        """
        guest = self.connect()
        result = Deferred.fromCoroutine(self.client.ping())
        [ping] = guest.receive()
        assert isinstance(ping, Ping)
        self.reactor.advance(0.002)
        guest.send(Pong(ping.opaque))
        self.assertAlmostEqual(self.successResultOf(result), 0.002)

    def test_ping_unavailable(self) -> None:
        """
        ping() raises :class:`AgentUnavailable` when not connected or when the
        connection drops before the pong.
        """
        self.failureResultOf(Deferred.fromCoroutine(self.client.ping()), AgentUnavailable)
        guest = self.connect()
        result = Deferred.fromCoroutine(self.client.ping())
        guest.protocol.connectionLost(Failure(ConnectionDone()))
        self.failureResultOf(result, AgentUnavailable)

    def test_open_stream(self) -> None:
        """
        open_stream connects a protocol to a new stream; without a connection it
        raises :class:`AgentUnavailable`.
        """
        self.assertRaises(AgentUnavailable, self.client.open_stream, {"op": "echo"}, Recorder())
        guest = self.connect()
        recorder = Recorder()
        stream = self.client.open_stream({"op": "echo"}, recorder)
        stream.write(b"hi")
        self.assertEqual(guest.receive(), [Open(1, {"op": "echo"}), Data(1, b"hi")])
        guest.send(Data(1, b"hi"))
        self.assertEqual(recorder.data, b"hi")


class ClockTests(ClientTestCase):
    """
    ``set_clock()``.
    """

    NOW = 1_700_000_000_123_456_789

    def answer(self, guest: FakeGuest, body: bytes, stream_id: int = 1) -> None:
        """
        Check the clock stream the host opened and serve it with ``body``.
        """
        events = guest.receive()
        self.assertEqual(events, [Open(stream_id, {"op": "clock", "unix_ns": self.NOW}), HalfClose(stream_id)])
        guest.send(Data(stream_id, body), HalfClose(stream_id))

    def test_set_clock(self) -> None:
        """
        set_clock sends the time in the OPEN header and returns the guest's
        previous clock.
        """
        guest = self.connect()
        result = Deferred.fromCoroutine(self.client.set_clock(self.NOW))
        self.assertNoResult(result)
        self.answer(guest, b'{"previous_ns":1600000000000000000}')
        self.assertEqual(self.successResultOf(result), 1_600_000_000_000_000_000)

    def test_bad_time(self) -> None:
        """
        A time that is not a positive integer below 2^63 raises ValueError before
        anything is sent.
        """
        guest = self.connect()
        for value in (0, -5, 2**63, 1.7e18, True, "1700000000000000000"):
            self.failureResultOf(Deferred.fromCoroutine(self.client.set_clock(value)), ValueError)  # type: ignore[arg-type]
        self.assertEqual(guest.receive(), [])

    def test_not_connected(self) -> None:
        """
        Without a connection, set_clock raises :class:`AgentUnavailable`.
        """
        self.failureResultOf(Deferred.fromCoroutine(self.client.set_clock(self.NOW)), AgentUnavailable)

    def test_refused(self) -> None:
        """
        A reset from the agent raises :class:`AgentRequestFailed` with its code.
        """
        guest = self.connect()
        result = Deferred.fromCoroutine(self.client.set_clock(self.NOW))
        guest.receive()
        guest.send(Reset(1, ResetCode.BAD_HEADER, "cannot set the clock"))
        failure = self.failureResultOf(result, AgentRequestFailed)
        self.assertEqual(failure.value.code, ResetCode.BAD_HEADER)

    def test_malformed(self) -> None:
        """
        A reply without an integer ``previous_ns`` raises
        :class:`AgentRequestFailed` without a code.
        """
        guest = self.connect()
        bodies = (b"nope", b"[]", b"{}", b'{"previous_ns":"1"}', b'{"previous_ns":1.5}', b'{"previous_ns":true}')
        for index, body in enumerate(bodies):
            result = Deferred.fromCoroutine(self.client.set_clock(self.NOW))
            self.answer(guest, body, 2 * index + 1)
            failure = self.failureResultOf(result, AgentRequestFailed)
            self.assertIsNone(failure.value.code, body)

    def test_restart_midway(self) -> None:
        """
        If the agent restarts before the reply, set_clock raises
        :class:`AgentUnavailable`.
        """
        guest = self.connect()
        result = Deferred.fromCoroutine(self.client.set_clock(self.NOW))
        guest.restart(b"RESTART!")
        guest.send(guest.conn.hello("x"))
        self.failureResultOf(result, AgentUnavailable)


class AgentRestartTests(ClientTestCase):
    """
    A new guest agent (a reboot of the VM, or the agent respawned) behind a
    connection that stays open.
    """

    def test_every_stream_fails_and_ready_again(self) -> None:
        """
        A HELLO of a new agent session fails every request in flight, the pings
        and the streams with :class:`AgentUnavailable` (or PEER_RESTARTED); the
        client is not connected until the new agent acknowledges, then
        ``when_ready`` fires and new requests work on the same connection.
        """
        guest = self.connect()
        health = Deferred.fromCoroutine(self.client.health())
        clock = Deferred.fromCoroutine(self.client.set_clock(1))
        ping = Deferred.fromCoroutine(self.client.ping())
        recorder = Recorder()
        self.client.open_stream({"op": "echo"}, recorder)
        guest.receive()
        # The guest has ended its direction of the echo stream already.
        guest.send(HalfClose(5))

        guest.restart(b"REBOOTED")
        guest.send(guest.conn.hello("0.2.0"))
        self.failureResultOf(health, AgentUnavailable)
        self.failureResultOf(clock, AgentUnavailable)
        self.failureResultOf(ping, AgentUnavailable)
        assert recorder.reason is not None
        self.assertEqual(recorder.reason.value.code, ResetCode.PEER_RESTARTED)
        self.assertFalse(self.client.connected)
        self.failureResultOf(Deferred.fromCoroutine(self.client.health()), AgentUnavailable)

        ready = self.client.when_ready()
        self.assertNoResult(ready)
        # The host answered the new agent's HELLO, and nothing else.
        [answer] = guest.receive()
        self.assertEqual(answer.echo, b"REBOOTED")  # type: ignore[union-attr]
        guest.send(guest.conn.hello("0.2.0"))
        self.assertIsNone(self.successResultOf(ready))
        self.assertTrue(self.client.connected)
        self.assertEqual(self.client.agent_version, "0.2.0")
        self.assertEqual(guest.receive(), [])
        self.assertEqual(self.attempts(), 1)
        self.assertFalse(guest.transport.disconnected)

        result = Deferred.fromCoroutine(self.client.health())
        [opened, closed] = guest.receive()
        assert isinstance(opened, Open)
        self.assertEqual(opened.header, {"op": "health"})
        guest.send(Data(opened.stream_id, json.dumps(HEALTH).encode()), HalfClose(opened.stream_id))
        self.assertEqual(self.successResultOf(result), AgentHealth(**HEALTH))

    def test_restart_twice(self) -> None:
        """
        An agent that restarts again before the exchange finished is still
        taken up; stale HELLOs of the first restart are not answered twice.
        """
        guest = self.connect()
        ready = self.client.when_ready()
        self.successResultOf(ready)
        guest.restart(b"FIRST!!!")
        guest.send(guest.conn.hello("1"))
        guest.restart(b"SECOND!!")
        guest.send(guest.conn.hello("2"))
        ready = self.client.when_ready()
        answers = guest.receive()
        self.assertEqual([a.echo for a in answers], [b"FIRST!!!", b"SECOND!!"])  # type: ignore[union-attr]
        guest.send(guest.conn.hello("2"))
        self.successResultOf(ready)
        self.assertEqual(self.client.agent_version, "2")
        self.assertEqual(guest.receive(), [])


class FaultPenaltyTests(ClientTestCase):
    """A connection dropped for the guest's fault is followed by a longer wait (vmservice.agent.guard)."""

    def break_protocol(self, guest: FakeGuest) -> None:
        guest.protocol.dataReceived(encode_event(Data(99, b"x")))
        self.assertTrue(guest.transport.disconnected)
        guest.protocol.connectionLost(Failure(ConnectionDone()))

    def test_penalty_doubles(self) -> None:
        """
        After a protocol error the next attempt waits 1 s, after another one at once 2 s;
        a connection dropped for no fault of the guest's is retried as before.
        """
        self.break_protocol(self.connect())
        self.reactor.advance(0.999)
        self.assertEqual(self.attempts(), 1)
        self.reactor.advance(0.001)
        self.assertEqual(self.attempts(), 2)
        guest = self.accept()
        guest.handshake()
        self.break_protocol(guest)
        self.reactor.advance(1.999)
        self.assertEqual(self.attempts(), 2)
        self.reactor.advance(0.001)
        self.assertEqual(self.attempts(), 3)
        guest = self.accept()
        guest.handshake()
        guest.protocol.connectionLost(Failure(ConnectionDone()))
        self.reactor.advance(0.1)
        self.assertEqual(self.attempts(), 4)
