# -*- test-case-name: tests.errors.test_no_room -*-
"""
Whether an error says a file system had no room for a write: the host's
(the state directory's, :class:`~vmservice.errors.service.StateDirFull`) or
a child process's words for it.
"""

from __future__ import annotations

import errno
import os


#: The errnos of a file system that has no room (left) for a write.
NO_ROOM_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
#: How a child process (``qemu-img``, QEMU) words them in its messages.
NO_ROOM_WORDS = tuple(os.strerror(number) for number in sorted(NO_ROOM_ERRNOS))


def no_room(error: BaseException) -> bool:
    """
    Whether ``error`` says a file system had no room for a write: an
    ``OSError`` with ``ENOSPC`` or ``EDQUOT``, or any other error whose
    message holds the system's words for them (``No space left on device``,
    ``Disk quota exceeded``), as a child process's does.  The errors it was
    raised from (``raise ... from error``) count too.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in NO_ROOM_ERRNOS:
            return True
        if any(words in str(current) for words in NO_ROOM_WORDS):
            return True
        current = current.__cause__
    return False
