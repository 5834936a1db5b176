# -*- test-case-name: tests.integration.guest.test_forwarding -*-
"""
The guest's ``forward`` handler with real sockets: run in-process on the host
through a real :class:`~vmservice.guest.agent.Session` and
:class:`~vmservice.guest.agent.Loop`.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.guest.session import GuestSessionMixin, StreamCollectorMixin
from tests.integration.echo_server import echo_server
from vmservice.guest import forwarding
from vmservice.guest.context import AgentContext
from vmservice.wire.events import Data, HalfClose, Open
from vmservice.wire.payloads import decode_head


class ForwardHandlerTests(StreamCollectorMixin, SynchronousTestCase):
    """:class:`ForwardHandler` relaying to real sockets."""

    def setUp(self) -> None:
        self.start_session({"forward": forwarding.ForwardHandler}, AgentContext("t"))
        self.handshake()
        self.start_collecting()

    def listener(self, family: int = socket.AF_INET, path: str = "") -> socket.socket:
        server = socket.socket(family, socket.SOCK_STREAM)
        self.addCleanup(server.close)
        server.bind(path if family == socket.AF_UNIX else ("127.0.0.1", 0))
        server.listen(8)
        server.setblocking(False)
        return server

    def open(self, **header: Any) -> int:
        stream_id = self.host.next_stream_id()
        self.send(Open(stream_id, {"op": "forward", **header}))
        return stream_id

    def test_tcp_both_ways(self) -> None:
        """Bytes flow both ways; the upstream closing half-closes the stream."""
        server = self.listener()
        stream_id = self.open(host="127.0.0.1", port=server.getsockname()[1])
        peer = self.accept(server, stream_id)
        self.assertEqual(self.head(stream_id), {"ok": True})
        payload = os.urandom(3 * 1024 * 1024)
        self.send(Data(stream_id, payload[:60000]))
        got = bytearray()
        self.pump(stream_id, lambda: len(got) >= 60000 or bool(got.extend(_recv(peer)) and False))
        self.assertEqual(bytes(got), payload[:60000])
        peer.setblocking(False)
        sent = 0

        def send_more() -> bool:
            nonlocal sent
            try:
                sent += peer.send(payload[sent:sent + 65536])
            except BlockingIOError:
                pass
            return sent == len(payload)

        self.pump(stream_id, send_more)
        self.pump(stream_id, lambda: len(self.received) == len(payload))
        self.assertEqual(bytes(self.received), payload)
        peer.close()
        self.pump(stream_id, lambda: self.half_closed)
        self.assertFalse(self.reset)

    def test_host_end_closes_socket(self) -> None:
        """The host's half-close closes the socket after what it sent was written."""
        server = self.listener()
        stream_id = self.open(host="localhost", port=server.getsockname()[1])
        peer = self.accept(server, stream_id)
        self.assertEqual(self.head(stream_id), {"ok": True})
        self.send(Data(stream_id, b"last words"), HalfClose(stream_id))
        self.pump(stream_id, lambda: self.half_closed)
        peer.settimeout(5)
        got = b""
        while True:
            chunk = peer.recv(100)
            if not chunk:
                break
            got += chunk
        self.assertEqual(got, b"last words")

    def test_unix(self) -> None:
        """A UNIX socket upstream."""
        path = os.path.join(tempfile.mkdtemp(), "s")
        self.addCleanup(os.rmdir, os.path.dirname(path))
        self.addCleanup(os.unlink, path)
        server = self.listener(socket.AF_UNIX, path)
        stream_id = self.open(unix=path)
        peer = self.accept(server, stream_id)
        self.assertEqual(self.head(stream_id), {"ok": True})
        peer.sendall(b"hello")
        self.pump(stream_id, lambda: bytes(self.received) == b"hello")

    def test_unix_backlog_full(self) -> None:
        """A UNIX listener whose backlog is full: the agent tries again until it gets in."""
        path = os.path.join(tempfile.mkdtemp(), "s")
        self.addCleanup(os.rmdir, os.path.dirname(path))
        self.addCleanup(os.unlink, path)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(server.close)
        server.bind(path)
        server.listen(0)
        fillers = []
        for _ in range(4):
            filler = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
            self.addCleanup(filler.close)
            if filler.connect_ex(path) != 0:
                break
            fillers.append(filler)
        stream_id = self.open(unix=path)
        self.loop.run_once(0.05)
        self.assertNotIn(b"ok", bytes(self.received))
        server.setblocking(False)
        for _ in fillers:
            server.accept()[0].close()
        peer = self.accept(server, stream_id)
        self.assertEqual(self.head(stream_id), {"ok": True})
        peer.sendall(b"in")
        self.pump(stream_id, lambda: bytes(self.received) == b"in")

    def test_stale_registration(self) -> None:
        """A descriptor number the loop still watches (closed without being unwatched) is polled anew."""
        server = self.listener()
        stale = socket.socket()
        number = stale.fileno()
        self.loop.watch(number, lambda: None)
        stale.close()  # leaked: still registered in the loop
        stream_id = self.open(host="127.0.0.1", port=server.getsockname()[1])
        self.assertEqual(self.session.streams[stream_id].handler._fd, number)  # type: ignore[attr-defined]
        peer = self.accept(server, stream_id)
        self.assertEqual(self.head(stream_id), {"ok": True})
        peer.sendall(b"polled")
        self.pump(stream_id, lambda: bytes(self.received) == b"polled", timeout=5)

    def test_refused(self) -> None:
        """Nothing listening: a ``refused`` head, then the stream's end."""
        server = self.listener()
        port = server.getsockname()[1]
        server.close()
        stream_id = self.open(host="127.0.0.1", port=port)
        head = self.head(stream_id)
        self.assertEqual((head["ok"], head["error"]), (False, "refused"))
        self.pump(stream_id, lambda: self.half_closed)

    def test_missing_unix_socket(self) -> None:
        """No such UNIX socket: ``not_found``."""
        stream_id = self.open(unix="/nonexistent/forward.sock")
        self.assertEqual(self.head(stream_id)["error"], "not_found")

    def test_invalid(self) -> None:
        """A header naming no upstream: ``invalid``."""
        for header in ({}, {"host": "127.0.0.1", "port": 0}, {"host": "", "port": 80}, {"unix": "relative"},
                       {"host": "127.0.0.1", "port": "80"}):
            stream_id = self.open(**header)
            self.received.clear()
            self.assertEqual(self.head(stream_id)["error"], "invalid", header)


