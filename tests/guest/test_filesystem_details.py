"""
Tests for :mod:`vmservice.guest.filesystem_details`: entries with their
details, renaming, directories made owned, and metadata, on a real
temporary directory, through :func:`vmservice.guest.fs_requests.perform`.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from twisted.trial.unittest import SynchronousTestCase

from vmservice.guest.filesystem_details import group_name, owner_name, read_metadata
from vmservice.guest.fs_requests import perform
from vmservice.wire.openheaders.fields import BadHeader
from vmservice.wire.openheaders.fs import FsHeader, checked_metadata


def _xattrs_work(directory: str) -> bool:
    probe = os.path.join(directory, ".probe")
    open(probe, "wb").close()
    try:
        os.setxattr(probe, "user.e2b.probe", b"1")
        return True
    except OSError:
        return False
    finally:
        os.unlink(probe)


class DetailsTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.root = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.root, True)

    def path(self, *names: str) -> str:
        return os.path.join(self.root, *names)

    def fs(self, **header: object) -> dict[str, object]:
        return perform({"op": "fs", **header})

    def test_stat_details(self) -> None:
        with open(self.path("a"), "wb") as f:
            f.write(b"abc")
        reply = self.fs(action="stat", path=self.path("a"), details=True)
        entry = reply["result"]
        assert isinstance(entry, dict)
        self.assertEqual((entry["name"], entry["type"], entry["size"]), ("a", "file", 3))
        self.assertEqual(entry["owner"], owner_name(os.getuid()))
        self.assertEqual(entry["group"], group_name(os.getgid()))
        self.assertIsNone(entry["symlink_target"])
        self.assertEqual(entry["metadata"], {})

    def test_plain_stat_has_no_details(self) -> None:
        reply = self.fs(action="stat", path=self.root)
        self.assertNotIn("owner", reply["result"])  # type: ignore[operator]

    def test_symlink(self) -> None:
        os.mkdir(self.path("d"))
        os.symlink(self.path("d"), self.path("link"))
        os.symlink(self.path("nowhere"), self.path("broken"))
        entries = self.fs(action="readdir", path=self.root, details=True)["result"]
        by_name = {entry["name"]: entry for entry in entries}  # type: ignore[attr-defined]
        self.assertEqual(by_name["link"]["type"], "symlink")
        self.assertEqual(by_name["link"]["symlink_target"], os.path.realpath(self.path("d")))
        self.assertEqual(by_name["link"]["target_type"], "directory")
        self.assertEqual(by_name["broken"]["symlink_target"], self.path("broken"))
        self.assertIsNone(by_name["broken"]["target_type"])

    def test_unknown_ids_are_numbers(self) -> None:
        self.assertEqual(owner_name(2**31 - 7), str(2**31 - 7))
        self.assertEqual(group_name(2**31 - 7), str(2**31 - 7))

    def test_rename(self) -> None:
        with open(self.path("a"), "wb") as f:
            f.write(b"x")
        reply = self.fs(action="rename", path=self.path("a"), destination=self.path("new", "deep", "b"))
        self.assertEqual(reply["result"]["name"], "b")  # type: ignore[index]
        self.assertFalse(os.path.exists(self.path("a")))
        self.assertEqual(oct(os.stat(self.path("new")).st_mode & 0o777), oct(0o755))

    def test_rename_missing(self) -> None:
        reply = self.fs(action="rename", path=self.path("a"), destination=self.path("b"))
        self.assertEqual(reply["error"], "not_found")

    def test_mkdir_owned(self) -> None:
        reply = self.fs(action="mkdir", path=self.path("x", "y"), uid=os.getuid(), gid=os.getgid())
        self.assertEqual(reply["result"]["type"], "directory")  # type: ignore[index]
        again = self.fs(action="mkdir", path=self.path("x", "y"), uid=os.getuid(), gid=os.getgid())
        self.assertEqual(again["error"], "exists")
        open(self.path("f"), "wb").close()
        over = self.fs(action="mkdir", path=self.path("f"), uid=os.getuid())
        self.assertEqual(over["error"], "not_a_directory")

    def test_metadata(self) -> None:
        if not _xattrs_work(self.root):
            raise self.skipTest("this file system keeps no user attributes")
        open(self.path("f"), "wb").close()
        os.setxattr(self.path("f"), "user.other", b"hidden")
        reply = self.fs(action="setmeta", path=self.path("f"), metadata={"k": "v", "two": "2"})
        self.assertEqual(reply["result"]["metadata"], {"k": "v", "two": "2"})  # type: ignore[index]
        self.assertEqual(read_metadata(self.path("f")), {"k": "v", "two": "2"})

    def test_metadata_missing(self) -> None:
        reply = self.fs(action="setmeta", path=self.path("nope"), metadata={"k": "v"})
        self.assertEqual(reply["ok"], False)


class HeaderTests(SynchronousTestCase):
    def test_round_trip(self) -> None:
        for header in (FsHeader("rename", "/a", destination="/b", uid=1000, gid=1000),
                       FsHeader("setmeta", "/a", metadata=(("k", "v"),)),
                       FsHeader("stat", "/a", details=True), FsHeader("mkdir", "/a", uid=5, gid=6)):
            self.assertEqual(FsHeader.from_json(header.to_json()), header)

    def test_old_headers_unchanged(self) -> None:
        self.assertEqual(FsHeader("stat", "/a").to_json(), {"op": "fs", "action": "stat", "path": "/a"})

    def test_bad_metadata(self) -> None:
        for value in ({"": "v"}, {"k": "\n"}, {"k": 1}, [], {"k": "v" * 5000}, {"é": "v"}):
            self.assertRaises(BadHeader, checked_metadata, value)

    def test_bad_destination(self) -> None:
        self.assertRaises(BadHeader, FsHeader.from_json, {"action": "rename", "path": "/a", "destination": "b"})
