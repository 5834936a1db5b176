# -*- test-case-name: tests.nodes.test_console -*-
"""
A node's serial console log: bounded on disk, read from its end, or read
whole chunk by chunk.

QEMU appends the guest's console to ``console.log`` (``append=on``: every
write lands at the file's end).  :func:`.console_rotation.rotate`, run for
every node, bounds it: once the log holds more than half of
the configured size, its newest half becomes ``console.log.1`` and the log
is truncated, QEMU's next write landing at its start.  The two files hold
the configured size at most, plus what the guest writes between two checks.

Readers read the *retained log*, ``console.log.1`` then ``console.log``, and
never more than its newest ``limit`` bytes (the *window*: a log that grew
while no daemon ran may be far larger); a window that leaves older bytes out
begins after its first line end, so that it shows whole lines.

- :func:`tail` reads the window backwards in blocks until it has enough line
  ends: its work is linear in the bytes it reads, at most the window.
- :class:`ConsoleText` reads the window forward, a block at a time, as text
  (for a response streamed whole); :class:`ConsoleStream` runs each read off
  the reactor and is safe to abandon at any point.

Both give the text as reading the whole window at once would: ``\\r\\n``
folded to ``\\n``, invalid UTF-8 as U+FFFD, lines as ``str.splitlines``
counts them.
"""

from __future__ import annotations

import codecs
import errno
import os
import re
import stat
import threading
from typing import TYPE_CHECKING

from attrs import frozen
from twisted.internet.defer import Deferred

from ..errors import Internal

if TYPE_CHECKING:
    from .blocking import Blocking

#: Bytes read (or copied) per step.
BLOCK = 64 * 1024
#: The older part of a rotated log is the log's name and this.
PREVIOUS = ".1"

#: Every character after which ``str.splitlines`` ends a line ("\r\n" is one end).
_LINE_ENDS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_LINE_END = re.compile("\r\n|[" + _LINE_ENDS + "]")
#: Opening a log to read: never through a link, never blocking on something that is no file.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def previous(path: str) -> str:
    """The older part of the console log ``path``: ``console.log.1``."""
    return path + PREVIOUS


def _unreadable(error: OSError) -> Internal:
    return Internal(f"cannot read the console log: {error}", code="log_read_failed")


def data_start(fd: int, size: int) -> int:
    """
    Where the data of the file ``fd`` begins: past a hole at its start, which a
    QEMU writing without ``O_APPEND`` (started before the log was bounded,
    then adopted) leaves when it writes on at its old offset after a
    truncation.  A hole costs no disk and is never read nor counted.
    """
    try:
        return os.lseek(fd, 0, os.SEEK_DATA)
    except OSError as error:
        # ENXIO: no data at all; anything else: the file system cannot tell.
        return size if error.errno == errno.ENXIO else 0


