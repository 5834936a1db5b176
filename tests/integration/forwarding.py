"""
Tunnels through the daemon's forward route (``GET /vm/{hostname}/forward``) for the tests and the
tunnel benchmark: a server to run in the guest (:data:`GUEST_SERVER`), and a plain-pipe tunnel opened
(:func:`open_pipe`) and read to its end (:func:`read_all`).
"""

from __future__ import annotations

import socket

from tests.integration.daemon import Daemon

#: A server run in the guest: ``echo`` (TCP port or UNIX path) sends every
#: byte back; ``sink`` reads a decimal length line, then that many bytes, and
#: answers their sha256; ``source`` sends that many MiB of a 1 MiB block (rotated by i % 7 bytes
#: for the i-th MiB) and closes.
GUEST_SERVER = b'''
import hashlib, os, socket, sys, threading
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
