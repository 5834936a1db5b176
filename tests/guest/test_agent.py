# -*- test-case-name: tests.guest.test_agent -*-
"""
Tests for :mod:`vmservice.guest.agent` without I/O: its session logic against a
host codec, the helpers that find the port and read facts, and its loop's timers
on a fake clock.  The loop and pipe on socket pairs, and the agent as a real
process, are tested in :mod:`tests.integration.guest.test_agent`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

import vmservice
from tests.guest.session import GuestSessionMixin
from tests.short_dirs import temp_dir
from vmservice.guest import agent, agentlog, context, deferred, operations, session
from vmservice.guest.context import AgentContext
from vmservice.guest.health import system_uptime_ns
from vmservice.guest.loop import Loop
from vmservice.guest.streams import GuestStream, StreamHandler
from vmservice.guest.ports import find_port
from vmservice.wire import (
    INITIAL_WINDOW,
    Connection,
    Data,
    HalfClose,
    Hello,
    Open,
    Ping,
    Pong,
    Reset,
    ResetCode,
    Role,
    WindowUpdate,
)
from vmservice.wire.frames import encode_event


# -- the session, without I/O ---------------------------------------------------------------


class Failing(StreamHandler):
    """
    An operation whose handler fails on data.
    """

    def data_received(self, data: bytes) -> None:
        raise ValueError("broken handler")


class Recording(StreamHandler):
    """
    An operation that records what happens to it.
    """

    seen: list[tuple[str, Any]] = []

    def start(self) -> None:
        self.seen.append(("start", dict(self.header)))

    def reset(self, code: int, reason: str) -> None:
        self.seen.append(("reset", code))


class SessionTests(GuestSessionMixin, SynchronousTestCase):
    """
    :class:`Session` against a host codec.
    """

    def setUp(self) -> None:
        directory = temp_dir(self)
        uptime = os.path.join(directory, "uptime")
        with open(uptime, "w") as f:
            f.write("1234.56 789.00\n")
        self.logged: list[str] = []
        self.context = AgentContext("test-1", time.monotonic_ns() - 5_000_000_000, uptime)
        self.room = True
        Recording.seen = []
        self.start_session({"fail": Failing, "record": Recording}, self.context, lambda: self.room, self.logged.append)

    def test_announces_itself(self) -> None:
        """
        A new session sends its HELLO first, with the agent's version.
        """
        self.session.start()
        [hello] = self.receive()
        assert isinstance(hello, Hello)
        self.assertEqual(hello.agent_version, "test-1")

    def test_health(self) -> None:
        """
        ``health`` answers one JSON DATA and HALF_CLOSE, with uptimes in integer
        nanoseconds.
        """
        self.handshake()
        self.send(Open(1, {"op": "health"}), HalfClose(1))
        data, end = self.receive()
        self.assertEqual(end, HalfClose(1))
        assert isinstance(data, Data)
        report = json.loads(data.data)
        self.assertEqual(
            {k: v for k, v in report.items() if k != "agent_uptime"},
            {"agent_version": "test-1", "system_uptime": 1_234_560_000_000, "userdata_ran": False},
        )
        self.assertIsInstance(report["agent_uptime"], int)
        self.assertGreaterEqual(report["agent_uptime"], 5_000_000_000)
        self.assertEqual(self.session.streams, {})

    def test_unknown_op(self) -> None:
        """
        An unknown or missing op is refused with UNKNOWN_OP; the session goes on.
        """
        self.handshake()
        self.send(Open(1, {"op": "teleport"}), Open(3, {}), Open(5, {"op": 7}))
        events = self.receive()
        self.assertEqual([(e.stream_id, e.code) for e in events if isinstance(e, Reset)],
                         [(1, ResetCode.UNKNOWN_OP), (3, ResetCode.UNKNOWN_OP), (5, ResetCode.UNKNOWN_OP)])
        self.send(Ping(b"stillok!"))
        self.assertEqual(self.receive(), [Pong(b"stillok!")])

    def test_echo_flow_control(self) -> None:
        """
        ``echo`` returns every byte, grants credit only for what it sent back, and
        half-closes after the host.
        """
        self.handshake()
        self.send(Open(1, {"op": "echo"}))
        self.room = False
        self.send(Data(1, b"e" * INITIAL_WINDOW))
        self.assertEqual(self.receive(), [])
        self.assertEqual(self.host.send_window(1), 0)
        self.room = True
        self.session.output_drained()
        events = self.receive()
        echoed = b"".join(e.data for e in events if isinstance(e, Data))
        self.assertEqual(echoed, b"e" * INITIAL_WINDOW)
        self.assertEqual(self.host.send_window(1), INITIAL_WINDOW)
        self.send(HalfClose(1))
        self.assertEqual(self.receive(), [HalfClose(1)])
        self.assertEqual(self.session.streams, {})

    def test_echo_waits_for_host_credit(self) -> None:
        """
        An echo the host has no credit for waits; the host's WINDOW releases it.
        """
        self.handshake()
        self.send(Open(1, {"op": "echo"}), Data(1, b"a" * INITIAL_WINDOW))
        self.receive()
        self.host.acknowledge_received_data(1, 0)
        self.send(Data(1, b"b" * 10))
        self.assertEqual(self.receive(), [])
        self.send(WindowUpdate(1, 10))
        self.assertEqual(self.receive(), [Data(1, b"b" * 10)])

    def test_handler_failure(self) -> None:
        """
        A handler that raises has its stream reset with INTERNAL_ERROR; other
        streams carry on.
        """
        self.handshake()
        self.send(Open(1, {"op": "fail"}), Open(3, {"op": "echo"}), Data(1, b"x"))
        [reset] = [e for e in self.receive() if isinstance(e, Reset)]
        self.assertEqual((reset.stream_id, reset.code), (1, ResetCode.INTERNAL_ERROR))
        self.assertEqual(self.logged, ["stream 1 failed: ValueError('broken handler')"])
        self.send(Data(3, b"y"))
        self.assertEqual(self.receive(), [Data(3, b"y")])

    def test_handler_table(self) -> None:
        """
        Operations plug in as handler classes; a reset from the host reaches them.
        """
        self.handshake()
        self.send(Open(1, {"op": "record", "arg": 1}), Reset(1, ResetCode.CANCEL, ""))
        self.assertEqual(Recording.seen, [("start", {"op": "record", "arg": 1}), ("reset", 0)])

    def test_host_restart(self) -> None:
        """
        A HELLO from a new host session drops every stream (handlers hear
        PEER_RESTARTED) and is answered.
        """
        self.handshake()
        self.send(Open(1, {"op": "record"}))
        self.host = Connection(Role.HOST, nonce=b"NEWHOST!")
        self.send(self.host.hello("host"))
        self.assertEqual(Recording.seen[-1], ("reset", ResetCode.PEER_RESTARTED))
        [answer] = self.receive()
        assert isinstance(answer, Hello)
        self.assertEqual(answer.echo, b"NEWHOST!")

    def test_host_restart_drops_every_stream(self) -> None:
        """
        A new host session (a new connection after a restore, or a restarted daemon
        that reconnected before the agent noticed) drops every stream, whatever
        its state: handlers hear PEER_RESTARTED, output still waiting for credit or
        room is discarded, and nothing of the old streams is sent.  The agent
        answers with one HELLO echoing the new host; once the host acknowledges,
        nothing more is sent, and stream ids start over.
        """
        self.handshake()
        old_nonce = self.session.conn.nonce
        self.send(Open(1, {"op": "record"}), Open(3, {"op": "record"}), HalfClose(3))
        self.send(Open(5, {"op": "echo"}))
        self.room = False
        self.send(Data(5, b"e" * 1000))
        self.assertEqual(self.session.streams[5].pending, 1000)
        self.receive()

        self.host = Connection(Role.HOST, nonce=b"RESTORED")
        self.send(self.host.hello("new host"))
        self.assertEqual(Recording.seen, [("start", {"op": "record"})] * 2 + [("reset", ResetCode.PEER_RESTARTED)] * 2)
        self.assertEqual(self.session.streams, {})
        self.room = True
        self.session.output_drained()
        [answer] = self.receive()
        self.assertEqual(answer, Hello(old_nonce, b"RESTORED", "test-1"))
        self.assertFalse(self.session.conn.established)

        self.send(self.host.hello("new host"))
        self.assertTrue(self.session.conn.established)
        self.assertTrue(self.host.established)
        self.assertEqual(self.receive(), [])
        self.send(Open(1, {"op": "echo"}), Data(1, b"new"))
        self.assertEqual(self.receive(), [Data(1, b"new")])

    def test_no_hello_loop(self) -> None:
        """
        A HELLO that shows the host knows our session is not answered (a repeated
        HELLO changes nothing, streams survive it); one with a stale echo is
        answered once, without dropping the streams of the same host session.
        """
        self.handshake()
        self.send(Open(1, {"op": "record"}))
        self.send(self.host.hello("host"))
        self.assertEqual(self.receive(), [])
        stale = Hello(self.host.nonce, b"OLDGUEST", "host")
        self.session.data_received(encode_event(stale))
        [answer] = self.receive()
        self.assertEqual(answer, Hello(self.session.conn.nonce, self.host.nonce, "test-1"))
        self.assertEqual(list(self.session.streams), [1])
        self.assertEqual(Recording.seen, [("start", {"op": "record"})])
        self.send(Ping(b"stillok!"))
        self.assertEqual(self.receive(), [Pong(b"stillok!")])

    def test_resync_after_protocol_error(self) -> None:
        """
        After bytes that break the protocol the agent starts a new session (a new
        HELLO) and finds the host's next HELLO in what follows.
        """
        self.handshake()
        old_nonce = self.session.conn.nonce
        self.send(Open(1, {"op": "record"}))
        fresh = Connection(Role.HOST, nonce=b"FRESHHST")
        self.session.data_received(encode_event(Data(99, b"bad")) + fresh.send(fresh.hello("h")))
        self.assertEqual(Recording.seen[-1], ("reset", ResetCode.PROTOCOL_ERROR))
        self.assertEqual(len(self.logged), 1)
        self.assertIn("protocol error", self.logged[0])
        self.host = fresh
        hellos = self.receive()
        self.assertTrue(all(isinstance(h, Hello) for h in hellos))
        self.assertNotEqual(self.session.conn.nonce, old_nonce)
        self.assertEqual(self.session.conn.peer_hello and self.session.conn.peer_hello.nonce, b"FRESHHST")

    def test_connection_lost(self) -> None:
        """
        When the host goes away, every handler hears of it and input is ignored.
        """
        self.handshake()
        self.send(Open(1, {"op": "record"}))
        self.session.connection_lost()
        self.assertEqual(Recording.seen[-1], ("reset", ResetCode.PEER_RESTARTED))
        self.session.data_received(b"ignored")
        self.assertEqual(self.session.streams, {})

    def test_too_many_streams(self) -> None:
        """
        Streams beyond the limit are refused.
        """
        self.patch(session, "MAX_STREAMS", 2)
        self.handshake()
        self.send(Open(1, {"op": "echo"}), Open(3, {"op": "echo"}), Open(5, {"op": "echo"}))
        [reset] = self.receive()
        assert isinstance(reset, Reset)
        self.assertEqual((reset.stream_id, reset.code), (5, ResetCode.REFUSED))

    def test_stream_helpers(self) -> None:
        """
        A handler's stream exposes the loop and context, and ignores writes after
        it ended.
        """
        self.handshake()
        self.send(Open(1, {"op": "record"}))
        stream: GuestStream = self.session.streams[1]
        self.assertIs(stream.loop, self.loop)
        self.assertIs(stream.context, self.context)
        stream.reset(ResetCode.CANCEL, "done")
        self.assertEqual(self.receive(), [Reset(1, ResetCode.CANCEL, "done")])
        stream.write(b"late")
        stream.end()
        self.assertEqual(self.receive(), [])


class HelpersTests(SynchronousTestCase):
    """
    Finding the port and reading facts.
    """

    def test_find_port(self) -> None:
        """
        The port is found by its name in sysfs, only once its device node exists.
        """
        root = temp_dir(self)
        sysfs, dev = os.path.join(root, "sys"), os.path.join(root, "dev")
        for entry, name in (("vport0p1", "org.qemu.guest_agent.0"), ("vport0p2", "agent")):
            os.makedirs(os.path.join(sysfs, entry))
            with open(os.path.join(sysfs, entry, "name"), "w") as f:
                f.write(name + "\n")
        os.makedirs(os.path.join(sysfs, "vport0p3"))
        os.makedirs(dev)
        self.assertIsNone(find_port("agent", sysfs, dev))
        open(os.path.join(dev, "vport0p2"), "w").close()
        self.assertEqual(find_port("agent", sysfs, dev), os.path.join(dev, "vport0p2"))
        self.assertIsNone(find_port("other", sysfs, dev))
        self.assertIsNone(find_port("agent", os.path.join(root, "missing"), dev))

    def test_system_uptime(self) -> None:
        """
        /proc/uptime's decimal seconds become exact integer nanoseconds.
        """
        path = os.path.join(temp_dir(self), "uptime")
        for text, expected in (("12.34 5.6", 12_340_000_000), ("7 1", 7_000_000_000),
                               ("0.000000001 0", 1)):
            with open(path, "w") as f:
                f.write(text)
            self.assertEqual(system_uptime_ns(path), expected)
        self.assertGreater(system_uptime_ns(), 0)

    def test_version(self) -> None:
        """
        The agent reports vmservice's version.
        """
        self.assertEqual(context.agent_version(), vmservice.__version__)


class LoopTests(SynchronousTestCase):
    """
    The epoll loop's timers and soon-calls, on a fake clock.
    """

    def setUp(self) -> None:
        self.now = 1000.0
        self.loop = Loop(clock=lambda: self.now)
        self.addCleanup(self.loop.close)
        self.waits: list[float] = []
        self.patch(time, "sleep", self.waits.append)

    def test_timers(self) -> None:
        """
        Timers run in order of due time, once due on the loop's clock; cancelled
        ones do not run, and the loop never waits for a timer already due.
        """
        ran: list[str] = []
        self.loop.call_later(0.02, lambda: ran.append("late"))
        self.loop.call_later(0.0, lambda: ran.append("soon"))
        self.loop.call_later(0.01, lambda: ran.append("cancelled")).cancel()
        self.loop.run_once(0.0)
        self.assertEqual(ran, ["soon"])
        self.now += 0.02
        self.loop.run_once(0.05)
        self.assertEqual(ran, ["soon", "late"])
        self.assertEqual(self.waits, [0.0, 0.0])

    def test_call_soon(self) -> None:
        """
        call_soon runs its callbacks in order at the end of the iteration, without
        waiting for a descriptor or timer, callbacks they add included.
        """
        ran: list[str] = []
        r, w = os.pipe()
        self.addCleanup(os.close, r)
        self.addCleanup(os.close, w)
        self.loop.watch(r, lambda: ran.append("never"))
        self.loop.call_soon(lambda: ran.append("first"))
        self.loop.call_soon(lambda: (ran.append("second"), self.loop.call_soon(lambda: ran.append("third"))))
        started = time.monotonic()
        self.loop.run_once(5.0)
        self.assertLess(time.monotonic() - started, 1.0)
        self.assertEqual(ran, ["first", "second", "third"])


class ReadyMarkTests(SynchronousTestCase):
    def _environment(self, value: str | None) -> None:
        """Set (or unset) ``VMSERVICE_AGENT_READY`` for this test only."""
        old = os.environ.pop("VMSERVICE_AGENT_READY", None)
        if value is not None:
            os.environ["VMSERVICE_AGENT_READY"] = value

        def restore() -> None:
            os.environ.pop("VMSERVICE_AGENT_READY", None)
            if old is not None:
                os.environ["VMSERVICE_AGENT_READY"] = old

        self.addCleanup(restore)
    def test_marks_the_named_file(self) -> None:
        """With ``VMSERVICE_AGENT_READY`` set, the agent creates that file (the guest's other services wait for it)."""
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory)
        path = os.path.join(directory, "agent.ready")
        self._environment(path)
        agent._mark_ready()
        self.assertTrue(os.path.exists(path))

    def test_nothing_without_the_variable(self) -> None:
        """Without ``VMSERVICE_AGENT_READY`` the agent creates no file (as when it runs outside a guest)."""
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory)
        self._environment(None)
        before = os.listdir(directory)
        agent._mark_ready()
        self.assertEqual(os.listdir(directory), before)
        self.assertNotIn("VMSERVICE_AGENT_READY", os.environ)

    def test_unwritable_path_is_logged_not_raised(self) -> None:
        """A marker the agent cannot create is logged; the agent goes on serving."""
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory)
        path = os.path.join(directory, "missing", "agent.ready")
        self._environment(path)
        logged: list[str] = []
        self.patch(agentlog, "log", logged.append)
        agent._mark_ready()
        self.assertFalse(os.path.exists(path))
        self.assertEqual(len(logged), 1)
        self.assertIn(path, logged[0])


class DeferredStartTests(SynchronousTestCase):
    """
    Start-up work put off until the host has its first answer (:func:`deferred.run_deferred`): the
    operations the host asks while a node boots do not run it; any other operation runs it first, once.
    """

    def test_runs_before_the_first_other_operation(self) -> None:
        ran: list[str] = []
        self.patch(deferred, "DEFERRED", [lambda: ran.append("grown")])
        for op in sorted(deferred.UNDEFERRED_OPS):
            self.assertIsNotNone(operations.find_handler(op, operations.HANDLERS))
        self.assertEqual(ran, [])
        operations.find_handler("no-such-op", operations.HANDLERS)
        self.assertEqual(ran, ["grown"])
        operations.find_handler("exec", operations.HANDLERS)
        self.assertEqual(ran, ["grown"])

    def test_once_in_order(self) -> None:
        """run_deferred() itself runs each piece of work once, in order."""
        ran: list[int] = []
        self.patch(deferred, "DEFERRED", [lambda: ran.append(1), lambda: ran.append(2)])
        deferred.run_deferred()
        deferred.run_deferred()
        self.assertEqual(ran, [1, 2])
