# -*- test-case-name: tests.guest.test_filesystem -*-
"""
Tests for :mod:`vmservice.guest.filesystem`: the operations in-process on the host
against a temporary directory, and the entry formatting with hypothesis.
:class:`~vmservice.guest.fs_requests.FsHandler`, whose work runs on a thread, is served by a real
:class:`~vmservice.guest.agent.Session` and :class:`~vmservice.guest.agent.Loop`
in :mod:`tests.integration.guest.test_filesystem`.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.guest import filesystem as fs
from vmservice.guest.fs_requests import perform


def _temp_dir(case: SynchronousTestCase) -> str:
    path = tempfile.mkdtemp(prefix="vmsfs-", dir="/tmp")
    case.addCleanup(shutil.rmtree, path, True)
    return path


_FORMATS = {
    stat.S_IFREG: "file",
    stat.S_IFDIR: "directory",
    stat.S_IFLNK: "symlink",
    stat.S_IFCHR: "char_device",
    stat.S_IFBLK: "block_device",
    stat.S_IFIFO: "fifo",
    stat.S_IFSOCK: "socket",
}


class FormattingTests(SynchronousTestCase):
    """
    Entries and names as the guest reports them.
    """

    @given(
        st.sampled_from(sorted(_FORMATS)),
        st.integers(0, 0o7777),
        st.integers(0, 2**63 - 1),
        st.integers(-(2**62), 2**62),
    )
    def test_describe(self, kind: int, bits: int, size: int, mtime_ns: int) -> None:
        """
        An entry carries the type named for the file-type bits, the permission bits
        including setuid/setgid/sticky (nothing else), the size and nanosecond mtime.
        """
        status = os.stat_result((kind | bits, 1, 2, 1, 0, 0, size, 0, 0, 0, 0.0, 0.0, 0.0, 0, mtime_ns, 0))
        entry = fs.describe("x", status)
        self.assertEqual(
            entry, {"name": "x", "type": _FORMATS[kind], "size": size, "mtime_ns": mtime_ns, "mode": bits}
        )

    def test_other_type(self) -> None:
        """File-type bits the kernel does not define become ``other``."""
        self.assertEqual(fs.file_type(0o160000 | 0o644), "other")
        self.assertEqual(fs.file_type(0), "other")

    @given(st.binary(min_size=1, max_size=40).filter(lambda b: b"/" not in b and b"\x00" not in b))
    def test_display_name(self, raw: bytes) -> None:
        """
        Any file name becomes valid UTF-8 text: UTF-8 names unchanged, other bytes
        as U+FFFD; the result always survives strict JSON encoding.
        """
        name = os.fsdecode(raw)
        shown = fs.display_name(name)
        shown.encode("utf-8")  # no lone surrogates
        json.loads(json.dumps(shown, ensure_ascii=False).encode("utf-8"))
        try:
            self.assertEqual(shown, raw.decode("utf-8"))
        except UnicodeDecodeError:
            self.assertIn("\ufffd", shown)

    def test_resolve_path(self) -> None:
        """Absolute paths stay; ``~`` and ``~/x`` use root's home; the rest is invalid."""
        home = lambda: "/root"  # noqa: E731
        self.assertEqual(fs.resolve_path("/etc", home), "/etc")
        self.assertEqual(fs.resolve_path("~", home), "/root")
        self.assertEqual(fs.resolve_path("~/a/b", home), "/root/a/b")
        for bad in ("", "etc", "~bob/x", "./x", None, 3, "/a\x00b"):
            with self.assertRaises(fs.FsError) as caught:
                fs.resolve_path(bad, home)
            self.assertEqual(caught.exception.kind, "invalid")

    def test_root_home(self) -> None:
        """Root's home comes from the password database."""
        import pwd

        self.assertEqual(fs.root_home(), pwd.getpwuid(0).pw_dir or "/root")


