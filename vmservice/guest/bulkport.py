# -*- test-case-name: tests.guest.test_bulkport,tests.integration.test_copy_bulk -*-
"""
The guest's end of the bulk port: a virtio-serial port named ``bulk`` that
carries one copy's file bytes at a time, without frames, so that they do not
pass through the agent's Python per 4 KiB page (``docs/agent-protocol.md``,
"The bulk port").

A copy's worker thread claims the port (:meth:`BulkPort.claim`: one copy at
a time; the agent opens the port once and keeps it open, so what it wrote is
delivered after the copy ended), waits for the host's token on it
(:meth:`BulkPort.expect`: bytes written before the host's end of this copy is
connected would be dropped by QEMU, and the hunt drops what an earlier
connection left), and then

- reads an upload with ``readv`` into 256 page-sized buffers (the port hands
  out at most one page per ``read``; one ``readv`` takes up to 1 MiB,
  :class:`PortReader`) until the size the host announced on the stream;
- writes a download as the token and then the file, read with ``O_DIRECT``
  into a page-aligned buffer and written with ``writev`` in 32 KiB pieces
  (``sendfile`` where the file system refuses ``O_DIRECT``).

The port is non-blocking; the worker waits in ``poll`` on the port and on a
:class:`Stop` pipe, so a reset stream (or the end of an upload) wakes it.
Flow control is the port's own: the guest reads only as fast as the disk
takes the bytes, and the host's socket fills when the guest does not read;
a download's ``sendfile`` waits while the host does not read.

Standard library only.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import queue
import select
import threading
import time
from typing import Optional, cast

from vmservice.guest.ports import find_port
from vmservice.wire.bulk import TokenHunt

__all__ = ["BulkClosed", "BulkPort", "PORT_NAME", "PortReader", "Stop"]

#: The port's name (``-device virtserialport,name=bulk``).
PORT_NAME = "bulk"
#: What the port hands out per ``read``.
PAGE = 4096
#: Pages per ``readv``.
READ_PAGES = 256
#: Bytes an upload gathers before it writes them to the file.
FILL_CHUNK = 1024 * 1024
#: Bytes per ``sendfile`` call.
SEND_CHUNK = 1024 * 1024
#: Largest plain ``write`` the port takes at once.
WRITE_CHUNK = 32 * 1024
#: Seconds a copy waits for the host's end of the port to be connected.
CONNECT_WAIT = 5.0
#: Seconds between looks at the port while waiting (POLLHUP is level-triggered).
HOST_POLL = 0.01
#: Seconds a copy waits for the port while another copy holds it.
CLAIM_WAIT = 2.0


class BulkClosed(Exception):
    """The transfer cannot go on: stopped, or the host's end went away."""


