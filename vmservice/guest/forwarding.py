# -*- test-case-name: tests.integration.guest.test_forwarding -*-
"""
The ``forward`` operation: a byte tunnel from the host to a TCP or UNIX
socket inside the guest (stdlib only).

The OPEN header names the upstream: ``{"op": "forward", "host": H, "port": P}``
or ``{"op": "forward", "unix": PATH}``.  The agent connects without blocking
(at most :data:`CONNECT_TIMEOUT` seconds), then sends one head
(:func:`vmservice.wire.payloads.encode_head`): ``{"ok": true}``, or
``{"ok": false, "error": KIND, "message": ...}`` with KIND one of
``refused``, ``unreachable``, ``timeout``, ``not_found`` (no such UNIX
socket) or ``invalid`` (a header that names no upstream), and half-closes.

After an ``ok`` head the stream carries raw bytes both ways:

- what the host sends is written to the socket; its credit is given back only
  once the socket took the bytes, so a slow upstream stops the host;
- what the socket sends goes to the host; the socket is not read while more
  than :data:`READ_PAUSE_PENDING` bytes wait for the host's credit;
- there is no half-close (``docs/agent-protocol.md``): the host's HALF_CLOSE
  closes the socket once what the host sent was written, and the socket's
  end of file half-closes the stream once what it sent went out; a RESET
  closes the socket at once.
"""

from __future__ import annotations

import errno
import os
import socket
import time
from typing import Any, Mapping, Optional

from vmservice.guest.loop import Timer
from vmservice.guest.streams import GuestStream, StreamHandler
from vmservice.wire.openheaders.fields import BadHeader
from vmservice.wire.openheaders.tunnel import ForwardHeader
from vmservice.wire.payloads import encode_head

#: Seconds a connection to the upstream may take.
CONNECT_TIMEOUT = 10.0
#: Seconds between attempts to connect to a UNIX socket whose backlog is full.
UNIX_RETRY_INTERVAL = 0.02
#: Bytes read from the socket at a time.
READ_SIZE = 256 * 1024
#: Stop reading the socket while this many bytes wait for the host's credit ...
READ_PAUSE_PENDING = 1024 * 1024

#: What each connect errno means for the host.
_CONNECT_ERRORS = {
    errno.ECONNREFUSED: "refused",
    errno.ENOENT: "not_found",
    errno.ENOTDIR: "not_found",
    errno.ETIMEDOUT: "timeout",
    errno.ENETUNREACH: "unreachable",
    errno.EHOSTUNREACH: "unreachable",
    errno.EADDRNOTAVAIL: "unreachable",
    errno.ENETDOWN: "unreachable",
    errno.EHOSTDOWN: "unreachable",
    errno.EACCES: "refused",
    errno.EPERM: "refused",
}


class UpstreamError(Exception):
    """
    The upstream cannot be reached.

    :ivar kind: ``refused``, ``unreachable``, ``timeout``, ``not_found`` or ``invalid``.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def parse_target(header: Mapping[str, Any]) -> tuple[int, Any]:
    """
    The socket family and address the header names: ``(AF_UNIX, path)`` or
    ``(AF_INET or AF_INET6, (host, port))``.  A host name other than an
    address literal is resolved here (blocking: ``/etc/hosts`` in practice).

    :raises UpstreamError: ``invalid`` for a header that names no upstream,
        ``unreachable`` for a host name that does not resolve.
    """
    try:
        upstream = ForwardHeader.from_json(header).upstream
    except BadHeader as e:
        raise UpstreamError("invalid", str(e)) from None
    if upstream.unix:
        return socket.AF_UNIX, upstream.unix
    host, port = upstream.host, upstream.port
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as e:
        raise UpstreamError("unreachable", f"cannot resolve {host!r}: {e}"[:200]) from None
    family, _, _, _, address = found[0]
    return family, address


def connect_error(code: int, target: object) -> UpstreamError:
    """The :class:`UpstreamError` a failed connect's ``errno`` is."""
    return UpstreamError(_CONNECT_ERRORS.get(code, "unreachable"), f"connecting to {target}: {os.strerror(code)}")


