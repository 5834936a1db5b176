# -*- test-case-name: tests.guest.test_agent,tests.integration.guest.test_agent -*-
"""
A byte pipe over a non-blocking descriptor (the virtio-serial port or an
accepted UNIX socket): vectored reads, writes collected and flushed once per
loop iteration, and the output's high and low water marks.
"""

from __future__ import annotations

import errno
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Optional

from vmservice.guest import agentlog
from vmservice.guest.loop import Loop

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
                    agentlog.log(f"read failed: {e}")
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
            agentlog.log(why)
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


__all__ = [
    "MAX_READ_PER_WAKEUP",
    "OUTPUT_HIGH_WATER",
    "OUTPUT_LOW_WATER",
    "READ_BUFFERS",
    "READ_BUFFER_SIZE",
    "READ_SIZE",
    "WRITE_BUFFER_SIZE",
    "WRITE_SIZE",
    "Pipe",
]
