# -*- test-case-name: tests.guest.test_copying,tests.integration.guest.test_copying -*-
"""
Extracting a tar stream below a directory, refusing what is unsafe: names that
are absolute or climb out, links that point outside, writes through a symlink,
devices and FIFOs.
"""

from __future__ import annotations

import os
import posixpath
import stat
from typing import TYPE_CHECKING, Callable, Optional

from vmservice.guest.copying.bridge import FileReader
from vmservice.guest.copying.writing import CHUNK, DIRECTORY_MODE, body_chunks, chown, temp_name, write_atomically
from vmservice.guest.filesystem import FsError
from vmservice.wire.excludes import Excludes

if TYPE_CHECKING:
    import tarfile


def member_path(name: str) -> str:
    """
    The normalised relative path of a tar entry named ``name`` (``""`` for the
    archive's root, ``.``).

    :raises FsError: ``unsafe_entry`` for an absolute name or one that climbs
        out with ``..``.
    """
    if not name or "\x00" in name:
        raise FsError("unsafe_entry", f"tar entry {name!r}: empty or invalid name")
    if name.startswith("/"):
        raise FsError("unsafe_entry", f"tar entry {name!r}: absolute names are refused")
    normal = posixpath.normpath(name)
    if normal == ".." or normal.startswith("../"):
        raise FsError("unsafe_entry", f"tar entry {name!r}: climbs out of the destination with ..")
    return "" if normal == "." else normal


def _inside(path: str, base: str) -> bool:
    base = base.rstrip("/") or "/"
    return path == base or path.startswith(base if base == "/" else base + "/")


def link_target_inside(root: str, rel: str, target: str) -> bool:
    """
    Whether a symlink at ``rel`` (relative to ``root``) pointing at ``target``
    stays inside ``root``, lexically: an absolute target must lie under ``root``
    (as given or as resolved), a relative one must not climb above it.
    """
    if not target or "\x00" in target:
        return False
    if target.startswith("/"):
        normal = posixpath.normpath(target)
        return _inside(normal, posixpath.normpath(root)) or _inside(normal, os.path.realpath(root))
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    return joined != ".." and not joined.startswith("../")


