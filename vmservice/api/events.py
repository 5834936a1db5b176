# -*- test-case-name: tests.api.test_events -*-
"""
``GET /events``: the nodes' lifecycle events as Server-Sent Events (an
extension of the contract, for operators).

Each event of the :class:`~vmservice.nodes.events.EventHub` that passes the
filters (``hostgroup``, ``tag``) becomes one SSE event whose ``id:`` is the
hub's id and whose data is its JSON (:func:`event_json`).  A client that
reconnects with ``Last-Event-ID`` (or ``last_event_id`` in the query) gets
what came after that id first, from the hub's ring; when that id is older
than the ring holds (or unknown to this run of the daemon) an ``event: gap``
comes first, its id the one before the oldest event held.  A quiet stream carries a ``: heartbeat`` comment every
:data:`~.sse.HEARTBEAT_INTERVAL` seconds.  The stream never ends on its own:
the client going away cancels the handler, which cancels the subscription.
With ``follow=false`` it ends once the replay is over (the events held, for
``vmctl events`` without ``--follow``).
"""

from __future__ import annotations

from typing import Any, Optional

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.web.server import Request
from zope.interface import implementer

from ..nodes.events import EventFilter, EventHub, IEventSink, NodeEvent
from ..nodes.fleet import Fleet
from .inputs.events import MAX_EVENT_ID, resume_after
from .filesystem import rfc3339_ns
from .models.meta import ErrorResponse
from .query import Boolean, Integer, Text, param
from .routing import Reply, Route
from .sse import HEARTBEAT_INTERVAL, SseStream


@frozen
class EventsQuery:
    """The query of the event stream (see docs/api.md)."""

    hostgroup: Optional[str] = param(Text(), "Only events of nodes of this host group")
    tag: Optional[str] = param(Text(), "Only events of nodes that have this tag")
    last_event_id: Optional[int] = param(Integer(0, MAX_EVENT_ID),
                                         "Replay what came after this id (as the Last-Event-ID header does)")
    follow: bool = param(Boolean(), "Keep the stream open for new events (false: end once the replay is over)",
                         default=True)

    def where(self) -> EventFilter:
        """The filter of the subscription."""
        return EventFilter(hostgroup=self.hostgroup, tag=self.tag)


def event_json(event: NodeEvent) -> dict[str, Any]:
    """
    One event as its SSE data: id, time (RFC 3339, UTC), type, hostname,
    hostgroup, status, tags (, exit_code, idle).
    """
    data: dict[str, Any] = {
        "id": event.id,
        "time": rfc3339_ns(round(event.time * 1_000_000) * 1000),
        "type": event.type.value,
        "hostname": event.hostname,
        "hostgroup": event.hostgroup,
        "status": event.status,
        "tags": list(event.tags),
    }
    if event.exit_code is not None:
        data["exit_code"] = event.exit_code
    if event.idle:
        data["idle"] = True
    return data


@implementer(IEventSink)
class _SseSink:
    """Writes a subscription's events to its SSE stream."""

    def __init__(self) -> None:
        self.stream: Optional[SseStream] = None

    def event(self, event: NodeEvent) -> None:
        if self.stream is not None:
            self.stream.send_as(event.id, event_json(event))

    def gap(self, last_id: int, oldest_id: int) -> None:
        if self.stream is not None:
            # Its id is where the stream now stands: a client reconnecting with it gets no second gap.
            resumed = oldest_id - 1
            self.stream.send_as(resumed, {"id": resumed, "type": "gap", "last_event_id": last_id,
                                          "oldest_id": oldest_id}, "gap")


class EventsApi:
    """
    :param fleet: the nodes of this daemon (their host groups, their events).
    :param clock: for the heartbeats.
    :param heartbeat: seconds of silence before a heartbeat comment.
    """

    def __init__(self, fleet: Fleet, clock: IReactorTime, heartbeat: float = HEARTBEAT_INTERVAL) -> None:
        self._fleet = fleet
        self._hub: EventHub = fleet.events
        self._clock = clock
        self._heartbeat = heartbeat

    def routes(self) -> list[Route]:
        return [
            Route(
                "GET", "/events", self.events, "Stream the nodes' lifecycle events (SSE; an extension)", "events",
                {200: Reply("Server-Sent Events, one per lifecycle event; `event: gap` when a replay asked for "
                            "more than is kept", media="text/event-stream"),
                 400: Reply("Bad input (a bad Last-Event-ID or last_event_id)", ErrorResponse),
                 404: Reply("No such host group", ErrorResponse)},
                query=EventsQuery,
                stream="events",
            ),
        ]

    async def events(self, request: Request, query: EventsQuery) -> bytes:
        after = resume_after(request, query.last_event_id)
        if query.hostgroup is not None:
            self._fleet.group(query.hostgroup)
        sink = _SseSink()
        subscription = self._hub.subscribe(sink, query.where(), after)
        stream = SseStream(request, subscription, self._clock, self._heartbeat)
        sink.stream = stream
        try:
            if request.method != b"HEAD":  # for HEAD the status and headers are the answer
                # Following, the stream lasts until the client goes away (the handler is cancelled).
                end: Deferred[None] = Deferred() if query.follow else subscription.reached(self._hub.newest_id)
                subscription.start()
                await end
        finally:
            subscription.cancel()
            stream.close()
        return b""


__all__ = ["EventsApi", "EventsQuery", "event_json"]