class Stop:
    """
    Wakes a worker blocked on the port: :meth:`wake` (look again: an upload's
    size is known) and :meth:`stop` (give up).  Written from the agent's loop,
    read by the worker.
    """

    def __init__(self) -> None:
        self.stopped = False
        self.reason: Optional[str] = None
        self.read_fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._closed = False

    def wake(self) -> None:
        """Make the worker look again."""
        if self._closed:
            return
        try:
            os.write(self._write_fd, b"x")
        except (BlockingIOError, OSError):
            pass

    def stop(self, reason: Optional[str] = None) -> None:
        """
        Make the worker give up: the stream was reset, or (``reason``) the
        host broke the protocol.
        """
        if not self.stopped:
            self.stopped = True
            self.reason = reason
        self.wake()

    def drain(self) -> None:
        """Empty the pipe (the worker, before it looks again)."""
        try:
            while os.read(self.read_fd, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        """Close the pipe (once the worker is done)."""
        if self._closed:
            return
        self._closed = True
        os.close(self.read_fd)
        os.close(self._write_fd)


class BulkPort:
    """
    The bulk port, claimed by one copy's worker at a time (:meth:`claim`):
    the agent opens it once and keeps it open, so that what it wrote is
    delivered even after the copy ended (a port closed by the guest may
    leave its last buffers unsent).
    """

    _lock = threading.Lock()
    _fd = -1

    def __init__(self, fd: int, stop: Stop) -> None:
        self.fd = fd
        self._stop = stop
        self._released = False

    @classmethod
    def claim(cls, stop: Stop, path: Optional[str] = None, wait: float = CLAIM_WAIT) -> Optional["BulkPort"]:
        """
        The port, or ``None``: there is no such port, or another copy held it
        for ``wait`` seconds (a cancelled copy's worker lets go at its next step).
        """
        if not cls._lock.acquire(timeout=wait):
            return None
        try:
            if BulkPort._fd < 0:
                path = path if path is not None else find_port(PORT_NAME)
                if path is None:
                    raise OSError(errno.ENOENT, "no bulk port")
                BulkPort._fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        except OSError:
            cls._lock.release()
            return None
        return cls(BulkPort._fd, stop)

    def release(self) -> None:
        """Let the next copy have the port."""
        if not self._released:
            self._released = True
            BulkPort._lock.release()

    def wait(self, events: int, timeout: float = 1.0) -> None:
        """
        Block until the port is ready for ``events`` (or hung up), the stop
        pipe is written to, or ``timeout`` seconds passed.

        :raises BulkClosed: stopped.
        """
        poller = select.poll()
        poller.register(self.fd, events)
        poller.register(self._stop.read_fd, select.POLLIN)
        poller.poll(int(timeout * 1000))
        self._stop.drain()
        self.check()

    def expect(self, token: bytes, wait: float = CONNECT_WAIT) -> bytes:
        """
        Wait for the host's ``token`` on the port (which proves the host's end
        of this copy is connected: bytes written before would be dropped);
        what came after it.

        :raises BulkClosed: stopped, or no token within ``wait`` seconds.
        """
        hunt = TokenHunt(token)
        buffer = bytearray(PAGE)
        deadline = time.monotonic() + wait
        while True:
            self.check()
            if time.monotonic() > deadline:
                raise BulkClosed("the host did not start the transfer on the bulk port")
            try:
                count = os.readv(self.fd, [buffer])
            except BlockingIOError:
                self.wait(select.POLLIN, max(0.0, min(1.0, deadline - time.monotonic())))
                continue
            if count == 0:  # no host connected (yet)
                time.sleep(HOST_POLL)
                continue
            found = hunt.feed(bytes(buffer[:count]))
            if found is not None:
                return found

    def write_all(self, data: bytes) -> None:
        """Write ``data`` (small: a token) to the port."""
        view = memoryview(data)
        while view:
            self.check()
            try:
                written = os.write(self.fd, view[:WRITE_CHUNK])
            except BlockingIOError:
                self._wait_writable()
                continue
            view = view[written:]

    def send_file(self, path: str, fd: int, size: int) -> int:
        """
        Send the first ``size`` bytes of file ``path`` (open as ``fd``); the
        bytes sent (less when the file shrank).

        The file is read with ``O_DIRECT`` into a page-aligned buffer where
        its file system allows it (filling the page cache costs the guest's
        vCPU more than the port does under TCG), else sent with ``sendfile``.

        :raises BulkClosed: stopped, or the host's end went away.
        """
        try:
            direct = os.open(path, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
        except OSError:
            return self._splice_file(fd, size)
        try:
            if not os.path.samestat(os.fstat(direct), os.fstat(fd)):
                return self._splice_file(fd, size)
            return self._copy_direct(direct, size)
        finally:
            os.close(direct)

    def _copy_direct(self, fd: int, size: int) -> int:
        # The buffer is left to the garbage collector: an exception's traceback may hold views of it.
        view = memoryview(mmap.mmap(-1, SEND_CHUNK))
        sent = 0
        while sent < size:
            self.check()
            count = os.preadv(fd, [view], sent)
            if count == 0:
                break
            count = min(count, size - sent)
            self._write_view(view[:count])
            sent += count
        return sent

    def _write_view(self, data: memoryview) -> None:
        """Write ``data`` with ``writev`` in pieces the port takes whole."""
        while len(data):
            self.check()
            pieces = [data[at:at + WRITE_CHUNK] for at in range(0, len(data), WRITE_CHUNK)]
            try:
                written = os.writev(self.fd, pieces)
            except BlockingIOError:
                self._wait_writable()
                continue
            data = data[written:]

    def _splice_file(self, fd: int, size: int) -> int:
        sent = 0
        while sent < size:
            self.check()
            try:
                count = os.sendfile(self.fd, fd, sent, min(SEND_CHUNK, size - sent))
            except BlockingIOError:
                self._wait_writable()
                continue
            except OSError as e:
                if sent == 0 and e.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    return self._copy_direct(fd, size)  # a kernel without splice to the port
                raise
            if count == 0:
                break
            sent += count
        return sent

    def check(self) -> None:
        """:raises BulkClosed: stopped."""
        if self._stop.stopped:
            raise BulkClosed("the copy was stopped")

    def _wait_writable(self) -> None:
        if _hung_up(self.fd):
            raise BulkClosed("the host's end of the bulk port went away")
        self.wait(select.POLLOUT)
        if _hung_up(self.fd):
            raise BulkClosed("the host's end of the bulk port went away")


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


def _hung_up(fd: int) -> bool:
    """Whether the host's end of the port is not connected."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(revents & select.POLLHUP for _, revents in poller.poll(0))


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
