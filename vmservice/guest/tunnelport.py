# -*- test-case-name: tests.guest.test_tunnelport,tests.integration.test_forward_ports -*-
"""
The ``forward-port`` operation: a tunnel whose bytes go over a tunnel port
(a raw virtio-serial port ``tunnelK``) while its stream carries only its
head and ends (``docs/agent-protocol.md``, "The tunnel ports"; stdlib only).

The OPEN header is a ``forward`` one with ``"tunnel_port"`` and ``"token"``
(:mod:`vmservice.wire.tunnelport`).  The agent claims the port (waiting up to
:data:`~vmservice.guest.bulkport.CLAIM_WAIT` seconds for a tunnel that ends
to let go of it; then it resets the stream with ``REFUSED`` and the host
opens a ``forward`` instead), connects the upstream as ``forward`` does
(:class:`~vmservice.guest.forwarding.ForwardHandler`: the same error heads),
and answers ``{"ok": true, "port": true}``.  A :class:`PortRelay` then moves
the bytes on two threads, without Python touching them on the way out:

- *out* (upstream → host): waits for the host's token on the port (the hunt
  drops what an earlier tunnel left there), echoes it, then ``splice``\\ s
  from the socket into a pipe and from the pipe into the port (the virtio
  console takes ``splice`` written to it); where the kernel refuses,
  ``recv_into`` and ``write``;
- *in* (host → upstream): reads the port with ``readv`` of page-sized
  buffers (it cannot be spliced from; :class:`~vmservice.guest.bulk_upload.PortReader`),
  1 MiB at a time, and sends that to the socket.

Each side ends its direction on the stream: the host with ``{"size": N}``
and HALF_CLOSE when its client is done (the in thread delivers exactly N
bytes, then the tunnel ends); the agent, once the tunnel ended (the upstream's
end of file, or the host's N delivered), with ``{"size": M}``, M the bytes
it put on the port, and the end of the stream.  There is no half-close, as
for ``forward``: either end closes the socket.  A RESET, or the host's end
of the port going away, stops both threads; the port is let go once both
are done.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import threading
import time
from typing import Any, Callable, Mapping, Optional

from vmservice.guest.bulk_upload import PortReader
from vmservice.guest.bulkport import CLAIM_WAIT, READ_PAGES, PAGE, BulkClosed, BulkPort, Stop
from vmservice.guest.forwarding import ForwardHandler, UpstreamError
from vmservice.guest.streams import GuestStream
from vmservice.wire.bulk import MAX_END, decode_upload_end, encode_upload_end
from vmservice.wire.errors import ResetCode
from vmservice.wire.payloads import encode_head
from vmservice.wire.tunnelport import parse_port

__all__ = ["PortForwardHandler", "PortRelay", "SPLICE_CHUNK"]

#: Bytes per ``splice`` from the socket (and the pipe's size, where the kernel allows it).
SPLICE_CHUNK = 1024 * 1024
#: Seconds between tries to claim a port another tunnel still holds.
CLAIM_RETRY = 0.02

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
            self.in_started = True
            threading.Thread(target=self._in, args=(carry,), name="tunnel-in", daemon=True).start()
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
                    port.wait(_POLLIN, fd=fd)
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
                port.wait(_POLLIN, fd=self._sock.fileno())
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
                port.wait(_POLLOUT, fd=self._sock.fileno())
                continue
            except OSError:
                return False
            data = data[sent:]
            self.delivered += sent
        return True


_POLLIN = 0x001
_POLLOUT = 0x004


class PortForwardHandler(ForwardHandler):
    """Serves one ``forward-port`` stream (see the module's description)."""

    def __init__(self, stream: GuestStream, header: Mapping[str, Any]) -> None:
        super().__init__(stream, header)
        self._names = parse_port(header)
        self._port: Optional[BulkPort] = None
        self._claim_stop: Optional[Stop] = None
        self._claim_deadline = 0.0
        self._relay: Optional[PortRelay] = None
        self._wake_r = self._wake_w = -1
        self._end = b""
        self._stopping = False
        self._over = False

    # -- claiming the port, connecting ----------------------------------------------

    def start(self) -> None:
        if self._names is None:
            self.stream.reset(ResetCode.PROTOCOL_ERROR, "no tunnel port or token")
            return
        self._claim_deadline = time.monotonic() + CLAIM_WAIT
        self._claim()

    def _claim(self) -> None:
        if self._over:
            return
        assert self._names is not None
        stop = Stop()
        port = BulkPort.claim(stop, wait=0, name=self._names[0])
        if port is None:
            stop.close()
            if time.monotonic() >= self._claim_deadline:
                self._over = True
                self.stream.reset(ResetCode.REFUSED, f"the port {self._names[0]} is busy or missing")
                return
            self.stream.loop.call_later(CLAIM_RETRY, self._claim)
            return
        self._port, self._claim_stop = port, stop
        super().start()

    def _refuse(self, error: UpstreamError) -> None:
        self._let_go()
        super()._refuse(error)

    def _established(self) -> None:
        assert self._sock is not None and self._port is not None and self._names is not None
        self._connected = True
        self.stream.write(encode_head({"ok": True, "port": True}))
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.stream.loop.watch(self._wake_r, self._woken)
        self._relay = PortRelay(self._port, self._sock, self._names[1], self._wake)
        self._relay.start()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    # -- the stream -----------------------------------------------------------------

    def flushed(self) -> None:
        pass  # the socket is the relay's threads', never the loop's

    def data_received(self, data: bytes) -> None:
        self.stream.consumed(len(data))
        self._end += data
        if len(self._end) > MAX_END:
            self._broken("the host's tunnel end is too long")

    def half_closed(self) -> None:
        relay = self._relay
        if relay is None:
            self._finish()
            return
        try:
            total = decode_upload_end(self._end)
        except ValueError as e:
            self._broken(f"bad tunnel end from the host: {e}")
            return
        relay.set_total(total)

    def _broken(self, reason: str) -> None:
        if self._relay is not None:
            self._relay.in_stop.stop(reason)
        else:
            self._over = True
            self._let_go()
            self._close_socket()
            self.stream.reset(ResetCode.PROTOCOL_ERROR, reason)

    def reset(self, code: int, reason: str) -> None:
        self._over = True
        if self._relay is None:
            self._let_go()
            super().reset(code, reason)
            return
        self._stop_relay()

    def _finish(self) -> None:
        if self._relay is None:
            self._let_go()
            super()._finish()

    # -- the relay's end ------------------------------------------------------------

    def _woken(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except OSError:
            pass
        relay = self._relay
        if relay is None:
            return
        if relay.failure is not None or relay.out_done or relay.in_done:
            self._stop_relay()
        if not relay.done:
            return
        self.stream.loop.watch(self._wake_r)
        os.close(self._wake_r)
        os.close(self._wake_w)
        self._relay = None
        relay.close()
        super()._close_socket()
        self._let_go()
        if self._over:
            return
        self._over = True
        if relay.failure is not None:
            self.stream.reset(relay.failure_code, relay.failure)
            return
        self.stream.write(encode_upload_end(relay.sent))
        self.stream.end()

    def _stop_relay(self) -> None:
        """Either direction is over (or failed, or the stream was reset): stop the other one too."""
        relay = self._relay
        if relay is None or self._stopping:
            return
        self._stopping = True
        relay.stop()
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _close_socket(self) -> None:
        if self._relay is None:
            super()._close_socket()

    def _let_go(self) -> None:
        """Release the port (its claim's stop pipe with it)."""
        port, self._port = self._port, None
        if port is not None:
            port.release()
        stop, self._claim_stop = self._claim_stop, None
        if stop is not None:
            stop.close()
