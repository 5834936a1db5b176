# -*- test-case-name: tests.guest.test_watching,tests.integration.guest.test_watching -*-
"""
Linux inotify through :mod:`ctypes` (the standard library has no binding): the
masks, ``struct inotify_event`` parsed and encoded (:class:`RawEvent`), and one
non-blocking inotify descriptor (:class:`Inotify`).
"""

from __future__ import annotations

import ctypes
import os
import struct
from dataclasses import dataclass
from typing import Optional, Protocol

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_UNMOUNT = 0x00002000
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

#: What every watch asks for.
WATCH_MASK = (
    IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
)
#: Watches of directories found below a watched one: never through a symlink.
SUBDIRECTORY_MASK = WATCH_MASK | IN_ONLYDIR | IN_DONT_FOLLOW

#: ``struct inotify_event``: wd, mask, cookie, len (native layout), then the name.
_EVENT = struct.Struct("=iIII")
#: Bytes asked for per read (whole events only; the largest is 16 + NAME_MAX + 1).
READ_SIZE = 64 * 1024


@dataclass(frozen=True)
class RawEvent:
    """
    One ``struct inotify_event``.

    :ivar wd: the watch descriptor it happened on.
    :ivar mask: what happened (``IN_*`` bits).
    :ivar cookie: ties the two halves of a rename together.
    :ivar name: the entry's name in the watched directory, ``b""`` for the
        watched path itself.
    """

    wd: int
    mask: int
    cookie: int
    name: bytes


def parse_events(data: bytes) -> list[RawEvent]:
    """
    The events in ``data``, what one ``read`` of an inotify descriptor returned
    (the kernel hands out whole events only).  The name's NUL padding is removed.

    :raises ValueError: ``data`` ends inside an event.
    """
    events = []
    offset = 0
    while offset < len(data):
        if offset + _EVENT.size > len(data):
            raise ValueError("truncated inotify event header")
        wd, mask, cookie, length = _EVENT.unpack_from(data, offset)
        start = offset + _EVENT.size
        end = start + length
        if end > len(data):
            raise ValueError("truncated inotify event name")
        name = bytes(data[start:end]).split(b"\0", 1)[0]
        events.append(RawEvent(wd, mask, cookie, name))
        offset = end
    return events


def encode_event(event: RawEvent, padding: int = 0) -> bytes:
    """
    ``event`` as the kernel lays it out, its name NUL-terminated and padded with
    ``padding`` more NULs (for tests of :func:`parse_events`).
    """
    name = event.name + b"\0" * (padding + 1) if event.name or padding else b""
    return _EVENT.pack(event.wd, event.mask, event.cookie, len(name)) + name


_libc: Optional[ctypes.CDLL] = None


def _c_library() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        library = ctypes.CDLL(None, use_errno=True)
        library.inotify_init1.argtypes = [ctypes.c_int]
        library.inotify_init1.restype = ctypes.c_int
        library.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        library.inotify_add_watch.restype = ctypes.c_int
        library.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        library.inotify_rm_watch.restype = ctypes.c_int
        _libc = library
    return _libc


def _errno_error(path: Optional[str] = None) -> OSError:
    number = ctypes.get_errno()
    return OSError(number, os.strerror(number), path) if path is not None else OSError(number, os.strerror(number))


class Inotify:
    """
    One inotify instance (non-blocking, close-on-exec), through the C library.

    :ivar fd: its descriptor, ``-1`` once closed.
    :raises OSError: the kernel refused a new instance (EMFILE: too many).
    """

    def __init__(self) -> None:
        self._c = _c_library()
        fd = self._c.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise _errno_error()
        self.fd: int = fd

    def add_watch(self, path: str, mask: int) -> int:
        """
        Watch ``path`` for ``mask``; the watch descriptor (the same one again for
        an inode already watched).

        :raises OSError: with the errno of ``inotify_add_watch``.
        """
        wd = self._c.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            raise _errno_error(path)
        return int(wd)

    def rm_watch(self, wd: int) -> None:
        """Stop watch ``wd`` (a watch the kernel dropped already is no error)."""
        if self.fd >= 0:
            self._c.inotify_rm_watch(self.fd, wd)

    def read(self) -> Optional[list[RawEvent]]:
        """The events waiting, or ``None`` when there are none (EAGAIN)."""
        try:
            data = os.read(self.fd, READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return None
        return parse_events(data)

    def close(self) -> None:
        """Close the descriptor: the kernel drops every watch."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


class Watches(Protocol):
    """What :class:`Tree` needs of an inotify instance (tests use a fake)."""

    def add_watch(self, path: str, mask: int) -> int:
        """Watch ``path``; its descriptor."""

    def rm_watch(self, wd: int) -> None:
        """Stop watch ``wd``."""


__all__ = [
    "IN_ATTRIB",
    "IN_CLOEXEC",
    "IN_CREATE",
    "IN_DELETE",
    "IN_DELETE_SELF",
    "IN_DONT_FOLLOW",
    "IN_IGNORED",
    "IN_ISDIR",
    "IN_MODIFY",
    "IN_MOVED_FROM",
    "IN_MOVED_TO",
    "IN_MOVE_SELF",
    "IN_NONBLOCK",
    "IN_ONLYDIR",
    "IN_Q_OVERFLOW",
    "IN_UNMOUNT",
    "SUBDIRECTORY_MASK",
    "WATCH_MASK",
    "Inotify",
    "RawEvent",
    "Watches",
    "encode_event",
    "parse_events",
]
