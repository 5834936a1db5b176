"""
A TCP echo server on the host's loopback for the forwarding tests: one thread
accepts, one thread a connection echoes until the peer half-closes.
"""

from __future__ import annotations

import socket
import threading


def echo_server() -> socket.socket:
    """
    Listen on 127.0.0.1 (an ephemeral port) and echo every connection.

    :return: the listening socket; closing it ends the accepting thread.
    """
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return

            def echo(conn: socket.socket = conn) -> None:
                with conn:
                    while True:
                        data = conn.recv(65536)
                        if not data:
                            return
                        conn.sendall(data)

            threading.Thread(target=echo, daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return server
