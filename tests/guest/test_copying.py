# -*- test-case-name: tests.guest.test_copying -*-
"""
Tests for :mod:`vmservice.guest.copying`: tar-name and link-target safety with
hypothesis, atomic replacement, and uploads and downloads in-process against
temporary directories.  Both handlers, whose work runs on threads, are served
by a real :class:`~vmservice.guest.agent.Session` and
:class:`~vmservice.guest.agent.Loop` in
:mod:`tests.integration.guest.test_copying`.
"""

from __future__ import annotations

import io
import os
import posixpath
import shutil
import stat
import tarfile
import tempfile
from typing import Any, Callable

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.guest.tars import make_tar
from vmservice.guest import copying as cp
from vmservice.guest.copying.errors import Cancelled
from vmservice.wire.excludes import Excludes
from vmservice.guest.filesystem import FsError
from vmservice.wire import payloads


def _temp_dir(case: SynchronousTestCase) -> str:
    path = tempfile.mkdtemp(prefix="vmscp-", dir="/tmp")
    case.addCleanup(shutil.rmtree, path, True)
    return path


def _reader(data: bytes, piece: int = 7000) -> Callable[[int], bytes]:
    """A body ``read`` function that hands out ``data`` in small, odd pieces."""
    stream = io.BytesIO(data)

    def read(size: int = -1) -> bytes:
        return stream.read(min(piece, size) if size >= 0 else piece)

    return read


def _tree(root: str) -> dict[str, Any]:
    """Everything below ``root``: contents or link targets, and modes."""
    found: dict[str, Any] = {}
    for rel in cp.walk(root):
        path = os.path.join(root, rel)
        status = os.lstat(path)
        if stat.S_ISLNK(status.st_mode):
            found[rel] = ("link", os.readlink(path))
        elif stat.S_ISDIR(status.st_mode):
            found[rel] = ("dir", stat.S_IMODE(status.st_mode))
        else:
            with open(path, "rb") as f:
                found[rel] = (f.read(), stat.S_IMODE(status.st_mode))
    return found


_SEGMENT = st.sampled_from(["a", "b", "..", ".", "", "c.d", "x y", "é"])


class SafetyTests(SynchronousTestCase):
    """Which tar names and link targets are refused."""

    @settings(deadline=None)
    @given(st.lists(_SEGMENT, min_size=1, max_size=6), st.booleans())
    def test_member_path(self, segments: list[str], absolute: bool) -> None:
        """
        A name is refused exactly when it is absolute or its normal form climbs
        out; an accepted one is relative, has no ``..`` and stays below any root.
        """
        name = ("/" if absolute else "") + "/".join(segments)
        normal = posixpath.normpath(name) if name else ""
        unsafe = not name or name.startswith("/") or normal == ".." or normal.startswith("../")
        if unsafe:
            with self.assertRaises(FsError) as caught:
                cp.member_path(name)
            self.assertEqual(caught.exception.kind, "unsafe_entry")
            return
        rel = cp.member_path(name)
        self.assertFalse(rel.startswith("/"))
        self.assertNotIn("..", rel.split("/"))
        self.assertTrue(posixpath.normpath(posixpath.join("/dest", rel)).startswith("/dest"))

    @settings(deadline=None)
    @given(st.lists(_SEGMENT, max_size=4), st.lists(_SEGMENT, min_size=1, max_size=5), st.booleans())
    def test_link_target(self, where: list[str], target: list[str], absolute: bool) -> None:
        """
        A symlink target is accepted exactly when, resolved lexically from the
        link's directory, it stays below the destination.
        """
        rel = posixpath.normpath("/".join(where + ["link"]))
        if rel.startswith("..") or rel.startswith("/"):
            return
        text = ("/dest/" if absolute else "") + "/".join(target)
        if not text:
            return
        base = "/" if absolute else posixpath.join("/dest", posixpath.dirname(rel))
        resolved = posixpath.normpath(posixpath.join(base, text))
        expected = resolved == "/dest" or resolved.startswith("/dest/")
        self.assertEqual(cp.link_target_inside("/dest", rel, text), expected, (rel, text))

    def test_absolute_link_outside(self) -> None:
        """Absolute targets outside the destination, and empty ones, are refused."""
        self.assertFalse(cp.link_target_inside("/dest", "a", "/etc/passwd"))
        self.assertFalse(cp.link_target_inside("/dest", "a", "/destination/x"))
        self.assertFalse(cp.link_target_inside("/dest", "a", ""))
        self.assertTrue(cp.link_target_inside("/dest", "a", "/dest/b"))


