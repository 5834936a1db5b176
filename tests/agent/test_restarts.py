"""
The host's :class:`~vmservice.agent.protocol.AgentProtocol` and the guest's
:class:`~vmservice.guest.agent.Session` joined in memory, when either side starts
over while the byte stream between them stays open: the guest agent restarts (the
VM rebooted), or a new host connection meets a guest session that carries on (the
VM was restored from a snapshot, or the daemon restarted and reconnected before the
agent noticed).  Both sides end up established on the new sessions, every old
stream is gone on both sides, and the HELLO exchange ends.
"""

from __future__ import annotations

import time
from typing import Any

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from tests.agent.fakes import Recorder
from tests.guest.session import refuse_real_clock
from vmservice.agent.protocol import AgentProtocol
from vmservice.agent.stream import StreamReset
from vmservice.guest import agentlog, operations
from vmservice.guest.context import AgentContext
from vmservice.guest.loop import Loop
from vmservice.guest.session import Session
from vmservice.guest.streams import StreamHandler
from vmservice.wire import ResetCode
from vmservice.wire.frames import HELLO_SIGNATURE

#: Most HELLOs one side may send for one restart; the protocol needs two.
MAX_HELLOS = 2


class Holding(StreamHandler):
    """
    An operation that holds its stream open (like a running process) and records
    when it is reset.
    """

    resets: list[tuple[int, int]] = []

    def reset(self, code: int, reason: str) -> None:
        self.resets.append((self.stream.stream_id, code))


class Link:
    """
    A host protocol and a guest session over a lossless in-memory wire; either end
    can be replaced by a new one while the other carries on.
    """

    def __init__(self, case: SynchronousTestCase) -> None:
        self.case = case
        self.clock = Clock()
        self.loop = Loop()
        case.addCleanup(self.loop.close)
        self.established: list[AgentProtocol] = []
        self.hellos = {"host": 0, "guest": 0}
        self.to_host = bytearray()
        self.new_host()
        self.new_guest()

    def new_host(self) -> AgentProtocol:
        """A new host connection (what reaches the guest's old session from now on)."""
        self.host = AgentProtocol(self.clock, on_established=self.established.append, hello_timeout=10.0)
        self.transport = StringTransport()
        self.host.makeConnection(self.transport)
        return self.host

    def new_guest(self) -> Session:
        """A new guest agent (the old one is gone, its unsent output with it)."""
        context = AgentContext("guest", time.monotonic_ns(), set_realtime_ns=refuse_real_clock)
        self.to_host.clear()
        self.guest = Session(self.loop, context, self.to_host.extend, handlers={**operations.HANDLERS, "hold": Holding})
        self.guest.start()
        return self.guest

    def pump(self) -> None:
        """Move bytes both ways until the wire is quiet; fail if it never is."""
        for _ in range(20):
            to_guest, to_host = self.transport.value(), bytes(self.to_host)
            if not to_guest and not to_host:
                return
            self.transport.clear()
            self.to_host.clear()
            self.hellos["host"] += to_guest.count(HELLO_SIGNATURE)
            self.hellos["guest"] += to_host.count(HELLO_SIGNATURE)
            self.guest.data_received(to_guest)
            self.host.dataReceived(to_host)
        raise AssertionError(f"the wire never went quiet: {self.hellos}")

    def check_established(self) -> None:
        """Both sides are established, after at most MAX_HELLOS HELLOs each."""
        self.case.assertTrue(self.host.established)
        self.case.assertTrue(self.guest.conn.established)
        self.case.assertLessEqual(max(self.hellos.values()), MAX_HELLOS, self.hellos)
        self.hellos = {"host": 0, "guest": 0}

    def open(self, op: str = "hold") -> Recorder:
        """Open a stream from the host and deliver its OPEN."""
        protocol = Recorder()
        self.host.open_stream({"op": op}, protocol)
        self.pump()
        return protocol


class RestartTests(SynchronousTestCase):
    """
    One side starts over behind an open byte stream.
    """

    def setUp(self) -> None:
        Holding.resets = []
        self.patch(agentlog, "log", lambda message: None)
        self.link = Link(self)
        self.link.pump()
        self.link.check_established()
        self.streams = [self.link.open(), self.link.open()]
        self.assertEqual(sorted(self.link.guest.streams), [1, 3])

    def assertPeerRestarted(self, protocols: list[Recorder]) -> None:
        for protocol in protocols:
            assert protocol.reason is not None
            error: Any = protocol.reason.value
            self.assertIsInstance(error, StreamReset)
            self.assertEqual(error.code, ResetCode.PEER_RESTARTED)

    def check_usable(self) -> None:
        """A new stream works end to end on the new sessions."""
        protocol = self.link.open("echo")
        assert protocol.transport is not None
        protocol.transport.write(b"ping")
        self.link.pump()
        self.assertEqual(protocol.data, b"ping")

    def test_agent_restarts(self) -> None:
        """
        The VM rebooted (or the agent was respawned): the host's streams fail, the
        host is established again on the same connection, ``on_established`` runs
        again.
        """
        self.link.new_guest()
        self.link.pump()
        self.assertPeerRestarted(self.streams)
        self.link.check_established()
        self.assertEqual(self.link.established, [self.link.host, self.link.host])
        self.check_usable()

    def test_host_reconnects(self) -> None:
        """
        The VM was restored from a snapshot (the guest's session carries on) or the
        daemon reconnected: a new host connection meets the old guest session,
        whose streams are all dropped (handlers reset) before it answers.
        """
        old_host = self.link.host
        self.link.new_host()
        self.link.pump()
        self.assertEqual(Holding.resets, [(1, ResetCode.PEER_RESTARTED), (3, ResetCode.PEER_RESTARTED)])
        self.assertEqual(self.link.guest.streams, {})
        self.link.check_established()
        self.assertEqual(self.link.established, [old_host, self.link.host])
        self.check_usable()

    def test_restore_with_stale_output(self) -> None:
        """
        After a restore the guest's session may still write for the old host (a
        stream's data) before the new host's HELLO reaches it: the new host skips
        it, and the exchange ends as usual.
        """
        stream = self.link.guest.streams[1]
        stream.write(b"for the old host")
        self.link.new_host()
        self.link.pump()
        self.link.check_established()
        self.assertEqual(self.link.guest.streams, {})
        self.check_usable()

    def test_both_restart(self) -> None:
        """
        Both sides start over at once (a reboot noticed only as the daemon
        reconnects): the exchange still ends with both established.
        """
        self.link.new_host()
        self.link.new_guest()
        self.link.pump()
        self.link.check_established()
        self.check_usable()

    def test_repeated_restarts(self) -> None:
        """
        Restarts of either side in turn, each with streams open, never leave a
        side answering HELLOs forever.
        """
        for turn in range(6):
            protocol = self.link.open()
            if turn % 2:
                self.link.new_host()
            else:
                self.link.new_guest()
            self.link.pump()
            self.link.check_established()
            if not turn % 2:
                self.assertPeerRestarted([protocol])
            self.check_usable()
