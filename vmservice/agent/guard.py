# -*- test-case-name: tests.agent.test_guard,tests.agent.test_protocol -*-
"""
What a guest may make the host's end of its channel do before the host drops
the connection, and how long the host then waits before it connects again.

The guest's root user owns the agent's end of the channel (docs/security.md,
"A guest against its channel").  The codec bounds what one frame may carry and
the streams' windows bound their data; what is left is what the guest's frames
make the host *answer* and *log*:

- a PONG for each PING, a HELLO for each new session, a RESET for each stream
  the guest opens (the host serves none): a guest that sends them and never
  reads the answers would have them pile up in the host's socket buffer.  At
  most :data:`MAX_UNREAD_ANSWERS` are written while the socket's buffer is
  full; one more is a fault.
- a new session (an agent restart) ends every stream and is logged: at most
  :data:`MAX_RESTARTS` within :data:`RESTART_WINDOW` seconds on one
  connection; one more is a fault.

A fault, like any protocol error, drops the connection; the next connection
then waits a penalty (:class:`ReconnectPenalty`) that doubles with each fault
in a row, so a guest that breaks the rules again at once costs the host a
bounded number of connections, handshakes and log lines per minute.
"""

from __future__ import annotations

import collections
from typing import Callable

from twisted.internet.interfaces import IReactorTime

#: Answers the host writes while its socket's buffer is full before it drops the connection.
MAX_UNREAD_ANSWERS = 256
#: New sessions (agent restarts) one connection may see within :data:`RESTART_WINDOW`.
MAX_RESTARTS = 8
#: Seconds over which :data:`MAX_RESTARTS` is counted.
RESTART_WINDOW = 60.0
#: Seconds the first connection after a fault waits; each fault in a row doubles it ...
PENALTY_FIRST = 1.0
#: ... up to this.
PENALTY_MOST = 30.0
#: Seconds without a fault after which the penalty starts from :data:`PENALTY_FIRST` again.
PENALTY_FORGET = 300.0


class GuestFault(Exception):
    """The guest broke a rule of :mod:`.guard`; the text says which."""


class ChannelGuard:
    """
    The counts of one connection.

    :param clock: when restarts happen.
    """

    def __init__(self, clock: IReactorTime) -> None:
        self._clock = clock
        self._unread = 0
        self._restarts: collections.deque[float] = collections.deque()

    def answering(self, paused: bool) -> None:
        """
        The host is about to answer the guest; ``paused``: its socket's buffer is full.

        :raises GuestFault: if this is one answer too many the guest is not reading.
        """
        if not paused:
            return
        self._unread += 1
        if self._unread > MAX_UNREAD_ANSWERS:
            raise GuestFault(f"the agent is not reading what the host answers ({self._unread} answers owed)")

    def drained(self) -> None:
        """The socket's buffer drained: the guest reads again."""
        self._unread = 0

    def restarted(self) -> None:
        """
        The guest started a new session.

        :raises GuestFault: if that is more than :data:`MAX_RESTARTS` within :data:`RESTART_WINDOW`.
        """
        now = self._clock.seconds()
        self._restarts.append(now)
        while self._restarts[0] <= now - RESTART_WINDOW:
            self._restarts.popleft()
        if len(self._restarts) > MAX_RESTARTS:
            raise GuestFault(f"the agent started {len(self._restarts)} sessions within {RESTART_WINDOW:g} s")


class ReconnectPenalty:
    """
    What the next connection of one channel waits after a fault.

    :param clock: when faults happen.
    """

    def __init__(self, clock: IReactorTime) -> None:
        self._clock = clock
        self._delay = 0.0
        self._due = 0.0
        self._last: float | None = None

    def fault(self) -> float:
        """A connection was dropped for a fault: return what the next one waits."""
        now = self._clock.seconds()
        if self._last is None or now - self._last > PENALTY_FORGET:
            self._delay = PENALTY_FIRST
        else:
            self._delay = min(self._delay * 2, PENALTY_MOST)
        self._last = now
        self._due = self._delay
        return self._delay

    def policy(self, base: Callable[[int], float]) -> Callable[[int], float]:
        """``base`` (the delay before reconnection attempt ``n``), lengthened by a penalty due."""

        def delay(attempt: int) -> float:
            due, self._due = self._due, 0.0
            return max(base(attempt), due)

        return delay


__all__ = ["ChannelGuard", "GuestFault", "ReconnectPenalty", "MAX_UNREAD_ANSWERS", "MAX_RESTARTS"]
