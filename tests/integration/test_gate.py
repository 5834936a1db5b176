# -*- test-case-name: tests.integration.test_gate -*-
"""
The request gate (:mod:`vmservice.api.gate`) against a real daemon, with
raw HTTP on its TCP port (http.client and sockets, the headers a browser
page would make it send): cross-origin creates and execs refused 403 with
nothing done, a WebSocket upgrade to a real node's shell from a foreign
origin refused before the 101, a rebinding ``Host`` refused 421, an
unauthenticated body answered 401 as soon as its headers are in (never
stored), ``/metrics`` behind the token and its method label fixed, a
non-loopback address without auth refused at start; and curl, as the
README walkthrough runs it, unaffected.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import subprocess
import time
from urllib.parse import quote, urlencode

from twisted.trial.unittest import SynchronousTestCase

from tests.integration.daemon import Daemon, SharedDaemonTestCase, SharedGuestTestCase, ensure_image

FOREIGN = "http://evil.example"


def raw(port: int, data: bytes, timeout: float = 10.0) -> tuple[bytes, bool]:
    """
    Send ``data`` to the daemon on a socket of its own and read until the
    daemon closes it or ``timeout`` passes: what it answered, and whether it
    closed the connection.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        return _read(sock, timeout)


def _read(sock: socket.socket, timeout: float) -> tuple[bytes, bool]:
    received = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            return received, True
        if not chunk:
            return received, True
        received += chunk
    return received, False


def status_of(answer: bytes) -> int:
    """The status of the first response in ``answer`` (0 when there is none)."""
    if not answer.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")):
        return 0
    return int(answer.split(b" ", 2)[1])


def error_code(answer: bytes) -> str:
    """The ErrorResponse code of a response without chunked coding."""
    code: str = json.loads(answer.partition(b"\r\n\r\n")[2])["code"]
    return code


class OpenDaemonTests(SharedGuestTestCase):
    """The shipped configuration (127.0.0.1, auth off) with one running node, demo-1."""

    def headers(self, **extra: str) -> dict[str, str]:
        return {"Host": f"127.0.0.1:{self.daemon.port}", **extra}

    def test_cross_origin_create(self) -> None:
        """
        A create a web page could send (a simple text/plain POST with its Origin, or only marked
        cross-site) is 403 forbidden_origin and creates nothing.
        """
        before = set(self.daemon.nodes())
        for headers in ({"Origin": FOREIGN, "Content-Type": "text/plain"}, {"Sec-Fetch-Site": "cross-site"},
                        {"Origin": "null", "Content-Type": "application/x-www-form-urlencoded"}):
            status, _, body = self.daemon.request("POST", "/hostgroup/demo/nodes", {"userdata": "touch /pwned"},
                                                  headers=self.headers(**headers))
            self.assertEqual((status, json.loads(body)["code"]), (403, "forbidden_origin"))
        self.assertEqual(set(self.daemon.nodes()), before)

    def test_cross_origin_exec(self) -> None:
        """An exec from a foreign origin is refused and never runs in the guest; the same exec without Origin runs."""
        path = "/vm/demo-1/exec?" + urlencode({"cmd": "touch /tmp/from-the-page", "buffered": "true"})
        status, _, body = self.daemon.request("POST", path, headers=self.headers(Origin=FOREIGN))
        self.assertEqual((status, json.loads(body)["code"]), (403, "forbidden_origin"))
        self.assertEqual(self.daemon.run("demo-1", "test -e /tmp/from-the-page; echo $?")[1].strip(), "1")
        status, _, _ = self.daemon.request("POST", path, headers=self.headers())
        self.assertEqual(status, 200)
        self.assertEqual(self.daemon.run("demo-1", "test -e /tmp/from-the-page; echo $?")[1].strip(), "0")

    def test_websocket_from_foreign_origin(self) -> None:
        """
        A WebSocket upgrade to the node's shell with a foreign Origin is answered 403 forbidden_origin, never
        101, and closed; the same upgrade without Origin (what vmctl and the SDKs send) opens.
        """
        key = base64.b64encode(os.urandom(16)).decode()
        upgrade = (f"GET /vm/demo-1/shell HTTP/1.1\r\nHost: 127.0.0.1:{self.daemon.port}\r\nConnection: Upgrade\r\n"
                   f"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n")
        answer, closed = raw(self.daemon.port, (upgrade + f"Origin: {FOREIGN}\r\n\r\n").encode())
        self.assertEqual((status_of(answer), error_code(answer), closed), (403, "forbidden_origin", True))
        self.assertNotIn(b"101 Switching", answer)
        with socket.create_connection(("127.0.0.1", self.daemon.port), timeout=30) as sock:
            sock.sendall((upgrade + "\r\n").encode())
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                answer += chunk
        self.assertEqual(status_of(answer), 101, answer)

    def test_rebinding_host(self) -> None:
        """A Host naming another server (a rebound DNS name) is 421 invalid_host; localhost and the address pass."""
        port = self.daemon.port
        for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.nip.io:{port}"):
            status, _, body = self.daemon.request("GET", "/nodes", headers={"Host": host})
            self.assertEqual((status, json.loads(body)["code"]), (421, "invalid_host"), host)
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost"):
            self.assertEqual(self.daemon.request("GET", "/nodes", headers={"Host": host})[0], 200, host)
        answer, _ = raw(port, b"GET /nodes HTTP/1.0\r\n\r\n")  # no Host at all
        self.assertEqual(status_of(answer), 200)

    def test_metrics_methods(self) -> None:
        """Requests with methods clients make up are counted under OTHER: no new series per method."""
        invented = ["M" + os.urandom(6).hex().upper() for _ in range(5)]
        for method in invented:
            self.assertEqual(self.daemon.request(method, "/nope")[0], 404)
        text = self.daemon.request("GET", "/metrics")[2].decode()
        self.assertFalse([method for method in invented if method in text])
        self.assertIn('method="OTHER",route="unmatched",status="404"', text)

    def test_curl_walkthrough(self) -> None:
        """
        curl as the README runs it (no Origin; ``-d`` is sent as a form): an exec with stdin, an upload,
        a create and a delete are served.
        """
        base = f"http://127.0.0.1:{self.daemon.port}"

        def curl(*args: str) -> bytes:
            done = subprocess.run(["curl", "-sS", "--fail-with-body", *args], capture_output=True, timeout=120)
            self.assertEqual(done.returncode, 0, done.stderr + done.stdout)
            return done.stdout

        data = os.urandom(300_000)
        source = os.path.join(self.daemon.root, "f.bin")
        with open(source, "wb") as f:
            f.write(data)
        out = curl("-XPOST", f"{base}/vm/demo-1/exec?cmd=sha256sum&stdin=true&buffered=true",
                   "--data-binary", f"@{source}")
        self.assertIn(hashlib.sha256(data).hexdigest(), json.loads(out)["stdout"])
        curl("-XPOST", f"{base}/vm/demo-1/cp?path={quote('/srv/f.bin')}", "--data-binary", f"@{source}")
        self.assertEqual(self.daemon.run("demo-1", "sha256sum /srv/f.bin")[1].split()[0], hashlib.sha256(data).hexdigest())
        created = json.loads(curl("-XPOST", f"{base}/hostgroup/demo/nodes", "-d", "{}"))
        curl("-XDELETE", f"{base}/hostgroup/demo/nodes/{created['hostname']}")
        self.assertNotIn(created["hostname"], self.daemon.nodes())