class UploadTests(SynchronousTestCase):
    """Uploads in-process, against a temporary directory."""

    def setUp(self) -> None:
        self.root = _temp_dir(self)

    def test_new_file_with_parents(self) -> None:
        """A binary upload makes missing parents 0755 and the file 0644 by default."""
        path = os.path.join(self.root, "a", "b", "f")
        result = cp.upload_file(path, _reader(b"x" * 100_000))
        self.assertEqual(result, {"path": path, "size": 100_000})
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"x" * 100_000)
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o644)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode), 0o755)
        self.assertEqual(os.listdir(os.path.dirname(path)), ["f"])

    def test_replace_keeps_mode_or_sets_it(self) -> None:
        """Replacing keeps the old mode unless permissions say otherwise; the inode changes (rename)."""
        path = os.path.join(self.root, "f")
        with open(path, "wb") as f:
            f.write(b"old")
        os.chmod(path, 0o600)
        before = os.stat(path).st_ino
        cp.upload_file(path, _reader(b"new"))
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        self.assertNotEqual(os.stat(path).st_ino, before)
        cp.upload_file(path, _reader(b"newer"), permissions=0o4711)
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o4711)

    def test_owner(self) -> None:
        """uid and gid are applied to the file and to the parents made for it."""
        path = os.path.join(self.root, "d", "f")
        cp.upload_file(path, _reader(b"x"), uid=1234, gid=2345)
        self.assertEqual((os.stat(path).st_uid, os.stat(path).st_gid), (1234, 2345))
        self.assertEqual(os.stat(os.path.dirname(path)).st_uid, 1234)

    def test_failure_leaves_old_file(self) -> None:
        """A body that fails half-way (a reset) leaves the old file and no temporary file."""
        path = os.path.join(self.root, "f")
        with open(path, "wb") as f:
            f.write(b"old")
        pieces = iter([b"new", b"more"])

        def read(size: int) -> bytes:
            chunk = next(pieces, None)
            if chunk is None:
                raise Cancelled()
            return chunk

        with self.assertRaises(Cancelled):
            cp.upload_file(path, read)
        self.assertEqual(os.listdir(self.root), ["f"])
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"old")

    def test_directory_refused(self) -> None:
        """A binary upload onto a directory is is_a_directory; onto a file's child, not_a_directory."""
        with self.assertRaises(FsError) as caught:
            cp.upload_file(self.root, _reader(b"x"))
        self.assertEqual(caught.exception.kind, "is_a_directory")
        with open(os.path.join(self.root, "file"), "wb"):
            pass
        with self.assertRaises(FsError) as caught:
            cp.upload_file(os.path.join(self.root, "file", "x"), _reader(b"x"))
        self.assertEqual(caught.exception.kind, "not_a_directory")

    def test_symlink_replaced_not_followed(self) -> None:
        """A symlink at the path is replaced by the file; its target is untouched."""
        target = os.path.join(self.root, "target")
        with open(target, "wb") as f:
            f.write(b"keep")
        link = os.path.join(self.root, "link")
        os.symlink(target, link)
        cp.upload_file(link, _reader(b"new"))
        self.assertFalse(os.path.islink(link))
        with open(target, "rb") as f:
            self.assertEqual(f.read(), b"keep")

    def test_tar_round_trip(self) -> None:
        """A tar with files, directories and links is extracted with its modes; entries are counted."""
        dest = os.path.join(self.root, "dest")
        data = make_tar([("d", None), ("d/f", b"hello"), ("top", b"x" * 300_000), ("d/l", ("sym", "f")),
                         ("h", ("hard", "top")), ("./e/g", b"deep")])
        result = cp.upload_tar(dest, _reader(data + b"\0" * 10240), permissions=0o700)
        self.assertEqual(result, {"path": dest, "entries": 6})
        tree = _tree(dest)
        self.assertEqual(tree["d"], ("dir", 0o750))
        self.assertEqual(tree["d/f"], (b"hello", 0o640))
        self.assertEqual(tree["d/l"], ("link", "f"))
        self.assertEqual(tree["e"], ("dir", 0o755))
        self.assertEqual(os.stat(os.path.join(dest, "h")).st_ino, os.stat(os.path.join(dest, "top")).st_ino)
        self.assertEqual(stat.S_IMODE(os.stat(dest).st_mode), 0o700)
        self.assertEqual(os.stat(os.path.join(dest, "d", "f")).st_mtime, 1_600_000_000)

    @settings(max_examples=30, deadline=None)
    @given(st.lists(st.tuples(st.lists(_SEGMENT, min_size=1, max_size=4), st.booleans()), min_size=1, max_size=4),
           st.sampled_from(["file", "sym", "hard", "dir"]))
    def test_nothing_written_outside(self, names: list[tuple[list[str], bool]], kind: str) -> None:
        """
        Whatever the names (absolute, with ``..``) and link targets, an upload
        either succeeds or fails with an unsafe/invalid-entry error, and never
        creates anything outside the destination.
        """
        outer = tempfile.mkdtemp(prefix="vmscp-", dir="/tmp")
        try:
            dest = os.path.join(outer, "in", "dest")
            os.makedirs(dest)
            entries: list[tuple[str, Any]] = []
            for segments, absolute in names:
                name = ("/" if absolute else "") + "/".join(segments) or "x"
                if kind == "file":
                    entries.append((name, b"data"))
                elif kind == "dir":
                    entries.append((name, None))
                else:
                    entries.append(("l" + str(len(entries)), (kind, name.replace("/in/", outer + "/in/"))))
            try:
                cp.upload_tar(dest, _reader(make_tar(entries)))
            except FsError as e:
                self.assertIn(e.kind, ("unsafe_entry", "bad_archive", "exists", "not_a_directory"), e.message)
            self.assertEqual(os.listdir(outer), ["in"])
            self.assertEqual(os.listdir(os.path.join(outer, "in")), ["dest"])
        finally:
            shutil.rmtree(outer, True)

    def test_unsafe_entries_refused(self) -> None:
        """Absolute names, .., links out and devices stop the upload; earlier entries stay."""
        cases = [
            ([("ok", b"1"), ("/etc/evil", b"x")], "unsafe_entry"),
            ([("ok", b"1"), ("a/../../evil", b"x")], "unsafe_entry"),
            ([("ok", b"1"), ("l", ("sym", "../outside"))], "unsafe_entry"),
            ([("ok", b"1"), ("l", ("sym", "/etc/passwd"))], "unsafe_entry"),
            ([("ok", b"1"), ("l", ("hard", "../outside"))], "unsafe_entry"),
            ([("ok", b"1"), ("p", ("fifo",))], "unsupported_entry"),
        ]
        for entries, kind in cases:
            dest = tempfile.mkdtemp(prefix="vmscp-", dir=self.root)
            with self.assertRaises(FsError) as caught:
                cp.upload_tar(dest, _reader(make_tar(entries)))
            self.assertEqual(caught.exception.kind, kind, entries)
            self.assertEqual(sorted(os.listdir(dest)), ["ok"], entries)
        self.assertEqual(len(os.listdir(self.root)), len(cases))

    def test_no_writes_through_symlinks(self) -> None:
        """An entry below an inside symlink that resolves outside is refused (the symlink is not followed)."""
        outside = os.path.join(self.root, "outside")
        os.mkdir(outside)
        dest = os.path.join(self.root, "dest")
        os.mkdir(dest)
        os.symlink(outside, os.path.join(dest, "escape"))
        with self.assertRaises(FsError) as caught:
            cp.upload_tar(dest, _reader(make_tar([("escape/f", b"x")])))
        self.assertEqual(caught.exception.kind, "unsafe_entry")
        self.assertEqual(os.listdir(outside), [])
        # A symlink entry followed by an entry below it (the classic two-step escape):
        with self.assertRaises(FsError):
            cp.upload_tar(dest, _reader(make_tar([("sub", ("sym", ".")), ("sub/x", b"x")])))
        self.assertEqual(os.listdir(outside), [])

    def test_bad_archive(self) -> None:
        """A body that is not a tar (or is gzipped) is bad_archive."""
        with self.assertRaises(FsError) as caught:
            cp.upload_tar(os.path.join(self.root, "d"), _reader(b"not a tar at all" * 100))
        self.assertEqual(caught.exception.kind, "bad_archive")