class ForwardHandler(StreamHandler):
    """Serves one ``forward`` stream (see the module's description)."""

    def __init__(self, stream: GuestStream, header: Mapping[str, Any]) -> None:
        super().__init__(stream, header)
        self._sock: Optional[socket.socket] = None
        self._fd = -1
        self._timer: Optional[Timer] = None
        self._retry: Optional[Timer] = None
        self._family: int = socket.AF_INET
        self._deadline = 0.0
        self._target: Any = None
        self._connected = False
        self._reading = False
        self._to_socket = bytearray()
        self._host_done = False
        self._closed = False

    # -- connecting -----------------------------------------------------------------

    def start(self) -> None:
        try:
            family, address = parse_target(self.header)
        except UpstreamError as e:
            self._refuse(e)
            return
        self._target = address
        self._family = family
        self._deadline = time.monotonic() + CONNECT_TIMEOUT
        self._connect()

    def _connect(self) -> None:
        self._retry = None
        if self._closed:
            return
        sock = socket.socket(self._family, socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
        self._sock = sock
        self._fd = sock.fileno()
        # Forget whatever the loop still holds for this descriptor number (an
        # earlier descriptor closed without being unwatched): the selector would
        # take our first watch for a change of that stale registration, and the
        # socket would never be polled.
        self.stream.loop.watch(self._fd)
        code = sock.connect_ex(self._target)
        if code == 0:
            self._established()
        elif code == errno.EINPROGRESS:
            self.stream.loop.watch(self._fd, None, self._connect_done)
            self._timer = self.stream.loop.call_later(max(0.0, self._deadline - time.monotonic()),
                                                      self._connect_timed_out)
        elif code == errno.EAGAIN:
            # A UNIX socket whose listener's backlog is full: nothing is in
            # progress, try again shortly (until the connect timeout).
            self._close_socket()
            if time.monotonic() >= self._deadline:
                self._connect_timed_out()
            else:
                self._retry = self.stream.loop.call_later(UNIX_RETRY_INTERVAL, self._connect)
        else:
            self._refuse(connect_error(code, self._target))

    def _connect_done(self) -> None:
        assert self._sock is not None
        self.stream.loop.watch(self._fd, None, None)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        code = self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            self._refuse(connect_error(code, self._target))
        else:
            self._established()

    def _connect_timed_out(self) -> None:
        self._timer = None
        if self._fd >= 0:
            self.stream.loop.watch(self._fd, None, None)
        self._refuse(UpstreamError("timeout", f"connecting to {self._target} took over {CONNECT_TIMEOUT:g} s"))

    def _refuse(self, error: UpstreamError) -> None:
        self._close_socket()
        self._closed = True
        self.stream.write(encode_head({"ok": False, "error": error.kind, "message": error.message[:500]}))
        self.stream.end()

    def _established(self) -> None:
        self._connected = True
        self.stream.write(encode_head({"ok": True}))
        self._reading = True
        self._watch()
        if self._to_socket:
            self._send()

    # -- relaying ---------------------------------------------------------------------

    def _watch(self) -> None:
        if self._closed or not self._connected:
            return
        self.stream.loop.watch(
            self._fd, self._readable if self._reading else None, self._send if self._to_socket else None
        )

    def _readable(self) -> None:
        assert self._sock is not None
        try:
            data = self._sock.recv(READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._upstream_ended()
            return
        self.stream.write(data)
        if self.stream.pending > READ_PAUSE_PENDING:
            self._reading = False
            self._watch()

    def flushed(self) -> None:
        if not self._reading and not self._closed and self._connected and self.stream.pending <= READ_PAUSE_PENDING:
            self._reading = True
            self._watch()

    def data_received(self, data: bytes) -> None:
        if self._closed:
            self.stream.consumed(len(data))
            return
        self._to_socket += data
        if self._connected:
            self._send()

    def _send(self) -> None:
        if self._closed or self._sock is None:
            return
        sent = 0
        while self._to_socket:
            try:
                count = self._sock.send(self._to_socket[:READ_SIZE])
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._upstream_ended()
                return
            del self._to_socket[:count]
            sent += count
        if sent:
            self.stream.consumed(sent)
        if not self._to_socket and self._host_done:
            self._finish()
            return
        self._watch()

    def half_closed(self) -> None:
        self._host_done = True
        if not self._to_socket or not self._connected:
            self._finish()

    def _upstream_ended(self) -> None:
        self._finish()

    def _finish(self) -> None:
        """Either side ended: close the socket and half-close the stream (no half-close)."""
        if self._closed:
            return
        self._closed = True
        self._close_socket()
        self._to_socket.clear()
        self.stream.end()

    def reset(self, code: int, reason: str) -> None:
        self._closed = True
        self._close_socket()

    def _close_socket(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._sock is not None:
            if self._fd >= 0:
                self.stream.loop.watch(self._fd, None, None)
            self._sock.close()
            self._sock = None
            self._fd = -1


__all__ = ["CONNECT_TIMEOUT", "ForwardHandler", "UpstreamError", "connect_error", "parse_target"]
