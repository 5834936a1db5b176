# -*- test-case-name: tests.guest.test_copying,tests.integration.guest.test_copying -*-
"""
The bridge between the agent's loop and a copy's worker thread (:class:`Bridge`),
and the file objects :mod:`tarfile` reads from and writes to on the worker.
"""

from __future__ import annotations

import collections
import os
import threading
from typing import Callable, Deque, Optional

from vmservice.guest.copying.errors import Cancelled
from vmservice.wire.errors import ResetCode

#: The worker stops producing while this much output waits in the bridge ...
BRIDGE_HIGH_WATER = 512 * 1024


class Bridge:
    """
    Moves bytes between the agent's loop (one thread) and a copy's worker thread.

    Loop side: :meth:`feed`, :meth:`feed_eof`, :meth:`cancel`,
    :meth:`take_consumed`, :meth:`take_output`.  Worker side: :meth:`read`,
    :meth:`write`, :meth:`finish`.  The worker wakes the loop through a pipe
    (:attr:`wake_r`), written while the lock is held so :meth:`close` can
    never race it.

    :ivar received: bytes fed so far.
    :ivar finished: the worker is done (read under the lock or from the loop).
    :ivar failure: why the worker failed after output began, if it did.
    """

    def __init__(self, high_water: int = BRIDGE_HIGH_WATER) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._high_water = high_water
        self._inbox: Deque[bytes] = collections.deque()
        self._in_eof = False
        self._taken = 0
        self._outbox: Deque[bytes] = collections.deque()
        self._out_size = 0
        self._cancelled = False
        self._wake_pending = False
        self._closed = False
        self.received = 0
        self.finished = False
        self.failure: Optional[str] = None
        self.code: int = ResetCode.INTERNAL_ERROR
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)

    def _wake(self) -> None:
        # Called with the lock held.
        if not self._wake_pending and not self._closed:
            self._wake_pending = True
            os.write(self.wake_w, b"x")

    # -- loop side ------------------------------------------------------------------

    def feed(self, data: bytes) -> bool:
        """
        Body bytes from the host.  ``False`` when the worker is done and the
        caller must acknowledge (drop) them itself.
        """
        with self._lock:
            if self.finished or self._cancelled:
                return False
            self._inbox.append(data)
            self.received += len(data)
            self._cond.notify_all()
            return True

    def feed_eof(self) -> None:
        """The body ended."""
        with self._lock:
            self._in_eof = True
            self._cond.notify_all()

    def cancel(self) -> None:
        """The stream is gone: the worker raises :class:`Cancelled` at its next step."""
        with self._lock:
            self._cancelled = True
            self._inbox.clear()
            self._outbox.clear()
            self._out_size = 0
            self._cond.notify_all()

    def woken(self) -> None:
        """Empty the wake pipe (before looking at the state)."""
        with self._lock:
            self._wake_pending = False
            if self._closed:
                return
            while True:
                try:
                    if not os.read(self.wake_r, 4096):
                        break
                except (BlockingIOError, InterruptedError):
                    break

    def take_consumed(self) -> int:
        """
        Bytes the worker took since the last call (and, once it is done, the
        ones it will never take): the credit to give back.
        """
        with self._lock:
            count, self._taken = self._taken, 0
            if self.finished:
                count += sum(len(chunk) for chunk in self._inbox)
                self._inbox.clear()
            return count

    def take_output(self) -> Optional[bytes]:
        """The next chunk the worker wrote, or ``None``."""
        with self._lock:
            if not self._outbox:
                return None
            chunk = self._outbox.popleft()
            self._out_size -= len(chunk)
            self._cond.notify_all()
            return chunk

    @property
    def drained(self) -> bool:
        """The worker is done and all it wrote was taken."""
        with self._lock:
            return self.finished and not self._outbox

    def close(self) -> None:
        """Close the wake pipe (only once the worker is done)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for fd in (self.wake_r, self.wake_w):
                try:
                    os.close(fd)
                except OSError:
                    pass

    # -- worker side --------------------------------------------------------------

    def read(self, size: int = -1) -> bytes:
        """
        Up to ``size`` body bytes (any amount when negative), blocking until
        some arrive; ``b""`` at the end of the body.

        :raises Cancelled: the stream was reset.
        """
        with self._lock:
            while not self._inbox and not self._in_eof and not self._cancelled:
                self._cond.wait()
            if self._cancelled:
                raise Cancelled()
            if not self._inbox:
                return b""
            chunk = self._inbox.popleft()
            if 0 <= size < len(chunk):
                self._inbox.appendleft(chunk[size:])
                chunk = chunk[:size]
            self._taken += len(chunk)
            self._wake()
            return chunk

    def write(self, data: bytes) -> None:
        """
        Output for the host, blocking while :data:`BRIDGE_HIGH_WATER` bytes wait.

        :raises Cancelled: the stream was reset.
        """
        if not data:
            return
        with self._lock:
            while self._out_size >= self._high_water and not self._cancelled:
                self._cond.wait()
            if self._cancelled:
                raise Cancelled()
            self._outbox.append(bytes(data))
            self._out_size += len(data)
            self._wake()

    def finish(self, failure: Optional[str] = None, code: int = ResetCode.INTERNAL_ERROR) -> None:
        """
        The worker is done (``failure`` says why it failed after output
        began: the stream is reset with ``code``).
        """
        with self._lock:
            self.finished = True
            self.failure = failure
            self.code = code
            self._wake()


class FileReader:
    """A ``read`` function as a file object, for :mod:`tarfile`."""

    def __init__(self, read: Callable[[int], bytes]) -> None:
        self.read = read


class FileWriter:
    """A ``write`` function as a file object, for :mod:`tarfile`."""

    def __init__(self, write: Callable[[bytes], None]) -> None:
        self._write = write

    def write(self, data: bytes) -> int:
        self._write(bytes(data))
        return len(data)


__all__ = ["BRIDGE_HIGH_WATER", "Bridge", "FileReader", "FileWriter"]