class DownloadTests(SynchronousTestCase):
    """Downloads in-process, against a temporary directory."""

    def setUp(self) -> None:
        self.root = _temp_dir(self)

    def run_download(self, path: str, mode: str) -> tuple[dict[str, Any], bytes]:
        out = bytearray()
        cp.download(path, mode, out.extend)
        decoded = payloads.decode_head(bytes(out))
        assert decoded is not None
        head, used = decoded
        return head, bytes(out[used:])

    def test_binary(self) -> None:
        """A file comes back whole, with its mode, name and size in the head."""
        path = os.path.join(self.root, "file.bin")
        data = os.urandom(700_000)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, 0o751)
        head, body = self.run_download(path, "binary")
        self.assertEqual(head, {"ok": True, "result": {"type": "file", "name": "file.bin", "mode": 0o751, "size": 700_000}})
        self.assertEqual(body, data)

    def test_binary_errors(self) -> None:
        """A directory names the words clients look for; a missing path is not_found."""
        head, body = self.run_download(self.root, "binary")
        self.assertEqual(head["error"], "is_a_directory")
        self.assertIn("must specify a file not a directory", head["message"])
        self.assertEqual(body, b"")
        head, _ = self.run_download(os.path.join(self.root, "missing"), "binary")
        self.assertEqual(head["error"], "not_found")

    def test_tar_of_directory(self) -> None:
        """A directory's tar holds its contents (no top-level entry) with modes and links, and round-trips."""
        src = os.path.join(self.root, "src")
        os.makedirs(os.path.join(src, "sub"))
        with open(os.path.join(src, "sub", "f"), "wb") as f:
            f.write(b"content")
        os.chmod(os.path.join(src, "sub", "f"), 0o604)
        os.chmod(os.path.join(src, "sub"), 0o711)
        os.symlink("sub/f", os.path.join(src, "link"))
        head, body = self.run_download(src, "tar")
        self.assertEqual(head["result"]["type"], "directory")
        self.assertEqual(body[257:262], b"ustar")
        with tarfile.open(fileobj=io.BytesIO(body)) as tar:
            self.assertEqual(tar.getnames(), ["link", "sub", "sub/f"])
        dest = os.path.join(self.root, "dest")
        cp.upload_tar(dest, _reader(body))
        self.assertEqual(_tree(dest), _tree(src))

    def test_tar_of_file(self) -> None:
        """A file's tar has one entry, its base name."""
        path = os.path.join(self.root, "one")
        with open(path, "wb") as f:
            f.write(b"1")
        head, body = self.run_download(path, "tar")
        self.assertEqual(head["result"]["type"], "file")
        with tarfile.open(fileobj=io.BytesIO(body)) as tar:
            self.assertEqual(tar.getnames(), ["one"])


