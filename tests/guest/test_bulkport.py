# -*- test-case-name: tests.guest.test_bulkport -*-
"""
Tests for :mod:`vmservice.guest.bulkport` on the host, a socket pair standing
in for the port: the token hunt, an upload's body written to a file (pages
and the tail), a file sent, a stopped worker, and one claim at a time.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import tempfile
import threading

from twisted.trial.unittest import SynchronousTestCase

from vmservice.guest.bulk_upload import PortReader
from vmservice.guest.bulkport import BulkClosed, BulkPort, Stop
from vmservice.wire.bulk import new_token


class PortTests(SynchronousTestCase):
    """A :class:`BulkPort` on one end of a socket pair; the test is the host."""

    def setUp(self) -> None:
        self.guest, self.host = socket.socketpair()
        self.guest.setblocking(False)
        self.addCleanup(self.guest.close)
        self.addCleanup(self.host.close)
        self.stop = Stop()
        self.addCleanup(self.stop.close)
        self.port = BulkPort(self.guest.fileno(), self.stop)
        self.token = new_token()
        self.directory = tempfile.mkdtemp(prefix="vms-bulkport-", dir="/tmp")
        self.addCleanup(shutil.rmtree, self.directory, True)

    def feed(self, data: bytes) -> threading.Thread:
        thread = threading.Thread(target=self.host.sendall, args=(data,))
        thread.start()
        self.addCleanup(thread.join, 10)
        return thread

    def test_expect_drops_stale_bytes(self) -> None:
        """What came before the host's token is dropped; what follows is returned."""
        self.feed(b"stale bytes of an earlier copy" + self.token + b"body")
        self.assertEqual(self.port.expect(self.token, wait=5), b"body")

    def test_expect_gives_up(self) -> None:
        """No token in time: BulkClosed."""
        self.feed(b"x" * 100)
        self.assertRaises(BulkClosed, self.port.expect, self.token, 0.2)

    def test_fill(self) -> None:
        """The body (pages and a tail) lands in the file whole, up to the size the host announced."""
        data = os.urandom(3 * 1024 * 1024 + 4097)
        self.feed(self.token + data)
        reader = PortReader(self.port, self.port.expect(self.token, wait=5))
        reader.total = len(data)
        path = os.path.join(self.directory, "f")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            self.assertEqual(reader.fill(fd), len(data))
        finally:
            os.close(fd)
        with open(path, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).digest(), hashlib.sha256(data).digest())

    def test_more_than_announced(self) -> None:
        """Bytes beyond the announced size are refused."""
        self.feed(self.token + b"0123456789")
        reader = PortReader(self.port, self.port.expect(self.token, wait=5))
        reader.total = 4
        self.assertRaises(BulkClosed, reader.read, 100)

    def test_read_waits_for_the_size(self) -> None:
        """The reader waits for the announced size (woken by the stop pipe), then ends."""
        self.feed(self.token + b"abc")
        reader = PortReader(self.port, self.port.expect(self.token, wait=5))
        self.assertEqual(bytes(reader.read(10)), b"abc")
        timer = threading.Timer(0.2, lambda: (setattr(reader, "total", 3), self.stop.wake()))
        timer.start()
        self.addCleanup(timer.join)
        self.assertEqual(bytes(reader.read(10)), b"")

    def test_stop(self) -> None:
        """A stopped reader raises BulkClosed."""
        reader = PortReader(self.port)
        timer = threading.Timer(0.2, self.stop.stop)
        timer.start()
        self.addCleanup(timer.join)
        self.assertRaises(BulkClosed, reader.read, 10)

    def test_send_file(self) -> None:
        """A file goes out whole after the token."""
        data = os.urandom(2 * 1024 * 1024 + 123)
        path = os.path.join(self.directory, "src")
        with open(path, "wb") as f:
            f.write(data)
        received = bytearray()

        def drain() -> None:
            while len(received) < len(data) + len(self.token):
                received.extend(self.host.recv(1 << 20))

        thread = threading.Thread(target=drain)
        thread.start()
        fd = os.open(path, os.O_RDONLY)
        try:
            self.port.write_all(self.token)
            self.assertEqual(self.port.send_file(path, fd, len(data)), len(data))
        finally:
            os.close(fd)
            thread.join(30)
        self.assertEqual(bytes(received), self.token + data)


class ClaimTests(SynchronousTestCase):
    """One copy holds the port at a time."""

    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="vms-bulkport-", dir="/tmp")
        self.path = os.path.join(self.directory, "port")
        os.mkfifo(self.path)
        self.addCleanup(os.rmdir, self.directory)
        self.addCleanup(os.unlink, self.path)
        self.addCleanup(self.forget)
        self.stop = Stop()
        self.addCleanup(self.stop.close)

    def forget(self) -> None:
        BulkPort.forget()

    def test_one_at_a_time(self) -> None:
        """A second claim waits, and gets the port once the first let go."""
        self.forget()
        first = BulkPort.claim(self.stop, self.path)
        assert first is not None
        self.assertIsNone(BulkPort.claim(self.stop, self.path, wait=0.1))
        first.release()
        second = BulkPort.claim(self.stop, self.path, wait=0.1)
        assert second is not None
        self.assertEqual(second.fd, first.fd)
        second.release()

    def test_no_port(self) -> None:
        """No such port: None, and the next claim is not held up."""
        self.forget()
        self.assertIsNone(BulkPort.claim(self.stop, os.path.join(self.directory, "missing")))
        port = BulkPort.claim(self.stop, self.path, wait=0.1)
        assert port is not None
        port.release()
