# -*- test-case-name: tests.guest.test_agent,tests.guest.test_clock -*-
"""
What the agent's handlers may know of it (:class:`AgentContext`): its version
and start time, the system uptime's file, the wall clock and the userdata
marker, each replaceable by tests.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Optional

from vmservice.guest.userdata_marker import USERDATA_MARKER


def agent_version() -> str:
    """
    The vmservice version the image was built from (``vmservice/__init__.py``'s
    ``__version__``), or ``"unknown"`` when the image lacks that file.
    """
    try:
        from vmservice import __version__
    except ImportError:
        return "unknown"
    return str(__version__)


def set_realtime_ns(unix_ns: int) -> None:
    """
    Set the guest's wall clock (``CLOCK_REALTIME``) to ``unix_ns`` nanoseconds since
    the epoch.
    """
    time.clock_settime_ns(time.CLOCK_REALTIME, unix_ns)


class AgentContext:
    """
    What handlers may want to know about the agent, and the clocks they use.

    :ivar version: reported as ``agent_version``.
    :ivar started_ns: :func:`time.monotonic_ns` when the agent started.
    :ivar proc_uptime: where to read the system uptime.
    :ivar realtime_ns: reads the wall clock, in nanoseconds since the epoch.
    :ivar set_realtime_ns: sets the wall clock (the ``clock`` op); tests replace
        it, so that they never set the clock of the machine they run on.
    :ivar userdata_marker: the file saying whether and how userdata ran (see
        :mod:`vmservice.guest.userdata`); tests point it elsewhere.
    """

    def __init__(
        self,
        version: Optional[str] = None,
        started_ns: Optional[int] = None,
        proc_uptime: str = "/proc/uptime",
        *,
        realtime_ns: Callable[[], int] = time.time_ns,
        set_realtime_ns: Callable[[int], None] = set_realtime_ns,
        userdata_marker: str = USERDATA_MARKER,
    ) -> None:
        self.userdata_marker = userdata_marker
        self.version = agent_version() if version is None else version
        self.started_ns = time.monotonic_ns() if started_ns is None else started_ns
        self.proc_uptime = proc_uptime
        self.realtime_ns = realtime_ns
        self.set_realtime_ns = set_realtime_ns


__all__ = ["AgentContext", "agent_version", "set_realtime_ns"]
