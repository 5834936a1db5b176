# -*- test-case-name: tests.cluster.test_pod_parts -*-
"""
:class:`WorkQueue`: keys to work on (a pod's uid), as Kubernetes' controllers
keep them: a key is queued once however often it is added; one work runs at
a time per key (a key added while its work runs is worked on again after);
at most ``concurrency`` works run at once; at most ``limit`` keys wait (more
are refused and counted: the next relist adds them again).  A work that
fails is logged; nothing is retried here (the work decides).
"""

from __future__ import annotations

from collections import deque
from typing import Callable

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

log = Logger(namespace="vmservice.cluster")

#: Works running at once, and keys waiting at most.
CONCURRENCY, LIMIT = 4, 10_000


class WorkQueue:
    """
    Runs ``work(key)`` for each key added.

    :param work: the work of one key; fires when done.
    """

    def __init__(self, work: Callable[[str], "Deferred[None]"], concurrency: int = CONCURRENCY,
                 limit: int = LIMIT) -> None:
        self._work, self._concurrency, self._limit = work, concurrency, limit
        self._waiting: deque[str] = deque()
        self._queued: set[str] = set()
        self._running: dict[str, Deferred[None]] = {}
        self._again: set[str] = set()
        self._stopped = False
        #: Keys refused because too many waited.
        self.refused = 0

    def add(self, key: str) -> None:
        """Work on ``key`` (again) as soon as it may."""
        if self._stopped:
            return
        if key in self._running:
            self._again.add(key)
            return
        if key in self._queued:
            return
        if len(self._waiting) >= self._limit:
            self.refused += 1
            return
        self._queued.add(key)
        self._waiting.append(key)
        self._next()

    @property
    def idle(self) -> bool:
        """Whether nothing waits and nothing runs."""
        return not self._waiting and not self._running

    def stop(self) -> None:
        """Forget what waits and cancel what runs."""
        self._stopped = True
        self._waiting.clear()
        self._queued.clear()
        self._again.clear()
        for running in list(self._running.values()):
            running.cancel()

    def _next(self) -> None:
        while self._waiting and len(self._running) < self._concurrency and not self._stopped:
            key = self._waiting.popleft()
            self._queued.discard(key)
            self._start(key)

    def _start(self, key: str) -> None:
        try:
            running = self._work(key)
        except Exception:
            log.failure("the work on {key} failed", key=key)
            return

        def done(result: object) -> None:
            self._running.pop(key, None)
            if isinstance(result, Failure) and not self._stopped:
                log.failure("the work on {key} failed", result, key=key)
            if key in self._again and not self._stopped:
                self._again.discard(key)
                self._queued.add(key)  # owed already: not refused by the limit
                self._waiting.append(key)
            self._next()

        self._running[key] = running
        running.addBoth(done)


__all__ = ["CONCURRENCY", "LIMIT", "WorkQueue"]
