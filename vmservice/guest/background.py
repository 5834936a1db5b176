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
whatever the readers do, into a :class:`~vmservice.guest.background_ring.Ring` of at most ``ring_bytes`` bytes of
output: the oldest frames are evicted to make room, and a reader that asks for
an evicted frame first gets a GAP frame saying how much it missed
(:mod:`vmservice.wire.logframes`).

One stream per request; the header's ``action`` says what to do:

- ``start`` (:class:`~vmservice.wire.openheaders.exec.BackgroundStartHeader`:
  the exec fields and ``ring_bytes``), ``list``, ``info``, ``kill`` (``signal``,
  ``grace_ms``), ``wait`` (``timeout_ms``), ``delete``: one JSON reply
  ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": KIND,
  "message": ...}``, then HALF_CLOSE.
- ``logs`` (``from_id``, ``follow``): a head (``length u32 | JSON``, the same
  reply with the exec's info as ``result``), then log frames from ``from_id``
  (0: the oldest in the ring), then HALF_CLOSE once the ring is drained
  (``follow`` false) or after the EXIT frame (``follow`` true).  A reader that
  falls behind does not hold the process back: what it has not read may be
  evicted, and it is told so with a GAP frame.

The registry and the execs are here; each request's stream is served by
:mod:`vmservice.guest.background_requests`, and the ring is
:mod:`vmservice.guest.background_ring`'s.

Standard library only: it runs inside the guest.
"""

from __future__ import annotations

import os
import signal
import time
import weakref
from collections import deque
from typing import Any, Callable, Mapping, Optional, TypeVar

from vmservice.guest.background_ring import Ring
from vmservice.guest.children import Child, signal_group
from vmservice.guest.loop import Loop, Timer
from vmservice.guest.exec_spec import runnable
from vmservice.guest.spawning import CannotStart, Rejected, exit_status, prepare, spawn
from vmservice.wire.logframes import STDERR, STDOUT
from vmservice.wire.openheaders.exec import DEFAULT_RING_BYTES, MAX_RING_BYTES, BackgroundStartHeader, ExecHeader
from vmservice.wire.openheaders.fields import BadHeader

_Header = TypeVar("_Header")

#: Most background execs a guest keeps (running, or ended and not deleted yet).
MAX_EXECS = 256
#: How many deleted exec ids the registry remembers, to answer "gone" rather than "not found".
REMEMBERED_DELETED = 4096
#: Bytes read from an output pipe at a time (less when the ring is smaller).
READ_SIZE = 64 * 1024
#: A logs stream stops sending while this much waits for credit or room on the link.
LOGS_HIGH_WATER = 256 * 1024
#: The signals a kill may send (:data:`~vmservice.wire.openheaders.background.SIGNAL_NAMES`), and which of
#: them are followed by SIGKILL after the grace period.
SIGNALS = {
    "TERM": signal.SIGTERM, "KILL": signal.SIGKILL, "HUP": signal.SIGHUP, "INT": signal.SIGINT,
    "QUIT": signal.SIGQUIT, "USR1": signal.SIGUSR1, "USR2": signal.SIGUSR2,
}
ESCALATED = frozenset({"TERM", "HUP", "INT", "QUIT"})

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


# -- one exec ---------------------------------------------------------------------------------


def read_header(read: Callable[[object], _Header], header: Mapping[str, Any]) -> _Header:
    """
    ``header`` read with ``read`` (a record's ``from_json``).

    :raises BackgroundError: ``invalid``, naming the field, for a bad header.
    """
    try:
        return read(header)
    except BadHeader as e:
        raise BackgroundError("invalid", str(e)) from None


class BackgroundExec:
    """
    One process started in the background and its ring.

    :ivar exec_id: ``ex_`` and 24 hexadecimal digits.
    :ivar pid: the process (the leader of its own session and process group).
    """

    def __init__(self, exec_id: str, spec: ExecHeader, cwd: str, ring: Ring, loop: Loop,
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
        start = read_header(BackgroundStartHeader.from_json, header)
        spec, ring_bytes = runnable(start.exec), start.ring_bytes
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


__all__ = [
    "BackgroundError",
    "BackgroundExec",
    "DEFAULT_RING_BYTES",
    "MAX_EXECS",
    "MAX_RING_BYTES",
    "Registry",
    "SIGNALS",
    "TRANSITIONS",
    "read_header",
    "registry_of",
]
