# -*- test-case-name: tests.agent.test_guest_agent -*-
"""
Tests for :mod:`vmservice.guest.agent`: its session logic without I/O, its loop and
pipe on socket pairs, and the agent as a real process (``--listen-unix``, and
``--device`` on a pseudo-terminal standing in for a virtio-serial port) driven by
:class:`~vmservice.agent.client.AgentClient`.
"""

from __future__ import annotations

import hashlib
import json
import os
import pty
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tty
from typing import Any, Optional

from twisted.internet import reactor as global_reactor
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.error import ConnectionDone
from twisted.internet.protocol import ProcessProtocol, Protocol
from twisted.internet.task import deferLater
from twisted.internet.utils import getProcessOutputAndValue
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase

import vmservice
from tests.guest.session import GuestSessionMixin
from tests.wire.pair import drain
from vmservice.agent.client import AgentClient, AgentRequestFailed
from vmservice.guest import agent
from vmservice.guest.agent import (
    AgentContext,
    GuestStream,
    Loop,
    Pipe,
    StreamHandler,
    find_port,
    system_uptime_ns,
)
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
from vmservice.wire.events import Event
from vmservice.wire.frames import encode_event

AGENT = os.path.abspath(agent.__file__)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(vmservice.__file__)))


def _temp_dir(case: SynchronousTestCase) -> str:
    """
    A short temporary directory (UNIX socket paths are limited to 107 bytes),
    removed after the test.
    """
    path = tempfile.mkdtemp(prefix="vmsa-", dir="/tmp")
    case.addCleanup(shutil.rmtree, path, True)
    return path


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
        directory = _temp_dir(self)
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
        self.patch(agent, "MAX_STREAMS", 2)
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
        root = _temp_dir(self)
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
        path = os.path.join(_temp_dir(self), "uptime")
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
        self.assertEqual(agent.agent_version(), vmservice.__version__)

    def test_image_layout(self) -> None:
        """
        Copied as the image does (wire and guest modules under another root) and
        run with ``-I -S``, the agent imports with the stdlib alone; without
        ``vmservice/__init__.py`` its version is "unknown".
        """
        root = _temp_dir(self)
        for package in ("wire", "guest"):
            target = os.path.join(root, "vmservice", package)
            os.makedirs(target)
            source = os.path.join(ROOT, "vmservice", package)
            for name in os.listdir(source):
                if name.endswith(".py"):
                    shutil.copy(os.path.join(source, name), target)
        script = (
            f"import sys; sys.path.insert(0, {root!r}); "
            "from vmservice.guest.agent import agent_version, main; print(agent_version())"
        )
        result = subprocess.run(
            [sys.executable, "-I", "-S", "-c", script], capture_output=True, timeout=30, env={}
        )
        self.assertEqual((result.stdout, result.stderr), (b"unknown\n", b""))