def _write(path: str, data: bytes = b"x") -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class PlacementTests(SynchronousTestCase):
    """The cp-v1 placement rules, on real directories."""

    def setUp(self) -> None:
        self.root = _temp_dir(self)
        self.dir = os.path.join(self.root, "dir")
        self.file = os.path.join(self.root, "file")
        os.mkdir(self.dir)
        _write(self.file)

    def assertKind(self, kind: str, call: Callable[[], object]) -> None:
        with self.assertRaises(FsError) as caught:
            call()
        self.assertEqual(caught.exception.kind, kind, caught.exception.message)

    def test_file_rules(self) -> None:
        """File: existing directory -> dir/name; existing file -> itself; missing -> itself; missing with / -> error."""
        self.assertEqual(cp.file_target(self.dir, "n"), os.path.join(self.dir, "n"))
        self.assertEqual(cp.file_target(self.dir + "/", "n"), os.path.join(self.dir, "n"))
        self.assertEqual(cp.file_target(self.dir + "/.", "n"), os.path.join(self.dir, "n"))
        self.assertEqual(cp.file_target(self.file, "n"), self.file)
        missing = os.path.join(self.root, "new")
        self.assertEqual(cp.file_target(missing, "n"), missing)
        self.assertEqual(cp.file_target(os.path.join(missing, "deeper"), "n"), os.path.join(missing, "deeper"))
        self.assertKind("missing_destination", lambda: cp.file_target(missing + "/", "n"))

    def test_file_rule_errors(self) -> None:
        """A directory destination needs a name, and dir/name must not be a directory; a file's child is not_a_directory."""
        self.assertKind("invalid", lambda: cp.file_target(self.dir, None))
        os.mkdir(os.path.join(self.dir, "taken"))
        self.assertKind("is_a_directory", lambda: cp.file_target(self.dir, "taken"))
        self.assertKind("not_a_directory", lambda: cp.file_target(self.file + "/x", "n"))

    def test_file_rule_follows_symlink_to_directory(self) -> None:
        """A symlink to a directory is that directory: the file lands inside it."""
        link = os.path.join(self.root, "link")
        os.symlink(self.dir, link)
        self.assertEqual(cp.file_target(link, "n"), os.path.join(link, "n"))

    def test_directory_rules(self) -> None:
        """Directory: non-directory -> error; copy-contents -> merge; existing -> dest/name; missing -> create."""
        self.assertKind("not_a_directory", lambda: cp.directory_target(self.file, "n", False))
        self.assertEqual(cp.directory_target(self.dir, "n", True), (self.dir, True))
        self.assertEqual(cp.directory_target(self.dir + "/", None, True), (self.dir, True))
        self.assertEqual(cp.directory_target(self.dir, "n", False), (os.path.join(self.dir, "n"), False))
        os.mkdir(os.path.join(self.dir, "n"))
        self.assertEqual(cp.directory_target(self.dir, "n", False), (os.path.join(self.dir, "n"), True))
        missing = os.path.join(self.root, "new")
        self.assertEqual(cp.directory_target(missing + "/", "n", False), (missing, False))
        self.assertEqual(cp.directory_target(missing, None, True), (missing, False))

    def test_directory_rule_errors(self) -> None:
        """dest/name that is a file is not_a_directory; a needed name that is absent is invalid."""
        _write(os.path.join(self.dir, "f"))
        self.assertKind("not_a_directory", lambda: cp.directory_target(self.dir, "f", False))
        self.assertKind("invalid", lambda: cp.directory_target(self.dir, None, False))

    def test_source_name(self) -> None:
        """A source name is a base name; empty is absent."""
        self.assertIsNone(cp.source_name(None))
        self.assertIsNone(cp.source_name(""))
        self.assertEqual(cp.source_name("a b.é"), "a b.é")
        for bad in ("a/b", ".", "..", "x\x00", 3):
            self.assertKind("invalid", lambda: cp.source_name(bad))


