# -*- test-case-name: tests.nodes.test_events -*-
"""
The lifecycle events of the nodes: what happened to which node, when, in the
order it happened, each with an id one greater than the one before.

Theory of operation
-------------------

The node layer *publishes* to one :class:`EventHub` at the few places where a
node changes: :meth:`NodeRuntime.set <vmservice.nodes.runtime.NodeRuntime.set>`
(every status change goes through it; :func:`status_event` names the change),
:meth:`NodeRuntime.forget <vmservice.nodes.runtime.NodeRuntime.forget>`
(deleted), its agent connection (agent up, agent down), its provisioning
(userdata finished), creation (created) and reboot (rebooted).

The hub keeps the last :data:`RING_SIZE` events in a ring.  A
:class:`Subscription` is a cursor over that ring: the id of the last event
its sink was given.  Delivering means moving the cursor to the newest event,
giving the sink each event its filter matches.  A subscriber that was
paused (its client reads slowly) is simply not moved while paused and
catches up from the ring when resumed: no per-subscriber queue, so a slow
client costs nothing but its cursor.  When the cursor points before the
oldest event the ring holds (a reconnecting client asked for an id too old,
or a paused one fell behind by more than the ring), or after the newest one
(an id of an earlier run of the daemon), the sink is told of the *gap*
first, then given what the ring holds.

Listeners (:meth:`EventHub.listen`: the metrics) hear every event at once and
are never paused.  Nothing here knows HTTP.
"""

from __future__ import annotations

from collections import deque
from enum import Enum
from typing import Callable, Iterator, Optional

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer
from twisted.logger import Logger
from zope.interface import Interface, implementer

from .model import NodeRecord, Status, visible

log = Logger()

#: How many events the hub keeps for replay.
RING_SIZE = 1024

#: The ``status`` of a ``deleted`` event: the node is gone.
DELETED = "Deleted"


class EventType(str, Enum):
    """What happened to a node."""

    CREATED = "created"
    RUNNING = "running"
    PAUSED = "paused"
    RESUMED = "resumed"
    SUSPENDED = "suspended"
    RESTORED = "restored"
    STOPPED = "stopped"
    REBOOTED = "rebooted"
    DELETED = "deleted"
    AGENT_UP = "agent_up"
    AGENT_DOWN = "agent_down"
    USERDATA_FINISHED = "userdata_finished"


#: Statuses written before an operation acts (see :class:`~.model.Status`): no news by themselves.
_INTERNAL = frozenset({Status.CREATING, Status.SUSPENDING, Status.RESTORING, Status.STOPPING, Status.DELETING})


def status_event(before: Status, after: Status) -> Optional[EventType]:
    """
    The event a change of a node's status from ``before`` to ``after`` is,
    or ``None`` when it is none: no change, an internal status written
    before an operation acts, or a failed suspend or restore going back to
    where it was.
    """
    if before == after or after in _INTERNAL:
        return None
    if before is Status.SUSPENDING and after is not Status.SUSPENDED:
        return None  # the suspend failed: the node is as it was
    if before is Status.RESTORING and after is not Status.RUNNING:
        return None  # the restore failed: still suspended
    if after is Status.PAUSED:
        return EventType.PAUSED
    if after is Status.SUSPENDED:
        return EventType.SUSPENDED
    if after is Status.STOPPED:
        return EventType.STOPPED
    if before is Status.PAUSED:
        return EventType.RESUMED
    if before is Status.RESTORING:
        return EventType.RESTORED
    return EventType.RUNNING


@frozen
class NodeEvent:
    """
    One lifecycle event.

    :ivar id: one greater than the event before (the first is 1).
    :ivar time: when it happened, seconds since the epoch (UTC).
    :ivar type: what happened.
    :ivar hostname: to which node.
    :ivar hostgroup: the node's host group.
    :ivar status: the node's status after it, as clients see it
        (:data:`DELETED` once the node is gone).
    :ivar tags: the node's tags then.
    :ivar exit_code: the userdata's exit code (``userdata_finished`` only;
        ``None`` when it did not exit, e.g. it was killed).
    :ivar idle: a ``suspended`` or ``restored`` event of a sleep that was
        the idle timer's: its automatic suspend, the wake that ends it.
    """

    id: int
    time: float
    type: EventType
    hostname: str
    hostgroup: str
    status: str
    tags: tuple[str, ...] = ()
    exit_code: Optional[int] = None
    idle: bool = False


@frozen
class EventFilter:
    """
    Which events a subscriber wants: all of one host group, of nodes with a
    tag, or both (``None``: any).
    """

    hostgroup: Optional[str] = None
    tag: Optional[str] = None

    def matches(self, event: NodeEvent) -> bool:
        """Whether ``event`` passes."""
        if self.hostgroup is not None and event.hostgroup != self.hostgroup:
            return False
        return self.tag is None or self.tag in event.tags


class IEventSink(Interface):
    """Where a subscription delivers."""

    def event(event: NodeEvent) -> None:
        """One event the filter matched, in id order."""

    def gap(last_id: int, oldest_id: int) -> None:
        """
        Events after ``last_id`` are no longer held (or ``last_id`` is unknown
        to this run of the daemon); what follows starts at ``oldest_id``.
        """


