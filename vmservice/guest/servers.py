# -*- test-case-name: tests.guest.test_agent,tests.integration.guest.test_agent -*-
"""
Where sessions come from: the virtio-serial port, served again each time the
host comes back (:class:`VirtioPortServer`), an AF_VSOCK listener
(:class:`VsockListenServer`), or a UNIX socket that stands in for QEMU's on the
host (:class:`UnixListenServer`), one :class:`Session` per connection over a
:class:`Pipe`.  The port and the vsock listener share one
:class:`~vmservice.guest.session_slot.SessionSlot`: one host session at a time,
on whichever link it came.
"""

from __future__ import annotations

import os
import select
import time

TYPE_CHECKING = False

from vmservice.guest import agentlog
from vmservice.guest.context import AgentContext
from vmservice.guest.listeners import unix_listener
from vmservice.guest.loop import Loop
from vmservice.guest.pipe import Pipe
from vmservice.guest.ports import find_port
from vmservice.guest.session import Session
from vmservice.guest.session_slot import SERIAL_LINK, VSOCK_LINK, SessionSlot

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

    :param slot: the session slot this link shares with the agent's others
        (its own when ``None``).
    """

    #: The link this server is, to its :class:`SessionSlot`.
    link = SERIAL_LINK

    def __init__(self, loop: Loop, context: AgentContext, slot: Optional[SessionSlot] = None) -> None:
        self.loop = loop
        self.context = context
        self.slot = slot if slot is not None else SessionSlot()
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
        self.slot.release()
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

    def __init__(self, loop: Loop, context: AgentContext, device: str, slot: Optional[SessionSlot] = None) -> None:
        super().__init__(loop, context, slot)
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
        elif not self.slot.take(self.link):
            # A host session on vsock holds the slot: this host waits its turn.
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


class ListenServer(Server):
    """
    Serves one accepted connection at a time from a listening socket; while the
    slot is taken (by this listener's session or another link's) the listener
    is not read, so new connections wait in its backlog.

    :param listener: a bound, listening stream socket.
    :param link: what this link is to the slot (``serial`` for a stand-in of QEMU's socket).
    """

    def __init__(
        self, loop: Loop, context: AgentContext, listener: "socket.socket", link: str,
        slot: Optional[SessionSlot] = None,
    ) -> None:
        super().__init__(loop, context, slot)
        self.link = link
        self._listener = listener
        self._conn: Optional[socket.socket] = None

    def start(self) -> None:
        """
        Wait for the first connection.
        """
        self._listener.setblocking(False)
        self._watch()

    def _watch(self) -> None:
        self.loop.watch(self._listener.fileno(), self._accept)

    def _accept(self) -> None:
        if not self.slot.take(self.link):
            # Another link's session holds the slot: leave the connection in the backlog.
            self.loop.watch(self._listener.fileno())
            self.slot.when_free(self._watch)
            return
        try:
            conn, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            self.slot.release()
            return
        conn.setblocking(False)
        self._conn = conn
        self.loop.watch(self._listener.fileno())
        agentlog.log(f"host connected on {self.link}")
        self._serve(conn.fileno())

    def _disconnected(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._watch()

    def close(self) -> None:
        """
        Stop listening.
        """
        self._listener.close()


class UnixListenServer(ListenServer):
    """
    Listens on a UNIX socket and serves one connection at a time, as QEMU's
    ``-chardev socket,server=on`` does for the host: for tests without a VM.
    """

    def __init__(self, loop: Loop, context: AgentContext, path: str, slot: Optional[SessionSlot] = None) -> None:
        super().__init__(loop, context, unix_listener(path), SERIAL_LINK, slot)
        self.path = path

    def close(self) -> None:
        """
        Stop listening and remove the socket file.
        """
        super().close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


class VsockListenServer(ListenServer):
    """
    The agent's AF_VSOCK listener: one host connection at a time, sharing the
    slot with the serial port (:class:`VirtioPortServer`).
    """

    def __init__(self, loop: Loop, context: AgentContext, listener: "socket.socket",
                 slot: Optional[SessionSlot] = None) -> None:
        super().__init__(loop, context, listener, VSOCK_LINK, slot)


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


__all__ = [
    "DISCONNECTED_POLL_INTERVAL", "ListenServer", "Server", "UnixListenServer", "VirtioPortServer",
    "VsockListenServer", "wait_for_port",
]
