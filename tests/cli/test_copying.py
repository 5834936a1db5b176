"""
Tests for :mod:`vmservice.cli.copying`: ``HOST:PATH`` parsing, tar packing
and extraction through real pipes (modes kept, escapes refused), the
progress line, and whole ``vmctl cp`` runs in-process against a loopback
server that keeps what is uploaded and serves it back.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
import threading
from typing import Any
from urllib.parse import parse_qs, urlsplit

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import reactor
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase, TestCase
from twisted.web.resource import Resource

from tests.test_client import serve
from vmservice.cli import copying
from vmservice.cli.copying import Location, Progress, pack_directory, parse_location, unpack_into
from vmservice.cli.main import run


class LocationTests(SynchronousTestCase):
    def test_examples(self) -> None:
        """HOST:PATH is remote; paths starting with / . ~ or with a / before the colon are local."""
        self.assertEqual(parse_location("demo-1:/srv/x"), Location("demo-1", "/srv/x"))
        self.assertEqual(parse_location("demo-1:"), Location("demo-1", ""))
        for local in ("./a:b", "/x:y", "~/a:b", "dir/a:b", ":x", "plain", "../up"):
            self.assertEqual(parse_location(local), Location(None, local))

    @given(st.from_regex(r"\A[a-z][a-z0-9-]{0,20}\Z"), st.text(max_size=30))
    def test_remote_round_trip(self, host: str, path: str) -> None:
        """Any hostname followed by a colon gives back exactly that host and the rest as the path."""
        self.assertEqual(parse_location(f"{host}:{path}"), Location(host, path))


class TarTests(SynchronousTestCase):
    """pack_directory and unpack_into, each in a thread on one end of a real pipe."""

    def tree(self) -> str:
        root = self.mktemp()
        os.makedirs(os.path.join(root, "sub", "deep"))
        with open(os.path.join(root, "a.sh"), "wb") as f:
            f.write(b"#!/bin/sh\n")
        with open(os.path.join(root, "sub", "data"), "wb") as f:
            f.write(os.urandom(300_000))
        os.chmod(os.path.join(root, "a.sh"), 0o750)
        os.chmod(os.path.join(root, "sub", "data"), 0o604)
        os.chmod(os.path.join(root, "sub", "deep"), 0o775)
        return root

    def through_pipe(self, writer: Any, reader: Any) -> None:
        read_end, write_end = os.pipe()
        errors: list[BaseException] = []

        def guarded(function: Any, *args: Any) -> None:
            try:
                function(*args)
            except BaseException as error:
                errors.append(error)

        thread = threading.Thread(target=guarded, args=(writer, write_end))
        thread.start()
        guarded(reader, read_end)
        thread.join()
        if errors:
            raise errors[0]

    def test_round_trip_keeps_contents_and_modes(self) -> None:
        """A directory packed and unpacked elsewhere has the same files, bytes and permission bits."""
        source = self.tree()
        target = self.mktemp()
        os.makedirs(target)
        self.through_pipe(lambda fd: pack_directory(source, fd), lambda fd: unpack_into(fd, target))
        for relative in ("a.sh", "sub", "sub/data", "sub/deep"):
            before, after = os.stat(os.path.join(source, relative)), os.stat(os.path.join(target, relative))
            self.assertEqual(stat.S_IMODE(after.st_mode), stat.S_IMODE(before.st_mode), relative)
        with open(os.path.join(source, "sub", "data"), "rb") as a, open(os.path.join(target, "sub", "data"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        self.assertFalse(os.path.exists(os.path.join(target, os.path.basename(source))))

    def test_pack_has_no_top_directory(self) -> None:
        """Entries are relative to the source directory."""
        source = self.tree()
        buffer = io.BytesIO()
        self.through_pipe(lambda fd: pack_directory(source, fd), lambda fd: buffer.write(os.fdopen(fd, "rb").read()))
        buffer.seek(0)
        with tarfile.open(fileobj=buffer) as tar:
            self.assertEqual(sorted(tar.getnames()), ["a.sh", "sub", "sub/data", "sub/deep"])

    def test_escapes_refused(self) -> None:
        """Names climbing out with .. and links pointing out are refused; nothing lands outside the target."""
        outside = self.mktemp()
        os.makedirs(outside)
        for name, kind in (("../escaped", tarfile.REGTYPE), ("a/../../escaped", tarfile.REGTYPE), ("link", tarfile.SYMTYPE)):
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w") as tar:
                info = tarfile.TarInfo(name)
                info.type = kind
                if kind == tarfile.SYMTYPE:
                    info.linkname = "/etc/passwd"
                    tar.addfile(info)
                else:
                    info.size = 1
                    tar.addfile(info, io.BytesIO(b"x"))
            target = os.path.join(outside, "t-" + str(len(os.listdir(outside))))
            os.makedirs(target)

            def feed(fd: int, data: bytes = buffer.getvalue()) -> None:
                with os.fdopen(fd, "wb") as f:
                    try:
                        f.write(data)
                    except BrokenPipeError:
                        pass

            with self.assertRaises(tarfile.TarError):
                self.through_pipe(feed, lambda fd, target=target: unpack_into(fd, target))
            self.assertEqual(os.listdir(target), [], name)
        self.assertFalse(os.path.exists(os.path.join(outside, "escaped")))

    def test_absolute_names_stay_inside(self) -> None:
        """An absolute name is extracted under the target, its leading slash dropped."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            info = tarfile.TarInfo("/abs-file")
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
        target = self.mktemp()
        os.makedirs(target)

        def feed(fd: int) -> None:
            with os.fdopen(fd, "wb") as f:
                f.write(buffer.getvalue())

        self.through_pipe(feed, lambda fd: unpack_into(fd, target))
        self.assertEqual(os.listdir(target), ["abs-file"])


class ProgressTests(SynchronousTestCase):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    def test_terminal(self) -> None:
        """On a terminal the line is redrawn at most every interval and ends with a newline."""
        clock, err = Clock(), self.Terminal()
        progress = Progress(clock, err, 2048)
        progress.add(1024)
        progress.add(512)
        clock.advance(1)
        progress.add(512)
        progress.finish()
        lines = err.getvalue().split("\r")[1:]
        self.assertEqual(len(lines), 3)
        self.assertTrue(lines[1].startswith("2K / 2K  100%  2K/s"), lines[1])
        self.assertTrue(err.getvalue().endswith("\n"))

    def test_not_terminal(self) -> None:
        """Nothing is drawn when stderr is not a terminal."""
        err = io.StringIO()
        progress = Progress(Clock(), err, None)
        progress.add(10)
        progress.finish()
        self.assertEqual((err.getvalue(), progress.done), ("", 10))


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
        source = TarTests.tree(self)  # type: ignore[arg-type]
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
