"""
The WebSocket way into a tunnel (``GET /vm/{hostname}/forward`` with
``Upgrade: websocket``, as existing clients dial it) against the real daemon
and a real guest without a network interface: bytes both ways with equal
sha256, text messages dropped, the upstream's end closing the WebSocket with
1000, and the errors answered before the upgrade.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import struct
import time
from urllib.parse import urlencode

from tests.integration.daemon import Daemon, SharedGuestTestCase

ECHO_SERVER = (
    "import socket, threading\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('127.0.0.1', 9100)); s.listen(16)\n"
    "def serve(c):\n"
    "    with c:\n"
    "        while True:\n"
    "            d = c.recv(65536)\n"
    "            if not d: return\n"
    "            c.sendall(d)\n"
    "while True:\n"
    "    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()\n"
)


class WebSocketClient:
    """A minimal RFC 6455 client over a blocking socket (masked frames out, unmasked in)."""

    def __init__(self, daemon: Daemon, upstream: str, hostname: str = "demo-1") -> None:
        self.sock = socket.create_connection(("127.0.0.1", daemon.port), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            f"GET /vm/{hostname}/forward HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"X-Inlets-Upstream: {upstream}\r\nX-Inlets-Mode: local\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                break
            head += chunk
        lines = head.split(b"\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {k.strip().lower(): v.strip() for k, _, v in (l.decode().partition(":") for l in lines[1:] if l)}
        self.body = b""
        if self.status != 101 and "content-length" in self.headers:
            self.body = self._exactly(int(self.headers["content-length"]))
        elif self.status != 101 and self.headers.get("transfer-encoding") == "chunked":
            while True:
                size = b""
                while not size.endswith(b"\r\n"):
                    size += self._exactly(1)
                if int(size, 16) == 0:
                    break
                self.body += self._exactly(int(size, 16))
                self._exactly(2)

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise EOFError("connection closed")
            data += chunk
        return data

    def send(self, payload: bytes, opcode: int = 2) -> None:
        mask = os.urandom(4)
        head = bytes([0x80 | opcode])
        if len(payload) < 126:
            head += bytes([0x80 | len(payload)])
        elif len(payload) < 65536:
            head += bytes([0x80 | 126]) + struct.pack(">H", len(payload))
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", len(payload))
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + masked)

    def receive(self) -> tuple[int, bytes]:
        """The next frame: ``(opcode, payload)``."""
        first, second = self._exactly(2)
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack(">H", self._exactly(2))
        elif length == 127:
            (length,) = struct.unpack(">Q", self._exactly(8))
        if second & 0x80:
            raise AssertionError("the server masked a frame")
        return first & 0x0F, self._exactly(length)

    def close(self) -> None:
        self.sock.close()


class TunnelSocketTests(SharedGuestTestCase):
    """WebSocket tunnels into demo-1 (no NIC)."""

    @classmethod
    def start_shared(cls) -> None:
        super().start_shared()
        daemon = cls.daemon
        code, out = daemon.run("demo-1", "mkdir -p /tmp/www && printf 'hello over a websocket' > /tmp/www/hi.txt")
        assert code == 0, out
        for cmd in ("cd /tmp/www && exec python3 -m http.server --bind 127.0.0.1 8100",
                    "exec python3 -c " + _quote(ECHO_SERVER)):
            status, _, body = daemon.request("POST", "/vm/demo-1/exec?" + urlencode({"background": "true", "cmd": cmd}))
            assert status == 201, body
        deadline = time.monotonic() + 120
        probe = "python3 -c \"import socket; [socket.create_connection(('127.0.0.1', p)).close() for p in (8100, 9100)]\""
        while daemon.run("demo-1", probe)[0] != 0:
            if time.monotonic() > deadline:
                raise AssertionError("the guest servers did not start")
            time.sleep(0.5)

    def test_echo_both_ways(self) -> None:
        """Binary messages reach the upstream and its bytes come back intact; text messages are dropped."""
        client = WebSocketClient(self.daemon, "127.0.0.1:9100")
        try:
            self.assertEqual(client.status, 101, client.body)
            client.send(b"ignored text", opcode=1)
            payload = os.urandom(4 * 1024 * 1024)
            received = bytearray()
            for start in range(0, len(payload), 64 * 1024):
                client.send(payload[start:start + 64 * 1024])
                while len(received) < start // 2:  # read along, so neither side's buffers fill up
                    opcode, data = client.receive()
                    self.assertEqual(opcode, 2)
                    received += data
            while len(received) < len(payload):
                opcode, data = client.receive()
                self.assertEqual(opcode, 2)
                received += data
            self.assertEqual(hashlib.sha256(received).hexdigest(), hashlib.sha256(payload).hexdigest())
            client.send(struct.pack(">H", 1000), opcode=8)
            opcode, data = client.receive()
            self.assertEqual((opcode, struct.unpack(">H", data[:2])[0]), (8, 1000))
        finally:
            client.close()

    def test_upstream_end_closes(self) -> None:
        """An HTTP exchange through the tunnel; the upstream closing closes the WebSocket with 1000."""
        client = WebSocketClient(self.daemon, "127.0.0.1:8100")
        try:
            self.assertEqual(client.status, 101, client.body)
            client.send(b"GET /hi.txt HTTP/1.0\r\nHost: guest\r\n\r\n")
            response = b""
            while True:
                opcode, data = client.receive()
                if opcode == 8:
                    self.assertEqual(struct.unpack(">H", data[:2])[0], 1000)
                    break
                response += data
            self.assertIn(b" 200 ", response.split(b"\r\n")[0])
            self.assertTrue(response.endswith(b"hello over a websocket"), response[-200:])
        finally:
            client.close()

    def test_errors_before_the_upgrade(self) -> None:
        """A refused upstream, a bad upstream, an unknown node: ErrorResponses, never a 101."""
        for upstream, hostname, status, code in (("127.0.0.1:1", "demo-1", 502, "upstream_refused"),
                                                 ("nonsense", "demo-1", 400, "invalid_upstream"),
                                                 ("127.0.0.1:8100", "demo-99", 404, None)):
            client = WebSocketClient(self.daemon, upstream, hostname)
            try:
                self.assertEqual(client.status, status, client.body)
                if code is not None:
                    self.assertEqual(json.loads(client.body)["code"], code)
            finally:
                client.close()
        status, _, body = self.daemon.request("GET", "/vm/demo-1/forward", headers={
            "Upgrade": "websocket", "Connection": "Upgrade", "X-Inlets-Upstream": "127.0.0.1:8100"})
        self.assertEqual((status, json.loads(body)["code"]), (400, "websocket_required"))


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"
