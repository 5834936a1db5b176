# -*- test-case-name: tests.integration.guest.test_shell -*-
"""
The guest's shell handler with a real pseudo-terminal and a real bash, run
in-process on the host through a real :class:`~vmservice.guest.agent.Session`
and :class:`~vmservice.guest.agent.Loop`.
"""

from __future__ import annotations

import os
import re
import signal
import time
from typing import Any, Callable

from twisted.trial.unittest import SynchronousTestCase

from tests.guest.session import GuestSessionMixin
from vmservice.guest import shell
from vmservice.wire import ResetCode
from vmservice.wire.events import Data, HalfClose, Open, Reset
from vmservice.wire.shellframes import DATA, EXIT, REJECTED, STARTED, FrameDecoder, encode_frame, encode_window_size


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


class ShellHandlerTests(GuestSessionMixin, SynchronousTestCase):
    """:class:`ShellHandler` with a real pty and bash."""

    def setUp(self) -> None:
        self.start_session({"shell": shell.ShellHandler})
        self.handshake()
        self.decoder = FrameDecoder()
        self.frames: list[tuple[int, Any]] = []
        self.ended = False
        self.addCleanup(self._kill_leftovers)

    def _kill_leftovers(self) -> None:
        for stream in list(self.session.streams.values()):
            handler = stream.handler
            if isinstance(handler, shell.ShellHandler) and handler.pid and _alive(handler.pid):
                os.killpg(handler.pid, signal.SIGKILL)
                os.waitpid(handler.pid, 0)

    def open(self, **header: Any) -> int:
        stream_id = self.host.next_stream_id()
        self.send(Open(stream_id, {"op": "shell", "cols": 80, "rows": 24, **header}))
        return stream_id

    def pump(self, stream_id: int, until: Callable[[], bool], timeout: float = 15.0) -> None:
        """Run the loop, acknowledging output, until ``until()`` holds."""
        deadline = time.monotonic() + timeout
        while not until():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; frames so far: {self.frames[-5:]}")
            self.loop.run_once(0.02)
            for event in self.receive():
                if getattr(event, "stream_id", None) != stream_id:
                    continue
                if isinstance(event, Data):
                    for frame in self.decoder.feed(event.data):
                        self.frames.append((frame.kind, frame.payload if frame.kind == DATA else frame.json()))
                    self.session.data_received(self.host.acknowledge_received_data(stream_id, len(event.data)))
                elif isinstance(event, (HalfClose, Reset)):
                    self.ended = True

    def output(self) -> bytes:
        return b"".join(payload for kind, payload in self.frames if kind == DATA)

    def type(self, stream_id: int, text: bytes) -> None:
        self.send(Data(stream_id, encode_frame(DATA, text)))

    def test_prompt_tty_resize_and_exit(self) -> None:
        """
        The shell runs on a terminal of the asked size with TERM set; a
        WINDOW_SIZE changes it; ``exit 3`` ends the stream with EXIT 3.
        """
        stream_id = self.open(cwd="/tmp")
        self.pump(stream_id, lambda: bool(self.frames))
        self.assertEqual(self.frames[0][0], STARTED)
        self.type(stream_id, b"tty; echo T=$TERM; stty size; pwd\r")
        self.pump(stream_id, lambda: b"24 80" in self.output() and b"/tmp\r\n" in self.output())
        self.assertIn(b"/dev/pts/", self.output())
        self.assertIn(b"T=xterm-256color", self.output())
        self.send(Data(stream_id, encode_window_size(132, 43)))
        self.type(stream_id, b"stty size\r")
        self.pump(stream_id, lambda: b"43 132" in self.output())
        self.type(stream_id, b"exit 3\r")
        self.pump(stream_id, lambda: self.ended)
        self.assertEqual(self.frames[-1], (EXIT, {"exit_code": 3, "signal": None}))

    def test_login_shell_of_user(self) -> None:
        """The shell is a login shell of the given uid/gid, in its own session with the pty as controlling terminal."""
        stream_id = self.open(uid=65534, gid=65534, cwd="/")
        self.pump(stream_id, lambda: bool(self.frames))
        self.type(stream_id, b"id -u; id -g; shopt -q login_shell && echo LOGIN; ps -o sid=,tty= -p $$; echo $$; exit\r")
        self.pump(stream_id, lambda: self.ended)
        out = self.output().decode()
        pid = self.frames[0][1]["pid"]
        self.assertIn("65534\r\n65534\r\nLOGIN\r\n", out)
        self.assertRegex(out, rf"\s*{pid}\s+pts/\d+")

    def test_env(self) -> None:
        """The header's env entries are in the shell's environment, TERM among them."""
        stream_id = self.open(cwd="/", env=["TERM=vt100", "FROM_HEADER=yes"])
        self.pump(stream_id, lambda: bool(self.frames))
        self.type(stream_id, b"echo T=$TERM H=$FROM_HEADER; exit\r")
        self.pump(stream_id, lambda: self.ended)
        self.assertIn("T=vt100 H=yes\r\n", self.output().decode())

    def test_rejected(self) -> None:
        """A missing directory or shell is REJECTED before anything runs."""
        stream_id = self.open(cwd="/no/such/dir")
        self.pump(stream_id, lambda: self.ended)
        self.assertEqual(self.frames[0][0], REJECTED)
        self.frames.clear()
        self.ended = False
        stream_id = self.open(shell="/no/such/shell")
        self.pump(stream_id, lambda: self.ended)
        self.assertEqual(self.frames[0][0], REJECTED)

    def test_reset_hangs_up(self) -> None:
        """A reset sends SIGHUP to every process of the session (a job's trap sees it); nothing is left running."""
        stream_id = self.open()
        self.pump(stream_id, lambda: bool(self.frames))
        pid = self.frames[0][1]["pid"]
        marker = f"/tmp/shell-hup-{os.getpid()}-{pid}"
        self.addCleanup(lambda: os.path.exists(marker) and os.unlink(marker))
        # The trap is a background job's (a shell running commands: it runs its traps between them); an
        # interactive bash waiting in readline runs its own only once a line is read or the terminal ends.
        self.type(stream_id, f"sh -c 'trap \"echo hup > {marker}; exit\" HUP; echo TRAPPED; "
                             f"while :; do sleep 0.1; done' & echo BG=$!\r".encode())
        self.pump(stream_id, lambda: re.search(rb"BG=(\d+)\r\n", self.output()) is not None
                  and b"TRAPPED\r\n" in self.output())
        found = re.search(rb"BG=(\d+)\r\n", self.output())
        assert found is not None
        background = int(found.group(1))
        self.send(Reset(stream_id, ResetCode.CANCEL, "bye"))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (_alive(pid) or _alive(background)):
            self.loop.run_once(0.05)
        self.assertFalse(_alive(pid))
        self.assertFalse(_alive(background))
        with open(marker) as f:
            self.assertEqual(f.read(), "hup\n")
        # Reaped after the grace: no zombie either.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
            self.loop.run_once(0.05)
        self.assertFalse(os.path.exists(f"/proc/{pid}"))

    def test_output_paced_by_credit(self) -> None:
        """Without credit the handler stops reading the pty: ``yes`` is held back, pending stays bounded."""
        stream_id = self.open()
        self.pump(stream_id, lambda: bool(self.frames))
        self.type(stream_id, b"yes\r")
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            self.loop.run_once(0.01)
        stream = self.session.streams[stream_id]
        self.assertLess(stream.pending, shell.PENDING_HIGH_WATER + shell.READ_SIZE + 16)
        self.type(stream_id, b"\x03")
        self.type(stream_id, b"exit 0\r")
        self.pump(stream_id, lambda: self.ended, timeout=30)
        self.assertEqual(self.frames[-1], (EXIT, {"exit_code": 0, "signal": None}))