class Extraction:
    """
    Extracts one tar stream below ``root``, refusing what is unsafe (see the
    package docstring, :mod:`vmservice.guest.copying`).
    """

    def __init__(
        self,
        root: str,
        uid: Optional[int],
        gid: Optional[int],
        excludes: Optional[Excludes] = None,
        link_root: Optional[str] = None,
    ) -> None:
        """
        :param root: where entries are written.
        :param excludes: entries left out.
        :param link_root: where ``root`` ends up (a staging directory is
            renamed into place): absolute symlink targets must lie below it.
        """
        self.root = root
        self.uid = uid
        self.gid = gid
        self.excludes = excludes or Excludes()
        self.link_root = link_root or root
        self.entries = 0
        self._directories: set[str] = {""}
        self._modes: list[tuple[str, int, float]] = []

    def _path(self, rel: str) -> str:
        return os.path.join(self.root, rel) if rel else self.root

    def _ensure_directories(self, rel: str) -> None:
        """Make ``rel``'s directories below the root, refusing to go through a symlink."""
        if rel in self._directories:
            return
        prefix = ""
        for part in rel.split("/"):
            prefix = f"{prefix}/{part}" if prefix else part
            if prefix in self._directories:
                continue
            path = self._path(prefix)
            try:
                status = os.lstat(path)
            except FileNotFoundError:
                os.mkdir(path, 0o700)
                chown(path, self.uid, self.gid)
                os.chmod(path, DIRECTORY_MODE)
            else:
                if stat.S_ISLNK(status.st_mode):
                    raise FsError("unsafe_entry", f"{prefix}: refusing to extract through a symlink")
                if not stat.S_ISDIR(status.st_mode):
                    raise FsError("not_a_directory", f"{prefix}: exists and is not a directory")
            self._directories.add(prefix)

    def _not_a_directory(self, rel: str) -> None:
        """Refuse to replace a directory by a file or link."""
        try:
            status = os.lstat(self._path(rel))
        except FileNotFoundError:
            return
        if stat.S_ISDIR(status.st_mode):
            raise FsError("exists", f"{rel}: is a directory in the destination")

    def _replace_with_link(self, target: str, make: Callable[[str], None]) -> None:
        temp = temp_name(target)
        make(temp)
        try:
            chown(temp, self.uid, self.gid)
            os.rename(temp, target)
        except BaseException:
            try:
                os.unlink(temp)
            except OSError:
                pass
            raise

    def add(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        """Extract ``member`` of ``tar`` (a :class:`tarfile.TarFile` read as a stream)."""
        rel = member_path(member.name)
        if rel == "":
            if not member.isdir():
                raise FsError("unsafe_entry", f"tar entry {member.name!r}: names the destination itself")
            return
        if self.excludes.excludes(rel):
            return
        self._ensure_directories(posixpath.dirname(rel))
        path = self._path(rel)
        mode = member.mode & 0o7777
        if member.isdir():
            try:
                status: Optional[os.stat_result] = os.lstat(path)
            except FileNotFoundError:
                status = None
            if status is None:
                os.mkdir(path, 0o700)
                chown(path, self.uid, self.gid)
            elif not stat.S_ISDIR(status.st_mode):
                raise FsError("exists", f"{rel}: exists and is not a directory")
            self._directories.add(rel)
            self._modes.append((rel, mode, float(member.mtime)))
        elif member.isreg():
            self._not_a_directory(rel)
            source = tar.extractfile(member)
            assert source is not None  # always a file object for a regular member
            write_atomically(path, body_chunks(source.read), mode, self.uid, self.gid, fsync=False,
                             mtime=float(member.mtime))
        elif member.issym():
            if not link_target_inside(self.link_root, rel, member.linkname):
                raise FsError("unsafe_entry", f"tar entry {rel!r}: symlink to {member.linkname!r} points outside")
            self._not_a_directory(rel)
            self._replace_with_link(path, lambda temp: os.symlink(member.linkname, temp))
        elif member.islnk():
            try:
                source_rel = member_path(member.linkname)
            except FsError:
                raise FsError("unsafe_entry", f"tar entry {rel!r}: hard link to {member.linkname!r} points outside")
            if source_rel == "":
                raise FsError("unsafe_entry", f"tar entry {rel!r}: hard link to the destination itself")
            if self.excludes.excludes(source_rel):
                return
            self._ensure_directories(posixpath.dirname(source_rel))
            source_path = self._path(source_rel)
            try:
                source_status = os.lstat(source_path)
            except FileNotFoundError:
                raise FsError("bad_archive", f"tar entry {rel!r}: hard link to {source_rel!r}, not extracted") from None
            if not stat.S_ISREG(source_status.st_mode):
                raise FsError("unsafe_entry", f"tar entry {rel!r}: hard link to a non-file {source_rel!r}")
            self._not_a_directory(rel)
            self._replace_with_link(path, lambda temp: os.link(source_path, temp, follow_symlinks=False))
        else:
            raise FsError("unsupported_entry", f"tar entry {rel!r}: devices and FIFOs are not extracted")
        self.entries += 1

    def apply_modes(self, root: str) -> None:
        """Set the archive's directory modes and mtimes below ``root`` (deepest first, after their contents)."""
        for rel, mode, mtime in reversed(self._modes):
            path = os.path.join(root, rel)
            os.chmod(path, mode)
            os.utime(path, (mtime, mtime))

    def finish(self, permissions: Optional[int]) -> None:
        """Set directory modes and mtimes, ``permissions`` on the root, then sync."""
        self.apply_modes(self.root)
        if permissions is not None:
            os.chmod(self.root, permissions)
        os.sync()


def extract(extraction: Extraction, read: Callable[[int], bytes]) -> None:
    """Extract the tar stream from ``read`` with ``extraction``, then take the rest of the body."""
    import tarfile

    # typeshed asks any file object for read, write, seek, tell and close;
    # tarfile's stream modes only read ("r|") or only write ("w|").
    with tarfile.open(fileobj=FileReader(read), mode="r|", bufsize=CHUNK) as tar:  # type: ignore[call-overload]
        for member in tar:
            extraction.add(tar, member)
    # The archive's end may be followed by padding: take all of the body.
    while read(CHUNK):
        pass


__all__ = ["Extraction", "extract", "link_target_inside", "member_path"]
