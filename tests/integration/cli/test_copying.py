# -*- test-case-name: tests.integration.cli.test_copying -*-
"""
Tests for :mod:`vmservice.cli.copying`: whole ``vmctl cp`` runs in-process on
the global reactor against a loopback server that keeps what is uploaded and
serves it back.  Locations, tar packing and extraction and the progress line
are tested in :mod:`tests.cli.test_copying`.
"""

from __future__ import annotations

import base64
import io
import os
import stat
import tarfile
from typing import Any
from urllib.parse import parse_qs, urlsplit

from twisted.internet import reactor
from twisted.trial.unittest import TestCase
from twisted.web.resource import Resource

from tests.cli.trees import make_tree
from tests.integration.loopback import serve
from vmservice.cli import copying
from vmservice.cli.main import run


class _FakeGuest(Resource):
    """
    The cp route of one node, ``demo-1``, over a dictionary: uploads are
    placed by the cp-v1 rules (``directories`` exist) and kept by path (a tar
    is kept whole), and served back as ``cp-v1-recursive`` downloads with the
    type and name headers.
    """

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.files: dict[str, tuple[str, bytes, str | None]] = {}
        self.directories = {"/srv"}
        self.requests: list[tuple[bytes, str, dict[str, list[str]]]] = []
        self.headers: list[Any] = []

    def render(self, request: Any) -> bytes:
        url = urlsplit(request.uri.decode())
        query = parse_qs(url.query, keep_blank_values=True)
        self.requests.append((request.method, url.path, query))
        self.headers.append(request.requestHeaders)
        path = query.get("path", [""])[0]
        if url.path != "/vm/demo-1/cp":
            request.setResponseCode(404)
            return b'{"error":"no node","code":"node_not_found"}'
        mode = query.get("mode", ["binary"])[0]
        if request.method == b"POST":
            kind = {"cp-v1-binary": "binary", "cp-v1-tar": "tar"}[mode]
            name = query.get("source_name", [""])[0]
            if path.rstrip("/") in self.directories:
                contents = query.get("copy_contents") == ["true"]
                path = path.rstrip("/") if kind == "tar" and contents else path.rstrip("/") + "/" + name
            elif path.endswith("/"):
                request.setResponseCode(400)
                return b'{"error":"no such directory","code":"missing_destination"}'
            self.files[path] = (kind, request.content.read(), query.get("permissions", [None])[0])
            return b'{}'
        if path not in self.files:
            request.setResponseCode(404)
            return b'{"error":"no such path","code":"not_found"}'
        kept_mode, body, permissions = self.files[path]
        request.setHeader(b"Content-Type", b"application/x-tar" if kept_mode == "tar" else b"application/octet-stream")
        request.setHeader(b"X-Slicer-Source-Type", b"directory" if kept_mode == "tar" else b"file")
        request.setHeader(b"X-Slicer-Source-Name-Base64",
                          base64.urlsafe_b64encode(path.rstrip("/").rsplit("/", 1)[-1].encode()).rstrip(b"="))
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


    async def test_directory_placement_up(self) -> None:
        """A directory to an existing remote directory goes in under its name; SRC/. sends its contents."""
        source = make_tree(os.path.join(self.mktemp(), "site"))
        self.assertEqual(await self.vmctl("cp", source, "demo-1:/srv"), (0, "", ""))
        self.assertEqual(self.guest.files["/srv/site"][0], "tar")
        query = self.guest.requests[-1][2]
        self.assertEqual((query["mode"], query["source_name"], query["source_type"], query["copy_semantics"]),
                         (["cp-v1-tar"], ["site"], ["directory"], ["cp-v1"]))
        self.assertEqual(await self.vmctl("cp", source + "/.", "demo-1:/srv/"), (0, "", ""))
        self.assertEqual(self.guest.requests[-1][2]["copy_contents"], ["true"])
        self.assertEqual(self.guest.files["/srv"][0], "tar")

    async def test_exclude_and_unpacked_size(self) -> None:
        """--exclude leaves entries out of the tar and is passed on; the unpacked size of what is sent is announced."""
        source = make_tree(self.mktemp())
        code, _, err = await self.vmctl("cp", "--exclude", "sub", "--exclude", "*.log", source, "demo-1:/srv/x")
        self.assertEqual((code, err), (0, ""))
        with tarfile.open(fileobj=io.BytesIO(self.guest.files["/srv/x"][1])) as tar:
            self.assertEqual(tar.getnames(), ["a.sh"])
        self.assertEqual(self.guest.requests[-1][2]["exclude"], ["sub", "*.log"])
        self.assertEqual(self.guest.headers[-1].getRawHeaders(b"x-slicer-unpacked-size"), [b"10"])
        await self.vmctl("cp", "--exclude", "x", "demo-1:/srv/x", self.mktemp())
        self.assertEqual(self.guest.requests[-1][2]["exclude"], ["x"])
        self.assertEqual(self.guest.requests[-1][2]["mode"], ["cp-v1-recursive"])
        self.assertEqual(self.guest.headers[-1].getRawHeaders(b"accept"),
                         [b"application/octet-stream, application/x-tar"])

    async def test_directory_placement_down(self) -> None:
        """A directory into an existing local directory lands under its name; SRC/. merges; onto a file it fails."""
        source = make_tree(self.mktemp())
        await self.vmctl("cp", source, "demo-1:/srv/tree")
        target = self.mktemp()
        os.makedirs(os.path.join(target, "keep"))
        self.assertEqual(await self.vmctl("cp", "demo-1:/srv/tree", target), (0, "", ""))
        self.assertEqual(sorted(os.listdir(target)), ["keep", "tree"])
        self.assertEqual(sorted(os.listdir(os.path.join(target, "tree"))), ["a.sh", "sub"])
        self.guest.files["/srv/tree/."] = self.guest.files["/srv/tree"]
        self.assertEqual(await self.vmctl("cp", "demo-1:/srv/tree/.", target), (0, "", ""))
        self.assertEqual(sorted(os.listdir(target)), ["a.sh", "keep", "sub", "tree"])
        code, _, err = await self.vmctl("cp", "demo-1:/srv/tree", os.path.join(target, "a.sh"))
        self.assertEqual((code, err), (1, f"vmctl: {os.path.join(target, 'a.sh')} exists and is not a directory\n"))

    async def test_file_placement_down(self) -> None:
        """A file into an existing local directory keeps its name; to a missing DIR/ it fails and writes nothing."""
        self.guest.files["/srv/f.txt"] = ("binary", b"data", "0640")
        target = self.mktemp()
        os.makedirs(target)
        self.assertEqual(await self.vmctl("cp", "demo-1:/srv/f.txt", target + "/"), (0, "", ""))
        self.assertEqual(os.listdir(target), ["f.txt"])
        missing = os.path.join(target, "nope") + "/"
        code, _, err = await self.vmctl("cp", "demo-1:/srv/f.txt", missing)
        self.assertEqual((code, err), (1, f"vmctl: {missing}: no such directory\n"))
        self.assertEqual(os.listdir(target), ["f.txt"])

    async def test_failed_directory_download_leaves_nothing(self) -> None:
        """A tar that does not extract leaves no new directory and no staging directory."""
        self.guest.files["/srv/bad"] = ("tar", b"not a tar" * 1000, None)
        parent = self.mktemp()
        os.makedirs(parent)
        code, _, err = await self.vmctl("cp", "demo-1:/srv/bad", os.path.join(parent, "new"))
        self.assertEqual(code, 1)
        self.assertIn("cannot extract", err)
        self.assertEqual(os.listdir(parent), [])


def _fail_replace(source: str, target: str) -> None:
    raise PermissionError(13, "Permission denied")
