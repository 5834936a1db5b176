# -*- test-case-name: tests.guest.test_agent,tests.guest.test_identity -*-
"""
Start-up work the agent puts off until it has answered what a create waits for
(growing the root file system, an adoption's files): :data:`DEFERRED`, run by
:func:`run_deferred`.  Callers name ``deferred.DEFERRED`` (the module's
attribute) so that tests can replace the list.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

#: Start-up work put off until the agent has answered the host (see :func:`run_deferred`).
DEFERRED: list[Callable[[], None]] = []
#: Operations that do not wait for :data:`DEFERRED`: what the host asks before a create answers (the
#: health check, the clock, the node's secrets on a tmpfs, its login user's few small files).
UNDEFERRED_OPS = frozenset({"health", "echo", "clock", "secrets", "login"})
#: Seconds after the agent is ready when :data:`DEFERRED` runs anyway, if no operation ran it sooner.
DEFERRED_DELAY = 1.0


def run_deferred() -> None:
    """
    Run the start-up work put off in :data:`DEFERRED` (growing the root file system), once: before
    the first operation other than :data:`UNDEFERRED_OPS`, or :data:`DEFERRED_DELAY` seconds after
    the agent is ready, whichever comes first.
    """
    while DEFERRED:
        DEFERRED.pop(0)()


__all__ = ["DEFERRED", "DEFERRED_DELAY", "UNDEFERRED_OPS", "run_deferred"]
