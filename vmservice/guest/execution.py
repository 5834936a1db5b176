# -*- test-case-name: tests.guest.test_execution,tests.integration.guest.test_execution -*-
"""
``{"op": "exec"}``: run one process in the guest and stream its output back.

What runs comes from the header (:mod:`vmservice.guest.exec_spec`); the process
is started by :mod:`vmservice.guest.spawning` and supervised as a
:class:`~vmservice.guest.children.Child`.  Standard library only.

Inside the stream, host to guest: DATA is the process's stdin, HALF_CLOSE is
EOF on stdin.  Guest to host: a sequence of *records*, each
``type u8 | length u32 (big-endian) | payload`` (see :func:`~vmservice.wire.payloads.encode_record`),
so stdout and stderr keep their order and boundaries:

- ``STARTED`` ``{"pid": N}``: the process runs (always the first record, or
  ``ERROR``/``REJECTED`` instead).
- ``STDOUT``/``STDERR``: raw bytes the process wrote (at most 64 KiB each).
- ``EXIT`` ``{"exit_code": N, "signal": "SIGKILL" | null}``: the last record;
  a process killed by a signal has ``exit_code`` 128 + the signal number.
- ``ERROR`` ``{"message": ..., "exit_code": 127 | 126}``: it could not be
  started (127: the program was not found; 126: anything else, e.g. no
  permission, ``setuid`` failed).
- ``REJECTED`` ``{"message": ...}``: the request itself is wrong (e.g. a
  ``cwd`` that does not exist); the host answers 400.

After the last record the agent half-closes.  A reset of the stream (the HTTP
client went away) kills the process group: SIGTERM, then SIGKILL after
:data:`KILL_GRACE` seconds.

The handler's phases (the process's, reading its outputs, its stdin) are the
tables of :mod:`vmservice.guest.exec_phase`.
"""

from __future__ import annotations

import os
import signal
from typing import Any, Callable, Mapping, Optional

from vmservice.guest.children import Child
from vmservice.guest.exec_phase import (
    CLOSED, DRAINING, ENDED, ENDING, FLOW, HELD, KILLING, READING, STARTING, STDIN, TRANSITIONS,
)
from vmservice.guest.exec_spec import runnable
from vmservice.guest.spawning import CannotStart, Launch, Rejected, exit_status, prepare, spawn
from vmservice.guest.streams import GuestStream, StreamHandler
from vmservice.wire.openheaders.exec import ExecHeader
from vmservice.wire.openheaders.fields import BadHeader
from vmservice.wire.payloads import (
    ERROR,
    REJECTED,
    STDERR,
    STDOUT,
    encode_json_record,
    encode_record,
    exit_record,
    started_record,
)

#: Bytes read from a child's pipe at a time: one record at most.
READ_SIZE = 64 * 1024
#: The handler stops reading the child's pipes while this much output waits
#: for credit or room on the link.
PENDING_HIGH_WATER = 256 * 1024
#: Seconds between SIGTERM and SIGKILL when the stream is reset.
KILL_GRACE = 0.5


class ExecHandler(StreamHandler):
    """
    Serves ``{"op": "exec", ...}`` (see the module docstring and :class:`ExecHeader`).
    """

    def __init__(self, stream: GuestStream, header: Mapping[str, Any]) -> None:
        super().__init__(stream, header)
        self.pid: Optional[int] = None
        self._child: Optional[Child] = None
        self._stdin = -1
        self._stdin_buffer = bytearray()
        self._outputs: dict[int, int] = {}  # fd -> record type
        self._status: Optional[int] = None
        self.phase = STARTING  # the process's (exec_phase.TRANSITIONS)
        self._flow = HELD  # reading its outputs (exec_phase.FLOW)
        self._stdin_phase = CLOSED  # its stdin (exec_phase.STDIN)

    def _advance(self, event: str) -> None:
        """Take ``event`` by :data:`~vmservice.guest.exec_phase.TRANSITIONS`; the EXIT record on entering Ended."""
        self.phase = TRANSITIONS[(self.phase, event)]
        if self.phase == ENDED:
            self._finish()

    # -- StreamHandler ---------------------------------------------------------------

    def start(self) -> None:
        try:
            spec = runnable(ExecHeader.from_json(self.header))
        except BadHeader as e:
            from vmservice.wire.errors import ResetCode

            self.stream.reset(ResetCode.BAD_HEADER, str(e))
            return
        try:
            launch = prepare(spec)
        except Rejected as e:
            self._reject(str(e))
            return
        except CannotStart as e:
            self._fail(e.message, e.exit_code)
            return
        self._spawn(spec, launch)

    def data_received(self, data: bytes) -> None:
        if self._stdin < 0:
            # No stdin (not asked for, closed by the child, or not started).
            self.stream.consumed(len(data))
            return
        self._stdin_buffer += data
        self._write_stdin()

    def half_closed(self) -> None:
        self._stdin_phase = STDIN[(self._stdin_phase, "eof")]
        if self._stdin >= 0 and not self._stdin_buffer:
            self._close_stdin()

    def flushed(self) -> None:
        if self.stream.pending < PENDING_HIGH_WATER:
            self._watch_outputs()

    def reset(self, code: int, reason: str) -> None:
        """
        The host gave up (its HTTP client went away): kill the process group.
        """
        self._advance("reset")
        self._close_stdin()
        for fd in list(self._outputs):
            self._close_output(fd)
        if self._child is not None and self.phase == KILLING:
            self._child.signal(signal.SIGTERM)
            self._child.kill_later(KILL_GRACE)

    # -- starting ----------------------------------------------------------------------

    def _reject(self, message: str) -> None:
        self.stream.write(encode_json_record(REJECTED, {"message": message}))
        self._advance("refused")
        self.stream.end()

    def _fail(self, message: str, exit_code: int) -> None:
        self.stream.write(encode_json_record(ERROR, {"message": message, "exit_code": exit_code}))
        self._advance("refused")
        self.stream.end()

    def _spawn(self, spec: ExecHeader, launch: Launch) -> None:
        opened: list[int] = []

        def pipe() -> tuple[int, int]:
            r, w = os.pipe()
            opened.extend((r, w))
            return r, w

        def null(flags: int) -> int:
            fd = os.open(os.devnull, flags | os.O_CLOEXEC)
            opened.append(fd)
            return fd

        try:
            if spec.stdin:
                stdin_child, self._stdin = pipe()
            else:
                stdin_child = null(os.O_RDONLY)
            child_fds = [stdin_child]
            for wanted, kind in ((spec.stdout, STDOUT), (spec.stderr, STDERR)):
                if wanted:
                    r, w = pipe()
                    self._outputs[r] = kind
                    child_fds.append(w)
                else:
                    child_fds.append(null(os.O_WRONLY))
            pid = spawn(launch, (child_fds[0], child_fds[1], child_fds[2]), opened)
        except CannotStart as e:
            self._close_stdin()
            for fd in list(self._outputs):
                self._close_output(fd)
            self._fail(e.message, e.exit_code)
            return
        except BaseException:
            for fd in opened:
                os.close(fd)
            self._stdin = -1
            self._outputs.clear()
            raise
        self.pid = pid
        self._advance("started")
        if not self._outputs:
            self._advance("drained")
        if self._stdin >= 0:
            self._stdin_phase = STDIN[(self._stdin_phase, "opened")]
        self._child = Child(self.stream.loop, pid, self._child_exited)
        for fd in self._outputs:
            os.set_blocking(fd, False)
        if self._stdin >= 0:
            os.set_blocking(self._stdin, False)
        self.stream.write(started_record(pid))
        self._watch_outputs()

    # -- stdin -------------------------------------------------------------------------

    def _write_stdin(self) -> None:
        written_total = 0
        while self._stdin_buffer and self._stdin >= 0:
            try:
                written = os.write(self._stdin, self._stdin_buffer[:READ_SIZE])
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                # EPIPE: the process closed its stdin; what remains is discarded.
                written = len(self._stdin_buffer)
                self._close_stdin()
            del self._stdin_buffer[:written]
            written_total += written
        if written_total:
            self.stream.consumed(written_total)
        if self._stdin >= 0:
            if self._stdin_buffer:
                self.stream.loop.watch(self._stdin, None, self._write_stdin)
            else:
                self.stream.loop.watch(self._stdin)
                if self._stdin_phase == ENDING:
                    self._close_stdin()

    def _close_stdin(self) -> None:
        if self._stdin >= 0:
            self.stream.loop.watch(self._stdin)
            os.close(self._stdin)
            self._stdin = -1
        self._stdin_phase = STDIN[(self._stdin_phase, "closed")]
        if self._stdin_buffer:
            count = len(self._stdin_buffer)
            self._stdin_buffer.clear()
            self.stream.consumed(count)

    # -- output ------------------------------------------------------------------------

    def _watch_outputs(self) -> None:
        # Once per change: every write to the stream calls flushed() and so this.
        if self._flow != HELD:
            return
        self._flow = FLOW[(self._flow, "room")]
        for fd in self._outputs:
            self.stream.loop.watch(fd, self._output_reader(fd))

    def _output_reader(self, fd: int) -> Callable[[], None]:
        """The loop's callback for a readable output pipe ``fd``."""
        return lambda: self._read_output(fd)

    def _read_output(self, fd: int) -> None:
        kind = self._outputs.get(fd)
        if kind is None:
            return
        try:
            chunk = os.read(fd, READ_SIZE)
        except (BlockingIOError, InterruptedError):
            if self.phase == DRAINING:
                # The process is gone and the pipe is empty: only something it
                # left running still holds the pipe; do not wait for it.
                self._output_ended(fd)
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._output_ended(fd)
            return
        self.stream.write(encode_record(kind, chunk))
        if self.stream.pending >= PENDING_HIGH_WATER and self._flow == READING:
            self._flow = FLOW[(self._flow, "full")]
            for out in self._outputs:
                self.stream.loop.watch(out)

    def _output_ended(self, fd: int) -> None:
        """``fd`` is at its end: close it; the last one drains the process's outputs."""
        self._close_output(fd)
        if not self._outputs:
            self._advance("drained")

    def _close_output(self, fd: int) -> None:
        if self._outputs.pop(fd, None) is not None:
            self.stream.loop.watch(fd)
            os.close(fd)

    # -- exit --------------------------------------------------------------------------

    def _child_exited(self) -> None:
        assert self._child is not None
        if self.phase == KILLING:
            # Reaped only after the group's SIGKILL: the zombie keeps the
            # process group id from being reused until then.
            self._child.forget()
            self._advance("exited")
            return
        self._status = self._child.reap()
        self._advance("exited")
        if self.stream.pending < PENDING_HIGH_WATER:
            # Drain what is in the pipes now; an empty pipe is closed at once.
            for fd in list(self._outputs):
                self._read_output(fd)

    def _finish(self) -> None:
        """The process was reaped and its outputs drained: the EXIT record ends the stream."""
        assert self._status is not None
        self._close_stdin()
        self.stream.write(exit_record(*exit_status(self._status)))
        self.stream.end()


__all__ = ["KILL_GRACE", "PENDING_HIGH_WATER", "READ_SIZE", "ExecHandler"]