class UploadV1Tests(SynchronousTestCase):
    """cp-v1 uploads: placement, staging, merges and what a failure leaves."""

    def setUp(self) -> None:
        self.root = _temp_dir(self)

    def test_file_into_directory(self) -> None:
        """A file sent to an existing directory lands inside it under its name."""
        result = cp.upload_file_v1(self.root, "f.txt", _reader(b"hello"), permissions=0o600)
        target = os.path.join(self.root, "f.txt")
        self.assertEqual(result, {"path": target, "size": 5})
        self.assertEqual(_read(target), b"hello")
        self.assertEqual(stat.S_IMODE(os.stat(target).st_mode), 0o600)

    def test_file_failure_leaves_nothing(self) -> None:
        """A file whose body fails leaves neither the file nor the parents made for it."""
        def read(size: int) -> bytes:
            raise Cancelled()

        with self.assertRaises(Cancelled):
            cp.upload_file_v1(os.path.join(self.root, "a", "b", "f"), "f", read)
        self.assertEqual(os.listdir(self.root), [])

    def test_new_directory(self) -> None:
        """A directory to a missing path becomes it (0755, or permissions); no staging is left."""
        dest = os.path.join(self.root, "p", "new")
        result = cp.upload_tar_v1(dest, "src", False, _reader(make_tar([("a", b"1"), ("d", None), ("d/b", b"2")])),
                                  permissions=0o750)
        self.assertEqual(result, {"path": dest, "entries": 3})
        self.assertEqual(_tree(dest), {"a": (b"1", 0o640), "d": ("dir", 0o750), "d/b": (b"2", 0o640)})
        self.assertEqual(stat.S_IMODE(os.stat(dest).st_mode), 0o750)
        self.assertEqual(os.listdir(os.path.dirname(dest)), ["new"])

    def test_into_existing_directory(self) -> None:
        """A directory to an existing one lands as dest/name, and a second copy merges into dest/name."""
        result = cp.upload_tar_v1(self.root, "src", False, _reader(make_tar([("a", b"1")])))
        target = os.path.join(self.root, "src")
        self.assertEqual(result["path"], target)
        self.assertEqual(_tree(target), {"a": (b"1", 0o640)})
        cp.upload_tar_v1(self.root, "src", False, _reader(make_tar([("b", b"2")])))
        self.assertEqual(_tree(target), {"a": (b"1", 0o640), "b": (b"2", 0o640)})
        self.assertEqual(os.listdir(self.root), ["src"])

    def test_copy_contents_merges(self) -> None:
        """copy_contents merges: files kept, replaced and added; directories merged; no staging left."""
        _write(os.path.join(self.root, "keep"), b"keep")
        _write(os.path.join(self.root, "over"), b"old")
        _write(os.path.join(self.root, "d", "old"), b"old")
        data = make_tar([("over", b"new"), ("d", None), ("d/new", b"n"), ("e", None), ("e/f", b"f")])
        result = cp.upload_tar_v1(self.root, None, True, _reader(data))
        self.assertEqual(result, {"path": self.root, "entries": 5})
        tree = _tree(self.root)
        self.assertEqual({rel: value[0] for rel, value in tree.items()},
                         {"keep": b"keep", "over": b"new", "d": "dir", "d/old": b"old", "d/new": b"n", "e": "dir",
                          "e/f": b"f"})
        self.assertEqual(tree["d"], ("dir", 0o750))

    def test_refused_new_directory_leaves_nothing(self) -> None:
        """An unsafe entry after good ones leaves no target, no staging and no parents made."""
        dest = os.path.join(self.root, "p", "q", "new")
        with self.assertRaises(FsError) as caught:
            cp.upload_tar_v1(dest, "n", False, _reader(make_tar([("ok", b"1"), ("../evil", b"x")])))
        self.assertEqual(caught.exception.kind, "unsafe_entry")
        self.assertEqual(os.listdir(self.root), [])

    def test_refused_merge_leaves_destination(self) -> None:
        """A refused or broken archive merged into a directory leaves it exactly as it was."""
        _write(os.path.join(self.root, "over"), b"old")
        before = _tree(self.root)
        for body in (make_tar([("over", b"new"), ("l", ("sym", "/etc"))]),
                     make_tar([("over", b"new"), ("more", b"x" * 100_000)])[:30_000]):
            with self.assertRaises(FsError):
                cp.upload_tar_v1(self.root, None, True, _reader(body))
            self.assertEqual(_tree(self.root), before)

    def test_merge_conflicts(self) -> None:
        """A file against a directory, a directory against a file or through a symlink: refused, nothing moved."""
        _write(os.path.join(self.root, "dir", "x"))
        _write(os.path.join(self.root, "file"))
        os.mkdir(os.path.join(self.root, "real"))
        os.symlink("real", os.path.join(self.root, "link"))
        before = _tree(self.root)
        for entries, kind in [([("a", b"1"), ("dir", b"f")], "exists"),
                              ([("a", b"1"), ("file", None), ("file/y", b"y")], "exists"),
                              ([("a", b"1"), ("link", None), ("link/y", b"y")], "unsafe_entry")]:
            with self.assertRaises(FsError) as caught:
                cp.upload_tar_v1(self.root, None, True, _reader(make_tar(entries)))
            self.assertEqual(caught.exception.kind, kind, entries)
            self.assertEqual(_tree(self.root), before, entries)

    def test_merge_across_file_systems(self) -> None:
        """Where a rename out of the staging crosses file systems (EXDEV), entries are copied beside and renamed."""
        import errno

        real_rename = os.rename
        crossed: list[str] = []

        def rename(source: str, destination: str) -> None:
            if "/.vmservice-" in source and "/.vmservice-" not in destination:
                crossed.append(os.path.relpath(destination, self.root))
                raise OSError(errno.EXDEV, "Invalid cross-device link")
            real_rename(source, destination)

        self.patch(os, "rename", rename)
        _write(os.path.join(self.root, "d", "old"), b"old")
        _write(os.path.join(self.root, "over"), b"old")
        data = make_tar([("over", b"new"), ("d", None), ("d/new", b"n"), ("e", None), ("e/f", b"f"),
                         ("e/l", ("sym", "f"))])
        cp.upload_tar_v1(self.root, None, True, _reader(data), uid=1234, gid=2345)
        self.assertEqual(sorted(crossed), ["d/new", "e", "over"])
        tree = _tree(self.root)
        self.assertEqual(tree, {"d": ("dir", 0o750), "d/old": (b"old", 0o644), "d/new": (b"n", 0o640),
                                "e": ("dir", 0o750), "e/f": (b"f", 0o640), "e/l": ("link", "f"),
                                "over": (b"new", 0o640)})
        for rel in ("d/new", "e", "e/f", "e/l", "over"):
            status = os.lstat(os.path.join(self.root, rel))
            self.assertEqual((status.st_uid, status.st_gid), (1234, 2345), rel)
        self.assertEqual(os.stat(os.path.join(self.root, "e", "f")).st_mtime, 1_600_000_000)

    def test_excludes(self) -> None:
        """Excluded entries and their contents are not extracted (nor hard links to them), in both semantics."""
        data = make_tar([("a.log", b"1"), ("keep", b"2"), ("cache", None), ("cache/x", b"3"), ("sub", None),
                         ("sub/b.log", b"4"), ("h", ("hard", "a.log"))])
        excludes = Excludes(["*.log", "cache"])
        result = cp.upload_tar_v1(os.path.join(self.root, "v1"), None, True, _reader(data), excludes=excludes)
        self.assertEqual(sorted(_tree(result["path"])), ["keep", "sub"])
        self.assertEqual(result["entries"], 2)
        result = cp.upload_tar(os.path.join(self.root, "legacy"), _reader(data), excludes=excludes)
        self.assertEqual(sorted(_tree(result["path"])), ["keep", "sub"])

    def test_absolute_link_inside_final_target(self) -> None:
        """An absolute symlink to the final directory is accepted although the archive is staged elsewhere."""
        dest = os.path.join(self.root, "new")
        cp.upload_tar_v1(dest, None, False, _reader(make_tar([("f", b"1"), ("l", ("sym", dest + "/f"))])))
        self.assertEqual(_read(os.path.join(dest, "l")), b"1")


