# -*- test-case-name: tests.cluster.kubelet.test_logs -*-
"""
A VM's console log read for ``containerLogs``: what it holds now, then what
QEMU appends to it (blocking calls, each run off the reactor by the caller).

:func:`snapshot` reads the newest ``limit`` bytes of the retained log
(``console.log.1``, then ``console.log``, as :mod:`vmservice.nodes.console`
lays them out) and notes where ``console.log`` ended; :func:`more` reads on
from there.  The daemon's rotation truncates ``console.log`` in place once it
is large: a log shorter than the position read so far (or another file under
the name) is read again from its start, so a follower may miss what was
written between its last read and the rotation (at most one poll's worth).
Files are never opened through a link.
"""

from __future__ import annotations

import os

from attrs import frozen

from ...errors import Internal
from ...nodes.console import data_start, open_window, regular_file

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


@frozen
class Position:
    """Where a follower has read ``console.log`` to: the file (its inode) and the offset."""

    inode: int
    offset: int


@frozen
class Snapshot:
    """
    The console as it is now.

    :ivar data: the newest bytes of the retained log (at most the limit).
    :ivar position: where ``console.log`` ended.
    :ivar modified: when the log was last written (seconds since the epoch);
        0 for a log not written yet.
    """

    data: bytes
    position: Position
    modified: float


def _unreadable(error: OSError) -> Internal:
    return Internal(f"cannot read the console log: {error}", code="log_read_failed")


def _read(fd: int, low: int, high: int) -> bytes:
    pieces = []
    while low < high:
        piece = os.pread(fd, high - low, low)
        if not piece:
            break
        pieces.append(piece)
        low += len(piece)
    return b"".join(pieces)


def snapshot(path: str, limit: int) -> Snapshot:
    """
    The newest ``limit`` bytes of the retained log ``path`` (from its first
    whole line when older bytes were left out), as :func:`~vmservice.nodes.console.open_window` takes them.

    :raise Internal: (``log_read_failed``) a file there cannot be read.
    """
    fds, window, cut = open_window(path, limit)
    try:
        data = b"".join(_read(part.fd, part.low, part.high) for part in window)
        found = [os.fstat(fd) for fd in fds]
        try:
            # The log is opened first; the rotation truncates it in place, so its inode stays.
            current = found[0] if found and os.path.samestat(found[0], os.lstat(path)) else None
        except FileNotFoundError:
            current = None
    except OSError as error:
        raise _unreadable(error) from None
    finally:
        for fd in fds:
            os.close(fd)
    # Where the read stopped in the log (not its size now: what came meanwhile is the follower's).
    end = next((part.high for part in window if fds and part.fd == fds[0]), 0)
    position = Position(current.st_ino, end) if current is not None else Position(0, 0)
    modified = max((info.st_mtime for info in found), default=0.0)
    return Snapshot(data[data.find(b"\n") + 1:] if cut else data, position, modified)


def more(path: str, position: Position, most: int) -> tuple[bytes, Position]:
    """
    At most ``most`` bytes of ``console.log`` after ``position``, and the position after them.

    :raise Internal: (``log_read_failed``) the log cannot be read.
    """
    try:
        fd = os.open(path, _READ)
    except FileNotFoundError:
        return b"", position
    except OSError as error:
        raise _unreadable(error) from None
    try:
        info = regular_file(fd, path)
        offset = position.offset
        if info.st_ino != position.inode or info.st_size < offset:
            offset = 0
        offset = max(offset, data_start(fd, info.st_size))
        data = _read(fd, offset, min(info.st_size, offset + most))
        return data, Position(info.st_ino, offset + len(data))
    except OSError as error:
        raise _unreadable(error) from None
    finally:
        os.close(fd)


__all__ = ["Position", "Snapshot", "more", "snapshot"]
