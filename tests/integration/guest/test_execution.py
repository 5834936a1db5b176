# -*- test-case-name: tests.integration.guest.test_execution -*-
"""
The guest's exec handler with real child processes: quoting checked by a
real bash, and :class:`~vmservice.guest.execution.ExecHandler` run in-process
on the host through a real :class:`~vmservice.guest.agent.Session` and
:class:`~vmservice.guest.agent.Loop`.  The parts without children are tested in
:mod:`tests.guest.test_execution`.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.guest.session import GuestSessionMixin
from vmservice.guest import execution, spawning
from vmservice.guest.context import AgentContext
from vmservice.guest.exec_phase import KILLING, QUIET, RUNNING
from vmservice.guest.exec_spec import argv
from vmservice.wire import payloads
from vmservice.wire.payloads import EXIT, STDOUT, RecordDecoder
from vmservice.wire import Connection, ResetCode, Role
from vmservice.wire.events import Data, HalfClose, Hello, Open, Reset
from vmservice.wire.openheaders.exec import ExecHeader


class BashTests(SynchronousTestCase):
    """Quoting as a real bash reads it."""

    def test_quote_really_in_bash(self) -> None:
        """bash sees the quoted args as the words given."""
        spec = ExecHeader(cmd="printf '%s|'", args=("a b", "$X", "it's", ";rm"))
        out = subprocess.run(argv(spec), capture_output=True, check=True).stdout
        self.assertEqual(out, b"a b|$X|it's|;rm|")


#: The phases of an exec whose process has not exited yet.
ALIVE = (RUNNING, QUIET, KILLING)


class HandlerTests(GuestSessionMixin, SynchronousTestCase):
    """:class:`ExecHandler` in a real session with real children."""

    def setUp(self) -> None:
        self.start_session({"exec": execution.ExecHandler}, AgentContext("t"))
        self.handshake()
        self.decoders: dict[int, RecordDecoder] = {}
        self.addCleanup(self._kill_leftovers)

    def _kill_leftovers(self) -> None:
        for stream in list(self.session.streams.values()):
            handler = stream.handler
            if isinstance(handler, execution.ExecHandler) and handler.pid and handler.phase in ALIVE:
                os.killpg(handler.pid, 9)
                os.waitpid(handler.pid, 0)

    def open(self, stdin: bytes | None = None, **header: Any) -> int:
        stream_id = self.host.next_stream_id()
        self.send(Open(stream_id, {"op": "exec", **header, "stdin": stdin is not None}))
        if stdin:
            self.send(Data(stream_id, stdin))
        self.send(HalfClose(stream_id))
        return stream_id

    def run_stream(self, stream_id: int, timeout: float = 10.0) -> tuple[list[tuple[int, Any]], bool]:
        """Run the loop until the stream ends; the records and whether it was reset."""
        decoder = RecordDecoder()
        out: list[tuple[int, Any]] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.receive():
                if getattr(event, "stream_id", None) != stream_id:
                    continue
                if isinstance(event, Data):
                    for record in decoder.feed(event.data):
                        out.append((record.kind, record.payload if record.kind in (2, 3) else record.json()))
                    self.session.data_received(self.host.acknowledge_received_data(stream_id, len(event.data)))
                elif isinstance(event, HalfClose):
                    return out, False
                elif isinstance(event, Reset):
                    return out, True
            self.loop.run_once(0.05)
        raise AssertionError(f"stream {stream_id} did not end: {out}")

    def output(self, records: list[tuple[int, Any]], kind: int = STDOUT) -> bytes:
        return b"".join(payload for k, payload in records if k == kind)

    def test_echo_and_exit_code(self) -> None:
        """stdout and stderr come back in order, then the exit code."""
        records, _ = self.run_stream(self.open(cmd="echo hi; echo err >&2; exit 5"))
        self.assertEqual(records[0][0], payloads.STARTED)
        self.assertEqual(self.output(records), b"hi\n")
        self.assertEqual(self.output(records, execution.STDERR), b"err\n")
        self.assertEqual(records[-1], (EXIT, {"exit_code": 5, "signal": None}))

    def test_signal(self) -> None:
        """A killed process reports the signal's name and 128 + its number."""
        records, _ = self.run_stream(self.open(cmd="kill -KILL $$"))
        self.assertEqual(records[-1], (EXIT, {"exit_code": 137, "signal": "SIGKILL"}))

    def test_stdin(self) -> None:
        """Stdin DATA reaches the process, HALF_CLOSE is its EOF; credit is given back."""
        payload = os.urandom(600_000)
        stream_id = self.host.next_stream_id()
        self.send(Open(stream_id, {"op": "exec", "cmd": "sha256sum", "stdin": True}))
        sent = 0
        while sent < len(payload):
            window = self.host.send_window(stream_id)
            if window:
                chunk = payload[sent:sent + min(window, 65536)]
                self.send(Data(stream_id, chunk))
                sent += len(chunk)
            self.loop.run_once(0.01)
            for event in self.receive():
                pass
        self.send(HalfClose(stream_id))
        records, _ = self.run_stream(stream_id)
        self.assertEqual(self.output(records).split()[0].decode(), hashlib.sha256(payload).hexdigest())

    def test_identity(self) -> None:
        """uid, gid, umask, cwd and env apply in the child."""
        records, _ = self.run_stream(self.open(cmd="id -u; id -g; umask; pwd; echo $A", uid=65534, gid=65534, umask=0o27,
                                        cwd="/tmp", env=["A=b=c"]))
        self.assertEqual(self.output(records), b"65534\n65534\n0027\n/tmp\nb=c\n")

    def test_default_identity_does_not_fork(self) -> None:
        """
        A request for the agent's own identity is spawned without fork (vfork
        via posix_spawn), with its cwd, umask, new session and environment, and
        the agent's own directory and umask are unchanged afterwards.
        """
        def no_fork() -> int:
            raise AssertionError("forked for the agent's own identity")

        self.patch(os, "fork", no_fork)
        here, mask = os.getcwd(), os.umask(0o022)
        self.addCleanup(os.umask, mask)
        ids = os.getuid(), os.getgid()
        self.assertTrue(spawning._identity_is_set(ExecHeader(cmd="x", uid=ids[0], gid=ids[1])))
        records, _ = self.run_stream(self.open(
            cmd="umask; pwd; echo $A; ps -o sid= -p $$ | tr -d ' '; echo $$; trap",
            uid=ids[0], gid=ids[1], umask=0o77, cwd="/tmp", env=["A=1"]))
        umask_text, cwd, a, sid, pid, traps = (self.output(records).decode().split("\n") + [""])[:6]
        self.assertEqual((umask_text, cwd, a, sid), ("0077", "/tmp", "1", pid))
        self.assertEqual(traps, "", "signals the agent handles or ignores are back at their default")
        self.assertEqual((os.getcwd(), os.umask(0o022)), (here, 0o022))

    def test_spawn_failure_restores_agent(self) -> None:
        """A program that cannot start through posix_spawn leaves the agent's cwd and umask as they were."""
        here, mask = os.getcwd(), os.umask(0o022)
        self.addCleanup(os.umask, mask)
        records, _ = self.run_stream(self.open(cmd="/no/such", shell="", cwd="/tmp", umask=0o77))
        self.assertEqual((records[0][0], records[0][1]["exit_code"]), (execution.ERROR, 127))
        self.assertEqual((os.getcwd(), os.umask(0o022)), (here, 0o022))

    def test_not_found(self) -> None:
        """A program that does not exist is one ERROR record with 127."""
        records, _ = self.run_stream(self.open(cmd="/no/such", shell=""))
        self.assertEqual(len(records), 1)
        self.assertEqual(records[0][0], execution.ERROR)
        self.assertEqual(records[0][1]["exit_code"], 127)

    def test_not_executable(self) -> None:
        """A program that exists but cannot run is an ERROR record with 126."""
        records, _ = self.run_stream(self.open(cmd="/etc/passwd", shell=""))
        self.assertEqual((records[0][0], records[0][1]["exit_code"]), (execution.ERROR, 126))

    def test_rejected_cwd(self) -> None:
        """A cwd that is not a directory is a REJECTED record, nothing starts."""
        records, _ = self.run_stream(self.open(cmd="true", cwd="/no/such"))
        self.assertEqual([k for k, _ in records], [execution.REJECTED])

    def test_reset_kills_group(self) -> None:
        """A reset kills the process group (the shell and its background child)."""
        stream_id = self.open(cmd="sleep 100 & echo $!; sleep 101; wait")
        child = None
        deadline = time.monotonic() + 10
        decoder = RecordDecoder()
        while child is None and time.monotonic() < deadline:
            self.loop.run_once(0.05)
            for event in self.receive():
                if isinstance(event, Data):
                    for record in decoder.feed(event.data):
                        if record.kind == STDOUT:
                            child = int(record.payload)
        handler = self.session.streams[stream_id].handler
        assert isinstance(handler, execution.ExecHandler) and handler.pid
        pid = handler.pid
        self.send(Reset(stream_id, ResetCode.CANCEL, "bye"))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (_alive(pid) or _alive(child)):
            self.loop.run_once(0.05)
        self.assertFalse(_alive(pid))
        self.assertFalse(_alive(child))

    def test_host_restart_kills_group(self) -> None:
        """
        A HELLO of a new host session (a new connection after a restore, or the
        daemon restarted) drops the stream like a reset: the process group is killed.
        """
        stream_id = self.open(cmd="sleep 100")
        handler = self.session.streams[stream_id].handler
        assert isinstance(handler, execution.ExecHandler) and handler.pid
        pid = handler.pid
        self.host = Connection(Role.HOST, nonce=b"NEWHOST!")
        self.send(self.host.hello("new host"))
        self.assertEqual(self.session.streams, {})
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _alive(pid):
            self.loop.run_once(0.05)
        self.assertFalse(_alive(pid))
        [answer] = self.receive()
        self.assertIsInstance(answer, Hello)

    def test_output_paced_by_credit(self) -> None:
        """Without credit from the host the handler stops reading the pipes (bounded pending)."""
        stream_id = self.open(cmd="head -c 50000000 /dev/zero")
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            self.loop.run_once(0.01)
        stream = self.session.streams[stream_id]
        self.assertLess(stream.pending, execution.PENDING_HIGH_WATER + execution.READ_SIZE + 16)
        records, _ = self.run_stream(stream_id, timeout=30)
        self.assertEqual(len(self.output(records)), 50_000_000)
        self.assertEqual(records[-1], (EXIT, {"exit_code": 0, "signal": None}))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False