class OperationTests(SynchronousTestCase):
    """
    :func:`perform` against a real temporary directory.
    """

    def setUp(self) -> None:
        self.root = _temp_dir(self)
        self.file = os.path.join(self.root, "file.txt")
        with open(self.file, "wb") as f:
            f.write(b"hello")
        os.chmod(self.file, 0o640)
        os.utime(self.file, ns=(1_700_000_000_123_456_789, 1_700_000_000_123_456_789))
        self.dir = os.path.join(self.root, "dir")
        os.mkdir(self.dir)
        os.chmod(self.dir, 0o1755)
        self.link = os.path.join(self.root, "link")
        os.symlink("file.txt", self.link)
        os.mkfifo(os.path.join(self.root, "pipe"))

    def perform(self, **header: object) -> dict:
        reply = perform(header, home=lambda: self.root)
        json.dumps(reply)
        return reply

    def assertFails(self, reply: dict, kind: str) -> None:
        self.assertEqual(reply["ok"], False, reply)
        self.assertEqual(reply["error"], kind, reply)
        self.assertIsInstance(reply["message"], str)

    def test_stat_file(self) -> None:
        """stat of a file gives its name, type, size, exact mtime and permission bits."""
        reply = self.perform(action="stat", path=self.file)
        self.assertEqual(
            reply,
            {"ok": True, "result": {"name": "file.txt", "type": "file", "size": 5,
                                    "mtime_ns": 1_700_000_000_123_456_789, "mode": 0o640}},
        )

    def test_stat_directory_and_special_bits(self) -> None:
        """stat of a directory reports it as one, sticky bit included in mode."""
        result = self.perform(action="stat", path=self.dir + "/")["result"]
        self.assertEqual((result["name"], result["type"], result["mode"]), ("dir", "directory", 0o1755))

    def test_stat_symlink_not_followed(self) -> None:
        """stat describes a symlink itself (lstat): type symlink, size = target length."""
        result = self.perform(action="stat", path=self.link)["result"]
        self.assertEqual((result["type"], result["size"]), ("symlink", len("file.txt")))

    def test_stat_root_and_home(self) -> None:
        """``/`` is named ``/``; ``~`` is root's home directory."""
        self.assertEqual(self.perform(action="stat", path="/")["result"]["name"], "/")
        result = self.perform(action="stat", path="~")["result"]
        self.assertEqual(result["name"], os.path.basename(self.root))

    def test_stat_missing(self) -> None:
        """stat of a missing path is ``not_found``; through a file, ``not_a_directory``."""
        self.assertFails(self.perform(action="stat", path=self.root + "/nope"), "not_found")
        self.assertFails(self.perform(action="stat", path=self.file + "/x"), "not_a_directory")

    def test_readdir(self) -> None:
        """readdir lists every entry sorted by name, lstat-described, without . and .."""
        result = self.perform(action="readdir", path=self.root)["result"]
        self.assertEqual(
            [(e["name"], e["type"]) for e in result],
            [("dir", "directory"), ("file.txt", "file"), ("link", "symlink"), ("pipe", "fifo")],
        )

    def test_readdir_through_symlink(self) -> None:
        """readdir of a symlink to a directory lists the directory, as ls does."""
        os.symlink("dir", os.path.join(self.root, "dirlink"))
        with open(os.path.join(self.dir, "inner"), "w"):
            pass
        result = self.perform(action="readdir", path=os.path.join(self.root, "dirlink"))["result"]
        self.assertEqual([e["name"] for e in result], ["inner"])

    def test_readdir_non_utf8_name(self) -> None:
        """A name that is not UTF-8 is listed with U+FFFD in place of the bad bytes."""
        with open(os.path.join(os.fsencode(self.dir), b"bad\xffname"), "w"):
            pass
        result = self.perform(action="readdir", path=self.dir)["result"]
        self.assertEqual([e["name"] for e in result], ["bad\ufffdname"])

    def test_readdir_errors(self) -> None:
        """readdir of a file is ``not_a_directory``; of a missing path ``not_found``."""
        self.assertFails(self.perform(action="readdir", path=self.file), "not_a_directory")
        self.assertFails(self.perform(action="readdir", path=self.root + "/nope"), "not_found")

    def test_mkdir(self) -> None:
        """mkdir makes the directory with exactly the mode asked, whatever the umask."""
        old = os.umask(0o077)
        self.addCleanup(os.umask, old)
        path = os.path.join(self.root, "new")
        reply = self.perform(action="mkdir", path=path, mode=0o2775)
        self.assertEqual(reply["result"]["type"], "directory")
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o2775)
        self.assertEqual(reply["result"]["mode"], 0o2775)

    def test_mkdir_default_mode(self) -> None:
        """Without a mode, mkdir uses 0755."""
        path = os.path.join(self.root, "plain")
        self.perform(action="mkdir", path=path)
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o755)

    def test_mkdir_errors(self) -> None:
        """
        Without recursive: an existing path is ``exists``, a missing parent
        ``not_found``, a parent that is a file ``not_a_directory``.
        """
        self.assertFails(self.perform(action="mkdir", path=self.dir), "exists")
        self.assertFails(self.perform(action="mkdir", path=self.root + "/a/b"), "not_found")
        self.assertFails(self.perform(action="mkdir", path=self.file + "/b"), "not_a_directory")

    def test_mkdir_recursive(self) -> None:
        """
        recursive makes missing parents with 0755 and the last one with the mode;
        an existing directory is success and keeps its mode.
        """
        path = os.path.join(self.root, "a", "b", "c")
        reply = self.perform(action="mkdir", path=path, recursive=True, mode=0o700)
        self.assertEqual(reply["result"]["name"], "c")
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o700)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode), 0o755)
        again = self.perform(action="mkdir", path=self.dir, recursive=True, mode=0o700)
        self.assertEqual(again["result"]["mode"], 0o1755)

    def test_mkdir_recursive_over_file(self) -> None:
        """recursive over an existing file is ``exists``; through a file ``not_a_directory``."""
        self.assertFails(self.perform(action="mkdir", path=self.file, recursive=True), "exists")
        self.assertFails(self.perform(action="mkdir", path=self.file + "/x/y", recursive=True), "not_a_directory")

    def test_remove_file_and_symlink(self) -> None:
        """remove unlinks a symlink (not its target) and a file, answering the old entry."""
        reply = self.perform(action="remove", path=self.link)
        self.assertEqual(reply["result"]["type"], "symlink")
        self.assertFalse(os.path.lexists(self.link))
        self.assertTrue(os.path.exists(self.file))
        self.assertEqual(self.perform(action="remove", path=self.file)["result"]["size"], 5)
        self.assertFalse(os.path.exists(self.file))

    def test_remove_directory(self) -> None:
        """An empty directory is removed; a non-empty one is ``not_empty`` without recursive."""
        with open(os.path.join(self.dir, "x"), "w"):
            pass
        self.assertFails(self.perform(action="remove", path=self.dir), "not_empty")
        self.assertTrue(os.path.exists(os.path.join(self.dir, "x")))
        os.unlink(os.path.join(self.dir, "x"))
        self.assertTrue(self.perform(action="remove", path=self.dir)["ok"])
        self.assertFalse(os.path.exists(self.dir))

    def test_remove_recursive(self) -> None:
        """
        recursive removes a deep tree without following symlinks out of it.
        """
        outside = os.path.join(self.root, "outside")
        os.mkdir(outside)
        with open(os.path.join(outside, "keep"), "w"):
            pass
        # Deeper than Python's recursion limit, lowered for the test so that the
        # tree stays small (each level costs a walk of the whole path).
        limit = _stack_depth() + 200
        self.addCleanup(sys.setrecursionlimit, sys.getrecursionlimit())
        sys.setrecursionlimit(limit)
        deep = self.dir
        for _ in range(limit + 100):
            deep = os.path.join(deep, "d")
            os.mkdir(deep)
        with open(os.path.join(deep, "leaf"), "w"):
            pass
        os.symlink(outside, os.path.join(self.dir, "escape"))
        reply = self.perform(action="remove", path=self.dir, recursive=True)
        self.assertTrue(reply["ok"], reply)
        self.assertFalse(os.path.exists(self.dir))
        self.assertTrue(os.path.exists(os.path.join(outside, "keep")))

    def test_remove_errors(self) -> None:
        """``/`` (however spelled) is ``invalid``; a missing path ``not_found``."""
        for root in ("/", "//", "/..", "/./"):
            self.assertFails(self.perform(action="remove", path=root, recursive=True), "invalid")
        self.assertFails(self.perform(action="remove", path=self.root + "/nope"), "not_found")

    def test_bad_headers(self) -> None:
        """Unknown actions, relative paths, non-boolean flags and bad modes are ``invalid``."""
        self.assertFails(self.perform(action="chmod", path=self.file), "invalid")
        self.assertFails(self.perform(action="stat", path="etc"), "invalid")
        self.assertFails(self.perform(action="stat"), "invalid")
        self.assertFails(self.perform(action="remove", path=self.dir, recursive="yes"), "invalid")
        for mode in ("0755", -1, 0o10000, True):
            self.assertFails(self.perform(action="mkdir", path=self.root + "/m", mode=mode), "invalid")

    def test_refusals(self) -> None:
        """A bad header's reply names the field; the first wrong one wins: action, path, mode, recursive."""
        for header, message in [
            ({"action": "chmod", "path": 1}, "unknown action 'chmod'"),
            ({"path": "/"}, "unknown action None"),
            ({"action": "stat"}, "path is required"),
            ({"action": "stat", "path": "etc", "recursive": 1}, "path must be absolute: 'etc'"),
            ({"action": "readdir", "path": "/a\x00"}, "path must not contain NUL"),
            ({"action": "mkdir", "path": "/m", "mode": True, "recursive": 1}, "mode must be an integer from 0 to 0o7777"),
            ({"action": "mkdir", "path": "/m", "recursive": "yes"}, "recursive must be true or false"),
            ({"action": "remove", "path": "/m", "recursive": "yes", "mode": "x"}, "recursive must be true or false"),
        ]:
            self.assertEqual(perform(header), {"ok": False, "error": "invalid", "message": message})

    def test_permission_denied(self) -> None:
        """An EACCES/EPERM/EROFS failure is ``permission_denied``."""
        import errno

        for code in (errno.EACCES, errno.EPERM, errno.EROFS):
            self.assertEqual(fs.error_from_os(OSError(code, "no"), "/x").kind, "permission_denied")
        self.assertEqual(fs.error_from_os(OSError(errno.EIO, "io"), "/x").kind, "io_error")

    def test_cancelled_removal_stops(self) -> None:
        """A recursive removal stops between entries once cancelled, leaving the rest."""
        with self.assertRaises(fs.Cancelled):
            fs.do_remove(self.dir, True, lambda: True)
        self.assertTrue(os.path.exists(self.dir))


def _stack_depth() -> int:
    """How many frames the stack holds now."""
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth
