# -*- test-case-name: tests.nodes.warm.test_fork_memory -*-
"""
Sparse copies of a memory file in a tmpfs (a fork's frozen copy, see
:mod:`.fork_memory`): the target made at once as large as the source, its
pages allocated where the source has data, then the data copied by the
kernel at the same offsets, holes left holes.  The allocation and the copy
block (a tenth of a second and more): callers run them off the reactor.  A
tmpfs that fills up under them is :class:`InsufficientMemory`
(``tmpfs_full``).  No file is opened through a link (one planted in the
daemon's directory fails the open with ``ELOOP``), and the copy is created
anew, 0600, never over a file that exists.
"""

from __future__ import annotations

import errno
import os
from contextlib import contextmanager
from typing import Iterable, Iterator

from ...errors import InsufficientMemory
from ...private_files import create_private

#: How a memory file is opened for reading: never through a link.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


def create_copy(source: str, target: str) -> None:
    """
    Make the new file ``target`` (mode 0600) as large as ``source``, all
    holes (at once: from then on :func:`ensure_room` counts it as a file
    that may grow to its size).  Neither is opened through a link, and
    ``target`` must not exist.
    """
    src = os.open(source, _READ)
    try:
        size = os.fstat(src).st_size
    finally:
        os.close(src)
    dst = create_private(target)
    try:
        os.ftruncate(dst, size)
    finally:
        os.close(dst)


def reserve(source: str, target: str) -> None:
    """
    Allocate the pages of ``target`` (made by :func:`create_copy`) where
    ``source`` has data now: a later :func:`copy_sparse` into it then only
    copies, which takes about half as long in a tmpfs as allocating the
    pages too.  Blocking (off the reactor).

    :raise InsufficientMemory: (``tmpfs_full``) the tmpfs is full.
    """
    with _tmpfs_errors(target), _opened(source, target) as (src, dst):
        for start, end in _extents(src, os.fstat(src).st_size):
            os.posix_fallocate(dst, start, end - start)


def copy_sparse(source: str, target: str) -> int:
    """
    Copy the data of the file ``source`` into ``target`` (made as by
    :func:`create_copy` and :func:`reserve` unless it exists), at the same
    offsets, holes left holes, the kernel copying (``copy_file_range``):
    the bytes copied.  Blocking (off the reactor).

    :raise InsufficientMemory: (``tmpfs_full``) the tmpfs is full.
    """
    if not os.path.lexists(target):
        create_copy(source, target)
        reserve(source, target)
    copied = 0
    with _tmpfs_errors(target), _opened(source, target) as (src, dst):
        for start, end in _extents(src, os.fstat(src).st_size):
            copied += _copy_range(src, dst, start, end)
    return copied


@contextmanager
def _opened(source: str, target: str) -> Iterator[tuple[int, int]]:
    """``source`` open for reading and ``target`` for writing, both closed after."""
    src = os.open(source, _READ)
    try:
        dst = os.open(target, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            yield src, dst
        finally:
            os.close(dst)
    finally:
        os.close(src)


@contextmanager
def _tmpfs_errors(target: str) -> Iterator[None]:
    """A full tmpfs (``ENOSPC``) as :class:`InsufficientMemory` (``tmpfs_full``)."""
    try:
        yield
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise InsufficientMemory(f"no room for {os.path.basename(target)} in the tmpfs of "
                                 f"{os.path.dirname(target)}", code="tmpfs_full") from None


def _extents(fd: int, size: int) -> Iterable[tuple[int, int]]:
    """The ranges of ``fd`` that hold data (``SEEK_DATA``/``SEEK_HOLE``)."""
    offset = 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError as error:
            if error.errno == errno.ENXIO:  # no data past offset
                return
            raise
        end = os.lseek(fd, start, os.SEEK_HOLE)
        yield start, end
        offset = end


def _copy_range(src: int, dst: int, start: int, end: int) -> int:
    """Copy ``[start, end)`` of ``src`` to the same offsets of ``dst`` in the kernel."""
    offset = start
    while offset < end:
        done = os.copy_file_range(src, dst, end - offset, offset, offset)
        if done == 0:  # the source shrank: a memory file never does
            raise OSError(errno.EIO, f"short copy at {offset}")
        offset += done
    return offset - start


__all__ = ["copy_sparse", "create_copy", "reserve"]
