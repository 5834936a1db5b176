# -*- test-case-name: tests.guest.test_copying,tests.integration.guest.test_copying -*-
"""
Writing a copy's files: directories made with their parents (and removed again),
trees removed, the free space checked before an upload, and files written beside
their name and renamed over it.
"""

from __future__ import annotations

import os
import stat
from typing import Callable, Iterable, Iterator, Optional

from vmservice.guest.copying.errors import os_error
from vmservice.guest.filesystem import FsError, missing_directories

#: Free space kept beyond an upload's announced unpacked size, for the file
#: system's own blocks and metadata: this much, plus :data:`SPACE_SHARE`.
SPACE_MARGIN = 256 * 1024
#: ... and one ``SPACE_SHARE``-th of the announced size.
SPACE_SHARE = 32

#: Mode of the directories a copy makes (parents, a tar's missing directories).
DIRECTORY_MODE = 0o755
#: Mode of a new file of a binary upload without ``permissions``.
FILE_MODE = 0o644
#: Bytes read from a file (or handed to tarfile) at a time.
CHUNK = 256 * 1024


def _write_all(fd: int, data: bytes) -> None:
    with memoryview(data) as view:
        while view:
            written = os.write(fd, view)
            view = view[written:]


def chown(path: str, uid: Optional[int], gid: Optional[int]) -> None:
    if uid is not None or gid is not None:
        os.lchown(path, -1 if uid is None else uid, -1 if gid is None else gid)


def make_directories(path: str, uid: Optional[int] = None, gid: Optional[int] = None) -> list[str]:
    """
    Make directory ``path`` and its missing parents with mode
    :data:`DIRECTORY_MODE` (exactly: the umask does not apply), owned by
    ``uid``/``gid`` when given.  Existing directories are left alone.

    :return: the directories made, outermost first.
    :raises FsError: ``not_a_directory`` when something on the way is not one.
    """
    made = []
    for directory in missing_directories(path):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise FsError("not_a_directory", f"{directory}: exists and is not a directory") from None
            continue
        except OSError as e:
            raise os_error(e, directory) from None
        made.append(directory)
        chown(directory, uid, gid)
        os.chmod(directory, DIRECTORY_MODE)
    return made


def remove_made(directories: list[str]) -> None:
    """Remove ``directories`` (as :func:`make_directories` returned them) while they are empty, innermost first."""
    for directory in reversed(directories):
        try:
            os.rmdir(directory)
        except OSError:
            return


def remove_tree(path: str) -> None:
    """Remove ``path`` and everything below it, never following a symlink; what cannot be removed stays."""
    try:
        status = os.lstat(path)
    except OSError:
        return
    if stat.S_ISDIR(status.st_mode):
        try:
            names = os.listdir(path)
        except OSError:
            names = []
        for name in names:
            remove_tree(os.path.join(path, name))
        try:
            os.rmdir(path)
        except OSError:
            pass
        return
    try:
        os.unlink(path)
    except OSError:
        pass


def space_needed(size: int) -> int:
    """The free bytes an upload announcing ``size`` unpacked bytes needs (with the margin)."""
    return size + size // SPACE_SHARE + SPACE_MARGIN


def check_space(path: str, size: Optional[int]) -> None:
    """
    Refuse an upload of ``size`` unpacked bytes (``X-Slicer-Unpacked-Size``)
    into ``path`` when the file system that will hold it (that of ``path``,
    or of its nearest existing ancestor) has less than :func:`space_needed`
    free for an unprivileged user (``f_bavail``).  Nothing is written.

    :raises FsError: ``no_space``.
    """
    if size is None:
        return
    where = path
    while True:
        try:
            status = os.statvfs(where)
            break
        except (FileNotFoundError, NotADirectoryError):
            parent = os.path.dirname(where.rstrip("/")) or "/"
            if parent == where:
                return
            where = parent
        except OSError:
            return
    free = status.f_bavail * status.f_frsize
    needed = space_needed(size)
    if needed > free:
        raise FsError(
            "no_space",
            f"{where}: not enough free space: the upload unpacks to {size} bytes and needs {needed} "
            f"(with a margin of {SPACE_MARGIN} bytes and 1/{SPACE_SHARE}), but {free} are free; nothing was written",
        )


def temp_name(target: str) -> str:
    directory, name = os.path.split(target)
    return os.path.join(directory, f".{name[:200]}.vmservice-{os.urandom(6).hex()}")


def write_atomically(
    target: str,
    chunks: Iterable[bytes],
    mode: int,
    uid: Optional[int] = None,
    gid: Optional[int] = None,
    fsync: bool = True,
    mtime: Optional[float] = None,
    fill: Optional[Callable[[int], int]] = None,
) -> int:
    """
    Write ``chunks`` to a new file beside ``target``, set its owner, mode (and
    mtime), fsync it, and rename it over ``target``; on any failure (or
    :class:`Cancelled`) the new file is removed and ``target`` is untouched.

    :param fsync: fsync the file and then its directory (binary uploads); tar
        extraction syncs once at the end instead.
    :param fill: writes the content to the new file's descriptor and returns
        its size, in place of ``chunks`` (the bulk port's reader).
    :return: the bytes written.
    """
    temp = temp_name(target)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    size = 0
    try:
        if fill is not None:
            size = fill(fd)
        for chunk in chunks if fill is None else ():
            _write_all(fd, chunk)
            size += len(chunk)
        if uid is not None or gid is not None:
            os.fchown(fd, -1 if uid is None else uid, -1 if gid is None else gid)
        os.fchmod(fd, mode)
        if fsync:
            os.fsync(fd)
        os.close(fd)
        fd = -1
        if mtime is not None:
            os.utime(temp, (mtime, mtime))
        os.rename(temp, target)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    if fsync:
        _fsync_directory(os.path.dirname(target) or "/")
    return size


def _fsync_directory(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def body_chunks(read: Callable[[int], bytes]) -> Iterator[bytes]:
    while True:
        chunk = read(CHUNK)
        if not chunk:
            return
        yield chunk


__all__ = [
    "CHUNK",
    "DIRECTORY_MODE",
    "FILE_MODE",
    "SPACE_MARGIN",
    "SPACE_SHARE",
    "body_chunks",
    "check_space",
    "chown",
    "make_directories",
    "remove_made",
    "remove_tree",
    "space_needed",
    "temp_name",
    "write_atomically",
]
