# -*- test-case-name: tests.agent.test_watching -*-
"""
File watching in a node's guest (:meth:`vmservice.guestport.guest.IGuest.watch`):
what to watch, the events, the sink they go to and the watch in progress.
"""

from __future__ import annotations

from attrs import frozen
from twisted.internet.interfaces import IPushProducer
from zope.interface import Attribute, Interface

from vmservice.wire.openheaders.watch import WATCH_EVENT_TYPES as WATCH_EVENT_TYPES, WatchHeader

from ..errors import AgentError


#: What to watch in the guest: the watch stream's OPEN header itself, so its
#: fields and their checks are written once (see
#: :class:`~vmservice.wire.openheaders.watch.WatchHeader`).
WatchRequest = WatchHeader


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