class LoopTests(SynchronousTestCase):
    """
    The selectors loop and the pipe over a socket pair.
    """

    def setUp(self) -> None:
        self.loop = Loop()
        self.addCleanup(self.loop.close)

    def test_timers(self) -> None:
        """
        Timers run in order of due time; cancelled ones do not run.
        """
        ran: list[str] = []
        self.loop.call_later(0.02, lambda: ran.append("late"))
        self.loop.call_later(0.0, lambda: ran.append("soon"))
        self.loop.call_later(0.01, lambda: ran.append("cancelled")).cancel()
        deadline = time.monotonic() + 2
        while len(ran) < 2 and time.monotonic() < deadline:
            self.loop.run_once(0.05)
        self.assertEqual(ran, ["soon", "late"])

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

    def test_pipe_batches_writes(self) -> None:
        """
        What a pipe is given during one iteration goes out at its end, in order, in
        one vectored write of pieces no larger than virtio-serial takes per write.
        """
        ours, theirs = socket.socketpair()
        self.addCleanup(ours.close)
        self.addCleanup(theirs.close)
        ours.setblocking(False)
        calls: list[list[int]] = []
        real_writev = os.writev

        def writev(fd: int, buffers: list[Any]) -> int:
            calls.append([len(b) for b in buffers])
            return real_writev(fd, buffers)

        self.patch(os, "writev", writev)
        pipe = Pipe(self.loop, ours.fileno(), lambda data: None, lambda: None, lambda: None)
        pipe.start()
        pieces = [b"a" * 10, b"b" * 100_000, b"c" * 3]
        for piece in pieces:
            pipe.write(piece)
        self.assertEqual(calls, [])
        self.assertEqual(pipe.buffered, 100_013)
        self.loop.run_once(0)
        self.assertEqual(len(calls), 1)
        self.assertEqual(sum(calls[0]), 100_013)
        self.assertLessEqual(max(calls[0]), agent.WRITE_BUFFER_SIZE)
        got = b""
        while len(got) < 100_013:
            got += theirs.recv(1 << 20)
        self.assertEqual(got, b"".join(pieces))

    def test_pipe_reads_all_buffers_at_once(self) -> None:
        """
        Everything readable arrives as one batch, read with vectored reads of
        page-sized buffers.
        """
        ours, theirs = socket.socketpair()
        self.addCleanup(ours.close)
        self.addCleanup(theirs.close)
        ours.setblocking(False)
        received: list[bytes] = []
        pipe = Pipe(self.loop, ours.fileno(), received.append, lambda: None, lambda: None)
        pipe.start()
        payload = os.urandom(3 * agent.READ_BUFFER_SIZE + 100)
        theirs.sendall(payload)
        self.loop.run_once(1.0)
        self.assertEqual(received, [payload])
        self.assertIs(type(received[0]), bytes)

    def test_pipe(self) -> None:
        """
        A pipe buffers what the socket does not take (EAGAIN), reports when it
        drained, delivers what it reads and reports end of input once.
        """
        ours, theirs = socket.socketpair()
        self.addCleanup(ours.close)
        self.addCleanup(theirs.close)
        ours.setblocking(False)
        theirs.setblocking(False)
        received: list[bytes] = []
        events: list[str] = []
        pipe = Pipe(self.loop, ours.fileno(), received.append,
                    lambda: events.append("closed"), lambda: events.append("drained"))
        pipe.start()
        payload = os.urandom(4 * 1024 * 1024)
        pipe.write(payload)
        self.assertGreater(pipe.buffered, 0)
        self.assertFalse(pipe.has_room)
        got = bytearray()
        deadline = time.monotonic() + 10
        while len(got) < len(payload) and time.monotonic() < deadline:
            self.loop.run_once(0.01)
            try:
                got += theirs.recv(1 << 20)
            except BlockingIOError:
                pass
        self.assertEqual(hashlib.sha256(got).digest(), hashlib.sha256(payload).digest())
        self.assertEqual(pipe.buffered, 0)
        self.assertIn("drained", events)
        theirs.sendall(b"to the agent")
        theirs.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + 5
        while "closed" not in events and time.monotonic() < deadline:
            self.loop.run_once(0.01)
        self.assertEqual(b"".join(received), b"to the agent")
        self.assertEqual(events.count("closed"), 1)
        pipe.write(b"after close")
        self.assertEqual(pipe.buffered, 0)


# -- the agent as a process ---------------------------------------------------------------------


class AgentProcess(ProcessProtocol):
    """
    A spawned agent: its output, readiness and end.
    """

    def __init__(self) -> None:
        self.stdout = b""
        self.stderr = b""
        self.ready: Deferred[None] = Deferred()
        self.ended: Deferred[None] = Deferred()
        self.running = True

    def outReceived(self, data: bytes) -> None:
        self.stdout += data
        if b"vmservice-agent: ready on " in self.stdout and not self.ready.called:
            self.ready.callback(None)

    def errReceived(self, data: bytes) -> None:
        self.stderr += data

    def processEnded(self, reason: Failure) -> None:
        self.running = False
        if not self.ready.called:
            self.ready.errback(RuntimeError(f"agent exited: {self.stderr.decode(errors='replace')}"))
        self.ended.callback(None)