def _recv(peer: socket.socket) -> bytes:
    peer.setblocking(False)
    try:
        return peer.recv(65536)
    except BlockingIOError:
        return b""


class ParallelTests(GuestSessionMixin, SynchronousTestCase):
    """Many ``forward`` streams at once against one threaded echo server."""

    def setUp(self) -> None:
        self.start_session({"forward": forwarding.ForwardHandler}, AgentContext("t"))
        self.handshake()

    def test_many_echo(self) -> None:
        server = echo_server()
        self.addCleanup(server.close)
        port = server.getsockname()[1]
        payloads = {}
        received: dict[int, bytearray] = {}
        for _ in range(32):
            stream_id = self.host.next_stream_id()
            self.send(Open(stream_id, {"op": "forward", "host": "127.0.0.1", "port": port}))
            payloads[stream_id] = os.urandom(256 * 1024)
            received[stream_id] = bytearray()
        headed: set[int] = set()
        sent = {stream_id: 0 for stream_id in payloads}
        deadline = time.monotonic() + 30
        while any(len(received[s]) < len(payloads[s]) for s in payloads):
            self.assertLess(time.monotonic(), deadline, {s: len(r) for s, r in received.items()})
            self.loop.run_once(0.01)
            for event in self.receive():
                if isinstance(event, Data):
                    stream_id = event.stream_id
                    data = event.data
                    if stream_id not in headed:
                        decoded = decode_head(data)
                        assert decoded is not None
                        self.assertEqual(decoded[0], {"ok": True})
                        data = data[decoded[1]:]
                        headed.add(stream_id)
                    received[stream_id] += data
                    self.session.data_received(self.host.acknowledge_received_data(stream_id, len(event.data)))
            for stream_id in headed:
                window = self.host.send_window(stream_id)
                left = len(payloads[stream_id]) - sent[stream_id]
                if window > 0 and left > 0:
                    size = min(window, left, 16384)
                    self.send(Data(stream_id, payloads[stream_id][sent[stream_id]:sent[stream_id] + size]))
                    sent[stream_id] += size
        for stream_id, payload in payloads.items():
            self.assertEqual(bytes(received[stream_id]), payload)
