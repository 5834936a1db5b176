# -*- test-case-name: tests.guest.test_shell,tests.integration.guest.test_shell -*-
"""
``{"op": "shell", ...}``: an interactive login shell on a pseudo-terminal.

Stdlib only (it runs inside the VM).  The header is ``{"uid", "gid", "shell",
"cwd", "cols", "rows", "env"}``.  The agent opens a pty (:func:`os.openpty`) of
``cols`` x ``rows`` and forks a child that starts a new session
(:func:`os.setsid`), makes the pty its controlling terminal (``TIOCSCTTY``),
takes the user's identity and directory and execs ``shell -l`` with ``TERM``,
``HOME``, ``USER``, ``LOGNAME``, ``SHELL`` and ``PATH`` set, then the
header's ``env`` entries over them (:func:`shell_env`).

Inside the stream both ways are frames of :mod:`vmservice.wire.shellframes`:

- host to guest: ``DATA`` is typed into the terminal (credit is given back
  once it is written to the pty), ``WINDOW_SIZE`` resizes it (``TIOCSWINSZ``:
  the foreground process gets ``SIGWINCH``); other frames are ignored.
- guest to host: ``STARTED`` ``{"pid"}`` (or ``REJECTED`` ``{"message"}``
  when the user, directory or shell cannot be used), then ``DATA`` (terminal
  output, at most :data:`READ_SIZE` bytes a frame), then ``EXIT``
  ``{"exit_code", "signal"}`` once the shell has exited and the terminal's
  output is drained; then the agent half-closes.

The agent stops reading the pty while :data:`PENDING_HIGH_WATER` bytes wait
for the host's credit, so a flood of output to a slow client blocks the
shell.  A reset of the stream (the client went away) hangs the session up:
the pty is closed and every process of the shell's session (its jobs too,
whatever their process group) gets ``SIGHUP``, then ``SIGKILL`` after
:data:`KILL_GRACE` seconds; the shell is reaped.
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import struct
import termios
from typing import Any, Mapping, Optional

from vmservice.guest.children import Child
from vmservice.guest.streams import GuestStream, StreamHandler
from vmservice.guest.exec_spec import build_env, passwd_entry, resolve_cwd, usable_shell
from vmservice.guest.spawning import exit_reporting, exit_status, read_report
from vmservice.wire.openheaders.exec import ExecHeader
from vmservice.wire.openheaders.fields import BadHeader
from vmservice.wire.openheaders.shell import ShellHeader
from vmservice.wire.shellframes import (DATA, EXIT, REJECTED, STARTED, WINDOW_SIZE, FrameDecoder, FrameError,
                                        encode_frame, encode_json_frame)

#: Bytes read from the pty at a time (one DATA frame; a WebSocket message
#: with its header stays under 32 KiB).
READ_SIZE = 16 * 1024
#: The handler stops reading the pty while this much output waits for credit.
PENDING_HIGH_WATER = 128 * 1024
#: Seconds between SIGHUP and SIGKILL when the stream is reset.
KILL_GRACE = 2.0
#: Largest frame the host may send (its messages are at most 32 KiB).
MAX_INPUT_FRAME = 64 * 1024


def set_window_size(fd: int, cols: int, rows: int) -> None:
    """Set the size of the terminal ``fd`` (clamped to what ``struct winsize`` holds)."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", min(rows, 0xFFFF), min(cols, 0xFFFF), 0, 0))


