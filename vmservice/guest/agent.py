# -*- test-case-name: tests.guest.test_agent,tests.integration.guest.test_agent -*-
"""
The guest agent: serves the agent wire protocol inside the VM.

It runs as ``from vmservice.guest.agent import main; main()`` under ``python3.11 -I -S``
(respawned by init), so it uses the standard library only.  It finds the
virtio-serial port named ``agent`` through ``/sys/class/virtio-ports/*/name``, opens
``/dev/<vportNpM>`` non-blocking and serves :mod:`vmservice.wire` on it with
:mod:`selectors`.

The host may connect late, disconnect and reconnect at any time.  While no host is
connected the port reports POLLHUP and reads return 0; the agent then drops every
stream, forgets its session and checks the port every
:data:`DISCONNECTED_POLL_INTERVAL` seconds (POLLHUP is level-triggered, so waiting in
the selector would spin) until a host is back, then starts a new session by sending
its HELLO.  A host that reconnects faster than that is still noticed, by the new
nonce of its HELLO (see :mod:`vmservice.wire.connection`).

``--listen-unix PATH`` serves a UNIX socket instead, one connection at a time, the
same way: it emulates QEMU's server socket for tests on the host.

Operations are a table, :data:`HANDLERS`: the ``op`` of a stream's OPEN header names a
:class:`StreamHandler` subclass, instantiated once per stream.  Later operations
(exec, file copy, shell, TCP forwarding) plug in there and use :attr:`GuestStream.loop`
for their own file descriptors and timers.
"""

from __future__ import annotations

import errno
import heapq
import itertools
import json
import os
import select
import selectors
import signal
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, TypeVarTuple, Unpack

if __name__ == "__main__" and not __package__:
    # Run as a script (tests on the host): make the package importable without
    # letting this directory shadow anything.
    _root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
        sys.path[0] = _root
    else:
        sys.path.insert(0, _root)

from vmservice.guest.ports import find_port
from vmservice.wire.connection import Connection, Role
from vmservice.wire.errors import LocalProtocolError, RemoteProtocolError, ResetCode
from vmservice.wire.events import (
    NEED_DATA,
    Data,
    Event,
    HalfClose,
    Hello,
    Open,
    Ping,
    Pong,
    Reset,
    WindowUpdate,
)
from vmservice.wire.frames import MAX_PAYLOAD

if TYPE_CHECKING:
    import argparse
    import socket

#: The arguments of a handler callback run by :meth:`Session.call_handler`.
_HandlerArguments = TypeVarTuple("_HandlerArguments")

#: Name of the virtio-serial port the host attaches the agent channel to.
PORT_NAME = "agent"
#: How often to look again while no host is connected, or the port is missing.
DISCONNECTED_POLL_INTERVAL = 0.1
#: Size of each buffer of one vectored read.  The virtio-serial driver hands out at
#: most one of its page-sized buffers per ``read()``, and ``readv()`` on a character
#: device calls ``read()`` once per buffer until one comes back short, so one
#: ``readv()`` collects many of them in one system call.
READ_BUFFER_SIZE = 4096
#: Buffers per vectored read (1 MiB in all).
READ_BUFFERS = 256
#: Bytes asked for per read.
READ_SIZE = READ_BUFFER_SIZE * READ_BUFFERS
#: Most bytes read per wake-up before the codec runs, so writes get their turn.
MAX_READ_PER_WAKEUP = 2 * 1024 * 1024
#: Size of each buffer of one vectored write: the virtio-serial driver takes at most
#: 32 KiB per ``write()``, and ``writev()`` calls ``write()`` once per buffer.
WRITE_BUFFER_SIZE = 32 * 1024
#: Most bytes per vectored write.
WRITE_SIZE = 1024 * 1024
#: Streams stop moving data into the output buffer beyond this many bytes ...
OUTPUT_HIGH_WATER = 1024 * 1024
#: ... and resume when it drains below this.
OUTPUT_LOW_WATER = 256 * 1024
#: Most streams open at once; more are refused.
MAX_STREAMS = 512
#: How the port is opened: never as our controlling terminal (tests use a pty).
_PORT_FLAGS = os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


