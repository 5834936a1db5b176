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
  :class:`~vmservice.guest.bulk_upload.PortReader`) until the size the host announced on the stream;
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
import mmap
import os
import select
import threading
import time
from typing import Optional

from vmservice.guest.ports import find_port
from vmservice.wire.bulk import TokenHunt

__all__ = ["BulkClosed", "BulkPort", "PAGE", "PORT_NAME", "READ_PAGES", "Stop"]

#: The port's name (``-device virtserialport,name=bulk``).
PORT_NAME = "bulk"
#: What the port hands out per ``read``.
PAGE = 4096
#: Pages per ``readv``.
READ_PAGES = 256
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


class _Slot:
    """One raw port's lock and descriptor (opened at its first claim, kept open)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fd = -1


class BulkPort:
    """
    A raw port (``bulk``, or a tunnel port ``tunnelK``), claimed by one
    worker at a time (:meth:`claim`): the agent opens each once and keeps it
    open, so that what it wrote is delivered even after the copy or tunnel
    ended (a port closed by the guest may leave its last buffers unsent).
    """

    _slots: dict[str, _Slot] = {}
    _slots_lock = threading.Lock()

    def __init__(self, fd: int, stop: Stop, slot: Optional[_Slot] = None) -> None:
        self.fd = fd
        self._stop = stop
        self._slot = slot
        self._released = False

    @classmethod
    def claim(cls, stop: Stop, path: Optional[str] = None, wait: float = CLAIM_WAIT,
              name: str = PORT_NAME) -> Optional["BulkPort"]:
        """
        Port ``name``, or ``None``: there is no such port, or another worker
        held it for ``wait`` seconds (a cancelled copy's worker lets go at its
        next step).
        """
        with cls._slots_lock:
            slot = cls._slots.setdefault(name, _Slot())
        if not slot.lock.acquire(timeout=wait):
            return None
        try:
            if slot.fd < 0:
                path = path if path is not None else find_port(name)
                if path is None:
                    raise OSError(errno.ENOENT, f"no port {name}")
                slot.fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        except OSError:
            slot.lock.release()
            return None
        return cls(slot.fd, stop, slot)

    @classmethod
    def forget(cls, name: str = PORT_NAME) -> None:
        """Close port ``name``'s descriptor (the next claim opens it again); for tests."""
        with cls._slots_lock:
            slot = cls._slots.pop(name, None)
        if slot is not None and slot.fd >= 0:
            os.close(slot.fd)

    def release(self) -> None:
        """Let the next worker have the port."""
        if not self._released and self._slot is not None:
            self._released = True
            self._slot.lock.release()

    def wait(self, events: int, timeout: float = 1.0, fd: Optional[int] = None) -> None:
        """
        Block until the port (or ``fd``) is ready for ``events`` (or hung
        up), the stop pipe is written to, or ``timeout`` seconds passed.

        :raises BulkClosed: stopped.
        """
        poller = select.poll()
        poller.register(self.fd if fd is None else fd, events)
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

    def wait_writable(self) -> None:
        """
        Block until the port takes more (or a second passed).

        :raises BulkClosed: stopped, or the host's end went away.
        """
        self._wait_writable()

    def _wait_writable(self) -> None:
        if _hung_up(self.fd):
            raise BulkClosed("the host's end of the bulk port went away")
        self.wait(select.POLLOUT)
        if _hung_up(self.fd):
            raise BulkClosed("the host's end of the bulk port went away")


def _hung_up(fd: int) -> bool:
    """Whether the host's end of the port is not connected."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(revents & select.POLLHUP for _, revents in poller.poll(0))
