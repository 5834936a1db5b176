# -*- test-case-name: tests.integration.guest.test_agent -*-
"""
Tests for :mod:`vmservice.guest.agent` with real I/O: the agent copied as the
image lays it out and run under ``-I -S``, its loop and pipe on socket pairs,
and the agent as a real process (``--listen-unix``, and ``--device`` on a
pseudo-terminal standing in for a virtio-serial port) driven by
:class:`~vmservice.agent.client.AgentClient` on the global reactor.  Its
logic without I/O is tested in :mod:`tests.guest.test_agent`.
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
import time
import tty
from typing import Any, Optional

from twisted.internet import reactor as global_reactor
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.error import ConnectionDone
from twisted.internet.protocol import Protocol
from twisted.internet.task import deferLater
from twisted.internet.utils import getProcessOutputAndValue
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase

import vmservice
from tests.integration.guest.agent_process import AGENT, AgentProcess
from tests.short_dirs import temp_dir
from tests.wire.pair import drain
from vmservice.agent.client import AgentClient, AgentRequestFailed
from vmservice.guest.loop import Loop
from vmservice.guest.pipe import OUTPUT_HIGH_WATER, READ_BUFFER_SIZE, WRITE_BUFFER_SIZE, Pipe
from vmservice.images.recipe import guest_sources
from vmservice.wire import Connection, Data, HalfClose, Hello, Open, ResetCode, Role
from vmservice.wire.events import Event

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(vmservice.__file__)))


class ImageLayoutTests(SynchronousTestCase):
    """
    The agent's modules as the image holds them.
    """

    def run_as_imaged(self, statements: str, with_version: bool = False) -> subprocess.CompletedProcess[bytes]:
        """
        Run ``statements`` with ``-I -S`` and the guest sources copied as the image copies them
        (the guest sources of the image recipe, subpackages too, under another root; without
        ``vmservice/__init__.py`` unless ``with_version``) first on the path.
        """
        root = temp_dir(self)
        for relative in guest_sources():
            if relative.endswith(".py") and (with_version or relative != "__init__.py"):
                target = os.path.join(root, "vmservice", relative)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copy(os.path.join(ROOT, "vmservice", relative), target)
        script = f"import sys; sys.path.insert(0, {root!r}); " + statements
        return subprocess.run([sys.executable, "-I", "-S", "-c", script], capture_output=True, timeout=30, env={})

    def test_image_layout(self) -> None:
        """
        Copied as the image does and run with ``-I -S``, the agent and the modules of
        its operations import with the stdlib alone; without
        ``vmservice/__init__.py`` its version is "unknown".
        """
        result = self.run_as_imaged(
            "from vmservice.guest.agent import main; from vmservice.guest.context import agent_version; "
            "from vmservice.guest.operations import LAZY_HANDLERS; "
            "[__import__(name.partition(':')[0]) for name in LAZY_HANDLERS.values()]; "
            "print(agent_version())"
        )
        self.assertEqual((result.stdout, result.stderr), (b"unknown\n", b""))

    def test_start_imports(self) -> None:
        """
        What the agent imports before it answers a create (its start, its port's session, the
        health check, then the duties it starts once ready) leaves out the modules that cost most
        to import in a cold guest under TCG (docs/performance.md, "Where a cold boot's time goes"):
        ``typing`` (and ``contextlib``, ``warnings``), ``dataclasses`` (and ``inspect``, ``ast``,
        ``dis``, ``tokenize``), ``argparse``, any OPEN header module, and ``json``, ``re``,
        ``enum``, ``signal``, ``functools``, ``collections``, ``selectors`` and ``heapq`` (the
        codec's codes are plain ints, its JSON goes through ``_json`` alone, the agent sets its
        signals with ``_signal`` and its loop waits on ``epoll`` itself).
        """
        result = self.run_as_imaged(
            "from vmservice.guest import agent, operations; "
            "operations.find_handler('health', operations.HANDLERS); "
            "from vmservice.guest.powerbutton import PowerButton; from vmservice.guest.rootgrowth import grow_root; "
            "print(' '.join(sorted(sys.modules)))",
            with_version=True,
        )
        self.assertEqual(result.stderr, b"")
        loaded = set(result.stdout.decode().split())
        self.assertIn("vmservice.guest.health", loaded)
        costly = {
            "typing", "contextlib", "warnings", "dataclasses", "inspect", "ast", "dis", "tokenize", "argparse",
            "json", "re", "enum", "signal", "functools", "collections", "selectors", "heapq",
        }
        self.assertEqual(loaded & costly, set())
        self.assertEqual({name for name in loaded if name.startswith("vmservice.wire.openheaders")}, set())


class PipeTests(SynchronousTestCase):
    """
    The epoll loop and the pipe over a socket pair.
    """

    def setUp(self) -> None:
        self.loop = Loop()
        self.addCleanup(self.loop.close)

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
        self.assertLessEqual(max(calls[0]), WRITE_BUFFER_SIZE)
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
        payload = os.urandom(3 * READ_BUFFER_SIZE + 100)
        theirs.sendall(payload)
        self.loop.run_once(1.0)
        self.assertEqual(received, [payload])
        self.assertIs(type(received[0]), bytes)

    def test_pipe_drained_when_all_was_taken_at_once(self) -> None:
        """
        Writers told there is no room (more than the high water queued within
        one loop iteration) hear that the pipe drained even when the
        descriptor takes everything in the first write, so it never waits for
        writability: streams held back then would otherwise wait forever.
        """
        ours, theirs = socket.socketpair()
        self.addCleanup(ours.close)
        self.addCleanup(theirs.close)
        ours.setblocking(False)
        theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * 1024 * 1024)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 * 1024 * 1024)
        events: list[str] = []
        pipe = Pipe(self.loop, ours.fileno(), lambda data: None, lambda: None, lambda: events.append("drained"))
        pipe.start()
        for _ in range(5):
            pipe.write(b"x" * (OUTPUT_HIGH_WATER // 4))
        self.assertFalse(pipe.has_room)
        self.loop.run_once(0)
        self.assertEqual(pipe.buffered, 0)
        self.assertEqual(events, ["drained"])

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
        self.dir = temp_dir(self)
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