@implementer(IPushProducer)
class Subscription:
    """
    One subscriber's cursor over the hub's ring; its flow control is an
    ``IPushProducer`` (a paused subscription is not moved; resumed, it
    catches up from the ring).

    :ivar last_id: the id of the last event considered for the sink.
    """

    def __init__(self, hub: "EventHub", sink: IEventSink, where: EventFilter, last_id: int) -> None:
        self._hub = hub
        self._sink = sink
        self._filter = where
        self.last_id = last_id
        self._paused = False
        self._delivering = False
        self._reached: list[tuple[int, Deferred[None]]] = []
        self.active = False

    def start(self) -> None:
        """Deliver what came after :attr:`last_id` (a replay), then every new event."""
        if not self.active:
            self.active = True
            self._hub._subscriptions.append(self)
            self.deliver()

    def cancel(self) -> None:
        """Stop: the sink hears nothing more and the hub forgets this subscription."""
        self.active = False
        if self in self._hub._subscriptions:
            self._hub._subscriptions.remove(self)

    def deliver(self) -> None:
        """Move the cursor to the newest event (unless paused), giving the sink what matches."""
        if self._delivering or self._paused or not self.active:
            return  # a sink that publishes: the loop below picks it up; paused: the resume does
        self._delivering = True
        try:
            hub = self._hub
            if self.last_id < hub.oldest_id - 1 or self.last_id > hub.newest_id:
                self._sink.gap(self.last_id, hub.oldest_id)
                self.last_id = hub.oldest_id - 1
            while self.active and not self._paused and self.last_id < hub.newest_id:
                event = hub.event(self.last_id + 1)
                self.last_id = event.id
                if self._filter.matches(event):
                    self._sink.event(event)
        finally:
            self._delivering = False
        self._check_reached()

    def reached(self, event_id: int) -> Deferred[None]:
        """Fires once every event up to ``event_id`` was considered for the sink (a replay is over)."""
        waiting: Deferred[None] = Deferred()
        self._reached.append((event_id, waiting))
        self._check_reached()
        return waiting

    def _check_reached(self) -> None:
        if not self.active:
            return
        done = [waiting for event_id, waiting in self._reached if self.last_id >= event_id]
        self._reached = [(event_id, waiting) for event_id, waiting in self._reached if self.last_id < event_id]
        for waiting in done:
            if not waiting.called:
                waiting.callback(None)

    # -- IPushProducer ------------------------------------------------------

    def pauseProducing(self) -> None:
        self._paused = True

    def resumeProducing(self) -> None:
        self._paused = False
        if self.active:
            self.deliver()

    def stopProducing(self) -> None:
        self.cancel()


class EventHub:
    """
    The lifecycle events of one daemon.

    :param clock: seconds since the epoch, for each event's time.
    :param size: how many events are kept for replay.
    """

    def __init__(self, clock: Callable[[], float], size: int = RING_SIZE) -> None:
        if size < 1:
            raise ValueError("the ring holds at least one event")
        self._clock = clock
        self._ring: deque[NodeEvent] = deque(maxlen=size)
        self._next_id = 1
        self._subscriptions: list[Subscription] = []
        self._listeners: list[Callable[[NodeEvent], None]] = []

    @property
    def newest_id(self) -> int:
        """The id of the last event published (0 before the first)."""
        return self._next_id - 1

    @property
    def oldest_id(self) -> int:
        """The id of the oldest event held (the next one's when none is)."""
        return self._ring[0].id if self._ring else self._next_id

    def event(self, event_id: int) -> NodeEvent:
        """The held event ``event_id`` (between :attr:`oldest_id` and :attr:`newest_id`)."""
        return self._ring[event_id - self.oldest_id]

    def held(self) -> Iterator[NodeEvent]:
        """The events held, oldest first."""
        return iter(tuple(self._ring))

    @property
    def subscribers(self) -> int:
        """How many subscriptions are active."""
        return len(self._subscriptions)

    def publish(self, type: EventType, record: NodeRecord, exit_code: Optional[int] = None,
                status: Optional[str] = None, idle: bool = False) -> NodeEvent:
        """
        Record that ``type`` happened to the node of ``record`` (as it is now)
        and tell every listener and subscriber.

        :param status: the status to report instead of the record's.
        :param idle: the event is of a sleep that was the idle timer's.
        """
        event = NodeEvent(
            id=self._next_id,
            time=self._clock(),
            type=type,
            hostname=record.hostname,
            hostgroup=record.hostgroup,
            status=status if status is not None else visible(record).status.value,
            tags=record.tags,
            exit_code=exit_code,
            idle=idle,
        )
        self._next_id += 1
        self._ring.append(event)
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                log.failure("a listener of node events failed")
        for subscription in list(self._subscriptions):
            try:
                subscription.deliver()
            except Exception:
                log.failure("a subscriber of node events failed; it is dropped")
                subscription.cancel()
        return event

    def subscribe(self, sink: IEventSink, where: EventFilter = EventFilter(),
                  last_id: Optional[int] = None) -> Subscription:
        """
        A subscription for ``sink``, not started yet (:meth:`Subscription.start`).

        :param last_id: replay what came after this id (``None``: only new events).
        """
        return Subscription(self, sink, where, self.newest_id if last_id is None else last_id)

    def listen(self, listener: Callable[[NodeEvent], None]) -> Callable[[], None]:
        """Call ``listener`` with every new event; returns a stop."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None


__all__ = ["DELETED", "EventFilter", "EventHub", "EventType", "IEventSink", "NodeEvent", "RING_SIZE",
           "Subscription", "status_event"]