class AuthDaemonTests(SharedDaemonTestCase):
    """A daemon with authentication on (no node needed)."""

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.daemon = Daemon(api={"auth": {"enabled": True}})
        cls.daemon.start()
        with open(os.path.join(cls.daemon.state_dir, "auth", "token")) as f:
            cls.token = f.read().strip()

    token: str

    def spooled(self) -> list[str]:
        """
        The deleted files the daemon holds open (twisted.web's temporary files of request bodies), its
        standard streams aside (inherited from whatever started the test, a deleted device among them).
        """
        assert self.daemon.process is not None
        directory = f"/proc/{self.daemon.process.pid}/fd"
        found = []
        for fd in os.listdir(directory):
            try:
                target = os.readlink(os.path.join(directory, fd))
            except OSError:
                continue
            if int(fd) > 2 and target.endswith("(deleted)") and not target.startswith("/dev/"):
                found.append(target)
        return found

    def test_unauthenticated_body_not_read(self) -> None:
        """
        An unauthenticated create announcing a 50 GB body, or a chunked one, is answered 401 as soon as its
        headers and a first 256 KiB are in (the client has not finished), the body never stored in a
        temporary file, and the connection closed.
        """
        port = self.daemon.port
        head = f"POST /hostgroup/demo/nodes HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode()
        part = b" " * (256 * 1024)
        for framing, body in ((b"Content-Length: 50000000000\r\n\r\n", part),
                              (b"Transfer-Encoding: chunked\r\n\r\n", b"%x\r\n%s\r\n" % (len(part), part))):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(head + framing)
                try:
                    sock.sendall(body)
                except OSError:
                    pass  # the daemon answered and closed first
                self.assertEqual(self.spooled(), [])
                answer, closed = _read(sock, 10)
            self.assertEqual((status_of(answer), error_code(answer), closed), (401, "unauthorized", True), answer)
        self.assertEqual(self.daemon.json("GET", "/nodes", headers={"Authorization": f"Bearer {self.token}"}), [])

    def test_too_large_declared(self) -> None:
        """An authenticated create announcing more than 1 MiB is 413 body_too_large before its body."""
        answer, closed = raw(self.daemon.port, (
            f"POST /hostgroup/demo/nodes HTTP/1.1\r\nHost: 127.0.0.1:{self.daemon.port}\r\n"
            f"Authorization: Bearer {self.token}\r\nContent-Length: {(1 << 20) + 1}\r\n\r\n{{").encode())
        self.assertEqual((status_of(answer), error_code(answer), closed), (413, "body_too_large", True))

    def test_metrics_need_token(self) -> None:
        """/metrics names every node: with auth on it needs the token (by default); /healthz does not."""
        self.assertEqual(self.daemon.request("GET", "/metrics")[0], 401)
        self.assertEqual(self.daemon.request("GET", "/healthz")[0], 200)
        status, _, body = self.daemon.request("GET", "/metrics", headers={"Authorization": f"Bearer {self.token}"})
        self.assertEqual(status, 200)
        self.assertIn(b"vmservice_http_requests_total", body)


class RemoteWithoutAuthTests(SynchronousTestCase):
    """Listening beyond the loopback with auth off needs the operator to say so."""

    def test_refused_at_start(self) -> None:
        """A non-loopback bind_address with auth off stops twistd with status 1 and one line naming the setting."""
        # An address of no interface here (TEST-NET-1): a daemon that failed to refuse could not listen
        # on it either, so this test never leaves an unauthenticated API open beyond the loopback.
        daemon = Daemon(api={"bind_address": "192.0.2.1"})
        self.addCleanup(daemon.cleanup)
        line = daemon.refused_start()
        self.assertIn("config.api.bind_address", line)
        self.assertIn("api.allow_unauthenticated_remote", line)
