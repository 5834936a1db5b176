# -*- test-case-name: tests.guest.test_tunnelport -*-
"""
A tunnel's bytes between its upstream socket and its tunnel port, on two
threads (:class:`PortRelay`, for :mod:`vmservice.guest.tunnelport`), without
Python touching them on the way out:

- *out* (upstream → host): waits for the host's token on the port (the hunt
  drops what an earlier tunnel left there), echoes it, then ``splice``\\ s
  from the socket into a pipe and from the pipe into the port (the virtio
  console takes ``splice`` written to it); where the kernel refuses,
  ``recv_into`` and ``write``;
- *in* (host → upstream): reads the port with ``readv`` of page-sized
  buffers (it cannot be spliced from; :class:`~vmservice.guest.bulk_upload.PortReader`),
  1 MiB at a time, and sends that to the socket, until the host's count.

Both wait in ``poll`` with a :class:`~vmservice.guest.bulkport.Stop` each, so
the agent's loop can stop them; they report through ``wake``.

Standard library only.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import socket
import threading
from typing import Callable, Optional

from vmservice.guest.bulk_upload import PortReader
from vmservice.guest.bulkport import PAGE, READ_PAGES, BulkClosed, BulkPort, Stop
from vmservice.wire.errors import ResetCode

__all__ = ["PortRelay", "SPLICE_CHUNK"]

#: Bytes per ``splice`` from the socket (and the pipe's size, where the kernel allows it).
SPLICE_CHUNK = 1024 * 1024

_SPLICE_FLAGS = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)
_F_SETPIPE_SZ = 1031


class PortRelay:
    """
    A tunnel's two threads between an upstream socket and a tunnel port (see
    the module's description).  ``wake`` is called (from a thread) whenever
    one of them is done; the agent's loop then looks at :attr:`out_done`,
    :attr:`in_done` and :attr:`failure`.

    :ivar sent: bytes put on the port (upstream → host).
    :ivar delivered: bytes written to the socket (host → upstream).
    """

    def __init__(self, port: BulkPort, sock: socket.socket, token: bytes, wake: Callable[[], None]) -> None:
        self._port = port
        self._sock = sock
        self._token = token
        self._wake = wake
        self.out_stop = Stop()
        self.in_stop = Stop()
        self._in_port = BulkPort(port.fd, self.in_stop)
        self._out_port = BulkPort(port.fd, self.out_stop)
        self._reader: Optional[PortReader] = None
        self._total: Optional[int] = None
        self._lock = threading.Lock()
        self.sent = 0
        self.delivered = 0
        self.out_done = False
        self.in_done = False
        self.in_started = False
        self.failure: Optional[str] = None
        self.failure_code = ResetCode.INTERNAL_ERROR

    def start(self) -> None:
        """Start the out thread (which starts the in thread once the token is through)."""
        threading.Thread(target=self._out, name="tunnel-out", daemon=True).start()

    @property
    def done(self) -> bool:
        """Whether both threads are over (the in thread counts as over if it never started)."""
        return self.out_done and (self.in_done or not self.in_started)

    def set_total(self, total: int) -> None:
        """The host put ``total`` bytes on the port: the in thread stops after as many."""
        with self._lock:
            self._total = total
            if self._reader is not None:
                self._reader.total = total
        self.in_stop.wake()

    def stop(self) -> None:
        """Make both threads give up."""
        self.out_stop.stop()
        self.in_stop.stop()

    def close(self) -> None:
        """Close the stop pipes (once both threads are done)."""
        self.out_stop.close()
        self.in_stop.close()

    def _fail(self, message: str, code: int = ResetCode.INTERNAL_ERROR) -> None:
        if self.failure is None:
            self.failure, self.failure_code = message[:200], code

    # -- out: upstream → port -------------------------------------------------------

    def _out(self) -> None:
        port = self._out_port
        try:
            carry = port.expect(self._token)
            port.write_all(self._token)
            # Started only once the thread is: a thread that cannot start never ends, and the relay
            # would never be done (its port never let go).
            threading.Thread(target=self._in, args=(carry,), name="tunnel-in", daemon=True).start()
            self.in_started = True
            self._splice_out()
        except BulkClosed as e:
            if not self.out_stop.stopped:
                self._fail(str(e))
        except Exception as e:
            self._fail(str(e) or repr(e))
        finally:
            self.out_done = True
            self._wake()

    def _splice_out(self) -> None:
        port, fd = self._out_port, self._sock.fileno()
        read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            try:
                fcntl.fcntl(write_end, _F_SETPIPE_SZ, SPLICE_CHUNK)
            except OSError:
                pass  # the default pipe size: more splices, the same bytes
            while True:
                port.check()
                try:
                    count = os.splice(fd, write_end, SPLICE_CHUNK, flags=_SPLICE_FLAGS)
                except BlockingIOError:
                    port.wait(select.POLLIN, fd=fd)
                    continue
                except OSError as e:
                    if e.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP) and self.sent == 0:
                        self._copy_out()
                        return
                    return  # the upstream's connection broke: its end
                if count == 0:
                    return  # the upstream's end of file
                self._drain_pipe(read_end, count)
        finally:
            os.close(read_end)
            os.close(write_end)

    def _drain_pipe(self, read_end: int, count: int) -> None:
        port = self._out_port
        while count:
            port.check()
            try:
                moved = os.splice(read_end, port.fd, count, flags=_SPLICE_FLAGS)
            except BlockingIOError:
                port.wait_writable()
                continue
            count -= moved
            self.sent += moved

    def _copy_out(self) -> None:
        """Upstream → port without ``splice`` (a kernel that refuses it)."""
        port = self._out_port
        buffer = bytearray(SPLICE_CHUNK)
        view = memoryview(buffer)
        while True:
            port.check()
            try:
                count = self._sock.recv_into(view)
            except BlockingIOError:
                port.wait(select.POLLIN, fd=self._sock.fileno())
                continue
            except OSError:
                return
            if count == 0:
                return
            data = view[:count]
            while len(data):
                port.check()
                try:
                    written = os.write(port.fd, data[:32 * 1024])
                except BlockingIOError:
                    port.wait_writable()
                    continue
                data = data[written:]
                self.sent += written

    # -- in: port → upstream --------------------------------------------------------

    def _in(self, carry: bytes) -> None:
        port = self._in_port
        try:
            with self._lock:
                reader = self._reader = PortReader(port, carry)
                reader.total = self._total
            buffer = bytearray(READ_PAGES * PAGE)
            view = memoryview(buffer)
            while True:
                count = reader.read_into(view)
                if count == 0:
                    return  # the host's N bytes are through
                if not self._send(view[:count]):
                    return  # the upstream is gone: the out thread sees its end
        except BulkClosed as e:
            if not self.in_stop.stopped:
                self._fail(str(e))
            elif self.in_stop.reason is not None:
                self._fail(self.in_stop.reason, ResetCode.PROTOCOL_ERROR)
        except Exception as e:
            self._fail(str(e) or repr(e))
        finally:
            self.in_done = True
            self._wake()

    def _send(self, data: memoryview) -> bool:
        """Write ``data`` to the socket; ``False`` if the upstream's connection broke."""
        port = self._in_port
        while len(data):
            port.check()
            try:
                sent = self._sock.send(data)
            except BlockingIOError:
                port.wait(select.POLLOUT, fd=self._sock.fileno())
                continue
            except OSError:
                return False
            data = data[sent:]
            self.delivered += sent
        return True
