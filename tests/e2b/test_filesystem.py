"""
Tests of :mod:`vmservice.e2b.filesystem` and :mod:`vmservice.e2b.entries`:
envd's unary filesystem methods over a guest's file system in memory, the
paths resolved for the user, the entries rendered, the errors mapped.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.e2b.fs_fakes import FsCase, Node
from vmservice.e2b.connect import ConnectError
from vmservice.e2b.entries import entry_info, permissions, resolve
from vmservice.e2b.users import ROOT, USER
from vmservice.guestport.files import FsDetails, FsEntry


class EntriesTests(SynchronousTestCase):
    def test_resolve(self) -> None:
        self.assertEqual(resolve("a/b", USER), "/home/user/a/b")
        self.assertEqual(resolve("", USER), "/home/user")
        self.assertEqual(resolve("~", ROOT), "/root")
        self.assertEqual(resolve("~/x/../y", USER), "/home/user/y")
        self.assertEqual(resolve("/etc//hosts", USER), "/etc/hosts")
        self.assertEqual(resolve("//x", USER), "/x")
        for bad in ("~other/x", "a\0b", "/" * 5000):
            self.assertRaises(ConnectError, resolve, bad, USER)

    def test_permissions(self) -> None:
        self.assertEqual(permissions("file", 0o644), "-rw-r--r--")
        self.assertEqual(permissions("directory", 0o755), "drwxr-xr-x")
        self.assertEqual(permissions("symlink", 0o777), "Lrwxrwxrwx")
        self.assertEqual(permissions("file", 0o4755), "urwxr-xr-x")
        self.assertEqual(permissions("directory", 0o1777), "dtrwxrwxrwx")
        self.assertEqual(permissions("char_device", 0o620), "Dcrw--w----")

    def test_entry_info(self) -> None:
        entry = FsEntry("f", "file", 12, 1_767_225_600_000_000_001, 0o640,
                        FsDetails(1000, 1000, "user", "user", metadata=(("k", "v"),)))
        self.assertEqual(entry_info(entry, "/home/user/f"), {
            "name": "f", "path": "/home/user/f", "type": "FILE_TYPE_FILE", "size": "12", "mode": 0o640,
            "permissions": "-rw-r-----", "owner": "user", "group": "user",
            "modifiedTime": "2026-01-01T00:00:00.000000001Z", "metadata": {"k": "v"}})

    def test_symlink_info(self) -> None:
        entry = FsEntry("l", "symlink", 4, 0, 0o777, FsDetails(0, 0, "root", "root", "/target", "directory", 0o755))
        info = entry_info(entry, "/l")
        self.assertEqual((info["type"], info["mode"], info["isSymlink"], info["symlinkTarget"], info["permissions"]),
                         ("FILE_TYPE_DIRECTORY", 0o755, True, "/target", "Lrwxrwxrwx"))
        broken = entry_info(FsEntry("l", "symlink", 4, 0, 0o777, FsDetails(0, 0, "root", "root", "/l")), "/l")
        self.assertNotIn("type", broken)
        self.assertNotIn("size", entry_info(FsEntry("e", "file", 0, 0, 0o644), "/e"))


class MethodTests(FsCase):
    def setUp(self) -> None:
        super().setUp()
        self.guest.put("/home/user/a.txt", Node("file", b"hello", uid=1000, gid=1000, metadata={"k": "v"}))
        self.guest.put("/home/user/d/e/f", Node("file", b"x"))
        self.guest.put("/home/user/link", Node("symlink", mode=0o777, target="/home/user/d"))

    def test_stat(self) -> None:
        status, body = self.fs("Stat", {"path": "a.txt"})
        self.assertEqual(status, 200)
        entry = body["entry"]
        self.assertEqual((entry["path"], entry["size"], entry["owner"], entry["metadata"]),
                         ("/home/user/a.txt", "5", "user", {"k": "v"}))

    def test_stat_missing(self) -> None:
        status, body = self.fs("Stat", {"path": "/nope"})
        self.assertEqual((status, body["code"]), (404, "not_found"))

    def test_stat_bad_path(self) -> None:
        self.assertEqual(self.fs("Stat", {"path": "~root/x"})[1]["code"], "invalid_argument")
        self.assertEqual(self.fs("Stat", {"path": 5})[1]["code"], "invalid_argument")

    def test_make_dir(self) -> None:
        status, body = self.fs("MakeDir", {"path": "new/deep"})
        self.assertEqual((status, body["entry"]["type"], body["entry"]["owner"]), (200, "FILE_TYPE_DIRECTORY", "user"))
        self.assertEqual(self.guest.nodes["/home/user/new/deep"].uid, 1000)
        status, body = self.fs("MakeDir", {"path": "new/deep"})
        self.assertEqual((status, body["code"]), (409, "already_exists"))
        self.assertEqual(self.fs("MakeDir", {"path": "a.txt"})[1]["code"], "invalid_argument")

    def test_make_dir_as_root(self) -> None:
        self.fs("MakeDir", {"path": "mine"}, user="root")
        self.assertEqual(self.guest.nodes["/root/mine"].uid, 0)

    def test_move(self) -> None:
        status, body = self.fs("Move", {"source": "a.txt", "destination": "/tmp/b.txt"})
        self.assertEqual((status, body["entry"]["path"], body["entry"]["name"]), (200, "/tmp/b.txt", "b.txt"))
        self.assertNotIn("/home/user/a.txt", self.guest.nodes)
        self.assertEqual(self.fs("Move", {"source": "a.txt", "destination": "c"})[1]["code"], "not_found")

    def test_remove(self) -> None:
        self.assertEqual(self.fs("Remove", {"path": "d"}), (200, {}))
        self.assertNotIn("/home/user/d/e/f", self.guest.nodes)
        self.assertEqual(self.fs("Remove", {"path": "d"}), (200, {}))

    def test_list_depth(self) -> None:
        status, body = self.fs("ListDir", {"path": "/home/user"})
        self.assertEqual([entry["name"] for entry in body["entries"]], ["a.txt", "d", "link"])
        status, body = self.fs("ListDir", {"path": "/home/user", "depth": 3})
        self.assertEqual([entry["path"] for entry in body["entries"]],
                         ["/home/user/a.txt", "/home/user/d", "/home/user/d/e", "/home/user/d/e/f",
                          "/home/user/link"])

    def test_list_through_symlink(self) -> None:
        status, body = self.fs("ListDir", {"path": "link", "depth": 2})
        self.assertEqual([entry["path"] for entry in body["entries"]], ["/home/user/link/e", "/home/user/link/e/f"])

    def test_list_not_directory(self) -> None:
        self.assertEqual(self.fs("ListDir", {"path": "a.txt"})[1]["code"], "invalid_argument")
        self.assertEqual(self.fs("ListDir", {"path": "nope"})[1]["code"], "not_found")
        self.assertEqual(self.fs("ListDir", {"path": "/", "depth": -1})[1]["code"], "invalid_argument")
