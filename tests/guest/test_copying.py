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

from vmservice.guest import copying as cp
from vmservice.wire import payloads
from vmservice.guest.filesystem import FsError


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


def make_tar(entries: list[tuple[str, Any]]) -> bytes:
    """
    A tar of ``entries``: ``(name, bytes)`` files, ``(name, None)`` directories,
    ``(name, ("sym"|"hard", target))`` links, ``(name, ("fifo",))``.
    """
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, value in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 1_600_000_000
            if value is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o750
                tar.addfile(info)
            elif isinstance(value, bytes):
                info.size, info.mode = len(value), 0o640
                tar.addfile(info, io.BytesIO(value))
            elif value[0] == "fifo":
                info.type = tarfile.FIFOTYPE
                tar.addfile(info)
            else:
                info.type = tarfile.SYMTYPE if value[0] == "sym" else tarfile.LNKTYPE
                info.linkname = value[1]
                tar.addfile(info)
    return out.getvalue()


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
                raise cp._Cancelled()
            return chunk

        with self.assertRaises(cp._Cancelled):
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
