# -*- test-case-name: tests.integration.test_copy_bulk -*-
"""
Binary copies over the bulk port (``docs/agent-protocol.md``, "The bulk
port") against the real daemon and a real guest: a file whose size is not a
multiple of a page both ways with equal sha256; copies at once (one holds
the port, the others take their streams); an upload and a download cancelled
mid-way leave nothing behind and the next copies are whole; a copy and an
exec while a stalled download holds the port; ``no_space`` on a file system
without ``O_DIRECT``; and a clone of a warm template copies over its port too.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import socket
import threading
import time
from typing import Any
from urllib.parse import urlencode

from tests.integration.bulk_port import BULK_PORT_OPEN, bulk_connections
from tests.integration.daemon import Daemon, SharedDaemonTestCase, TemplatesDaemonTestCase, ensure_image

MiB = 1024 * 1024



def _random(size: int) -> bytes:
    return os.urandom(size)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Copies:
    """Helpers shared by the test cases below (a daemon and a node's hostname)."""

    daemon: Daemon
    hostname = "demo-1"

    def upload(self, path: str, body: bytes, **query: str) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.daemon.port, timeout=300)
        try:
            conn.request("POST", f"/vm/{self.hostname}/cp?{urlencode({'path': path, **query})}", body=body,
                         headers={"Content-Type": "application/octet-stream"})
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    def download(self, path: str) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.daemon.port, timeout=300)
        try:
            conn.request("GET", f"/vm/{self.hostname}/cp?{urlencode({'path': path})}")
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def sh(self, command: str) -> str:
        code, out = self.daemon.run(self.hostname, command)
        assert code == 0, (command, code, out)
        return out

    def round_trip(self, test: Any, path: str, size: int) -> None:
        """Upload ``size`` random bytes to ``path`` and download them: equal sha256 everywhere."""
        data = _random(size)
        status, reply = self.upload(path, data)
        test.assertEqual((status, reply), (200, {"path": path, "mode": "binary", "size": size}))
        test.assertEqual(self.sh(f"sha256sum {path}").split()[0], _sha(data))
        status, back = self.download(path)
        test.assertEqual(status, 200)
        test.assertEqual((len(back), _sha(back)), (size, _sha(data)))


