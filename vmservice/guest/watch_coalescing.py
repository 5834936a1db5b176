# -*- test-case-name: tests.guest.test_watching,tests.integration.guest.test_watching -*-
"""
What a watch sends of its reports: the request's selection of types and names
(:class:`Selection`), and the debounce windows that merge a path's events of a
type into one (:class:`Debouncer`).
"""

from __future__ import annotations

import fnmatch
import os
from collections import deque
from dataclasses import dataclass
from typing import Callable, Optional

from vmservice.guest.loop import Timer
from vmservice.guest.watch_tree import OVERFLOW, Report

#: Most (type, path) pairs a debounce window holds; beyond, events go out uncoalesced.
MAX_DEBOUNCED = 10_000


@dataclass(frozen=True)
class Selection:
    """
    Which reports a request wants.

    :ivar events: the types kept; empty for all.
    :ivar patterns: globs on the base name; empty for every name.
    """

    events: frozenset[str] = frozenset()
    patterns: tuple[str, ...] = ()

    def wants(self, report: Report) -> bool:
        """Whether ``report`` is sent (an overflow always is)."""
        if report.type == OVERFLOW:
            return True
        if self.events and report.type not in self.events:
            return False
        if not self.patterns:
            return True
        name = os.path.basename(report.path.rstrip("/")) or report.path
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.patterns)


class Debouncer:
    """
    Coalesces reports of the same type and path within ``window`` seconds: the
    first opens the window, the others are merged into it (the latest wins), one
    goes to ``send`` when the window closes.  Reports leave in the order their
    windows opened.  With no window, or for an overflow, or once
    :data:`MAX_DEBOUNCED` windows are open, reports go out at once.

    :param window: seconds; 0 for none.
    :param send: where reports go.
    :param clock: monotonic seconds.
    :param call_later: ``(delay, callback) -> Timer``.
    """

    def __init__(
        self,
        window: float,
        send: Callable[[Report], None],
        clock: Callable[[], float],
        call_later: Callable[[float, Callable[[], None]], Timer],
    ) -> None:
        self._window = window
        self._send = send
        self._clock = clock
        self._call_later = call_later
        self._pending: dict[tuple[str, str], Report] = {}
        self._order: deque[tuple[float, tuple[str, str]]] = deque()
        self._timer: Optional[Timer] = None

    def add(self, report: Report) -> None:
        """A report to send (now, or when its window closes)."""
        if self._window <= 0 or report.type == OVERFLOW:
            self._send(report)
            return
        key = (report.type, report.path)
        if key in self._pending:
            self._pending[key] = report
            return
        if len(self._pending) >= MAX_DEBOUNCED:
            self._send(report)
            return
        self._pending[key] = report
        self._order.append((self._clock() + self._window, key))
        if self._timer is None:
            self._timer = self._call_later(self._window, self._due)

    def _due(self) -> None:
        self._timer = None
        now = self._clock()
        while self._order and self._order[0][0] <= now:
            _, key = self._order.popleft()
            self._send(self._pending.pop(key))
        if self._order:
            self._timer = self._call_later(max(0.0, self._order[0][0] - now), self._due)

    def flush(self) -> None:
        """Send every open window's report now."""
        self.close()
        while self._order:
            _, key = self._order.popleft()
            self._send(self._pending.pop(key))

    def close(self) -> None:
        """Stop the timer (what is pending stays until :meth:`flush`)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


__all__ = ["MAX_DEBOUNCED", "Debouncer", "Selection"]
