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
and answers ``{"ok": true, "port": true}``.  A
:class:`~vmservice.guest.port_relay.PortRelay` then moves the bytes on two
threads (``splice`` from the socket into the port, ``readv`` from the port
into the socket).

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

import os
import socket
import threading
import time
from typing import Any, Mapping, Optional

from vmservice.guest.bulkport import CLAIM_WAIT, BulkPort, Stop
from vmservice.guest.forwarding import ForwardHandler, UpstreamError
from vmservice.guest.port_relay import PortRelay
from vmservice.guest.streams import GuestStream
from vmservice.wire.bulk import MAX_END, decode_upload_end, encode_upload_end
from vmservice.wire.errors import ResetCode
from vmservice.wire.payloads import encode_head
from vmservice.wire.tunnelport import parse_port

__all__ = ["CLAIM_RETRY", "PortForwardHandler"]

#: Seconds between tries to claim a port another tunnel still holds.
CLAIM_RETRY = 0.02


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
        # A thread's last wake may come after the loop saw it done and closed the pipe: the number
        # must not be written to once closed (another descriptor may have it by then).
        self._wake_lock = threading.Lock()
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
        # After the head went out (the loop writes what this turn produced at its end): a thread's start
        # costs the one vCPU a few switches, which the host's wait for the head need not include.
        self.stream.loop.call_soon(self._relay.start)

    def _wake(self) -> None:
        with self._wake_lock:
            if self._wake_w < 0:
                return
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
            # Over before the relay started (the host's HALF_CLOSE while the port is claimed or the upstream
            # connects): a claim still being retried must not take the port afterwards.
            self._over = True
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
        with self._wake_lock:
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._wake_r = self._wake_w = -1
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
