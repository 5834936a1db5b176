# -*- test-case-name: tests.nodes.test_room -*-
"""
The state directory's room: an operation that could not write what it had
to write there (a record, a disk, a snapshot, a template's files) because
the file system is full (``ENOSPC``) or the daemon's quota is used up
(``EDQUOT``) fails with :class:`~vmservice.errors.StateDirFull`, which says
so, instead of an internal error.  The operation itself removes what it made
(its own failure path), so nothing half-written is left, and the same
request succeeds once there is room again.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from ..errors import StateDirFull, no_room


def full(what: str, error: BaseException) -> StateDirFull:
    """The error of ``what`` not fitting in the state directory, ``error`` saying why."""
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    return StateDirFull(f"the state directory has no room for {what}: {reason}; nothing of it was kept, "
                        f"and the same request succeeds once there is room")


@contextmanager
def room_for(what: str) -> Iterator[None]:
    """
    Run the block; a failure of it for lack of room (:func:`~vmservice.errors.no_room`:
    the error or one it was raised from) becomes :class:`StateDirFull` naming ``what``.
    Any other failure passes as it is.
    """
    try:
        yield
    except StateDirFull:
        raise
    except Exception as error:
        if not no_room(error):
            raise
        raise full(what, error) from error


__all__ = ["full", "room_for"]
