# -*- test-case-name: tests.guest.test_agent,tests.integration.guest.test_agent -*-
"""
The guest agent's event loop: a small reactor over ``epoll``, with file
descriptor callbacks and timers (:class:`Loop`, :class:`Timer`).

``select.epoll`` and ``_heapq`` are used directly rather than through
:mod:`selectors` and :mod:`heapq`: ``selectors`` imports ``collections`` (and
``keyword``, ``operator``, ``reprlib``, ``math``), which a cold guest under TCG pays
for on its way to its first answer (docs/performance.md, "The imports left").
"""

from __future__ import annotations

import itertools
import select
import time
from _heapq import heappop, heappush

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Optional


class Timer:
    """
    A call scheduled with :meth:`Loop.call_later`.
    """

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback: Optional[Callable[[], None]] = callback

    def cancel(self) -> None:
        """
        Do not run the call.
        """
        self.callback = None


class Loop:
    """
    A small reactor over ``epoll``: file descriptor callbacks and timers.

    Handlers that need their own descriptors (a child's pipes, a TCP connection)
    register them here, so the agent stays one thread.

    :param clock: monotonic seconds; tests may replace it.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._epoll = select.epoll()
        self._callbacks: dict[int, tuple[Optional[Callable[[], None]], Optional[Callable[[], None]]]] = {}
        self._timers: list[tuple[float, int, Timer]] = []
        self._soon: list[Callable[[], None]] = []
        self._sequence = itertools.count()
        self._clock = clock
        self._running = False

    def watch(
        self,
        fd: int,
        on_readable: Optional[Callable[[], None]] = None,
        on_writable: Optional[Callable[[], None]] = None,
    ) -> None:
        """
        Call ``on_readable``/``on_writable`` when ``fd`` is ready; ``None`` for both
        stops watching it.  Replaces earlier callbacks for ``fd``.
        """
        mask = (select.EPOLLIN if on_readable else 0) | (select.EPOLLOUT if on_writable else 0)
        known = fd in self._callbacks
        if not mask:
            if known:
                del self._callbacks[fd]
                try:
                    self._epoll.unregister(fd)
                except OSError:
                    pass  # closed before it was unwatched: the kernel dropped it already
            return
        self._callbacks[fd] = (on_readable, on_writable)
        if known:
            self._epoll.modify(fd, mask)
        else:
            self._epoll.register(fd, mask)

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """
        Run ``callback`` after ``delay`` seconds.
        """
        timer = Timer(self._clock() + delay, callback)
        heappush(self._timers, (timer.when, next(self._sequence), timer))
        return timer

    def call_soon(self, callback: Callable[[], None]) -> None:
        """
        Run ``callback`` at the end of this iteration, after the ready descriptors and
        timers and before waiting again (or in the next iteration, without waiting,
        when called from outside :meth:`run_once`).  :class:`Pipe` uses it to write
        what one iteration produced in one system call.
        """
        self._soon.append(callback)

    def stop(self) -> None:
        """
        Make :meth:`run` return after the current iteration.
        """
        self._running = False

    def close(self) -> None:
        """
        Release the epoll descriptor.
        """
        self._epoll.close()

    def run(self) -> None:
        """
        Dispatch until :meth:`stop`.
        """
        self._running = True
        while self._running:
            self.run_once()

    def run_once(self, max_wait: Optional[float] = None) -> None:
        """
        Wait for the next descriptor event or timer (at most ``max_wait`` seconds)
        and dispatch what is ready.
        """
        timeout = 0.0 if self._soon else max_wait
        if self._timers:
            until_timer = max(0.0, self._timers[0][0] - self._clock())
            timeout = until_timer if timeout is None else min(timeout, until_timer)
        if self._callbacks:
            # epoll rounds the timeout up to whole milliseconds (no early wake-up, no spin).
            ready = self._epoll.poll(-1 if timeout is None else timeout)
        else:
            if timeout is None:
                raise RuntimeError("nothing to wait for")
            time.sleep(timeout)
            ready = []
        for fd, events in ready:
            # As selectors reads epoll: an error or hang-up makes a descriptor both
            # readable and writable, so that whichever callback it has finds out.
            for wanted, index in ((events & ~select.EPOLLOUT, 0), (events & ~select.EPOLLIN, 1)):
                if wanted:
                    # Look the callback up again: an earlier one may have replaced it.
                    callbacks = self._callbacks.get(fd)
                    callback = callbacks[index] if callbacks else None
                    if callback is not None:
                        callback()
        now = self._clock()
        while self._timers and self._timers[0][0] <= now:
            _, _, timer = heappop(self._timers)
            callback = timer.callback
            timer.callback = None
            if callback is not None:
                callback()
        while self._soon:
            soon, self._soon = self._soon, []
            for callback in soon:
                callback()


__all__ = ["Loop", "Timer"]