def regular_file(fd: int, path: str) -> os.stat_result:
    """The status of the open file ``fd`` (named ``path``); ``OSError`` unless it is a regular file."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise OSError(errno.EINVAL, "not a regular file", path)
    return info


@frozen
class Range:
    """Bytes ``[low, high)`` of the open file ``fd``."""

    fd: int
    low: int
    high: int


def open_window(path: str, limit: int) -> tuple[list[int], list[Range], bool]:
    """
    Open the retained log of ``path`` and take its newest ``limit`` bytes.

    :return: the descriptors opened (the caller closes them), the window's
        ranges (oldest first), and whether older bytes were left out.
    :raise Internal: (``log_read_failed``) a file there cannot be read.
    """
    fds: list[int] = []
    parts: list[Range] = []
    try:
        # The log first: a rotation between the two opens then leaves the
        # log we hold truncated and the part it kept in the console.log.1 we
        # open next, so nothing is read twice.
        for name in (path, previous(path)):
            try:
                fd = os.open(name, _READ)
            except FileNotFoundError:
                continue
            fds.append(fd)
            size = regular_file(fd, name).st_size
            parts.insert(0, Range(fd, data_start(fd, size), size))
    except OSError as error:
        for fd in fds:
            os.close(fd)
        raise _unreadable(error) from None
    window: list[Range] = []
    budget = limit
    for part in reversed(parts):
        low = max(part.low, part.high - budget)
        if part.high > low:
            window.insert(0, Range(part.fd, low, part.high))
            budget -= part.high - low
    cut = sum(part.high - part.low for part in parts) > limit
    return fds, window, cut


def _tail_bytes(window: list[Range], cut: bool, count: int) -> bytes:
    """
    The end of the window from just after its (count+1)-th last newline (all
    of it for 0, from after its first newline if older bytes were cut).

    Each block read is kept in a list and its newlines counted once; the
    list is joined once: the work is linear in the bytes read.
    """
    blocks: list[bytes] = []
    newlines = 0
    for part in reversed(window):
        position = part.high
        while position > part.low:
            start = max(part.low, position - BLOCK)
            block = os.pread(part.fd, position - start, start)
            position = start
            blocks.append(block)
            newlines += block.count(b"\n")
            if count and newlines > count:
                data = b"".join(reversed(blocks))
                # Cut after the newline before the last ``count`` ones: every
                # line break (splitlines knows more than b"\n") of the last
                # lines lies after it, and no character or "\r\n" pair is cut.
                end = len(data)
                for _ in range(count + 1):
                    end = data.rindex(b"\n", 0, end)
                return data[end + 1:]
    data = b"".join(reversed(blocks))
    return data[data.find(b"\n") + 1:] if cut else data


def _lines(data: bytes, count: int) -> tuple[str, int]:
    text = data.decode("utf-8", "replace").replace("\r\n", "\n")
    every = text.splitlines(keepends=True)
    chosen = every if count == 0 else every[-count:]
    return "".join(chosen), len(chosen)


def tail(path: str, count: int, limit: int) -> tuple[str, int]:
    """
    The last ``count`` lines of the console log ``path`` (all of its window
    for 0), as text (``\\r\\n`` as ``\\n``, invalid UTF-8 as U+FFFD).

    :param path: the log (``console.log``; ``console.log.1`` is read before it).
    :param count: lines wanted, 0 for all.
    :param limit: the most bytes read: the window is the newest ``limit``
        bytes of the retained log.
    :return: the text and the number of lines in it; a log not written yet is empty.
    :raise Internal: (``log_read_failed``) it cannot be read.
    """
    fds, window, cut = open_window(path, limit)
    try:
        data = _tail_bytes(window, cut, count)
    except OSError as error:
        raise _unreadable(error) from None
    finally:
        for fd in fds:
            os.close(fd)
    return _lines(data, count)


class _LineCount:
    """
    The lines of a text given piece by piece, counted as ``str.splitlines``
    counts the whole: a line end of each kind, ``\\r\\n`` as one even when
    the ``\\r`` ends one piece and the ``\\n`` begins the next, and a last
    line without an end.
    """

    def __init__(self) -> None:
        self._ends = 0
        self._open = False
        self._after_cr = False

    def add(self, text: str) -> None:
        ends = len(_LINE_END.findall(text))
        if self._after_cr and text.startswith("\n"):
            ends -= 1
        self._ends += ends
        self._open = text[-1] not in _LINE_ENDS
        self._after_cr = text.endswith("\r")

    @property
    def lines(self) -> int:
        return self._ends + int(self._open)


class ConsoleText:
    """
    The window of the console log ``path`` (see :func:`tail`) read forward
    as text, a block at a time, with its lines counted.

    Blocking: each call runs off the reactor.  The files are opened by the
    first :meth:`read`; :meth:`close` may run in another thread while a read
    does (it waits for it), and once it ran nothing is opened or read.

    :param path: the log.
    :param limit: the most bytes read.
    """

    def __init__(self, path: str, limit: int) -> None:
        self._path = path
        self._limit = limit
        self._lock = threading.Lock()
        self._fds: list[int] | None = None
        self._window: list[Range] = []
        self._position = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        #: A "\r" that ended the last block, held until we know whether a "\n" follows.
        self._held = ""
        self._count = _LineCount()
        self._over = False

    @property
    def lines(self) -> int:
        """The lines read so far (all of them once :meth:`read` gave ``""``)."""
        return self._count.lines

    def read(self) -> str:
        """
        The next piece of text; ``""`` at the end (and after :meth:`close`).

        :raise Internal: (``log_read_failed``) the log cannot be read.
        """
        with self._lock:
            try:
                return self._read()
            except OSError as error:
                raise _unreadable(error) from None

    def _read(self) -> str:
        if self._fds is None and not self._over:
            self._fds, self._window, cut = open_window(self._path, self._limit)
            self._position = self._window[0].low if self._window else 0
            if cut:
                self._to_first_line()
        while not self._over:
            data = self._next_block()
            if data is None:
                self._over = True
                text = self._held + self._decoder.decode(b"", final=True)
            else:
                text = self._held + self._decoder.decode(data)
            self._held = ""
            if not self._over and text.endswith("\r"):
                text, self._held = text[:-1], "\r"
            text = text.replace("\r\n", "\n")
            if text:
                self._count.add(text)
                return text
        return ""

    def _to_first_line(self) -> None:
        """Start after the window's first newline, as :func:`tail` does (at its start when it has none)."""
        for index, part in enumerate(self._window):
            for start in range(part.low, part.high, BLOCK):
                block = os.pread(part.fd, min(BLOCK, part.high - start), start)
                end = block.find(b"\n")
                if end >= 0:
                    del self._window[:index]
                    self._position = start + end + 1
                    return

    def _next_block(self) -> bytes | None:
        """The next block of the window, ``None`` at its end (or where a file shrank under us)."""
        while self._window:
            part = self._window[0]
            if self._position < part.high:
                data = os.pread(part.fd, min(BLOCK, part.high - self._position), self._position)
                if data:
                    self._position += len(data)
                    return data
            # This part is over (or was truncated meanwhile): on to the next.
            self._window.pop(0)
            self._position = self._window[0].low if self._window else 0
        return None

    def close(self) -> None:
        """Close the files (waiting for a read under way); reads then give ``""``."""
        with self._lock:
            self._over = True
            self._window = []
            for fd in self._fds or ():
                os.close(fd)
            self._fds = []


class ConsoleStream:
    """
    A node's console read whole as text, each step off the reactor.  Safe to
    abandon: a cancelled read's thread finishes on its own, and
    :meth:`close`, which the reader must call however it ends, waits for it.

    :param text: the console's text.
    :param blocking: runs each step off the reactor.
    """

    def __init__(self, text: ConsoleText, blocking: Blocking) -> None:
        self._text = text
        self._blocking = blocking

    def read(self) -> Deferred[str]:
        """The next piece of text, ``""`` at the end; fails with ``Internal`` (``log_read_failed``)."""
        return self._blocking(self._text.read)

    @property
    def lines(self) -> int:
        """The lines read so far."""
        return self._text.lines

    def close(self) -> Deferred[None]:
        """Close the files, once any read under way is over."""
        return self._blocking(self._text.close)


__all__ = ["BLOCK", "PREVIOUS", "ConsoleStream", "ConsoleText", "Range", "data_start", "open_window", "previous",
           "regular_file", "tail"]