class BulkCopyTests(_Copies, SharedDaemonTestCase):
    """One daemon and one node for every test."""

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.daemon = Daemon(groups=[{"name": "demo", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "2G"}])
        cls.daemon.start()
        cls.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=2m", {}, expect=201)

    def setUp(self) -> None:
        super().setUp()
        self.sh("mkdir -p /root/bulk")
        self.addCleanup(self.daemon.run, self.hostname, "rm -rf /root/bulk")

    def wait_until_free(self) -> None:
        """Wait until no copy holds the node's bulk port."""
        self.daemon.wait_for("the bulk port free", lambda: bulk_connections(self.daemon, self.hostname) == 0)

    def leftovers(self, directory: str) -> list[str]:
        return [name for name in self.sh(f"ls -a {directory}").split() if "vmservice" in name]

    def test_big_file_both_ways(self) -> None:
        """64 MiB and a bit (not a whole page) up and down over the port: equal sha256 in the guest and on the host."""
        self.round_trip(self, "/root/bulk/big.bin", 64 * MiB + 4097)
        self.assertEqual(self.sh(BULK_PORT_OPEN).strip(), "1")
        self.round_trip(self, "/root/bulk/small.bin", 1)
        self.round_trip(self, "/root/bulk/pages.bin", 3 * 4096)

    def test_empty_and_cp_v1(self) -> None:
        """An empty file, and a cp-v1 upload into a directory, over the port."""
        status, reply = self.upload("/root/bulk/empty", b"")
        self.assertEqual((status, reply["size"]), (200, 0))
        status, body = self.download("/root/bulk/empty")
        self.assertEqual((status, body), (200, b""))
        data = _random(3 * MiB + 5)
        status, reply = self.upload("/root/bulk/", data, mode="cp-v1-binary", source_name="named.bin")
        self.assertEqual(status, 200, reply)
        self.assertEqual(reply["path"], "/root/bulk/named.bin")
        self.assertEqual(self.sh("sha256sum /root/bulk/named.bin").split()[0], _sha(data))

    def test_concurrent_copies(self) -> None:
        """Four uploads and then four downloads at once: one at a time holds the port, all are whole."""
        blobs = {f"/root/bulk/c{i}.bin": _random(8 * MiB + i) for i in range(4)}
        errors: list[Any] = []

        def up(path: str, data: bytes) -> None:
            try:
                status, reply = self.upload(path, data)
                if (status, reply.get("size")) != (200, len(data)):
                    errors.append((path, status, reply))
            except Exception as e:
                errors.append((path, e))

        def down(path: str, data: bytes) -> None:
            try:
                status, body = self.download(path)
                if status != 200 or _sha(body) != _sha(data):
                    errors.append((path, status, len(body)))
            except Exception as e:
                errors.append((path, e))

        for work in (up, down):
            threads = [threading.Thread(target=work, args=item) for item in blobs.items()]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(300)
            self.assertEqual(errors, [])
        sums = self.sh("sha256sum /root/bulk/c*.bin")
        for path, data in blobs.items():
            self.assertIn(f"{_sha(data)}  {path}", sums)

    def test_cancelled_upload(self) -> None:
        """A client that goes away mid-upload leaves no file; the next copies over the port are whole."""
        size = 64 * MiB
        with socket.create_connection(("127.0.0.1", self.daemon.port)) as sock:
            sock.sendall((f"POST /vm/{self.hostname}/cp?path=/root/bulk/cut.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          f"Content-Type: application/octet-stream\r\nContent-Length: {size}\r\n\r\n").encode())
            chunk = _random(MiB)
            for _ in range(8):
                sock.sendall(chunk)
            time.sleep(1)
        self.wait_until_free()
        self.daemon.wait_for("the cancelled upload's file removed", lambda: not self.leftovers("/root/bulk"))
        self.assertEqual(self.sh("ls /root/bulk").split(), [])
        self.round_trip(self, "/root/bulk/after.bin", 16 * MiB + 3)

    def test_cancelled_download(self) -> None:
        """A client that goes away mid-download frees the port; the next download is whole."""
        data = _random(64 * MiB)
        self.assertEqual(self.upload("/root/bulk/src.bin", data)[0], 200)
        with socket.create_connection(("127.0.0.1", self.daemon.port)) as sock:
            sock.sendall(f"GET /vm/{self.hostname}/cp?path=/root/bulk/src.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            received = 0
            while received < 2 * MiB:
                received += len(sock.recv(MiB))
        self.wait_until_free()
        status, body = self.download("/root/bulk/src.bin")
        self.assertEqual((status, _sha(body)), (200, _sha(data)))
        self.round_trip(self, "/root/bulk/after.bin", 5 * MiB)

    def test_copies_while_the_port_is_held(self) -> None:
        """
        While a download whose client does not read holds the port, an upload,
        a download and an exec still work (over their streams); the held
        download then finishes whole.
        """
        data = _random(48 * MiB)
        self.assertEqual(self.upload("/root/bulk/held.bin", data)[0], 200)
        self.wait_until_free()
        conn = http.client.HTTPConnection("127.0.0.1", self.daemon.port, timeout=300)
        self.addCleanup(conn.close)
        conn.request("GET", f"/vm/{self.hostname}/cp?path=/root/bulk/held.bin")
        response = conn.getresponse()
        first = response.read(MiB)
        self.assertEqual(bulk_connections(self.daemon, self.hostname), 1)
        self.round_trip(self, "/root/bulk/beside.bin", 2 * MiB + 1)
        self.assertEqual(self.sh("echo ok").strip(), "ok")
        self.assertEqual(bulk_connections(self.daemon, self.hostname), 1)
        rest = response.read()
        self.assertEqual(_sha(first + rest), _sha(data))
        self.wait_until_free()

    def test_no_space(self) -> None:
        """An upload that fills a small file system (tmpfs: no O_DIRECT) is no_space, and leaves nothing."""
        self.sh("mkdir -p /root/bulk/small && mount -t tmpfs -o size=4m tmpfs /root/bulk/small")
        self.addCleanup(self.daemon.run, self.hostname, "umount /root/bulk/small")
        status, reply = self.upload("/root/bulk/small/big.bin", _random(8 * MiB))
        self.assertEqual((status, reply["code"]), (507, "insufficient_storage"), reply)
        self.wait_until_free()
        self.assertEqual(self.sh("ls -a /root/bulk/small").split(), [".", ".."])
        self.round_trip(self, "/root/bulk/small/fits.bin", MiB + 7)


class WarmCloneBulkTests(_Copies, TemplatesDaemonTestCase):
    """A clone of a warm template has the bulk port, and copies over it."""

    groups = [{"name": "warm", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "warm": True}]

    def test_clone_copies_over_its_port(self) -> None:
        created = self.daemon.json("POST", "/hostgroup/warm/nodes?wait=agent&timeout=4m", {}, expect=201)
        self.hostname = created["hostname"]
        self.addCleanup(self.daemon.request, "DELETE", f"/hostgroup/warm/nodes/{self.hostname}")
        argv = " ".join(self.qemu_argv(self.hostname))
        self.assertIn("memory-backend-file", argv)  # a clone, not a cold boot
        self.assertIn("name=bulk", argv)
        self.round_trip(self, "/root/clone.bin", 16 * MiB + 1)
        self.assertEqual(self.sh(BULK_PORT_OPEN).strip(), "1")
