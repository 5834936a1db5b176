"""
Tunnels through the daemon's forward route (``GET /vm/{hostname}/forward``) for the tests and the
tunnel benchmark: a server to run in the guest (:data:`GUEST_SERVER`), and a plain-pipe tunnel opened
(:func:`open_pipe`) and read to its end (:func:`read_all`, :func:`read_digest`); the sha256 of the
server's source (:func:`source_digest`) and a body sent to its sink (:func:`send_to_sink`); the
server started in a guest (:func:`start_guest_servers`).
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from urllib.parse import urlencode

from tests.integration.daemon import Daemon

#: A server run in the guest: ``echo`` (TCP port or UNIX path) sends every
#: byte back; ``sink`` reads a decimal length line, then that many bytes, and
#: answers their sha256; ``source`` sends that many MiB of a 1 MiB block (rotated by i % 7 bytes
#: for the i-th MiB) and closes; ``store PATH [SECONDS]`` waits that long after
#: a connection came, then writes what it reads to PATH until its end.
GUEST_SERVER = b'''
import hashlib, os, socket, sys, threading, time
mode, where = sys.argv[1], sys.argv[2]
if where.startswith("/"):
    server = socket.socket(socket.AF_UNIX)
    server.bind(where)
else:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", int(where)))
server.listen(64)
def serve(conn):
    with conn:
        if mode == "echo":
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                conn.sendall(data)
        elif mode == "sink":
            f = conn.makefile("rb")
            left = int(f.readline())
            digest = hashlib.sha256()
            while left:
                data = f.read(min(left, 1 << 20))
                if not data:
                    return
                digest.update(data)
                left -= len(data)
            conn.sendall(digest.hexdigest().encode())
        elif mode == "store":
            time.sleep(float(sys.argv[4]) if len(sys.argv) > 4 else 0)
            part = "%s.%d.part" % (sys.argv[3], threading.get_ident())
            with open(part, "wb") as f:
                while data := conn.recv(1 << 20):
                    f.write(data)
            os.rename(part, sys.argv[3])
        else:
            block = hashlib.sha256(b"tunnel").digest() * 32768
            for i in range(int(sys.argv[3]) >> 20):
                conn.sendall(block[i % 7:] + block[:i % 7])
while True:
    conn, _ = server.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
'''


def open_pipe(daemon: Daemon, upstream: str, hostname: str = "demo-1", timeout: float = 60.0) -> tuple[socket.socket, bytes]:
    """A plain-pipe tunnel: the connected socket (past the response head) and the status line."""
    sock = socket.create_connection(("127.0.0.1", daemon.port), timeout=timeout)
    sock.sendall(f"GET /vm/{hostname}/forward HTTP/1.1\r\nHost: localhost\r\nX-Inlets-Upstream: {upstream}\r\n"
                 "\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        if not chunk:
            break
        head += chunk
    return sock, head.split(b"\r\n", 1)[0]


def read_all(sock: socket.socket) -> bytes:
    """Everything ``sock`` receives until the peer closes."""
    out = bytearray()
    while True:
        chunk = sock.recv(1 << 20)
        if not chunk:
            return bytes(out)
        out += chunk


def source_digest(size: int) -> str:
    """The sha256 of what ``GUEST_SERVER``'s source sends for ``size`` bytes."""
    block = hashlib.sha256(b"tunnel").digest() * 32768
    digest = hashlib.sha256()
    for i in range(size >> 20):
        digest.update(block[i % 7:] + block[:i % 7])
    return digest.hexdigest()


def read_digest(sock: socket.socket) -> tuple[int, str]:
    """How many bytes ``sock`` receives until the peer closes, and their sha256."""
    digest = hashlib.sha256()
    size = 0
    while chunk := sock.recv(1 << 20):
        digest.update(chunk)
        size += len(chunk)
    return size, digest.hexdigest()


def send_to_sink(sock: socket.socket, size: int) -> str:
    """Send ``GUEST_SERVER``'s sink its length line and ``size`` random bytes (whole MiB); their sha256."""
    digest = hashlib.sha256()
    block = os.urandom(1 << 20)
    sock.sendall(b"%d\n" % size)
    for i in range(size >> 20):
        data = block[i % 7:] + block[:i % 7]
        digest.update(data)
        sock.sendall(data)
    return digest.hexdigest()


def start_guest_servers(daemon: Daemon, commands: tuple[str, ...], ready: str, hostname: str = "demo-1") -> None:
    """
    Upload ``GUEST_SERVER`` to ``/tmp/server.py``, start each of ``commands`` as a background exec, and
    wait (up to 2 minutes) until the shell command ``ready`` succeeds in the guest.
    """
    status, _, body = daemon.request("POST", f"/vm/{hostname}/cp?" + urlencode({"path": "/tmp/server.py"}),
                                     GUEST_SERVER, headers={"Content-Type": "application/octet-stream"})
    assert status == 200, body
    for cmd in commands:
        status, _, body = daemon.request("POST", f"/vm/{hostname}/exec?" + urlencode({"background": "true",
                                                                                     "cmd": cmd}))
        assert status == 201, body
    deadline = time.monotonic() + 120
    while daemon.run(hostname, ready)[0] != 0:
        if time.monotonic() > deadline:
            raise AssertionError(f"the guest servers did not start: {daemon.run(hostname, 'ls -la /tmp; ps aux')}")
        time.sleep(0.5)
