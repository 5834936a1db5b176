# -*- test-case-name: tests.integration.cli.test_copying -*-
"""
Tests for :mod:`vmservice.cli.copying`: whole ``vmctl cp`` runs in-process on
the global reactor against a loopback server that keeps what is uploaded and
serves it back.  Locations, tar packing and extraction and the progress line
are tested in :mod:`tests.cli.test_copying`.
"""

from __future__ import annotations

import io
import os
import stat
from typing import Any
from urllib.parse import parse_qs, urlsplit

from twisted.internet import reactor
from twisted.trial.unittest import TestCase
from twisted.web.resource import Resource

from tests.cli.test_copying import make_tree
from tests.integration.test_client import serve
from vmservice.cli import copying
from vmservice.cli.main import run


class _FakeGuest(Resource):
    """
    The cp and fs/stat routes of one node, ``demo-1``, over a dictionary:
    uploads are kept by path (a tar is kept whole) and served back.
    """

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.files: dict[str, tuple[str, bytes, str | None]] = {}
        self.requests: list[tuple[bytes, str, dict[str, list[str]]]] = []

    def render(self, request: Any) -> bytes:
        url = urlsplit(request.uri.decode())
        query = parse_qs(url.query, keep_blank_values=True)
        self.requests.append((request.method, url.path, query))
        path = query.get("path", [""])[0]
        if url.path == "/vm/demo-1/fs/stat":
            if path not in self.files:
                request.setResponseCode(404)
                return b'{"error":"no such path","code":"not_found"}'
            kind = "directory" if self.files[path][0] == "tar" else "file"
            body = self.files[path][1]
            return b'{"name":"x","type":"%s","size":%d,"mtime":"2024-01-01T00:00:00Z","mode":"0600"}' % (
                kind.encode(), len(body))
        if url.path != "/vm/demo-1/cp":
            request.setResponseCode(404)
            return b'{"error":"no node","code":"node_not_found"}'
        mode = query.get("mode", ["binary"])[0]
        if request.method == b"POST":
            self.files[path] = (mode, request.content.read(), query.get("permissions", [None])[0])
            return b""
        if path not in self.files:
            request.setResponseCode(404)
            return b'{"error":"no such path","code":"not_found"}'
        kept_mode, body, permissions = self.files[path]
        if kept_mode != mode:
            request.setResponseCode(400)
            return b'{"error":"must specify a file not a directory","code":"invalid_mode"}'
        if permissions:
            request.setHeader(b"X-Service-File-Mode", permissions.encode())
        return body


class CopyRunTests(TestCase):
    """``vmctl cp`` both ways in-process against :class:`_FakeGuest`."""

    async def setUp(self) -> None:
        self.guest = _FakeGuest()
        self.url = await serve(self, self.guest)

    async def vmctl(self, *argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = await run(reactor, ["--url", self.url, *argv], out, err, {})
        return code, out.getvalue(), err.getvalue()

    async def test_file_round_trip_with_mode(self) -> None:
        """A file goes up in binary mode with its permissions and comes back with them, atomically."""
        source = self.mktemp()
        with open(source, "wb") as f:
            f.write(b"\x00payload\xff" * 10_000)
        os.chmod(source, 0o741)
        self.assertEqual(await self.vmctl("cp", source, "demo-1:/srv/f"), (0, "", ""))
        self.assertEqual(self.guest.files["/srv/f"][0::2], ("binary", "0741"))
        target = self.mktemp()
        os.makedirs(target)
        self.assertEqual(await self.vmctl("cp", "demo-1:/srv/f", target), (0, "", ""))
        copied = os.path.join(target, "f")
        with open(copied, "rb") as f:
            self.assertEqual(f.read(), b"\x00payload\xff" * 10_000)
        self.assertEqual(stat.S_IMODE(os.stat(copied).st_mode), 0o741)
        self.assertEqual(os.listdir(target), ["f"])

    async def test_file_into_remote_directory(self) -> None:
        """A file copied to a path ending in / keeps its base name."""
        source = self.mktemp()
        with open(source, "wb") as f:
            f.write(b"x")
        self.assertEqual((await self.vmctl("cp", source, "demo-1:/srv/"))[0], 0)
        self.assertIn("/srv/" + os.path.basename(source), self.guest.files)

    async def test_directory_round_trip(self) -> None:
        """A directory goes up as a tar of its contents and comes back into a new directory with its modes."""
        source = make_tree(self.mktemp())
        self.assertEqual(await self.vmctl("cp", source, "demo-1:/srv/dir"), (0, "", ""))
        self.assertEqual(self.guest.files["/srv/dir"][0], "tar")
        target = os.path.join(self.mktemp(), "new")
        self.assertEqual(await self.vmctl("cp", "demo-1:/srv/dir", target), (0, "", ""))
        self.assertEqual(sorted(os.listdir(target)), ["a.sh", "sub"])
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(target, "a.sh")).st_mode), 0o750)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(target, "sub", "deep")).st_mode), 0o775)

    async def test_errors(self) -> None:
        """A missing remote path, an unreadable local file and an unknown node exit 1 with one line."""
        code, _, err = await self.vmctl("cp", "demo-1:/nope", self.mktemp())
        self.assertEqual((code, err), (1, "vmctl: no such path (404 not_found)\n"))
        code, _, err = await self.vmctl("cp", self.mktemp(), "demo-1:/x")
        self.assertEqual(code, 1)
        self.assertIn("cannot read", err)
        source = self.mktemp()
        with open(source, "wb") as f:
            f.write(b"x")
        code, _, err = await self.vmctl("cp", source, "demo-9:/x")
        self.assertEqual((code, err), (1, "vmctl: no node (404 node_not_found)\n"))

    async def test_failed_download_leaves_nothing(self) -> None:
        """A download that fails leaves no partial file behind."""
        self.guest.files["/d"] = ("tar", b"", None)
        self.guest.files["/f"] = ("binary", b"abc", None)
        target = self.mktemp()
        os.makedirs(target)
        self.patch(copying.os, "replace", _fail_replace)
        code, _, err = await self.vmctl("cp", "demo-1:/f", os.path.join(target, "g"))
        self.assertEqual(os.listdir(target), [])
        self.assertEqual((code, err), (1, "vmctl: Permission denied\n"))


def _fail_replace(source: str, target: str) -> None:
    raise PermissionError(13, "Permission denied")