class ShellHandler(StreamHandler):
    """
    Serves ``{"op": "shell", ...}`` (see the module docstring).

    :ivar pid: the shell's pid (also its session and process group), once started.
    """

    def __init__(self, stream: GuestStream, header: Mapping[str, Any]) -> None:
        super().__init__(stream, header)
        self.pid: Optional[int] = None
        self._master = -1
        self._child: Optional[Child] = None
        self._decoder = FrameDecoder(MAX_INPUT_FRAME)
        self._input = bytearray()
        self._input_credit = 0
        self._status: Optional[int] = None
        self._finished = False
        self._hungup = False

    # -- StreamHandler -----------------------------------------------------------------

    def start(self) -> None:
        try:
            header = ShellHeader.from_json(self.header)
        except BadHeader as e:
            from vmservice.wire.errors import ResetCode

            self.stream.reset(ResetCode.BAD_HEADER, str(e))
            return
        uid, gid, cwd, cols, rows = header.uid, header.gid, header.cwd, header.cols, header.rows
        shell = usable_shell(header.shell)
        spec = ExecHeader(cmd=shell, env=header.env, uid=uid, gid=gid, cwd=cwd, shell=shell)
        user = passwd_entry(uid)
        try:
            directory = resolve_cwd(cwd, user[1] if user else None)
        except ValueError as e:
            self._reject(str(e))
            return
        if not os.path.isdir(directory):
            self._reject(f"cwd {directory!r} is not a directory in the guest")
            return
        if not shell.startswith("/") or not os.path.isfile(shell) or not os.access(shell, os.X_OK):
            self._reject(f"shell {shell!r} is not an executable file in the guest")
            return
        self._spawn(spec, shell_env(spec, user), directory, cols, rows)

    def data_received(self, data: bytes) -> None:
        if self._master < 0:
            self.stream.consumed(len(data))
            return
        try:
            frames = list(self._decoder.feed(data))
        except FrameError:
            from vmservice.wire.errors import ResetCode

            self.stream.reset(ResetCode.PROTOCOL_ERROR, "bad shell frame")
            self.reset(0, "bad shell frame")
            return
        # Credit for headers and control frames now; for DATA once it is written.
        data_bytes = sum(len(f.payload) for f in frames if f.kind == DATA)
        self.stream.consumed(len(data) - data_bytes)
        for frame in frames:
            if frame.kind == DATA:
                self._input += frame.payload
            elif frame.kind == WINDOW_SIZE:
                try:
                    cols, rows = frame.window_size()
                    set_window_size(self._master, cols, rows)
                except (FrameError, OSError):
                    pass
        self._input_credit += data_bytes
        self._write_input()

    def flushed(self) -> None:
        if self._master >= 0 and self.stream.pending < PENDING_HIGH_WATER:
            self.stream.loop.watch(self._master, self._read_output, self._writer())
        self._maybe_finish()

    def reset(self, code: int, reason: str) -> None:
        """
        The client went away: hang the session up as a terminal does.  The
        pty is closed (the shell reading it gets EOF, the kernel sends SIGHUP
        to the session leader), then every process of the session gets
        SIGHUP and SIGCONT, and SIGKILL after :data:`KILL_GRACE` seconds.
        """
        self._finished = True
        self._close_master()
        if self._child is not None and self._status is None and not self._hungup:
            self._hungup = True
            self._child.signal(signal.SIGHUP)
            self._child.signal(signal.SIGCONT)
            self._child.kill_later(KILL_GRACE, self._close_master)

    # -- starting ----------------------------------------------------------------------

    def _reject(self, message: str) -> None:
        self.stream.write(encode_json_frame(REJECTED, {"message": message}))
        self._finished = True
        self.stream.end()

    def _spawn(self, spec: ExecHeader, env: dict[str, str], directory: str, cols: int, rows: int) -> None:
        master, slave = os.openpty()
        try:
            set_window_size(master, cols, rows)
            report_r, report_w = os.pipe()
        except BaseException:
            os.close(master)
            os.close(slave)
            raise
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child execs or exits
            os.close(master)
            os.close(report_r)
            _child(spec, env, directory, slave, report_w)
        os.close(slave)
        os.close(report_w)
        report = read_report(report_r)
        if report:
            os.close(master)
            os.waitpid(pid, 0)
            self._reject(report.decode("utf-8", "replace"))
            return
        self.pid = pid
        self._master = master
        os.set_blocking(master, False)
        self._child = Child(self.stream.loop, pid, self._child_exited, send=signal_session)
        self.stream.write(encode_json_frame(STARTED, {"pid": pid}))
        self.stream.loop.watch(master, self._read_output)

    # -- the terminal ------------------------------------------------------------------

    def _writer(self) -> Any:
        return self._write_input if self._input else None

    def _write_input(self) -> None:
        written_total = 0
        while self._input and self._master >= 0:
            try:
                written = os.write(self._master, self._input[:READ_SIZE])
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                written = len(self._input)  # the terminal is gone: discard
            del self._input[:written]
            written_total += written
        if self._master < 0:
            written_total += len(self._input)
            self._input.clear()
        credit = min(written_total, self._input_credit)
        if credit:
            self._input_credit -= credit
            self.stream.consumed(credit)
        self._rewatch()

    def _rewatch(self) -> None:
        if self._master < 0:
            return
        reading = self.stream.pending < PENDING_HIGH_WATER
        self.stream.loop.watch(self._master, self._read_output if reading else None, self._writer())

    def _read_output(self) -> None:
        if self._master < 0:
            return
        try:
            chunk = os.read(self._master, READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            # EIO: every process let go of the terminal.
            if e.errno != errno.EIO:
                raise
            chunk = b""
        if not chunk:
            self.stream.loop.watch(self._master, None, None)
            self._maybe_finish()
            return
        self.stream.write(encode_frame(DATA, chunk))
        self._rewatch()

    def _close_master(self) -> None:
        if self._master >= 0:
            self.stream.loop.watch(self._master)
            os.close(self._master)
            self._master = -1
        if self._input_credit:
            self.stream.consumed(self._input_credit)
            self._input_credit = 0
        self._input.clear()

    # -- the end -----------------------------------------------------------------------

    def _child_exited(self) -> None:
        assert self._child is not None
        if self._hungup:
            # Reaped after the session's SIGKILL: the zombie holds the session id.
            self._child.forget()
            self._close_master()
            return
        self._status = self._child.reap()
        # Whatever the shell wrote last is drained before EXIT (but not what a
        # process it left behind keeps writing).
        self._drain()
        self._maybe_finish()

    def _drain(self) -> None:
        while self._master >= 0 and self.stream.pending < PENDING_HIGH_WATER:
            try:
                chunk = os.read(self._master, READ_SIZE)
            except (BlockingIOError, InterruptedError, OSError):
                chunk = b""
            if not chunk:
                self._close_master()
                return
            self.stream.write(encode_frame(DATA, chunk))

    def _maybe_finish(self) -> None:
        if self._finished or self._status is None:
            return
        if self._master >= 0:
            self._drain()
            if self._master >= 0:
                return  # more output waits for credit: flushed() comes back here
        self._finished = True
        code, name = exit_status(self._status)
        self.stream.write(encode_json_frame(EXIT, {"exit_code": code, "signal": name}))
        self.stream.end()


def shell_env(spec: ExecHeader, user: Optional[tuple[str, str]]) -> dict[str, str]:
    """A shell's environment: ``TERM=xterm-256color``, then an exec's (the request's entries win)."""
    return {"TERM": "xterm-256color", **build_env(spec, user)}


def signal_session(sid: int, number: int) -> None:
    """Signal every process of session ``sid`` (a shell's jobs have process groups of their own)."""
    for pid in session_members(sid):
        try:
            os.kill(pid, number)
        except (ProcessLookupError, PermissionError):
            pass


def session_members(sid: int, proc: str = "/proc") -> list[int]:
    """The pids of the processes in session ``sid`` (from ``/proc/<pid>/stat``)."""
    members = []
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp session ...: comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 3 and fields[3] == str(sid).encode():
            members.append(int(name))
    return members


def _child(spec: ExecHeader, env: dict[str, str], directory: str, slave: int, report: int) -> None:
    """
    In the forked child: new session, the pty ``slave`` as controlling terminal
    and stdio, identity, directory, then ``exec shell -l``.  A failure is
    written to ``report`` and the child exits 127; never returns.
    """
    try:
        os.setsid()
        for number in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGINT, signal.SIGCHLD,
                       signal.SIGHUP, signal.SIGQUIT, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU):
            signal.signal(number, signal.SIG_DFL)
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
        if spec.uid != 0 or spec.gid != 0 or os.getuid() == 0:
            if os.getuid() == 0:
                os.setgroups([])
            os.setgid(spec.gid)
            os.setuid(spec.uid)
        os.chdir(directory)
        for target in (0, 1, 2):
            os.dup2(slave, target)
        if slave > 2:
            os.close(slave)
        os.execve(spec.shell, [spec.shell, "-l"], env)
    except OSError as e:
        message = f"{spec.shell}: {e.strerror or e}"
    except BaseException as e:  # noqa: BLE001 - the child must never return
        message = f"{spec.shell}: {e!r}"
    exit_reporting(report, message)


__all__ = ["KILL_GRACE", "PENDING_HIGH_WATER", "READ_SIZE", "ShellHandler", "set_window_size", "shell_env"]
