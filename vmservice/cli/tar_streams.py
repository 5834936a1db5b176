# -*- test-case-name: tests.cli.test_copying,tests.integration.cli.test_copying -*-
"""
Directories as uncompressed tar streams for ``vmctl cp``, on the fly: packed
into a pipe (:func:`pack_directory`, its size told ahead by
:func:`unpacked_size`) and extracted from one (:func:`unpack_into`), each on a
thread at one end of the pipe while the HTTP body streams through the other.
"""

from __future__ import annotations

import os
import stat
import tarfile

from ..wire.excludes import Excludes

__all__ = ["pack_directory", "unpack_into", "unpacked_size", "write_all"]


def pack_directory(source: str, fd: int, excludes: Excludes | None = None) -> None:
    """
    Write an uncompressed tar of the contents of directory ``source`` to
    file descriptor ``fd`` (entries relative to ``source``, no top-level
    directory; modes kept; what ``excludes`` names left out, with its
    contents), then close ``fd``.  Runs in a thread: writes block while the
    pipe is full.  On failure ``fd`` is left open so the caller can fail the
    upload before the reader sees an end of file.
    """
    excludes = excludes or Excludes()

    def kept(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if excludes.excludes(info.name) else info

    stream = os.fdopen(fd, "wb", closefd=False)
    with tarfile.open(fileobj=stream, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(os.listdir(source)):
            tar.add(os.path.join(source, name), arcname=name, filter=kept)
    stream.close()
    os.close(fd)


def unpacked_size(source: str, excludes: Excludes | None = None) -> int:
    """
    The bytes of the regular files :func:`pack_directory` would pack from
    ``source`` (``X-Slicer-Unpacked-Size``: the guest checks its free space
    against it before writing).
    """
    excludes = excludes or Excludes()
    total = 0
    for directory, subdirectories, files in os.walk(source):
        rel = os.path.relpath(directory, source)
        prefix = "" if rel == "." else rel + "/"
        subdirectories[:] = [d for d in subdirectories if not excludes.excludes(prefix + d)]
        for name in files:
            if excludes.excludes(prefix + name):
                continue
            try:
                status = os.lstat(os.path.join(directory, name))
            except OSError:
                continue
            if stat.S_ISREG(status.st_mode):
                total += status.st_size
    return total


def _keep_modes(member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo | None:
    """
    :func:`tarfile.data_filter` (nothing outside ``destination``, no
    absolute paths or links out, no devices, no owners), but with the
    permission bits of files and directories as the tar says (without
    setuid, setgid and sticky), so modes such as ``0775`` survive.
    """
    checked = tarfile.data_filter(member, destination)
    if checked is None or not (checked.isreg() or checked.isdir()):
        return checked
    return checked.replace(mode=member.mode & 0o777, deep=False)


def unpack_into(fd: int, destination: str) -> None:
    """
    Extract the tar stream read from ``fd`` into ``destination`` (streaming
    mode: read once, front to back), then read to the end of the stream so
    the writer never sees a broken pipe, and close ``fd``.  Runs in a
    thread.

    :raise tarfile.TarError: the stream is not a tar, or an entry is refused
        (absolute, climbing out with ``..``, a link pointing out).
    """
    with os.fdopen(fd, "rb") as stream:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            tar.extractall(destination, filter=_keep_modes)
        while stream.read(1 << 16):
            pass


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (a pipe's write end), however many writes it takes."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
