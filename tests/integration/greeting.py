"""
The "hello" greeting the network tests connect to: a TCP server in this process
(:class:`HelloServer`), and for a guest a client that checks the greeting (:data:`CLIENT`) and a server
run in the background (:data:`SERVER`).
"""

from __future__ import annotations

import socket
import threading

#: A TCP client for the guest: exit status 0 when it connected and read the greeting.
CLIENT = (
    "python3.11 -c \"import socket,sys; s=socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3);"
    " sys.exit(0 if s.recv(5) == b'hello' else 1)\""
)
#: A TCP server for the guest, in the background: answers "hello" on a port.
SERVER = (
    "setsid python3.11 -c \"import socket,sys\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)"
    "\ns.bind(('0.0.0.0',int(sys.argv[1])));s.listen()\nwhile True:\n c,_=s.accept();c.sendall(b'hello');c.close()\""
    " {port} </dev/null >/dev/null 2>&1 &"
)


class HelloServer:
    """A TCP server in this process that greets every connection with "hello"."""

    def __init__(self, address: str = "0.0.0.0") -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            connection.sendall(b"hello")
            connection.close()

    def close(self) -> None:
        self.sock.close()
