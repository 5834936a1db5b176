# -*- test-case-name: tests.guest.test_bulkport,tests.integration.test_copy_bulk -*-
"""
An upload's body from the bulk port (:class:`PortReader`, after the token
:meth:`~vmservice.guest.bulkport.BulkPort.expect` found), read as the copy's
``read`` function or written straight to its file, with ``O_DIRECT`` where the
file system allows it, by a second thread while the next buffer is read.

Standard library only.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import queue
import select
import threading
from typing import Optional, cast

from vmservice.guest.bulkport import PAGE, READ_PAGES, BulkClosed, BulkPort

#: Bytes an upload gathers before it writes them to the file.
FILL_CHUNK = 1024 * 1024


class _Writer:
    """
    Writes buffers to a file on a thread of its own, in order, while the
    caller fills the next one: three page-aligned buffers of twice
    :data:`FILL_CHUNK` go round.
    """

    def __init__(self, fd: int, buffers: int = 3) -> None:
        self._fd = fd
        self._buffers = [mmap.mmap(-1, 2 * FILL_CHUNK) for _ in range(buffers)]
        self._free: "queue.Queue[mmap.mmap]" = queue.Queue()
        self._full: "queue.Queue[Optional[tuple[mmap.mmap, int]]]" = queue.Queue()
        for buffer in self._buffers:
            self._free.put(buffer)
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="bulk-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._full.get()
            if item is None:
                return
            buffer, length = item
            if self._error is None:
                try:
                    with memoryview(buffer) as view:
                        _write_all(self._fd, view[:length])
                except BaseException as e:
                    self._error = e.with_traceback(None)
            self._free.put(buffer)

    def free_buffer(self) -> mmap.mmap:
        """A buffer to fill (waits while all are being written).

        :raises OSError: a write failed.
        """
        buffer = self._free.get()
        if self._error is not None:
            self._free.put(buffer)
            raise self._error
        return buffer

    def write(self, buffer: mmap.mmap, length: int) -> None:
        """Write the first ``length`` bytes of ``buffer`` (a buffer from :meth:`free_buffer`)."""
        self._full.put((buffer, length))

    def close(self) -> None:
        """Wait for the writes queued, drop the buffers (to the garbage collector:
        an exception's traceback may still hold views of them).

        :raises OSError: a write failed.
        """
        self._full.put(None)
        self._thread.join()
        self._buffers = []
        if self._error is not None:
            raise self._error


def _set_direct(fd: int, on: bool) -> bool:
    """Turn ``O_DIRECT`` on or off for ``fd``; whether it is now on."""
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT if on else flags & ~os.O_DIRECT)
    except OSError:
        return False
    return on


def _write_all(fd: int, data: memoryview) -> None:
    while len(data):
        written = os.write(fd, data)
        data = data[written:]


class PortReader:
    """
    An upload's body from the port, after its token (:meth:`BulkPort.expect`):
    :meth:`read` as the copy's ``read`` function.  :attr:`total` is set (by the
    agent's loop, which then wakes the :class:`Stop`) when the host said how
    many bytes it sent.

    :ivar received: body bytes read so far.
    """

    def __init__(self, port: BulkPort, carry: bytes = b"") -> None:
        self._port = port
        self._buffer = bytearray(READ_PAGES * PAGE)
        self._view = memoryview(self._buffer)
        self._carry = carry
        self.received = 0
        self.total: Optional[int] = None

    def read(self, size: int = -1) -> bytes:
        """
        Up to ``size`` body bytes (a view into a buffer reused by the next
        call); ``b""`` once :attr:`total` bytes were read.

        :raises BulkClosed: stopped, the host's end went away, or more bytes
            came than announced.
        """
        size = min(size, len(self._buffer)) if size > 0 else len(self._buffer)
        count = self.read_into(self._view[:size])
        return cast(bytes, self._view[:count])

    def read_into(self, target: memoryview) -> int:
        """
        Read up to ``len(target)`` body bytes into ``target``; 0 once
        :attr:`total` bytes were read.

        :raises BulkClosed: as :meth:`read`.
        """
        port = self._port
        while True:
            port.check()
            if self._carry:
                count = min(len(target), len(self._carry))
                target[:count] = self._carry[:count]
                self._carry = self._carry[count:]
                return self._count(count)
            total = self.total
            if total is not None and self.received >= total:
                if self.received > total:
                    raise BulkClosed(f"the host sent more than the {total} bytes it announced")
                return 0
            # The port hands out at most a page per read: one buffer per page.
            pages = [target[at:at + PAGE] for at in range(0, min(len(target), READ_PAGES * PAGE), PAGE)]
            try:
                count = os.readv(port.fd, pages)
            except BlockingIOError:
                port.wait(select.POLLIN)
                continue
            if count == 0:
                raise BulkClosed("the host's end of the bulk port went away")
            return self._count(count)

    def fill(self, fd: int) -> int:
        """
        Write the whole body to file ``fd`` (from its start); its size.

        The file is written with ``O_DIRECT`` where its file system allows it,
        from page-aligned buffers in whole pages of 1 MiB or more (the tail
        without): under TCG the page cache costs the guest's vCPU several
        times what the port does (``docs/performance.md``).  A second thread
        writes one buffer while this one reads the next from the port, so
        that the port and the disk work at the same time.

        :raises BulkClosed: as :meth:`read`.
        :raises OSError: from writing the file (``ENOSPC`` ...).
        """
        direct = _set_direct(fd, True)
        writer = _Writer(fd)
        carry = b""
        try:
            while True:
                buffer = writer.free_buffer()
                with memoryview(buffer) as view:
                    filled = len(carry)
                    view[:filled] = carry
                    ended = False
                    while filled < FILL_CHUNK:
                        count = self.read_into(view[filled:filled + FILL_CHUNK])
                        if not count:
                            ended = True
                            break
                        filled += count
                    whole = filled - filled % PAGE if direct else filled
                    carry = bytes(view[whole:filled])
                writer.write(buffer, whole)
                if ended:
                    break
        finally:
            writer.close()
        if carry:
            if direct:
                _set_direct(fd, False)
            _write_all(fd, memoryview(carry))
        return self.received

    def _count(self, count: int) -> int:
        self.received += count
        if self.total is not None and self.received > self.total:
            raise BulkClosed(f"the host sent more than the {self.total} bytes it announced")
        return count


__all__ = ["FILL_CHUNK", "PortReader"]
