# -*- test-case-name: tests.integration.guest.test_vsock_listener -*-
"""
Tests for the guest agent's vsock listener (:class:`vmservice.guest.servers.VsockListenServer`)
and its session slot shared with the serial link, with real sockets in the
agent's own loop: a UNIX listener stands in for the AF_VSOCK one (this host has
no vsock transport) and another for the serial port (as ``--listen-unix`` does).
The listener on a real AF_VSOCK socket, in a guest, is in
:mod:`tests.integration.test_vsock`.
"""

from __future__ import annotations

import os
import socket

from twisted.trial.unittest import SynchronousTestCase

from tests.short_dirs import temp_dir
from vmservice.guest.context import AgentContext
from vmservice.guest.loop import Loop
from vmservice.guest.servers import UnixListenServer, VsockListenServer
from vmservice.guest.session_slot import FREE, SERIAL, VSOCK, SessionSlot
from vmservice.wire import NEED_DATA, Connection, Hello, Ping, Pong, Role


class ListenerTests(SynchronousTestCase):
    def setUp(self) -> None:
        directory = temp_dir(self)
        self.loop = Loop()
        self.addCleanup(self.loop.close)
        self.slot = SessionSlot()
        context = AgentContext()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.vsock_path = os.path.join(directory, "vsock")
        listener.bind(self.vsock_path)
        listener.listen(4)
        self.vsock = VsockListenServer(self.loop, context, listener, self.slot)
        self.serial_path = os.path.join(directory, "serial")
        self.serial = UnixListenServer(self.loop, context, self.serial_path, self.slot)
        self.addCleanup(self.vsock.close)
        self.addCleanup(self.serial.close)
        self.vsock.start()
        self.serial.start()

    def client(self, path: str) -> socket.socket:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(path)
        client.setblocking(False)
        self.addCleanup(client.close)
        return client

    def spin(self, times: int = 5) -> None:
        for _ in range(times):
            self.loop.run_once(0.01)

    def received(self, client: socket.socket) -> bytes:
        try:
            return client.recv(65536)
        except BlockingIOError:
            return b""

    def handshake(self, client: socket.socket) -> Connection:
        """The host's side of a session on ``client``: HELLO both ways, then a PING answered."""
        host = Connection(Role.HOST)
        client.sendall(host.send(host.hello("test")))
        events: list[object] = []
        for _ in range(50):
            self.spin(1)
            data = self.received(client)
            if data:
                host.receive_data(data)
                events += list(iter(host.next_event, NEED_DATA))
                if host.hello_wanted:
                    client.sendall(host.send(host.hello("test")))
            if host.established and any(isinstance(e, Hello) for e in events):
                break
        self.assertTrue(host.established)
        client.sendall(host.send(Ping(b"abcdefgh")))
        for _ in range(50):
            self.spin(1)
            data = self.received(client)
            if data:
                host.receive_data(data)
                if Pong(b"abcdefgh") in list(iter(host.next_event, NEED_DATA)):
                    return host
        self.fail("no PONG")

    def test_vsock_session(self) -> None:
        """A host on the vsock listener gets a session: HELLO, PING answered."""
        client = self.client(self.vsock_path)
        self.handshake(client)
        self.assertEqual(self.slot.state, VSOCK)

    def waits(self, first: str, second: str, held: str, then: str) -> None:
        """
        A session on ``first`` holds the slot (``held``): a host on ``second`` gets nothing
        until the first leaves, then its session (``then``).
        """
        holder = self.client(first)
        self.handshake(holder)
        waiting = self.client(second)
        self.spin(10)
        self.assertEqual(self.received(waiting), b"")
        self.assertEqual(self.slot.state, held)
        holder.close()
        self.spin(10)
        self.handshake(waiting)
        self.assertEqual(self.slot.state, then)

    def test_serial_waits_for_vsock(self) -> None:
        """While a vsock session holds the slot the serial link is not served; it is once the vsock host leaves."""
        self.waits(self.vsock_path, self.serial_path, VSOCK, SERIAL)

    def test_vsock_waits_in_backlog(self) -> None:
        """While the serial link holds the slot a vsock connection waits, unanswered; then it is served."""
        self.waits(self.serial_path, self.vsock_path, SERIAL, VSOCK)

    def test_slot_freed(self) -> None:
        """A session that ends frees the slot."""
        client = self.client(self.vsock_path)
        self.handshake(client)
        client.close()
        self.spin(10)
        self.assertEqual(self.slot.state, FREE)
