# -*- test-case-name: tests.nodes.test_console,tests.nodes.warm.test_fork_memory -*-
"""
What runs a blocking call (a file read, a sparse copy) off the reactor:
:class:`Blocking`, a thread pool's in the daemon, at once in the tests.
"""

from __future__ import annotations

from typing import Callable, Protocol, TypeVar

from twisted.internet.defer import Deferred

_T = TypeVar("_T")


class Blocking(Protocol):
    """Runs a blocking call (a file read) off the reactor; fires with its result."""

    def __call__(self, call: Callable[[], _T]) -> Deferred[_T]: ...


__all__ = ["Blocking"]
