# -*- test-case-name: tests.integration.test_e2b_files -*-
"""
A sandbox's files through the official E2B Python SDK (``e2b``, sync,
unchanged) against a real daemon and a real guest: ``files.write`` and
``read`` (text, bytes, a stream), ``write_files``, ``list`` with a depth,
``exists``, ``get_info`` (owner, permissions, metadata), ``make_dir``
(True, then False), ``rename``, ``remove``, ``watch_dir`` (create then
write events, recursive names), signed download and upload URLs fetched
with plain HTTP (an expired one refused), and a 50 MiB file up and down
with the daemon's memory flat.

The tests share one sandbox; each works in a directory of its own under
the default user's home (``user``, of the ``e2b`` image the group boots).
"""

from __future__ import annotations

import hashlib
import io
import json
import time
import urllib.error
import urllib.request
import uuid
from typing import Any, Iterator

from e2b import FileType
from e2b.sandbox.filesystem.watch_handle import FilesystemEventType

from tests.integration.daemon import wait_until
from tests.integration.e2b_daemon import E2bDaemonTestCase

MiB = 1024 * 1024


class _Pattern(io.RawIOBase):
    """``size`` bytes of a repeating pattern, read in pieces (never held whole)."""

    def __init__(self, size: int) -> None:
        self.left = size
        self.block = bytes(range(256)) * 256

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        count = min(len(buffer), self.left, len(self.block))
        buffer[:count] = self.block[:count]
        self.left -= count
        return count


def _pattern_digest(size: int) -> str:
    digest, source = hashlib.sha256(), _Pattern(size)
    while True:
        piece = source.read(MiB)
        if not piece:
            return digest.hexdigest()
        digest.update(piece)