class Collect(Protocol):
    """
    Hashes everything a stream delivers.
    """

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.size = 0
        self.reason: Optional[Failure] = None
        self.done: Deferred[None] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.digest.update(data)
        self.size += len(data)

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        self.reason = reason
        self.done.callback(None)


async def _until(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await deferLater(global_reactor, 0.01)


class AgentProcessTests(TestCase):
    """
    The agent as a process under the interpreter's isolated, site-less mode (as in
    the guest: stdlib only), on a UNIX socket, driven by :class:`AgentClient`.
    """

    timeout = 60

    def setUp(self) -> None:
        self.dir = _temp_dir(self)
        self.path = os.path.join(self.dir, "agent.sock")

    async def spawn(self, *args: str) -> AgentProcess:
        """
        Start an agent; it is killed (by PID) after the test.
        """
        process = AgentProcess()
        argv = [sys.executable, "-I", "-S", AGENT, *(args or ("--listen-unix", self.path))]
        global_reactor.spawnProcess(process, sys.executable, argv, env={}, path=self.dir)
        self.addCleanup(self.kill, process)
        await process.ready
        return process

    def kill(self, process: AgentProcess) -> Optional[Deferred[None]]:
        """
        Kill the agent by its PID if it still runs, and wait for its end.
        """
        if process.running:
            process.transport.signalProcess("KILL")
        return process.ended

    def client(self) -> AgentClient:
        """
        A started client of the agent's socket, stopped after the test.
        """
        client = AgentClient(global_reactor, self.path)
        client.start()
        self.addCleanup(client.stop)
        return client

    async def test_version(self) -> None:
        """
        ``--version`` prints the vmservice version.
        """
        out, err, code = await getProcessOutputAndValue(
            sys.executable, ["-I", "-S", AGENT, "--version"], env={}
        )
        self.assertEqual((out, code), (f"vmservice-agent {vmservice.__version__}\n".encode(), 0))

    async def test_health(self) -> None:
        """
        The agent prints its ready line, and health reports its version and
        uptimes.
        """
        process = await self.spawn()
        self.assertEqual(process.stdout, f"vmservice-agent: ready on {self.path}\n".encode())
        client = self.client()
        await client.when_ready()
        health = await client.health()
        self.assertEqual(health.agent_version, vmservice.__version__)
        self.assertEqual(client.agent_version, vmservice.__version__)
        self.assertGreater(health.agent_uptime, 0)
        self.assertGreater(health.system_uptime, health.agent_uptime)
        self.assertFalse(health.userdata_ran)

    async def test_unknown_op(self) -> None:
        """
        An operation the agent does not know fails with UNKNOWN_OP.
        """
        await self.spawn()
        client = self.client()
        await client.when_ready()
        with self.assertRaises(AgentRequestFailed) as caught:
            await client.request({"op": "teleport"}, 100)
        self.assertEqual(caught.exception.code, ResetCode.UNKNOWN_OP)

    async def echo(self, client: AgentClient, payload: bytes) -> None:
        """
        Echo ``payload`` through the agent and check every byte came back.
        """
        collect = Collect()
        stream = client.open_stream({"op": "echo"}, collect)
        stream.write(payload)
        stream.loseConnection()
        await collect.done
        assert collect.reason is not None
        self.assertTrue(collect.reason.check(ConnectionDone), collect.reason)
        self.assertEqual(collect.size, len(payload))
        self.assertEqual(collect.digest.digest(), hashlib.sha256(payload).digest())

    async def test_echo_8_mib(self) -> None:
        """
        8 MiB echoed through the agent come back byte for byte.
        """
        await self.spawn()
        client = self.client()
        await client.when_ready()
        await self.echo(client, os.urandom(8 * 1024 * 1024))

    async def test_streams_at_once(self) -> None:
        """
        Several echo streams and health requests share the channel at once.
        """
        await self.spawn()
        client = self.client()
        await client.when_ready()
        work = [Deferred.fromCoroutine(self.echo(client, os.urandom(1024 * 1024 + i))) for i in range(4)]
        work += [Deferred.fromCoroutine(client.health()) for _ in range(3)]
        await gatherResults(work, consumeErrors=True)

    async def test_pings(self) -> None:
        """
        50 pings come back, each with a positive round trip.
        """
        await self.spawn()
        client = self.client()
        await client.when_ready()
        rtts = [await client.ping() for _ in range(50)]
        self.assertEqual(len(rtts), 50)
        self.assertTrue(all(0 < rtt < 5 for rtt in rtts), rtts)

    async def test_reconnect_after_client_drops(self) -> None:
        """
        When the client's connection drops, it reconnects to the same agent, which
        serves the new connection.
        """
        await self.spawn()
        client = self.client()
        await client.when_ready()
        first = await client.health()
        for _ in range(3):
            client.reconnect()
            await _until(lambda: not client.connected)
            await client.when_ready()
        second = await client.health()
        self.assertGreater(second.agent_uptime, first.agent_uptime)

    async def test_next_client(self) -> None:
        """
        After one client stops, another is served.
        """
        await self.spawn()
        first = self.client()
        await first.when_ready()
        await first.stop()
        second = self.client()
        await second.when_ready()
        await second.health()

    async def test_agent_restart(self) -> None:
        """
        When the agent dies and a new one listens again, the client reconnects by
        itself.
        """
        process = await self.spawn()
        client = self.client()
        await client.when_ready()
        old = await client.health()
        process.transport.signalProcess("KILL")
        await process.ended
        await _until(lambda: not client.connected)
        await self.spawn()
        await client.when_ready()
        new = await client.health()
        self.assertLess(new.agent_uptime, old.agent_uptime + 10_000_000_000)

    async def test_garbage_connection(self) -> None:
        """
        A peer that sends garbage and leaves does not hurt the agent: the next
        client is served.
        """
        await self.spawn()
        raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(raw.close)
        raw.connect(self.path)
        raw.sendall(os.urandom(100_000) + b"\x00\x00\x00\x1d\x01\x00\x00\x00\x00\x00VMSAGENT")
        raw.close()
        client = self.client()
        await client.when_ready()
        await client.health()

    async def test_device_on_a_pty(self) -> None:
        """
        ``--device`` serves a character device as virtio-serial's port (a raw
        pseudo-terminal stands in for it): HELLO, health, and when the host side
        goes away the agent notices, drops the session and keeps running.
        """
        master, slave = pty.openpty()
        self.addCleanup(_close_quietly, slave)
        self.addCleanup(_close_quietly, master)
        tty.setraw(slave)
        process = await self.spawn("--device", os.ttyname(slave))
        os.close(slave)
        host = Connection(Role.HOST)
        os.write(master, host.send(host.hello("test")))
        events = await _exchange(master, host, lambda: host.established)
        if host.hello_wanted:
            os.write(master, host.send(host.hello("test")))
        os.write(master, host.send(Open(1, {"op": "health"})) + host.send(HalfClose(1)))
        events = await _exchange(master, host, lambda: not host.is_open(1))
        [body] = [e.data for e in events if isinstance(e, Data)]
        self.assertEqual(json.loads(body)["agent_version"], vmservice.__version__)
        os.close(master)
        await _until(lambda: b"host disconnected" in process.stderr)
        await deferLater(global_reactor, 0.3)
        self.assertTrue(process.running)


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


async def _exchange(fd: int, conn: Connection, done: Any, timeout: float = 10.0) -> list[Event]:
    """
    Read from ``fd`` into ``conn``, answering HELLOs, until ``done()``.
    """
    events: list[Event] = []
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"no answer; got {events}")
        readable, _, _ = select.select([fd], [], [], 0)
        if not readable:
            await deferLater(global_reactor, 0.01)
            continue
        conn.receive_data(os.read(fd, 65536))
        for event in drain(conn):
            events.append(event)
            if isinstance(event, Hello) and conn.hello_wanted:
                os.write(fd, conn.send(conn.hello("test")))
    return events


