# -*- test-case-name: tests.guest.test_agent,tests.integration.guest.test_agent -*-
"""
Where sessions come from: the virtio-serial port, served again each time the
host comes back (:class:`VirtioPortServer`), or a UNIX socket that stands in for
QEMU's on the host (:class:`UnixListenServer`), one :class:`Session` per
connection over a :class:`Pipe`.
"""

from __future__ import annotations

import os
import select
import time

TYPE_CHECKING = False

from vmservice.guest import agentlog
from vmservice.guest.context import AgentContext
from vmservice.guest.loop import Loop
from vmservice.guest.pipe import Pipe
from vmservice.guest.ports import find_port
from vmservice.guest.session import Session

if TYPE_CHECKING:
    from typing import Optional
    import socket

#: How often to look again while no host is connected, or the port is missing.
DISCONNECTED_POLL_INTERVAL = 0.1
#: How the port is opened: never as our controlling terminal (tests use a pty).
_PORT_FLAGS = os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


class Server:
    """
    Runs one :class:`Session` per host connection over a :class:`Pipe`.
    """

    def __init__(self, loop: Loop, context: AgentContext) -> None:
        self.loop = loop
        self.context = context
        self.session: Optional[Session] = None
        self._pipe: Optional[Pipe] = None

    def _serve(self, fd: int) -> None:
        pipe = Pipe(
            self.loop,
            fd,
            on_data=lambda data: session.data_received(data),
            on_closed=self._closed,
            on_drained=lambda: session.output_drained(),
        )
        session = Session(self.loop, self.context, pipe.write, lambda: pipe.has_room)
        self._pipe, self.session = pipe, session
        pipe.start()
        session.start()

    def _closed(self) -> None:
        session, self.session, self._pipe = self.session, None, None
        if session is not None:
            session.connection_lost()
        self._disconnected()

    def start(self) -> None:
        """
        Begin serving.
        """
        raise NotImplementedError

    def _disconnected(self) -> None:
        raise NotImplementedError


class VirtioPortServer(Server):
    """
    Serves the virtio-serial port at ``device``; sessions come and go with the host.
    """

    def __init__(self, loop: Loop, context: AgentContext, device: str) -> None:
        super().__init__(loop, context)
        self.device = device
        self._fd = -1

    def start(self) -> None:
        """
        Open the port and serve it.
        """
        self._fd = os.open(self.device, _PORT_FLAGS)
        self._probe()

    def _probe(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN | select.POLLOUT)
        revents = 0
        for _, revents in poller.poll(0):
            pass
        if revents & select.POLLNVAL:
            agentlog.log(f"{self.device} went away; opening it again")
            self.loop.call_later(DISCONNECTED_POLL_INTERVAL, self._reopen)
        elif revents & (select.POLLHUP | select.POLLERR) and not revents & select.POLLIN:
            self.loop.call_later(DISCONNECTED_POLL_INTERVAL, self._probe)
        else:
            agentlog.log(f"host connected on {self.device}")
            self._serve(self._fd)

    def _reopen(self) -> None:
        try:
            os.close(self._fd)
        except OSError:
            pass
        try:
            self._fd = os.open(self.device, _PORT_FLAGS)
        except OSError:
            self.loop.call_later(DISCONNECTED_POLL_INTERVAL, self._reopen)
            return
        self._probe()

    def _disconnected(self) -> None:
        agentlog.log(f"host disconnected from {self.device}")
        self.loop.call_later(DISCONNECTED_POLL_INTERVAL, self._probe)


class UnixListenServer(Server):
    """
    Listens on a UNIX socket and serves one connection at a time, as QEMU's
    ``-chardev socket,server=on`` does for the host: for tests without a VM.
    """

    def __init__(self, loop: Loop, context: AgentContext, path: str) -> None:
        super().__init__(loop, context)
        self.path = path
        self._listener: Optional[socket.socket] = None
        self._conn: Optional[socket.socket] = None

    def start(self) -> None:
        """
        Bind, listen and wait for the first connection.
        """
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        import socket  # only here: its import costs under TCG, and the guest never listens

        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.path)
        listener.listen(8)
        listener.setblocking(False)
        self._listener = listener
        self._disconnected()

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            conn, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        conn.setblocking(False)
        self._conn = conn
        self.loop.watch(self._listener.fileno())
        self._serve(conn.fileno())

    def _disconnected(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        assert self._listener is not None
        self.loop.watch(self._listener.fileno(), self._accept)

    def close(self) -> None:
        """
        Stop listening and remove the socket file.
        """
        if self._listener is not None:
            self._listener.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


def wait_for_port(loop: Loop, name: str) -> str:
    """
    Block until the virtio-serial port ``name`` shows up, and return its device node.
    """
    logged = False
    while True:
        device = find_port(name)
        if device is not None:
            return device
        if not logged:
            agentlog.log(f"waiting for virtio-serial port {name!r}")
            logged = True
        time.sleep(DISCONNECTED_POLL_INTERVAL)


__all__ = ["DISCONNECTED_POLL_INTERVAL", "Server", "UnixListenServer", "VirtioPortServer", "wait_for_port"]