class SpaceTests(SynchronousTestCase):
    """The unpacked-size check: refused before anything is written."""

    def setUp(self) -> None:
        self.root = _temp_dir(self)
        status = os.statvfs(self.root)
        self.free = status.f_bavail * status.f_frsize

    def test_needed(self) -> None:
        """The margin: 256 KiB plus 1/32 of the size."""
        self.assertEqual(cp.space_needed(0), 256 * 1024)
        self.assertEqual(cp.space_needed(32 * 1024 * 1024), 33 * 1024 * 1024 + 256 * 1024)

    def test_check(self) -> None:
        """A size that fits passes; one beyond the free space is no_space, named in the message."""
        cp.check_space(self.root, None)
        cp.check_space(os.path.join(self.root, "missing", "deeper"), 1000)
        with self.assertRaises(FsError) as caught:
            cp.check_space(os.path.join(self.root, "missing", "deeper"), self.free)
        self.assertEqual(caught.exception.kind, "no_space")
        self.assertIn("nothing was written", caught.exception.message)

    def test_every_upload_refuses_first(self) -> None:
        """All four kinds of upload refuse a too-large announced size without writing anything or reading the body."""
        def read(size: int) -> bytes:
            raise AssertionError("the body was read")

        too_big = self.free
        dest = os.path.join(self.root, "a", "b")
        for call in (lambda: cp.upload_file(dest, read, unpacked_size=too_big),
                     lambda: cp.upload_file_v1(dest, "n", read, unpacked_size=too_big),
                     lambda: cp.upload_tar(dest, read, unpacked_size=too_big),
                     lambda: cp.upload_tar_v1(dest, "n", False, read, unpacked_size=too_big),
                     lambda: cp.upload_tar_v1(self.root, None, True, read, unpacked_size=too_big)):
            with self.assertRaises(FsError) as caught:
                call()
            self.assertEqual(caught.exception.kind, "no_space")
            self.assertEqual(os.listdir(self.root), [])

    def test_full_file_system_is_no_space(self) -> None:
        """ENOSPC and EDQUOT met while writing are no_space; other errors keep their kinds."""
        import errno

        self.assertEqual(cp.os_error(OSError(errno.ENOSPC, "No space left on device"), "/x").kind, "no_space")
        self.assertEqual(cp.os_error(OSError(errno.EDQUOT, "Disk quota exceeded"), "/x").kind, "no_space")
        self.assertEqual(cp.os_error(OSError(errno.ENOENT, "No such file"), "/x").kind, "not_found")


