"""
``GET /vm/{hostname}/forward`` against the real daemon and a real guest (the
default group's node has no network interface at all: every tunnel goes
through the agent channel): ``python3 -m http.server`` in the guest through
the plain pipe and through ``vmctl forward`` with curl, a UNIX socket, 256 MiB
each way with equal sha256, and the errors answered before any tunnel opens.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from tests.integration.daemon import SharedGuestTestCase
from tests.integration.forwarding import (open_pipe, read_all, read_digest, send_to_sink, source_digest,
                                          start_guest_servers)

#: Size of the big transfers (the issue asks for 256 MiB).
BIG = 256 * 1024 * 1024


class ForwardTests(SharedGuestTestCase):
    """Tunnels into demo-1 (no NIC), each started by its test's guest server."""

    @classmethod
    def start_shared(cls) -> None:
        super().start_shared()
        daemon = cls.daemon
        code, out = daemon.run("demo-1", "mkdir -p /tmp/www && printf 'hello from the guest' > /tmp/www/hello.txt"
                                         " && command -v python3")
        assert code == 0, out
        start_guest_servers(daemon, ("cd /tmp/www && exec python3 -m http.server --bind 127.0.0.1 8000",
                                     "exec python3 /tmp/server.py echo 9000",
                                     "exec python3 /tmp/server.py echo /tmp/echo.sock",
                                     "exec python3 /tmp/server.py sink 9001",
                                     "exec python3 /tmp/server.py source 9002 %d" % BIG),
                            "test -S /tmp/echo.sock && python3 -c \"import socket; "
                            "[socket.create_connection(('127.0.0.1', p)).close() for p in (8000, 9000, 9001)]\"")

    def error(self, upstream: str | None, hostname: str = "demo-1", **headers: str) -> tuple[int, dict[str, Any]]:
        if upstream is not None:
            headers["X-Inlets-Upstream"] = upstream
        status, _, body = self.daemon.request("GET", f"/vm/{hostname}/forward", headers=headers)
        return status, json.loads(body)

    def test_http_server(self) -> None:
        """``python3 -m http.server`` in the guest, through the plain pipe."""
        sock, status = open_pipe(self.daemon, "127.0.0.1:8000")
        with sock:
            self.assertEqual(status, b"HTTP/1.1 200 OK")
            sock.sendall(b"GET /hello.txt HTTP/1.0\r\nHost: guest\r\n\r\n")
            answer = read_all(sock)
        self.assertTrue(answer.startswith(b"HTTP/1.0 200"), answer[:100])
        self.assertTrue(answer.endswith(b"\r\n\r\nhello from the guest"), answer[-100:])

    def test_vmctl_forward(self) -> None:
        """``vmctl forward`` with curl on the host; a refused upstream is logged; Ctrl-C stops it cleanly."""
        vmctl = os.path.join(os.path.dirname(sys.executable), "vmctl")
        process = subprocess.Popen(
            [vmctl, "--url", f"http://127.0.0.1:{self.daemon.port}", "forward", "demo-1", "0:127.0.0.1:8000",
             "127.0.0.1:0:127.0.0.1:1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            # Ctrl-C's SIGINT at its default action, as in a terminal: a test run started in the
            # background of a script has it ignored, and vmctl (rightly) keeps it so.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.addCleanup(lambda: process.poll() is not None or (process.kill(), process.wait()))
        assert process.stdout is not None
        first = process.stdout.readline().decode()
        second = process.stdout.readline().decode()
        self.assertRegex(first, r"^forwarding 127\.0\.0\.1:\d+ -> demo-1 127\.0\.0\.1:8000$")
        port = first.split()[1].rsplit(":", 1)[1]
        fetched = subprocess.run(["curl", "-sS", "--max-time", "60", f"http://127.0.0.1:{port}/hello.txt"],
                                 capture_output=True)
        self.assertEqual((fetched.returncode, fetched.stdout), (0, b"hello from the guest"), fetched.stderr)
        refused_port = second.split()[1].rsplit(":", 1)[1]
        refused = subprocess.run(["curl", "-sS", "--max-time", "60", f"http://127.0.0.1:{refused_port}/"],
                                 capture_output=True)
        self.assertNotEqual(refused.returncode, 0)
        # The refusal is reported while vmctl runs: the daemon ends a refused tunnel's connection, and
        # vmctl reads the refusal whole without waiting for that.
        assert process.stderr is not None
        before = b""
        deadline = time.monotonic() + 60
        while b"upstream_refused" not in before and time.monotonic() < deadline:
            if select.select([process.stderr], [], [], 1)[0]:
                before += os.read(process.stderr.fileno(), 65536)
        self.assertIn(b"no tunnel: 502 upstream_refused", before)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
        err = before + err
        self.assertEqual(process.returncode, 0, err)
        self.assertIn(b"opening a tunnel to 127.0.0.1:8000", err)
        self.assertIn(b"forwarding stopped", err)

    def test_query_parameter(self) -> None:
        """The ``upstream`` query parameter names the upstream too; the client's close ends the tunnel."""
        sock = socket.create_connection(("127.0.0.1", self.daemon.port), timeout=60)
        with sock:
            sock.sendall(b"GET /vm/demo-1/forward?upstream=localhost:9000 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nearly bytes")
            got = b""
            while not got.endswith(b"early bytes"):
                chunk = sock.recv(4096)
                self.assertTrue(chunk, got)
                got += chunk
            self.assertTrue(got.startswith(b"HTTP/1.1 200 OK\r\n"), got)

    def test_unix_socket(self) -> None:
        """A UNIX socket in the guest."""
        sock, status = open_pipe(self.daemon, "unix:/tmp/echo.sock")
        with sock:
            self.assertEqual(status, b"HTTP/1.1 200 OK")
            sock.sendall(b"ping over unix")
            got = b""
            while len(got) < 14:
                got += sock.recv(100)
        self.assertEqual(got, b"ping over unix")

    def test_parallel(self) -> None:
        """32 tunnels at once, each echoing its own 256 KiB."""
        results: dict[int, bool] = {}
        progress: dict[int, int] = {}

        def one(index: int) -> None:
            payload = os.urandom(256 * 1024)
            sock, status = open_pipe(self.daemon, "127.0.0.1:9000" if index % 2 else "unix:/tmp/echo.sock",
                                     timeout=120)
            with sock:
                if status != b"HTTP/1.1 200 OK":
                    results[index] = False
                    return
                sender = threading.Thread(target=sock.sendall, args=(payload,))
                sender.start()
                got = bytearray()
                while len(got) < len(payload):
                    try:
                        chunk = sock.recv(65536)
                    except OSError:
                        break
                    if not chunk:
                        break
                    got += chunk
                    progress[index] = len(got)
                sender.join()
                results[index] = bytes(got) == payload

        threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        self.assertEqual(results, {i: True for i in range(32)}, progress)

    def test_big_download(self) -> None:
        """256 MiB from the guest arrive intact (equal sha256)."""
        sock, status = open_pipe(self.daemon, "127.0.0.1:9002", timeout=300)
        with sock:
            self.assertEqual(status, b"HTTP/1.1 200 OK")
            got = read_digest(sock)
        self.assertEqual(got, (BIG, source_digest(BIG)))

    def test_big_upload(self) -> None:
        """256 MiB into the guest arrive intact (sha256 computed by the guest)."""
        sock, status = open_pipe(self.daemon, "127.0.0.1:9001", timeout=300)
        with sock:
            self.assertEqual(status, b"HTTP/1.1 200 OK")
            sent = send_to_sink(sock, BIG)
            answer = read_all(sock)
        self.assertEqual(answer.decode(), sent)

    def test_refused(self) -> None:
        """Nothing listens: 502 before any tunnel."""
        status, body = self.error("127.0.0.1:1")
        self.assertEqual((status, body["code"]), (502, "upstream_refused"))
        status, body = self.error("unix:/tmp/no-such.sock")
        self.assertEqual((status, body["code"]), (502, "upstream_not_found"))

    def test_bad_requests(self) -> None:
        """No or a bad upstream: 400; an unknown node: 404; an incomplete WebSocket upgrade: 400."""
        self.assertEqual(self.error(None)[0], 400)
        status, body = self.error("no-port")
        self.assertEqual((status, body["code"]), (400, "invalid_upstream"))
        self.assertEqual(self.error("127.0.0.1:8000", hostname="demo-99")[0], 404)
        status, body = self.error("127.0.0.1:8000", Upgrade="websocket", Connection="Upgrade")
        self.assertEqual((status, body["code"]), (400, "websocket_required"))