def _log(message: str) -> None:
    """
    One line on stderr (the guest's console log).
    """
    try:
        sys.stderr.write(f"vmservice-agent: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def agent_version() -> str:
    """
    The vmservice version the image was built from (``vmservice/__init__.py``'s
    ``__version__``), or ``"unknown"`` when the image lacks that file.
    """
    try:
        from vmservice import __version__
    except ImportError:
        return "unknown"
    return str(__version__)


def system_uptime_ns(path: str = "/proc/uptime") -> int:
    """
    Time since the guest kernel booted, in integer nanoseconds, parsed exactly from
    the decimal text of ``/proc/uptime``.
    """
    with open(path, "rb") as f:
        text = f.read().split()[0].decode("ascii")
    seconds, _, fraction = text.partition(".")
    return int(seconds) * 1_000_000_000 + int((fraction + "000000000")[:9])


# -- the event loop --------------------------------------------------------------------


class Timer:
    """
    A call scheduled with :meth:`Loop.call_later`.
    """

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback: Optional[Callable[[], None]] = callback

    def cancel(self) -> None:
        """
        Do not run the call.
        """
        self.callback = None


class Loop:
    """
    A small reactor over :mod:`selectors`: file descriptor callbacks and timers.

    Handlers that need their own descriptors (a child's pipes, a TCP connection)
    register them here, so the agent stays one thread.

    :param clock: monotonic seconds; tests may replace it.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._selector = selectors.DefaultSelector()
        self._callbacks: dict[int, tuple[Optional[Callable[[], None]], Optional[Callable[[], None]]]] = {}
        self._timers: list[tuple[float, int, Timer]] = []
        self._soon: list[Callable[[], None]] = []
        self._sequence = itertools.count()
        self._clock = clock
        self._running = False

    def watch(
        self,
        fd: int,
        on_readable: Optional[Callable[[], None]] = None,
        on_writable: Optional[Callable[[], None]] = None,
    ) -> None:
        """
        Call ``on_readable``/``on_writable`` when ``fd`` is ready; ``None`` for both
        stops watching it.  Replaces earlier callbacks for ``fd``.
        """
        mask = (selectors.EVENT_READ if on_readable else 0) | (
            selectors.EVENT_WRITE if on_writable else 0
        )
        known = fd in self._callbacks
        if not mask:
            if known:
                del self._callbacks[fd]
                self._selector.unregister(fd)
            return
        self._callbacks[fd] = (on_readable, on_writable)
        if known:
            self._selector.modify(fd, mask)
        else:
            self._selector.register(fd, mask)

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """
        Run ``callback`` after ``delay`` seconds.
        """
        timer = Timer(self._clock() + delay, callback)
        heapq.heappush(self._timers, (timer.when, next(self._sequence), timer))
        return timer

    def call_soon(self, callback: Callable[[], None]) -> None:
        """
        Run ``callback`` at the end of this iteration, after the ready descriptors and
        timers and before waiting again (or in the next iteration, without waiting,
        when called from outside :meth:`run_once`).  :class:`Pipe` uses it to write
        what one iteration produced in one system call.
        """
        self._soon.append(callback)

    def stop(self) -> None:
        """
        Make :meth:`run` return after the current iteration.
        """
        self._running = False

    def close(self) -> None:
        """
        Release the selector.
        """
        self._selector.close()

    def run(self) -> None:
        """
        Dispatch until :meth:`stop`.
        """
        self._running = True
        while self._running:
            self.run_once()

    def run_once(self, max_wait: Optional[float] = None) -> None:
        """
        Wait for the next descriptor event or timer (at most ``max_wait`` seconds)
        and dispatch what is ready.
        """
        timeout = 0.0 if self._soon else max_wait
        if self._timers:
            until_timer = max(0.0, self._timers[0][0] - self._clock())
            timeout = until_timer if timeout is None else min(timeout, until_timer)
        if self._callbacks:
            ready = self._selector.select(timeout)
        else:
            if timeout is None:
                raise RuntimeError("nothing to wait for")
            time.sleep(timeout)
            ready = []
        for key, mask in ready:
            for flag, index in ((selectors.EVENT_READ, 0), (selectors.EVENT_WRITE, 1)):
                if mask & flag:
                    # Look the callback up again: an earlier one may have replaced it.
                    callbacks = self._callbacks.get(key.fd)
                    callback = callbacks[index] if callbacks else None
                    if callback is not None:
                        callback()
        now = self._clock()
        while self._timers and self._timers[0][0] <= now:
            _, _, timer = heapq.heappop(self._timers)
            callback = timer.callback
            timer.callback = None
            if callback is not None:
                callback()
        while self._soon:
            soon, self._soon = self._soon, []
            for callback in soon:
                callback()


# -- a byte pipe over a non-blocking descriptor ------------------------------------------


class Pipe:
    """
    Non-blocking reads and buffered writes on one descriptor (the virtio-serial port
    or an accepted UNIX socket), for one :class:`Session`.

    Writes are collected and go out at the end of the loop iteration
    (:meth:`Loop.call_soon`), in as few vectored system calls as the descriptor
    allows; what meets EAGAIN is kept and retried when the descriptor is writable.
    Reads are vectored too (see :data:`READ_BUFFER_SIZE`).
    End of input (read returning 0, as a virtio-serial port does when the host is not
    connected) and write errors both end the pipe: ``on_closed`` is called once and
    nothing more is read or written.

    :param loop: the loop to watch ``fd`` with.
    :param fd: the descriptor, already non-blocking; the pipe does not close it.
    :param on_data: called with each batch of bytes read.
    :param on_closed: called once when the pipe ends.
    :param on_drained: called when buffered output falls below
        :data:`OUTPUT_LOW_WATER` after having been above :data:`OUTPUT_HIGH_WATER`.
    """

    def __init__(
        self,
        loop: Loop,
        fd: int,
        on_data: Callable[[bytes], None],
        on_closed: Callable[[], None],
        on_drained: Callable[[], None],
    ) -> None:
        self._loop = loop
        self._fd = fd
        self._on_data = on_data
        self._on_closed = on_closed
        self._on_drained = on_drained
        self._out = bytearray()
        # What this iteration wrote, joined into _out in one go (appending to a
        # bytearray piece by piece reallocates and copies it again and again).
        self._queued: list[bytes] = []
        self._queued_size = 0
        self._closed = False
        self._was_full = False
        self._flush_scheduled = False
        self._read_buffer = bytearray(READ_SIZE)
        self._read_view = memoryview(self._read_buffer)
        self._read_parts = [
            self._read_view[at : at + READ_BUFFER_SIZE] for at in range(0, READ_SIZE, READ_BUFFER_SIZE)
        ]

    def start(self) -> None:
        """
        Begin reading.
        """
        self._watch()

    @property
    def buffered(self) -> int:
        """
        Bytes written but not yet accepted by the descriptor.
        """
        return len(self._out) + self._queued_size

    @property
    def has_room(self) -> bool:
        """
        Whether producers should keep writing.
        """
        if self.buffered >= OUTPUT_HIGH_WATER:
            self._was_full = True
            return False
        return True

    def _watch(self) -> None:
        if not self._closed:
            self._loop.watch(self._fd, self._readable, self._writable if self._out else None)

    def write(self, data: bytes) -> None:
        """
        Send ``data`` at the end of this loop iteration, buffering what the
        descriptor does not take then.
        """
        if self._closed or not data:
            return
        self._queued.append(bytes(data))
        self._queued_size += len(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush_soon)

    def _flush_soon(self) -> None:
        self._flush_scheduled = False
        if self._closed or not self._queued:
            return
        waiting = bool(self._out)
        if waiting:
            self._out += b"".join(self._queued)
        else:
            self._out = bytearray().join(self._queued)
        self._queued.clear()
        self._queued_size = 0
        if waiting:
            return  # the descriptor is watched for writability already
        self._flush()
        if self._out:
            self._watch()
        else:
            # All taken at once: no writability wake-up will come to say so.
            self._report_drained()

    def _flush(self) -> None:
        while self._out and not self._closed:
            failure: Optional[OSError] = None
            with memoryview(self._out) as view:
                end = min(len(view), WRITE_SIZE)
                parts = [view[at : at + WRITE_BUFFER_SIZE] for at in range(0, end, WRITE_BUFFER_SIZE)]
                try:
                    written = os.writev(self._fd, parts)
                except (BlockingIOError, InterruptedError):
                    written = 0
                except OSError as e:
                    failure, written = e, 0
                finally:
                    # The buffer cannot change size while views of it exist.
                    for part in parts:
                        part.release()
            if failure is not None:
                self._fail(f"write failed: {failure}")
                return
            if not written:
                return
            del self._out[:written]

    def _writable(self) -> None:
        self._flush()
        if self._closed:
            return
        if not self._out:
            self._watch()
        self._report_drained()

    def _report_drained(self) -> None:
        """Tell the writers once the output that filled the pipe has gone below the low water."""
        if self._was_full and not self._closed and self.buffered < OUTPUT_LOW_WATER:
            self._was_full = False
            self._on_drained()

    def _readable(self) -> None:
        chunks = []
        total = 0
        eof = False
        while total < MAX_READ_PER_WAKEUP:
            try:
                count = os.readv(self._fd, self._read_parts)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                if e.errno not in (errno.ECONNRESET, errno.EPIPE, errno.EIO, errno.ENODEV):
                    _log(f"read failed: {e}")
                eof = True
                break
            if not count:
                eof = True
                break
            chunks.append(self._read_view[:count].tobytes())
            total += count
        if chunks:
            self._on_data(b"".join(chunks))
        if eof:
            self._fail(None)

    def _fail(self, why: Optional[str]) -> None:
        if self._closed:
            return
        if why:
            _log(why)
        self._closed = True
        self._out.clear()
        self._queued.clear()
        self._queued_size = 0
        self._loop.watch(self._fd)
        self._on_closed()

    def close(self) -> None:
        """
        Stop reading and writing without calling ``on_closed``.
        """
        if not self._closed:
            self._closed = True
            self._out.clear()
            self._queued.clear()
            self._queued_size = 0
            self._loop.watch(self._fd)


# -- streams and their handlers ------------------------------------------------------------


class StreamHandler:
    """
    Serves one stream; subclasses are listed in :data:`HANDLERS` under their ``op``.

    The default methods discard incoming data (acknowledging it, so the host is
    never stuck) and do nothing else.

    :ivar stream: the stream served.
    :ivar header: the stream's OPEN header.
    """

    def __init__(self, stream: "GuestStream", header: Mapping[str, Any]) -> None:
        self.stream = stream
        self.header = header

    def start(self) -> None:
        """
        The stream was opened.  Raising here resets it with INTERNAL_ERROR.
        """

    def data_received(self, data: bytes) -> None:
        """
        The host sent ``data``.  Call :meth:`GuestStream.consumed` once it has been
        taken care of: that is what grants the host more credit.
        """
        self.stream.consumed(len(data))

    def half_closed(self) -> None:
        """
        The host will send no more data.
        """

    def flushed(self) -> None:
        """
        Some of what we wrote went out (see :attr:`GuestStream.sent_total`).
        """

    def reset(self, code: int, reason: str) -> None:
        """
        The stream is gone: the host reset it, the host restarted, or the link
        dropped.  Release whatever the handler holds.
        """


class GuestStream:
    """
    The agent's end of one stream: buffered writes within the host's credit.

    :ivar stream_id: the stream's id.
    :ivar sent_total: bytes of DATA handed to the link so far.
    """

    def __init__(self, session: "Session", stream_id: int) -> None:
        self._session = session
        self.stream_id = stream_id
        self.handler: StreamHandler = StreamHandler(self, {})
        self._out = bytearray()
        self._end_requested = False
        self._gone = False
        self._start_over: Optional[str] = None
        self.sent_total = 0

    @property
    def loop(self) -> Loop:
        """
        The agent's event loop, for handlers with descriptors or timers of their own.
        """
        return self._session.loop

    @property
    def context(self) -> "AgentContext":
        """
        Facts about the agent (version, start time).
        """
        return self._session.context

    @property
    def pending(self) -> int:
        """
        Bytes written but still waiting for credit or room on the link; handlers
        that read from a source stop reading while this is large.
        """
        return len(self._out)

    def write(self, data: bytes) -> None:
        """
        Send ``data`` to the host as soon as credit allows.
        """
        if self._gone or self._end_requested or not data:
            return
        if not self._out and len(data) <= 4 * MAX_PAYLOAD:
            # Nothing waits: send it as it is, without copying it into the buffer.
            session = self._session
            if session.has_room and session.conn.send_window(self.stream_id) >= len(data):
                session.send(Data(self.stream_id, bytes(data)))
                self.sent_total += len(data)
                session.call_handler(self, self.handler.flushed)
                session.forget_if_closed(self.stream_id)
                return
        self._out += data
        self.flush()

    def end(self) -> None:
        """
        Half-close after everything written has been sent.
        """
        if self._gone or self._end_requested:
            return
        self._end_requested = True
        self.flush()

    def end_session(self, why: str) -> None:
        """
        Half-close, and once that went out start a new session on the link
        (:meth:`Session.start_over`): what was written reaches the host in the old
        session, everything after in the new one.
        """
        if self._gone or self._end_requested:
            return
        self._start_over = why
        self.end()

    def reset(self, code: int = ResetCode.CANCEL, reason: str = "") -> None:
        """
        Abort the stream in both directions.
        """
        if self._gone:
            return
        self._session.reset_stream(self.stream_id, code, reason)

    def consumed(self, count: int) -> None:
        """
        Give the host back ``count`` bytes of credit: its data was taken care of.
        """
        if not self._gone:
            self._session.acknowledge(self.stream_id, count)

    def flush(self) -> None:
        """
        Move buffered data to the link while there is credit and room.
        """
        if self._gone:
            return
        session = self._session
        conn = session.conn
        sent = 0
        while self._out and session.has_room:
            window = conn.send_window(self.stream_id)
            if window <= 0:
                break
            size = min(window, len(self._out), 4 * MAX_PAYLOAD)
            with memoryview(self._out) as view:
                chunk = view[:size].tobytes()
            del self._out[:size]
            session.send(Data(self.stream_id, chunk))
            sent += size
        ended = False
        if not self._out and self._end_requested and conn.can_send(self.stream_id):
            session.send(HalfClose(self.stream_id))
            ended = True
        if sent:
            self.sent_total += sent
            session.call_handler(self, self.handler.flushed)
        session.forget_if_closed(self.stream_id)
        if ended and self._start_over is not None:
            why, self._start_over = self._start_over, None
            session.start_over(why)

    def _gone_now(self) -> None:
        self._gone = True
        self._out.clear()


class HealthHandler(StreamHandler):
    """
    ``{"op": "health"}``: one DATA with the agent's health as JSON, then HALF_CLOSE.

    The reply has ``agent_uptime`` and ``system_uptime`` (integer nanoseconds),
    ``agent_version`` and ``userdata_ran``, the fields of the API's AgentHealth,
    and ``userdata_exit_code`` once userdata has exited.
    """

    def start(self) -> None:
        context = self.stream.context
        marker = read_userdata_marker(context.userdata_marker)
        report: dict[str, Any] = {
            "agent_uptime": time.monotonic_ns() - context.started_ns,
            "agent_version": context.version,
            "system_uptime": system_uptime_ns(context.proc_uptime),
            "userdata_ran": userdata_ran(marker),
        }
        exit_code = marker.get("exit_code") if marker is not None else None
        if type(exit_code) is int:
            report["userdata_exit_code"] = exit_code
        self.stream.write(json.dumps(report, separators=(",", ":")).encode("utf-8"))
        self.stream.end()


class EchoHandler(StreamHandler):
    """
    ``{"op": "echo"}``: sends every byte back, and HALF_CLOSE after the host's.

    Credit is given back only once the echo went out, so a host that does not read
    its replies stops itself: the raw channel's throughput with flow control.
    """

    def __init__(self, stream: GuestStream, header: Mapping[str, Any]) -> None:
        super().__init__(stream, header)
        self._acknowledged = 0

    def data_received(self, data: bytes) -> None:
        self.stream.write(data)

    def flushed(self) -> None:
        sent = self.stream.sent_total
        if sent > self._acknowledged:
            count, self._acknowledged = sent - self._acknowledged, sent
            self.stream.consumed(count)

    def half_closed(self) -> None:
        self.stream.end()


#: Largest ``unix_ns`` of the ``clock`` op: the kernel keeps time in signed 64-bit
#: nanoseconds.
MAX_CLOCK_NS = 2**63 - 1


class ClockHandler(StreamHandler):
    """
    ``{"op": "clock", "unix_ns": N}``: sets the wall clock to ``N`` nanoseconds since
    the epoch, then answers one DATA, ``{"previous_ns": ...}`` (the wall clock just
    before), and HALF_CLOSE.

    The host sends it after the VM was paused, suspended or restored: meanwhile the
    guest's clock stood still.  A ``unix_ns`` that is not a positive integer
    (below 2^63), or a time the kernel refuses, resets the stream with BAD_HEADER;
    any other failure of ``clock_settime`` with INTERNAL_ERROR.
    """

    def start(self) -> None:
        unix_ns = self.header.get("unix_ns")
        if type(unix_ns) is not int or not 0 < unix_ns <= MAX_CLOCK_NS:
            self.stream.reset(
                ResetCode.BAD_HEADER, f"unix_ns must be a positive integer (nanoseconds), not {unix_ns!r}"[:200]
            )
            return
        context = self.stream.context
        previous = context.realtime_ns()
        try:
            context.set_realtime_ns(unix_ns)
        except (OverflowError, ValueError) as e:
            self.stream.reset(ResetCode.BAD_HEADER, f"cannot set the clock to {unix_ns}: {e}"[:200])
            return
        except OSError as e:
            code = ResetCode.BAD_HEADER if e.errno == errno.EINVAL else ResetCode.INTERNAL_ERROR
            self.stream.reset(code, f"cannot set the clock to {unix_ns}: {e.strerror or e}"[:200])
            return
        _log(f"wall clock set, stepped by {(unix_ns - previous) / 1e9:+.3f} s")
        self.stream.write(b'{"previous_ns":%d}' % previous)
        self.stream.end()


#: Where the outcome of the node's userdata is kept, on the node's disk: a JSON object
#: whose ``state`` is ``running``, ``finished`` or ``interrupted`` (see
#: :mod:`vmservice.guest.userdata`, which writes it).  Read here, by every health reply,
#: so that health does not import the userdata module.
USERDATA_MARKER = "/var/lib/vmservice/userdata.json"
#: The states of :data:`USERDATA_MARKER` in which userdata is over.
USERDATA_OVER = ("finished", "interrupted")


def read_userdata_marker(path: str) -> Optional[dict[str, Any]]:
    """
    The userdata marker at ``path`` as a dict, or None when there is none (or it
    is unreadable: a write never leaves half a marker, see
    :func:`vmservice.guest.userdata.write_marker`).
    """
    try:
        with open(path, "rb") as stream:
            marker = json.loads(stream.read(65536))
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def userdata_ran(marker: Optional[Mapping[str, Any]]) -> bool:
    """Whether the node's userdata is over (or there was none to run)."""
    return marker is not None and marker.get("state") in USERDATA_OVER


#: The operations the agent serves, by the ``op`` of the OPEN header.
HANDLERS: dict[str, type[StreamHandler]] = {
    "health": HealthHandler,
    "echo": EchoHandler,
    "clock": ClockHandler,
}

#: Operations served by other modules, as ``"module:Class"``: imported on first
#: use, so that the agent starts fast (every import costs under TCG).
LAZY_HANDLERS: dict[str, str] = {
    "exec": "vmservice.guest.execution:ExecHandler",
    "fs": "vmservice.guest.filesystem:FsHandler",
    "cp-upload": "vmservice.guest.copying.streams:UploadHandler",
    "cp-download": "vmservice.guest.copying.streams:DownloadHandler",
    "cp-upload-bulk": "vmservice.guest.copying.streams:BulkUploadHandler",
    "background": "vmservice.guest.background:BackgroundHandler",
    "watch": "vmservice.guest.watching:WatchHandler",
    "shell": "vmservice.guest.shell:ShellHandler",
    "forward": "vmservice.guest.forwarding:ForwardHandler",
    "secrets": "vmservice.guest.secrets:SecretsHandler",
    "userdata": "vmservice.guest.userdata:UserdataHandler",
    "login": "vmservice.guest.login:LoginHandler",
    "adopt": "vmservice.guest.identity:AdoptHandler",
}


#: Start-up work put off until the agent has answered the host (see :func:`run_deferred`).
DEFERRED: list[Callable[[], None]] = []
#: Operations that do not wait for :data:`DEFERRED`: what the host asks before a create answers (the
#: health check, the clock, the node's secrets on a tmpfs, its login user's few small files).
UNDEFERRED_OPS = frozenset({"health", "echo", "clock", "secrets", "login"})
#: Seconds after the agent is ready when :data:`DEFERRED` runs anyway, if no operation ran it sooner.
DEFERRED_DELAY = 1.0


def run_deferred() -> None:
    """
    Run the start-up work put off in :data:`DEFERRED` (growing the root file system), once: before
    the first operation other than :data:`UNDEFERRED_OPS`, or :data:`DEFERRED_DELAY` seconds after
    the agent is ready, whichever comes first.
    """
    while DEFERRED:
        DEFERRED.pop(0)()


def find_handler(op: object, handlers: Mapping[str, type[StreamHandler]]) -> Optional[type[StreamHandler]]:
    """
    The handler class of operation ``op``: from ``handlers``, else imported from
    :data:`LAZY_HANDLERS` (only when ``handlers`` is the agent's own table).
    """
    if not isinstance(op, str):
        return None
    if op not in UNDEFERRED_OPS:
        run_deferred()
    found = handlers.get(op)
    if found is not None or handlers is not HANDLERS or op not in LAZY_HANDLERS:
        return found
    module_name, _, class_name = LAZY_HANDLERS[op].partition(":")
    try:
        module = __import__(module_name, fromlist=[class_name])
        loaded: type[StreamHandler] = getattr(module, class_name)
    except (ImportError, AttributeError) as e:
        _log(f"op {op!r} is not available: {e!r}")
        return None
    HANDLERS[op] = loaded
    return loaded


def set_realtime_ns(unix_ns: int) -> None:
    """
    Set the guest's wall clock (``CLOCK_REALTIME``) to ``unix_ns`` nanoseconds since
    the epoch.
    """
    time.clock_settime_ns(time.CLOCK_REALTIME, unix_ns)


class AgentContext:
    """
    What handlers may want to know about the agent, and the clocks they use.

    :ivar version: reported as ``agent_version``.
    :ivar started_ns: :func:`time.monotonic_ns` when the agent started.
    :ivar proc_uptime: where to read the system uptime.
    :ivar realtime_ns: reads the wall clock, in nanoseconds since the epoch.
    :ivar set_realtime_ns: sets the wall clock (the ``clock`` op); tests replace
        it, so that they never set the clock of the machine they run on.
    :ivar userdata_marker: the file saying whether and how userdata ran (see
        :mod:`vmservice.guest.userdata`); tests point it elsewhere.
    """

    def __init__(
        self,
        version: Optional[str] = None,
        started_ns: Optional[int] = None,
        proc_uptime: str = "/proc/uptime",
        *,
        realtime_ns: Callable[[], int] = time.time_ns,
        set_realtime_ns: Callable[[int], None] = set_realtime_ns,
        userdata_marker: str = USERDATA_MARKER,
    ) -> None:
        self.userdata_marker = userdata_marker
        self.version = agent_version() if version is None else version
        self.started_ns = time.monotonic_ns() if started_ns is None else started_ns
        self.proc_uptime = proc_uptime
        self.realtime_ns = realtime_ns
        self.set_realtime_ns = set_realtime_ns



# -- one session over one pipe ------------------------------------------------------------


class Session:
    """
    The codec and the streams of one host connection.

    Knows nothing of descriptors: bytes come in through :meth:`data_received` and go
    out through ``write``, so tests drive it directly.

    :param loop: handed to handlers through :attr:`GuestStream.loop`.
    :param context: agent facts for the handlers.
    :param write: sends bytes to the host.
    :param has_room: whether the link takes more output now.
    :param handlers: the operation table.
    """

    def __init__(
        self,
        loop: Loop,
        context: AgentContext,
        write: Callable[[bytes], None],
        has_room: Callable[[], bool] = lambda: True,
        handlers: Optional[Mapping[str, type[StreamHandler]]] = None,
    ) -> None:
        self.loop = loop
        self.context = context
        self._write = write
        self._has_room = has_room
        self._handlers = HANDLERS if handlers is None else handlers
        self.conn = Connection(Role.GUEST)
        self.streams: dict[int, GuestStream] = {}
        self._closed = False

    @property
    def has_room(self) -> bool:
        """
        Whether streams may move more data to the link.
        """
        return self._has_room()

    def start(self) -> None:
        """
        Announce this session to the host.
        """
        self._send_hello()

    def _send_hello(self) -> None:
        self._write(self.conn.send(self.conn.hello(self.context.version)))

    def send(self, event: Event) -> None:
        """
        Encode ``event`` and write it.
        """
        self._write(self.conn.send(event))

    def data_received(self, data: bytes) -> None:
        """
        Bytes from the host.  A protocol error drops every stream and starts a
        fresh session that hunts for the host's next HELLO in what follows.
        """
        if self._closed:
            return
        self.conn.receive_data(data)
        while not self._closed:
            try:
                event = self.conn.next_event()
            except RemoteProtocolError as e:
                _log(f"protocol error from host, starting over: {e}")
                trailing = self.conn.trailing_data[1:]
                self._drop_streams(ResetCode.PROTOCOL_ERROR, "protocol error")
                self.conn = Connection(Role.GUEST)
                self._send_hello()
                self.conn.receive_data(trailing)
                continue
            if event is NEED_DATA:
                return
            self._dispatch(event)

    def _dispatch(self, event: Event) -> None:
        if isinstance(event, Hello):
            if self.conn.hello_wanted:
                self._send_hello()
        elif isinstance(event, Ping):
            self.send(Pong(event.opaque))
        elif isinstance(event, Pong):
            pass
        elif isinstance(event, Open):
            self._open(event)
        else:
            stream = self.streams.get(event.stream_id)
            if stream is None:
                return
            if isinstance(event, Data):
                self.call_handler(stream, stream.handler.data_received, event.data)
            elif isinstance(event, WindowUpdate):
                stream.flush()
            elif isinstance(event, HalfClose):
                self.call_handler(stream, stream.handler.half_closed)
            elif isinstance(event, Reset):
                self.streams.pop(event.stream_id, None)
                stream._gone_now()
                self.call_handler(stream, stream.handler.reset, event.code, event.reason)
            self.forget_if_closed(event.stream_id)

    def _open(self, event: Open) -> None:
        op = event.header.get("op")
        handler_class = find_handler(op, self._handlers)
        if handler_class is None:
            self.send(Reset(event.stream_id, ResetCode.UNKNOWN_OP, f"unknown op {op!r}"))
            return
        if len(self.streams) >= MAX_STREAMS:
            self.send(Reset(event.stream_id, ResetCode.REFUSED, "too many streams"))
            return
        stream = GuestStream(self, event.stream_id)
        self.streams[event.stream_id] = stream
        try:
            stream.handler = handler_class(stream, event.header)
        except Exception as e:  # a handler that cannot start fails its stream only
            _log(f"op {op!r} failed to start: {e!r}")
            self.reset_stream(event.stream_id, ResetCode.INTERNAL_ERROR, str(e)[:200])
            return
        self.call_handler(stream, stream.handler.start)

    def call_handler(
        self, stream: GuestStream, method: Callable[[Unpack[_HandlerArguments]], None], *args: Unpack[_HandlerArguments]
    ) -> None:
        """
        Run a handler callback; if it raises, reset its stream with INTERNAL_ERROR
        and keep serving the others.
        """
        try:
            method(*args)
        except Exception as e:
            _log(f"stream {stream.stream_id} failed: {e!r}")
            if not stream._gone:
                self.reset_stream(stream.stream_id, ResetCode.INTERNAL_ERROR, repr(e)[:200])

    def reset_stream(self, stream_id: int, code: int, reason: str) -> None:
        """
        Send RESET for ``stream_id`` and forget it (its handler's :meth:`reset` is
        not called: the handler asked for it, or failed).
        """
        stream = self.streams.pop(stream_id, None)
        if stream is not None:
            stream._gone_now()
        if self.conn.is_open(stream_id):
            self.send(Reset(stream_id, code, reason))

    def acknowledge(self, stream_id: int, count: int) -> None:
        """
        Give back ``count`` bytes of credit on ``stream_id``.
        """
        try:
            frame = self.conn.acknowledge_received_data(stream_id, count)
        except LocalProtocolError as e:
            _log(f"bad acknowledgement on stream {stream_id}: {e}")
            return
        self._write(frame)

    def forget_if_closed(self, stream_id: int) -> None:
        """
        Drop our record of a stream that ended in both directions.
        """
        if stream_id in self.streams and not self.conn.is_open(stream_id):
            self.streams.pop(stream_id)._gone_now()

    def output_drained(self) -> None:
        """
        The link has room again: let streams move data.
        """
        for stream in list(self.streams.values()):
            stream.flush()

    def _drop_streams(self, code: int, reason: str) -> None:
        streams, self.streams = self.streams, {}
        for stream in streams.values():
            stream._gone_now()
            self.call_handler(stream, stream.handler.reset, code, reason)

    def start_over(self, why: str) -> None:
        """
        End this session and start a new one on the same link, with a new nonce
        drawn now: every stream is dropped (PEER_RESTARTED) and a HELLO that
        echoes the host's nonce goes out after what was written so far.  The
        host sees an agent that started over, and what it sent for the old
        session is skipped until its next HELLO.
        The ``adopt`` operation does it once it answered, so that clones of one
        template never share a session nonce.
        """
        if self._closed:
            return
        self._drop_streams(ResetCode.PEER_RESTARTED, why)
        # The new session's HELLO echoes the host's nonce: the host is acknowledged
        # at once, and its answer completes the exchange (no second HELLO from us).
        peer = self.conn.peer_hello
        self.conn = Connection(Role.GUEST, peer_nonce=peer.nonce if peer is not None else None)
        self._send_hello()
        _log(f"starting a new session: {why}")

    def connection_lost(self) -> None:
        """
        The host went away: every stream is gone.
        """
        self._closed = True
        self._drop_streams(ResetCode.PEER_RESTARTED, "host disconnected")


# -- where sessions come from ---------------------------------------------------------------


class _Server:
    """
    Runs one :class:`Session` per host connection over a :class:`Pipe`.
    """

    def __init__(self, loop: Loop, context: AgentContext) -> None:
        self.loop = loop
        self.context = context
        self.session: Optional[Session] = None
        self._pipe: Optional[Pipe] = None

    def _serve(self, fd: int) -> None:
        pipe = Pipe(
            self.loop,
            fd,
            on_data=lambda data: session.data_received(data),
            on_closed=self._closed,
            on_drained=lambda: session.output_drained(),
        )
        session = Session(self.loop, self.context, pipe.write, lambda: pipe.has_room)
        self._pipe, self.session = pipe, session
        pipe.start()
        session.start()

    def _closed(self) -> None:
        session, self.session, self._pipe = self.session, None, None
        if session is not None:
            session.connection_lost()
        self._disconnected()

    def start(self) -> None:
        """
        Begin serving.
        """
        raise NotImplementedError

    def _disconnected(self) -> None:
        raise NotImplementedError


class VirtioPortServer(_Server):
    """
    Serves the virtio-serial port at ``device``; sessions come and go with the host.
    """

    def __init__(self, loop: Loop, context: AgentContext, device: str) -> None:
        super().__init__(loop, context)
        self.device = device
        self._fd = -1

    def start(self) -> None:
        """
        Open the port and serve it.
        """
        self._fd = os.open(self.device, _PORT_FLAGS)
        self._probe()

    def _probe(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN | select.POLLOUT)
        revents = 0
        for _, revents in poller.poll(0):
            pass
        if revents & select.POLLNVAL:
            _log(f"{self.device} went away; opening it again")
            self.loop.call_later(DISCONNECTED_POLL_INTERVAL, self._reopen)
        elif revents & (select.POLLHUP | select.POLLERR) and not revents & select.POLLIN:
            self.loop.call_later(DISCONNECTED_POLL_INTERVAL, self._probe)
        else:
            _log(f"host connected on {self.device}")
            self._serve(self._fd)

    def _reopen(self) -> None:
        try:
            os.close(self._fd)
        except OSError:
            pass
        try:
            self._fd = os.open(self.device, _PORT_FLAGS)
        except OSError:
            self.loop.call_later(DISCONNECTED_POLL_INTERVAL, self._reopen)
            return
        self._probe()

    def _disconnected(self) -> None:
        _log(f"host disconnected from {self.device}")
        self.loop.call_later(DISCONNECTED_POLL_INTERVAL, self._probe)


class UnixListenServer(_Server):
    """
    Listens on a UNIX socket and serves one connection at a time, as QEMU's
    ``-chardev socket,server=on`` does for the host: for tests without a VM.
    """

    def __init__(self, loop: Loop, context: AgentContext, path: str) -> None:
        super().__init__(loop, context)
        self.path = path
        self._listener: Optional[socket.socket] = None
        self._conn: Optional[socket.socket] = None

    def start(self) -> None:
        """
        Bind, listen and wait for the first connection.
        """
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        import socket  # only here: its import costs under TCG, and the guest never listens

        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.path)
        listener.listen(8)
        listener.setblocking(False)
        self._listener = listener
        self._disconnected()

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            conn, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        conn.setblocking(False)
        self._conn = conn
        self.loop.watch(self._listener.fileno())
        self._serve(conn.fileno())

    def _disconnected(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        assert self._listener is not None
        self.loop.watch(self._listener.fileno(), self._accept)

    def close(self) -> None:
        """
        Stop listening and remove the socket file.
        """
        if self._listener is not None:
            self._listener.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


def wait_for_port(loop: Loop, name: str) -> str:
    """
    Block until the virtio-serial port ``name`` shows up, and return its device node.
    """
    logged = False
    while True:
        device = find_port(name)
        if device is not None:
            return device
        if not logged:
            _log(f"waiting for virtio-serial port {name!r}")
            logged = True
        time.sleep(DISCONNECTED_POLL_INTERVAL)


class _Arguments:
    """The defaults of the command line, when there is none."""

    version = False
    listen_unix: Optional[str] = None
    port_name = PORT_NAME
    device: Optional[str] = None


def _parse_arguments(arguments: list[str], context: "AgentContext") -> argparse.Namespace:
    import argparse

    parser = argparse.ArgumentParser(prog="vmservice-agent", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"vmservice-agent {context.version}")
    parser.add_argument("--listen-unix", metavar="PATH", help="serve a UNIX socket instead")
    parser.add_argument("--port-name", default=PORT_NAME, help="virtio-serial port name")
    parser.add_argument("--device", help="serve this character device as the port")
    return parser.parse_args(arguments)


def _mark_ready() -> None:
    """
    Create the file ``$VMSERVICE_AGENT_READY`` names, if any: the guest's
    other services wait for it before they start, so that the agent, which
    the host waits for, has the vCPU to itself at boot.
    """
    path = os.environ.get("VMSERVICE_AGENT_READY")
    if path:
        try:
            with open(path, "w"):
                pass
        except OSError as error:
            _log(f"cannot create {path}: {error}")


def _start_guest_duties(loop: Loop) -> None:
    """
    In the guest (the agent started without arguments), once it serves its port: watch the ACPI power
    button (no process of its own for it), and grow the root file system to its disk (one ioctl, no
    program to run), put off past what the host asks before a create answers but done before any
    other operation (:func:`run_deferred`).
    """
    from vmservice.guest.powerbutton import PowerButton, power_off
    from vmservice.guest.rootgrowth import grow_root

    PowerButton(loop, power_off).start()

    def grow() -> None:
        grow_root(lambda line: print(line, flush=True))

    DEFERRED.append(grow)
    loop.call_later(DEFERRED_DELAY, run_deferred)


def main(argv: Optional[list[str]] = None) -> None:
    """
    Run the agent until killed.

    :param argv: command-line arguments (default ``sys.argv[1:]``).
    """
    context = AgentContext()
    arguments = sys.argv[1:] if argv is None else argv
    args: _Arguments | argparse.Namespace
    if arguments:
        args = _parse_arguments(arguments, context)
    else:
        # The guest starts the agent without arguments: skip argparse, whose
        # import costs about a tenth of a second under TCG.
        args = _Arguments()

    loop = Loop()
    server: _Server
    if args.listen_unix:
        server = unix = UnixListenServer(loop, context, args.listen_unix)
        where = args.listen_unix
    else:
        where = args.device or wait_for_port(loop, args.port_name)
        server = VirtioPortServer(loop, context, where)
        unix = None

    def terminate(signum: int, frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, terminate)
    server.start()
    print(f"vmservice-agent: ready on {where}", flush=True)
    _mark_ready()
    if not arguments:
        _start_guest_duties(loop)
    try:
        loop.run()
    finally:
        if unix is not None:
            unix.close()


if __name__ == "__main__":
    main()