class E2bFilesTests(E2bDaemonTestCase):
    """``sandbox.files`` on one shared sandbox."""

    timeout = 600
    sandbox_envs: dict[str, str] = {}

    def setUp(self) -> None:
        super().setUp()
        self.files = self.sandbox.files
        self.name = f"t-{uuid.uuid4().hex[:12]}"
        self.dir = f"/home/user/{self.name}"
        self.assertTrue(self.files.make_dir(self.name))
        self.addCleanup(lambda: self.files.remove(self.dir))

    def test_write_read(self) -> None:
        """Text, bytes and a stream written and read back; several files at once; exists."""
        info = self.files.write(f"{self.dir}/a.txt", "héllo\n")
        self.assertEqual((info.path, info.name), (f"{self.dir}/a.txt", "a.txt"))
        self.assertEqual(self.files.read(f"{self.dir}/a.txt"), "héllo\n")
        self.files.write(f"{self.dir}/b.bin", b"\x00\xff" * 1000)
        self.assertEqual(bytes(self.files.read(f"{self.dir}/b.bin", format="bytes")), b"\x00\xff" * 1000)
        streamed = b"".join(self.files.read(f"{self.dir}/b.bin", format="stream"))
        self.assertEqual(streamed, b"\x00\xff" * 1000)
        written = self.files.write_files([{"path": f"{self.dir}/m/one", "data": "1"},
                                          {"path": f"{self.dir}/m/two", "data": b"2"}])
        self.assertEqual(sorted(item.path for item in written), [f"{self.dir}/m/one", f"{self.dir}/m/two"])
        self.assertEqual(self.files.read(f"{self.dir}/m/two"), "2")
        self.assertTrue(self.files.exists(f"{self.dir}/m/one"))
        self.assertFalse(self.files.exists(f"{self.dir}/nope"))

    def test_list_info_dirs(self) -> None:
        """list with depth, get_info with owner, permissions and metadata, make_dir twice, rename, remove."""
        self.files.write(f"{self.dir}/x/y/z.txt", "z", metadata={"team": "infra"})
        self.assertEqual([entry.name for entry in self.files.list(self.dir)], ["x"])
        deep = self.files.list(self.dir, depth=3)
        self.assertEqual([entry.path for entry in deep], [f"{self.dir}/x", f"{self.dir}/x/y", f"{self.dir}/x/y/z.txt"])
        info = self.files.get_info(f"{self.dir}/x/y/z.txt")
        self.assertEqual((info.type, info.size, info.owner, info.group), (FileType.FILE, 1, "user", "user"))
        self.assertEqual(info.permissions, "-rw-r--r--")
        self.assertEqual(info.metadata, {"team": "infra"})
        self.assertEqual(self.files.get_info(f"{self.name}/x").type, FileType.DIR)
        self.assertEqual(self.files.get_info(f"{self.name}/x").owner, "user")
        self.files.write(f"/root/{self.name}", "mine", user="root")
        self.addCleanup(lambda: self.files.remove(f"/root/{self.name}", user="root"))
        self.assertEqual(self.files.get_info(f"/root/{self.name}", user="root").owner, "root")
        self.assertEqual(self.files.read(f"~/{self.name}", user="root"), "mine")
        self.assertTrue(self.files.make_dir(f"{self.dir}/new"))
        self.assertFalse(self.files.make_dir(f"{self.dir}/new"))
        moved = self.files.rename(f"{self.dir}/x/y/z.txt", f"{self.dir}/new/z2.txt")
        self.assertEqual(moved.path, f"{self.dir}/new/z2.txt")
        self.assertFalse(self.files.exists(f"{self.dir}/x/y/z.txt"))
        self.files.remove(f"{self.dir}/new")
        self.assertFalse(self.files.exists(f"{self.dir}/new/z2.txt"))

    def test_watch(self) -> None:
        """watch_dir: a new file is a create then a write; recursive names are relative."""
        self.files.make_dir(f"{self.dir}/sub")
        handle = self.files.watch_dir(self.dir, recursive=True)
        self.addCleanup(handle.stop)
        self.files.write(f"{self.dir}/new.txt", "data")
        self.files.write(f"{self.dir}/sub/inner.txt", "data")
        events: list[Any] = []

        def both_written() -> bool:
            events.extend(handle.get_new_events())
            seen = {(event.name, event.type) for event in events}
            return {("new.txt", FilesystemEventType.WRITE), ("sub/inner.txt", FilesystemEventType.WRITE)} <= seen

        wait_until("both files written", both_written, timeout=30, interval=0.5,
                   details=lambda: f": {[(event.name, event.type) for event in events]}")
        named = [event.type for event in events if event.name == "new.txt"]
        self.assertEqual(named[0], FilesystemEventType.CREATE)

    def test_signed_urls(self) -> None:
        """download_url and upload_url fetched with plain HTTP, no sandbox header; an expired one refused."""
        self.files.write(f"{self.dir}/d.txt", "signed")
        with urllib.request.urlopen(self.sandbox.download_url(f"{self.dir}/d.txt")) as answer:
            self.assertEqual(answer.read(), b"signed")
        upload = urllib.request.Request(self.sandbox.upload_url(f"{self.dir}/u.txt"), data=b"up",
                                        method="POST", headers={"Content-Type": "application/octet-stream"})
        with urllib.request.urlopen(upload) as answer:
            self.assertEqual(json.loads(answer.read())[0]["path"], f"{self.dir}/u.txt")
        self.assertEqual(self.files.read(f"{self.dir}/u.txt"), "up")
        expiring = self.sandbox.download_url(f"{self.dir}/d.txt", use_signature_expiration=1)
        time.sleep(2.5)
        with self.assertRaises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(expiring)
        self.assertEqual(refused.exception.code, 401)
        self.assertEqual(json.loads(refused.exception.read()),
                         {"code": 401, "message": "signature is already expired"})

    def test_large_file(self) -> None:
        """50 MiB up (streamed) and down (streamed), checksums equal, the daemon's memory flat."""
        size = 50 * MiB
        before = self.daemon.rss()
        self.files.write(f"{self.dir}/big", _Pattern(size))  # type: ignore[arg-type]
        digest = hashlib.sha256()
        for piece in self._stream(f"{self.dir}/big"):
            digest.update(piece)
        self.assertEqual(digest.hexdigest(), _pattern_digest(size))
        self.assertLess(self.daemon.rss() - before, 40 * MiB)

    def _stream(self, path: str) -> Iterator[bytes]:
        yield from self.files.read(path, format="stream")