class HomeTests(SynchronousTestCase):
    """``~`` for a uid."""

    def test_home_of(self) -> None:
        """No uid or 0 is root's home; another uid's comes from /etc/passwd; an unknown uid is root's (as before)."""
        from vmservice.guest.exec_spec import passwd_entry
        from vmservice.guest.filesystem import root_home

        self.assertEqual(cp.home_of(None), root_home())
        self.assertEqual(cp.home_of(0), root_home())
        nobody = passwd_entry(65534)
        if nobody is not None:
            self.assertEqual(cp.home_of(65534), nobody[1])
        self.assertEqual(cp.home_of(4_000_000_000), root_home())


class DownloadV1Tests(SynchronousTestCase):
    """Downloads: recursive, cp-v1 tar, excludes."""

    def setUp(self) -> None:
        self.root = _temp_dir(self)
        self.src = os.path.join(self.root, "src")
        _write(os.path.join(self.src, "a.txt"), b"a")
        _write(os.path.join(self.src, "b.log"), b"b")
        _write(os.path.join(self.src, "cache", "c"), b"c")
        _write(os.path.join(self.src, "sub", "d.log"), b"d")

    def run_download(self, path: str, mode: str, semantics: str = "legacy",
                     excludes: Excludes | None = None) -> tuple[dict[str, Any], bytes]:
        out = bytearray()
        cp.download(path, mode, out.extend, semantics, excludes)
        decoded = payloads.decode_head(bytes(out))
        assert decoded is not None
        head, used = decoded
        return head, bytes(out[used:])

    def names(self, body: bytes) -> list[str]:
        with tarfile.open(fileobj=io.BytesIO(body)) as tar:
            return tar.getnames()

    def test_recursive(self) -> None:
        """recursive is the raw bytes of a file and a tar of a directory."""
        head, body = self.run_download(os.path.join(self.src, "a.txt"), "recursive", "cp-v1")
        self.assertEqual((head["result"]["type"], head["result"]["size"], body), ("file", 1, b"a"))
        head, body = self.run_download(self.src, "recursive", "cp-v1")
        self.assertEqual(head["result"]["type"], "directory")
        self.assertEqual(self.names(body), ["a.txt", "b.log", "cache", "cache/c", "sub", "sub/d.log"])

    def test_cp_v1_tar_of_file(self) -> None:
        """cp-v1 tar refuses a file (not_a_directory); legacy tar sends a one-entry tar."""
        path = os.path.join(self.src, "a.txt")
        head, body = self.run_download(path, "tar", "cp-v1")
        self.assertEqual((head["error"], body), ("not_a_directory", b""))
        head, body = self.run_download(path, "tar")
        self.assertEqual(self.names(body), ["a.txt"])

    def test_binary_of_directory_in_both(self) -> None:
        """binary of a directory has the words clients look for, in both semantics."""
        for semantics in cp.SEMANTICS:
            head, _ = self.run_download(self.src, "binary", semantics)
            self.assertIn("must specify a file not a directory", head["message"])

    def test_excludes(self) -> None:
        """Excluded entries and their contents are left out of the tar."""
        _, body = self.run_download(self.src, "tar", "cp-v1", Excludes(["*.log", "cache/"]))
        self.assertEqual(self.names(body), ["a.txt", "sub"])

    def test_copy_contents_name(self) -> None:
        """A path ending in /. is the directory; its name is the directory's."""
        head, _ = self.run_download(self.src + "/.", "tar", "cp-v1")
        self.assertEqual((head["result"]["type"], head["result"]["name"]), ("directory", "src"))
