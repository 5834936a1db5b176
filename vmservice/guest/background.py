# -*- test-case-name: tests.guest.test_background,tests.integration.guest.test_background -*-
"""
``{"op": "background"}``: processes that run in the guest on their own, with
their output kept in a bounded ring that readers replay and follow.

A background exec belongs to the agent, not to a stream or a connection: it
keeps running and its output keeps being captured when nobody follows, when
the host's daemon restarts (``kill -9`` included) and across a suspend and
restore (the agent's memory is part of the snapshot).  The agent's
:class:`Registry` (one per event loop) holds every exec until it is deleted
after its end.

The process starts as a foreground exec does (:func:`~vmservice.guest.spawning.prepare`,
:func:`~vmservice.guest.spawning.spawn`: a session of its own, stdin from
``/dev/null``); its stdout and stderr are read as soon as they are readable,
whatever the readers do, into a :class:`Ring` of at most ``ring_bytes`` bytes of
output: the oldest frames are evicted to make room, and a reader that asks for
an evicted frame first gets a GAP frame saying how much it missed
(:mod:`vmservice.wire.logframes`).

One stream per request; the header's ``action`` says what to do:

- ``start`` (the exec fields of :class:`~vmservice.guest.exec_spec.ExecSpec`
  and ``ring_bytes``), ``list``, ``info``, ``kill`` (``signal``,
  ``grace_ms``), ``wait`` (``timeout_ms``), ``delete``: one JSON reply
  ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": KIND,
  "message": ...}``, then HALF_CLOSE.
- ``logs`` (``from_id``, ``follow``): a head (``length u32 | JSON``, the same
  reply with the exec's info as ``result``), then log frames from ``from_id``
  (0: the oldest in the ring), then HALF_CLOSE once the ring is drained
  (``follow`` false) or after the EXIT frame (``follow`` true).  A reader that
  falls behind does not hold the process back: what it has not read may be
  evicted, and it is told so with a GAP frame.

Standard library only: it runs inside the guest.
"""

from __future__ import annotations

import json
import os
import signal
import time
import weakref
from collections import deque
from typing import Any, Callable, Mapping, Optional

from vmservice.guest.children import Child, signal_group
from vmservice.guest.loop import Loop, Timer
from vmservice.guest.streams import GuestStream, StreamHandler
from vmservice.guest.exec_spec import BadExecHeader, ExecSpec
from vmservice.guest.spawning import CannotStart, Rejected, exit_status, prepare, spawn
from vmservice.wire.logframes import EXIT, STDERR, STDOUT, LogFrame, encode_frame, exit_frame, gap_frame
from vmservice.wire.payloads import encode_head

#: ``ring_bytes`` when the request gives none (1 MiB), and the largest accepted (64 MiB).
DEFAULT_RING_BYTES = 1024 * 1024
MAX_RING_BYTES = 64 * 1024 * 1024
#: Most background execs a guest keeps (running, or ended and not deleted yet).
MAX_EXECS = 256
#: How many deleted exec ids the registry remembers, to answer "gone" rather than "not found".
REMEMBERED_DELETED = 4096
#: Bytes read from an output pipe at a time (less when the ring is smaller).
READ_SIZE = 64 * 1024
#: A logs stream stops sending while this much waits for credit or room on the link.
LOGS_HIGH_WATER = 256 * 1024
#: Milliseconds between the signal of a kill and SIGKILL, when the request gives none.
DEFAULT_GRACE_MS = 5000
#: The signals a kill may send, and which of them are followed by SIGKILL after the grace period.
SIGNALS = {
    "TERM": signal.SIGTERM, "KILL": signal.SIGKILL, "HUP": signal.SIGHUP, "INT": signal.SIGINT,
    "QUIT": signal.SIGQUIT, "USR1": signal.SIGUSR1, "USR2": signal.SIGUSR2,
}
ESCALATED = frozenset({"TERM", "HUP", "INT", "QUIT"})
#: What ``action`` may be.
ACTIONS = ("start", "list", "info", "kill", "wait", "delete", "logs")

#: The phases of a background exec (``docs/state-machines/background-exec.md``): the leader
#: runs (``Running``); it was reaped but output pipes are still open (``Draining``); it runs
#: with both outputs closed (``Quiet``); both happened and the EXIT frame is in the ring
#: (``Ended``); it was forgotten (``Deleted``).
RUNNING, DRAINING, QUIET, ENDED, DELETED = "Running", "Draining", "Quiet", "Ended", "Deleted"
#: ``(phase, input) -> next phase``; any other pair is a bug.
TRANSITIONS = {
    (RUNNING, "exited"): DRAINING,
    (RUNNING, "drained"): QUIET,
    (DRAINING, "drained"): ENDED,
    (QUIET, "exited"): ENDED,
    (ENDED, "deleted"): DELETED,
}


class BackgroundError(Exception):
    """
    A request that fails, reported as ``{"ok": false, "error": kind, ...}``.

    :ivar kind: ``not_found`` (no such exec), ``gone`` (deleted), ``running``
        (cannot delete a running exec), ``busy`` (too many execs), ``invalid``
        (a bad field), ``rejected`` (the exec cannot start).
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


# -- the ring ---------------------------------------------------------------------------------


class Ring:
    """
    An exec's log: frames numbered from 1, at most ``capacity`` bytes of output
    kept, the oldest evicted first.

    :ivar written: output bytes ever appended.
    :ivar dropped_bytes: output bytes evicted.
    :ivar dropped_frames: frames evicted.
    :ivar next_id: the id the next frame gets.
    """

    def __init__(self, capacity: int, clock_ns: Callable[[], int] = time.time_ns) -> None:
        self.capacity = capacity
        self._clock_ns = clock_ns
        # id -> (frame, offset of its first byte in the whole output); insertion order is id order.
        self._frames: dict[int, tuple[LogFrame, int]] = {}
        self._size = 0
        self.written = 0
        self.dropped_bytes = 0
        self.dropped_frames = 0
        self.next_id = 1

    @property
    def first_id(self) -> int:
        """The oldest frame still held (``next_id`` when none is)."""
        return self.next_id - len(self._frames)

    @property
    def first_offset(self) -> int:
        """Output bytes before the oldest frame still held."""
        return self.dropped_bytes

    def append_output(self, kind: int, data: bytes) -> LogFrame:
        """
        Keep ``data`` (at most ``capacity`` bytes: a longer one keeps its end)
        written on ``kind`` (:data:`STDOUT` or :data:`STDERR`).
        """
        if len(data) > self.capacity:
            self.written += len(data) - self.capacity
            self.dropped_bytes += len(data) - self.capacity
            data = data[-self.capacity:]
        while self._frames and self._size + len(data) > self.capacity:
            oldest = next(iter(self._frames))
            frame, _ = self._frames.pop(oldest)
            self._size -= len(frame.payload)
            self.dropped_bytes += len(frame.payload)
            self.dropped_frames += 1
        frame = LogFrame(kind, self.next_id, self._clock_ns(), bytes(data))
        self._frames[frame.id] = (frame, self.written)
        self.next_id += 1
        self._size += len(data)
        self.written += len(data)
        return frame

    def append_exit(self, exit_code: int, signal_name: Optional[str]) -> LogFrame:
        """The last frame: how the process ended (takes no room)."""
        frame = exit_frame(self.next_id, self._clock_ns(), exit_code, signal_name)
        self._frames[frame.id] = (frame, self.written)
        self.next_id += 1
        return frame

    def get(self, frame_id: int) -> tuple[LogFrame, int]:
        """Frame ``frame_id`` and its offset; ``KeyError`` unless ``first_id <= frame_id < next_id``."""
        return self._frames[frame_id]


# -- one exec ---------------------------------------------------------------------------------


class BackgroundExec:
    """
    One process started in the background and its ring.

    :ivar exec_id: ``ex_`` and 24 hexadecimal digits.
    :ivar pid: the process (the leader of its own session and process group).
    """

    def __init__(self, exec_id: str, spec: ExecSpec, cwd: str, ring: Ring, loop: Loop,
                 clock_ns: Callable[[], int]) -> None:
        self.exec_id = exec_id
        self.spec = spec
        self.cwd = cwd
        self.ring = ring
        self.pid = -1
        self.started_ns = clock_ns()
        self.ended_ns: Optional[int] = None
        self.exit_code: Optional[int] = None
        self.signal: Optional[str] = None
        self._loop = loop
        self._clock_ns = clock_ns
        self._child: Optional[Child] = None
        self._outputs: dict[int, int] = {}  # fd -> frame kind
        self._status = 0  # the leader's wait status, once reaped
        self._listeners: list[Callable[[], None]] = []
        self._kill_timer: Optional[Timer] = None
        self.phase = RUNNING

    def _advance(self, event: str) -> None:
        """Take ``event`` (``exited``, ``drained``, ``deleted``) by :data:`TRANSITIONS`."""
        self.phase = TRANSITIONS[(self.phase, event)]
        if self.phase == ENDED:
            self._ended()

    @property
    def running(self) -> bool:
        """Whether its last frame (EXIT) is still to come."""
        return self.phase in (RUNNING, DRAINING, QUIET)

    def start(self, launch: Any) -> None:
        """
        Spawn the process with stdin from ``/dev/null`` and both outputs read into the ring.

        :raises CannotStart: it could not be executed.
        """
        opened: list[int] = []
        try:
            stdin = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            opened.append(stdin)
            pipes = []
            for kind in (STDOUT, STDERR):
                r, w = os.pipe()
                opened.extend((r, w))
                pipes.append((r, w, kind))
            self.pid = spawn(launch, (stdin, pipes[0][1], pipes[1][1]), opened)
        except BaseException:
            for fd in opened:
                os.close(fd)
            raise
        self._child = Child(self._loop, self.pid, self._exited)
        size = min(READ_SIZE, self.ring.capacity)
        for r, _, kind in pipes:
            os.set_blocking(r, False)
            self._outputs[r] = kind
            self._loop.watch(r, self._reader(r, size))

    def _reader(self, fd: int, size: int) -> Callable[[], None]:
        return lambda: self._read(fd, size)

    def _read(self, fd: int, size: int) -> None:
        kind = self._outputs.get(fd)
        if kind is None:
            return
        try:
            chunk = os.read(fd, size)
        except (BlockingIOError, InterruptedError):
            if self.phase == DRAINING:
                # The process is gone and the pipe is empty: only something it left running
                # holds the pipe; the exec has ended all the same.
                self._close(fd)
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._close(fd)
            return
        self.ring.append_output(kind, chunk)
        self._notify()

    def _close(self, fd: int) -> None:
        if self._outputs.pop(fd, None) is not None:
            self._loop.watch(fd)
            os.close(fd)
            if not self._outputs:
                self._advance("drained")

    def _exited(self) -> None:
        assert self._child is not None
        self._status = self._child.reap()
        self._advance("exited")
        # Take what is in the pipes now; an empty pipe is closed at once.
        size = min(READ_SIZE, self.ring.capacity)
        for fd in list(self._outputs):
            self._read(fd, size)

    def _ended(self) -> None:
        self.exit_code, self.signal = exit_status(self._status)
        self.ended_ns = self._clock_ns()
        if self._kill_timer is not None:
            self._kill_timer.cancel()
            self._kill_timer = None
        self.ring.append_exit(self.exit_code, self.signal)
        self._notify()

    # -- readers and waiters ------------------------------------------------------------

    def listen(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after every new frame (until :meth:`unlisten`)."""
        self._listeners.append(callback)

    def unlisten(self, callback: Callable[[], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    def _notify(self) -> None:
        for callback in list(self._listeners):
            callback()

    # -- kill ---------------------------------------------------------------------------

    def kill(self, name: str, grace_ms: int) -> str:
        """
        Send signal ``name`` (a key of :data:`SIGNALS`) to the process group
        while the exec runs; for a terminating signal, SIGKILL follows after
        ``grace_ms`` if it still runs.  Returns what was sent (``""`` after the end).
        """
        if self.phase not in (RUNNING, QUIET):
            return ""  # ended, or its leader reaped: its process group id may be another's now
        signal_group(self.pid, SIGNALS[name])
        if name in ESCALATED and self._kill_timer is None:
            self._kill_timer = self._loop.call_later(grace_ms / 1000.0, self._escalate)
        return name

    def _escalate(self) -> None:
        self._kill_timer = None
        if self.phase in (RUNNING, QUIET):
            signal_group(self.pid, signal.SIGKILL)

    def delete(self) -> None:
        """
        The registry forgets the exec (it has ended, so it holds no descriptor); a
        reading under way keeps its ring until it is done.
        """
        self._advance("deleted")

    # -- what the host sees -----------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """The exec as the ``info`` and ``list`` actions report it."""
        return {
            "exec_id": self.exec_id,
            "pid": self.pid,
            "command": self.spec.cmd,
            "args": list(self.spec.args),
            "cwd": self.cwd,
            "uid": self.spec.uid,
            "gid": self.spec.gid,
            "started_ns": self.started_ns,
            "running": self.running,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "ended_ns": self.ended_ns,
            "bytes_written": self.ring.written,
            "bytes_dropped": self.ring.dropped_bytes,
            "next_id": self.ring.next_id,
            "ring_bytes": self.ring.capacity,
        }


# -- the registry -----------------------------------------------------------------------------


class Registry:
    """
    The background execs of one agent (one per event loop: see :func:`registry_of`).
    """

    def __init__(self, loop: Loop, clock_ns: Callable[[], int] = time.time_ns,
                 random: Callable[[int], bytes] = os.urandom) -> None:
        self._loop = loop
        self._clock_ns = clock_ns
        self._random = random
        self.execs: dict[str, BackgroundExec] = {}
        self._deleted: deque[str] = deque()
        self._deleted_set: set[str] = set()

    def start(self, header: Mapping[str, Any]) -> BackgroundExec:
        """
        Start the exec ``header`` describes.

        :raises BackgroundError: a bad field (``invalid``), too many execs
            (``busy``), a directory or program that cannot be used (``rejected``).
        """
        try:
            spec = ExecSpec.from_header({**header, "stdin": False, "stdout": True, "stderr": True})
        except BadExecHeader as e:
            raise BackgroundError("invalid", str(e)) from None
        ring_bytes = header.get("ring_bytes", DEFAULT_RING_BYTES)
        if type(ring_bytes) is not int or not 0 < ring_bytes <= MAX_RING_BYTES:
            raise BackgroundError("invalid", f"ring_bytes must be 1 .. {MAX_RING_BYTES}")
        if len(self.execs) >= MAX_EXECS:
            raise BackgroundError(
                "busy", f"the guest keeps at most {MAX_EXECS} background execs: delete ended ones first"
            )
        try:
            launch = prepare(spec)
        except (Rejected, CannotStart) as e:
            raise BackgroundError("rejected", str(e)) from None
        exec_id = "ex_" + self._random(12).hex()
        entry = BackgroundExec(exec_id, spec, launch.cwd, Ring(ring_bytes, self._clock_ns), self._loop,
                               self._clock_ns)
        try:
            entry.start(launch)
        except CannotStart as e:
            raise BackgroundError("rejected", e.message) from None
        self.execs[exec_id] = entry
        return entry

    def get(self, exec_id: object) -> BackgroundExec:
        """
        The exec called ``exec_id``.

        :raises BackgroundError: ``gone`` if it was deleted, else ``not_found``.
        """
        entry = self.execs.get(exec_id) if isinstance(exec_id, str) else None
        if entry is not None:
            return entry
        if exec_id in self._deleted_set:
            raise BackgroundError("gone", f"background exec {exec_id} was deleted")
        raise BackgroundError("not_found", f"no background exec {exec_id!r} in this guest")

    def delete(self, exec_id: object) -> None:
        """
        Forget an exec that has ended.

        :raises BackgroundError: ``running`` while it runs; see :meth:`get`.
        """
        entry = self.get(exec_id)
        if entry.running:
            raise BackgroundError("running", f"background exec {entry.exec_id} is still running: kill it first")
        del self.execs[entry.exec_id]
        entry.delete()
        self._deleted.append(entry.exec_id)
        self._deleted_set.add(entry.exec_id)
        if len(self._deleted) > REMEMBERED_DELETED:
            self._deleted_set.discard(self._deleted.popleft())


_REGISTRIES: "weakref.WeakKeyDictionary[Loop, Registry]" = weakref.WeakKeyDictionary()


def registry_of(loop: Loop) -> Registry:
    """The registry of the agent running ``loop`` (made on first use)."""
    registry = _REGISTRIES.get(loop)
    if registry is None:
        registry = _REGISTRIES[loop] = Registry(loop)
    return registry


# -- the stream handler -----------------------------------------------------------------------


def _int_field(header: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = header.get(name, default)
    if type(value) is not int or not low <= value <= high:
        raise BackgroundError("invalid", f"{name} must be an integer {low} .. {high}")
    return value


class BackgroundHandler(StreamHandler):
    """
    Serves ``{"op": "background", "action": ...}`` (see the module docstring).
    """

    def __init__(self, stream: GuestStream, header: Mapping[str, Any]) -> None:
        super().__init__(stream, header)
        self._entry: Optional[BackgroundExec] = None
        self._timer: Optional[Timer] = None
        self._cursor = 0
        self._offset: Optional[int] = None
        self._follow = False
        self._done = False
        self._pumping = False

    def start(self) -> None:
        action = self.header.get("action")
        try:
            if action not in ACTIONS:
                raise BackgroundError("invalid", f"unknown action {action!r}")
            registry = registry_of(self.stream.loop)
            if action == "start":
                self._reply(registry.start(self.header).info())
            elif action == "list":
                self._reply([entry.info() for entry in registry.execs.values()])
            else:
                entry = registry.get(self.header.get("exec_id"))
                if action == "info":
                    self._reply(entry.info())
                elif action == "kill":
                    self._kill(entry)
                elif action == "delete":
                    registry.delete(entry.exec_id)
                    self._reply({"exec_id": entry.exec_id, "reaped": True})
                elif action == "wait":
                    self._wait(entry)
                else:
                    self._logs(entry)
        except BackgroundError as e:
            reply = {"ok": False, "error": e.kind, "message": e.message}
            if action == "logs":
                self.stream.write(encode_head(reply))
            else:
                self.stream.write(json.dumps(reply).encode())
            self.stream.end()

    def _reply(self, result: Any) -> None:
        self.stream.write(json.dumps({"ok": True, "result": result}, separators=(",", ":")).encode())
        self.stream.end()

    def _kill(self, entry: BackgroundExec) -> None:
        name = self.header.get("signal", "TERM")
        if name not in SIGNALS:
            raise BackgroundError("invalid", f"signal must be one of {', '.join(SIGNALS)}")
        grace_ms = _int_field(self.header, "grace_ms", DEFAULT_GRACE_MS, 0, 3_600_000)
        sent = entry.kill(name, grace_ms)
        self._reply({"exec_id": entry.exec_id, "pid": entry.pid, "running": entry.running, "signal_sent": sent})

    # -- wait ---------------------------------------------------------------------------

    def _wait(self, entry: BackgroundExec) -> None:
        timeout_ms = _int_field(self.header, "timeout_ms", 30_000, 0, 24 * 3_600_000)
        self._entry = entry
        if entry.running and timeout_ms > 0:
            entry.listen(self._wait_check)
            self._timer = self.stream.loop.call_later(timeout_ms / 1000.0, self._wait_over)
            return
        self._wait_over()

    def _wait_check(self) -> None:
        if self._entry is not None and not self._entry.running:
            self._wait_over()

    def _wait_over(self) -> None:
        entry = self._entry
        if entry is None or self._done:
            return
        self._done = True
        entry.unlisten(self._wait_check)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._reply({
            "exec_id": entry.exec_id, "running": entry.running, "exit_code": entry.exit_code,
            "signal": entry.signal, "ended_ns": entry.ended_ns, "timed_out": entry.running,
        })

    # -- logs ---------------------------------------------------------------------------

    def _logs(self, entry: BackgroundExec) -> None:
        from_id = _int_field(self.header, "from_id", 0, 0, 2**63 - 1)
        follow = self.header.get("follow", False)
        if not isinstance(follow, bool):
            raise BackgroundError("invalid", "follow must be a boolean")
        self._entry, self._follow = entry, follow
        ring = entry.ring
        self._cursor = from_id or ring.first_id
        if from_id == 1 or from_id == 0:
            self._offset = 0 if from_id == 1 else ring.first_offset
        self.stream.write(encode_head({"ok": True, "result": entry.info()}))
        entry.listen(self._pump)
        self._pump()

    def _pump(self) -> None:
        entry = self._entry
        if entry is None or self._done or self._pumping:
            # Writing may call back (flushed, a new frame): the loop below goes on from where it is.
            return
        self._pumping = True
        try:
            self._send_frames(entry)
        finally:
            self._pumping = False

    def _send_frames(self, entry: BackgroundExec) -> None:
        ring = entry.ring
        stream = self.stream
        while not self._done and stream.pending < LOGS_HIGH_WATER and self._cursor < ring.next_id:
            if self._cursor < ring.first_id:
                # Evicted before this reader got to it: say how much, once, when it can take more.
                missed = ring.first_id - self._cursor
                dropped = ring.first_offset - (self._offset if self._offset is not None else 0)
                self._cursor, self._offset = ring.first_id, ring.first_offset
                stream.write(encode_frame(gap_frame(time.time_ns(), missed, max(dropped, 0))))
                continue
            frame, offset = ring.get(self._cursor)
            self._cursor += 1
            self._offset = offset + len(frame.payload)
            stream.write(encode_frame(frame))
            if frame.kind == EXIT:
                self._finish()
                return
        if not self._done and self._cursor >= ring.next_id and (not self._follow or not entry.running):
            self._finish()

    def _finish(self) -> None:
        self._done = True
        if self._entry is not None:
            self._entry.unlisten(self._pump)
        self.stream.end()

    def flushed(self) -> None:
        if self._entry is not None and not self._done and self.header.get("action") == "logs":
            self._pump()

    def reset(self, code: int, reason: str) -> None:
        self._done = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._entry is not None:
            self._entry.unlisten(self._pump)
            self._entry.unlisten(self._wait_check)


__all__ = [
    "ACTIONS",
    "BackgroundError",
    "BackgroundExec",
    "BackgroundHandler",
    "DEFAULT_RING_BYTES",
    "MAX_EXECS",
    "MAX_RING_BYTES",
    "Registry",
    "Ring",
    "SIGNALS",
    "registry_of",
]
