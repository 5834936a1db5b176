# -*- test-case-name: tests.agent.test_watching -*-
"""
File watching in a node's guest (:meth:`vmservice.guestport.guest.IGuest.watch`):
what to watch, the events, the sink they go to and the watch in progress.
"""

from __future__ import annotations

from attrs import frozen
from twisted.internet.interfaces import IPushProducer
from zope.interface import Attribute, Interface

from ..errors import AgentError


#: The event types a watch may ask for (``overflow`` is always reported).
WATCH_EVENT_TYPES = ("create", "write", "remove", "rename", "chmod")


@frozen
class WatchRequest:
    """
    What to watch in the guest.

    :ivar paths: absolute, or ``~``/``~/...`` (the home of ``uid``).
    :ivar patterns: globs on an entry's base name; empty for every name.
    :ivar events: the types reported (of :data:`WATCH_EVENT_TYPES`); empty for all.
    :ivar recursive: watch every directory below, and new ones as they appear.
    :ivar debounce: seconds within which events of one type and path become one; 0 for none.
    :ivar uid: whose home directory ``~`` is.
    """

    paths: tuple[str, ...]
    patterns: tuple[str, ...] = ()
    events: tuple[str, ...] = ()
    recursive: bool = False
    debounce: float = 0.0
    uid: int = 0


@frozen
class WatchEvent:
    """
    One file-system event in the guest.

    :ivar type: ``create``, ``write``, ``remove``, ``rename``, ``chmod``, or
        ``overflow`` (events were lost; :attr:`message` says why).
    :ivar path: the entry's path in the guest (``""`` for an overflow).
    :ivar size: the entry's size when the guest sent the event (0 for
        ``remove`` and ``rename``).
    :ivar is_dir: whether the entry is a directory.
    :ivar message: why events were lost, for an overflow.
    """

    type: str
    path: str
    size: int
    is_dir: bool
    message: str | None = None


class IWatchSink(Interface):
    """Receives the events of one watch, in order, then its end (once)."""

    def event(event: WatchEvent) -> None:
        """Something happened in the guest."""

    def ended(error: AgentError | None) -> None:
        """
        The watch is over: ``None`` when the guest ended it (nothing it watched
        is left), else why it was lost.  Not called for a watch that never got
        ready, nor after :meth:`IWatch.cancel`.
        """


class IWatch(IPushProducer):
    """
    A watch in progress.  As an ``IPushProducer`` it controls the events:
    pausing it withholds credit from the guest, which drops what it cannot
    send and reports an ``overflow`` once the host catches up.
    """

    ready = Attribute(
        "A Deferred firing once the guest watches every path, or failing with an AgentError "
        "(kind NOT_FOUND for a missing path, ...)."
    )

    def cancel() -> None:
        """Stop watching: the guest removes every watch."""
