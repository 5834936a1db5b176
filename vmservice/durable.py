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
import re
import secrets

from .private_files import create_private

#: The names of :func:`write_atomic`'s temporary files (``.<name>.<random>.tmp``, beside ``<name>``).
TEMPORARY = re.compile(r"\..*\.[0-9a-f]{16}\.tmp\Z", re.DOTALL)


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


def write_atomic(path: str, data: bytes, mode: int = 0o600) -> None:
    """
    Replace ``path`` with ``data`` so that a crash leaves either the old or
    the new content.

    The new content is written to a temporary file beside ``path`` whose
    name no one can guess (a random part), created for this write alone
    (never a file that exists, never through a link) with ``mode`` whatever
    the umask, and removed if the write fails.

    :param mode: the permission bits of the new file.
    """
    temporary = os.path.join(os.path.dirname(path), temporary_name(os.path.basename(path)))
    fd = create_private(temporary, mode)  # nothing to remove if this fails: it is not ours
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        commit(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise


def temporary_name(name: str) -> str:
    """A new temporary name for a write of the file ``name`` (it matches :data:`TEMPORARY`)."""
    return f".{name[:200]}.{secrets.token_hex(8)}.tmp"


def remove_temporaries(directory: str, also: "re.Pattern[str] | None" = None) -> None:
    """
    Remove the temporary files of atomic writes a crash left in
    ``directory`` (never renamed into place: the old file is whole beside
    them), and names ``also`` matches; a missing directory has none.
    """
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        if TEMPORARY.match(name) or (also is not None and also.match(name)):
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass


__all__ = ["TEMPORARY", "commit", "fsync_path", "remove_temporaries", "temporary_name", "write_atomic"]
