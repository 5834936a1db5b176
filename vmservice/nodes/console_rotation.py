# -*- test-case-name: tests.nodes.test_console_rotation -*-
"""
Every node's console log kept within ``console_log_size``: :func:`rotate`
bounds one log, and one timer (:class:`ConsoleRotation`) runs it for every
node each :data:`CHECK_INTERVAL` seconds, off the reactor (a ``fstat`` of each
log, a copy and a truncation of those past half of the size).

A guest writes its console without limit and QEMU appends it to a file, so
what bounds the file is how often it is checked: at most the configured size
plus what the guest writes in one interval (0.5-0.75 MB/s measured under TCG
here: see docs/security.md).  The first round runs as the daemon starts, once
the fleet has registered the nodes it found, so a log that grew while no
daemon ran (its VM adopted now) is cut down at once.  Rounds never overlap: the
next is timed from the end of the last.
"""

from __future__ import annotations

import os
from typing import Callable

from twisted.application.internet import TimerService
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from .console import BLOCK, data_start, previous, regular_file
from .blocking import Blocking

log = Logger()

#: Seconds between two checks of every console log.
CHECK_INTERVAL = 1.0


def rotate(path: str, size: int) -> bool:
    """
    Bound the console log ``path`` and its older part to ``size`` bytes.

    Once the log holds more than half of ``size``, its newest half (from the
    beginning of a line, when one begins in its first block) is copied into
    ``console.log.1`` (written beside it, 0600, and renamed over the last
    one) and the log is truncated to nothing.  QEMU appends, so its next
    write lands at the log's new start.  What the guest writes during the
    copy is copied too, up to ``size`` bytes in all; what it writes between
    the copy's last read and the truncation (one system call later) is lost.
    When the copy cannot be written (a full disk), the log is truncated all
    the same: the bound matters most then.

    Only data counts: a hole at the log's start (see :func:`.console.data_start`)
    is neither counted nor copied.

    :return: whether it rotated.
    :raise OSError: the log cannot be opened or truncated.
    """
    half = size // 2
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return False
    try:
        info = regular_file(fd, path)
        if min(info.st_size, info.st_blocks * 512) <= half:
            return False
        first = data_start(fd, info.st_size)
        start = max(first, info.st_size - half)
        kept = _copy_out(fd, start, start > first, size, previous(path))
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)
    if kept is not None:
        os.replace(kept, previous(path))
    return True


def _copy_out(fd: int, start: int, align: bool, most: int, final: str) -> str | None:
    """
    Copy the file ``fd`` from ``start`` to its end (``most`` bytes at most)
    into a new file beside ``final``: its path, or ``None`` when it could
    not be written (then it is removed).  With ``align``, the copy begins
    after the first newline of its first block, if there is one.
    """
    partial = final + ".partial"
    try:
        try:
            os.unlink(partial)  # left by a daemon that died during a rotation
        except FileNotFoundError:
            pass
        out = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        position, copied = start, 0
        while copied < most:
            block = os.pread(fd, min(BLOCK, most - copied), position)
            if not block:
                break
            position += len(block)
            if align:
                align = False
                end = block.find(b"\n")
                block = block[end + 1:]
            view = memoryview(block)
            while view:
                written = os.write(out, view)
                view = view[written:]
            copied += len(block)
    except OSError:
        os.close(out)
        os.unlink(partial)
        return None
    os.close(out)
    return partial


def rotate_all(paths: list[str], size: int) -> dict[str, OSError]:
    """Rotate each log of ``paths`` that needs it (blocking): the ones that could not be, and why."""
    failed = {}
    for path in paths:
        try:
            rotate(path, size)
        except OSError as error:
            failed[path] = error
    return failed


class ConsoleRotation(TimerService):
    """
    Keeps every node's console log within ``size`` bytes.

    :param clock: times the rounds.
    :param consoles: the console logs to check at each round (every node's).
    :param blocking: runs a round off the reactor.
    :param size: ``console_log_size``.
    :param interval: seconds between the end of one round and the next.
    """

    name = "console-rotation"

    def __init__(self, clock: IReactorTime, consoles: Callable[[], list[str]], blocking: Blocking, size: int,
                 interval: float = CHECK_INTERVAL) -> None:
        super().__init__(interval, self._round)  # type: ignore[no-untyped-call]  # Twisted's services are not annotated
        self.clock = clock
        self._consoles = consoles
        self._blocking = blocking
        self._size = size
        #: The logs whose last rotation failed (reported once, until one succeeds).
        self._failing: set[str] = set()

    def _round(self) -> Deferred[None]:
        # A Deferred: the next round is timed from its end (LoopingCall), so rounds never overlap.
        paths = self._consoles()
        return Deferred.fromCoroutine(self._check(paths))

    async def _check(self, paths: list[str]) -> None:
        try:
            failed = await self._blocking(lambda: rotate_all(paths, self._size))
        except Exception:
            log.failure("checking the console logs failed")
            return
        for path, error in failed.items():
            if path not in self._failing:
                log.warn("cannot bound the console log {path}: {error}", path=path, error=error)
        self._failing = set(failed)


__all__ = ["CHECK_INTERVAL", "ConsoleRotation", "rotate", "rotate_all"]
