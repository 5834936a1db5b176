# -*- test-case-name: tests.test_durable -*-
"""
Files that survive a crash whole: the one way the host side writes a file
that must never be seen half-written (node records, counters, the API token,
snapshots, downloads).

A file is written beside its final name, flushed to the disk, renamed over
the final name, and the directory is flushed, so that after a crash at any
point a reader finds either the old content or the new one, never a mix.
(The guest agent, which is stdlib-only and runs in the VM, has its own in
``vmservice.guest.copying``.)
"""

from __future__ import annotations

import os


def fsync_path(path: str) -> None:
    """Flush the file ``path`` (or a directory's entries) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit(partial: str, final: str) -> None:
    """
    Put the complete file ``partial`` in place of ``final``: flush it, rename
    it, flush the directory.
    """
    fsync_path(partial)
    os.replace(partial, final)
    fsync_path(os.path.dirname(os.path.abspath(final)))


def write_atomic(path: str, data: bytes, mode: int = 0o644) -> None:
    """
    Replace ``path`` with ``data`` so that a crash leaves either the old or
    the new content.

    :param mode: the permission bits of the new file.
    """
    temporary = f"{path}.tmp{os.getpid()}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    try:
        commit(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise


__all__ = ["commit", "fsync_path", "write_atomic"]
