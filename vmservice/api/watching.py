# -*- test-case-name: tests.api.test_watching -*-
"""
``GET /vm/{hostname}/fs/watch``: file-system events of a guest as
Server-Sent Events.

The handler starts a watch on the node's guest
(:meth:`~vmservice.guestport.guest.IGuest.watch`) and waits until the guest
watches every path: a refusal (a missing path is 404) or a lost agent is an
error status; then the response commits to a 200 ``text/event-stream``
(:class:`~.sse.SseStream`) and each event becomes one SSE event with
consecutive ids.  The stream ends (the response is closed) after the first
event with ``one_shot``, after ``max_events``, when ``timeout`` has passed,
or when the guest ends the watch; each time the guest removes its watches.
A client that goes away resets the guest's stream, which removes them too.
"""

from __future__ import annotations

from typing import Any, Optional

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.web.server import Request
from zope.interface import implementer

from ..errors import AgentError
from ..guestport.watch import IWatchSink, WATCH_EVENT_TYPES, WatchEvent, WatchRequest
from ..nodes.fleet import Fleet
from .inputs.events import MAX_EVENT_ID, last_event_id
from .filesystem import rfc3339_ns
from .models.meta import ErrorResponse
from .query import GUEST_PATH, Boolean, Choice, Duration, Integer, Text, UserId, param
from .routing import Reply, Route
from .sse import HEARTBEAT_INTERVAL, SseStream

log = Logger()


@frozen
class WatchQuery:
    """The query of a watch (see docs/api.md)."""

    paths: tuple[str, ...] = param(GUEST_PATH, "A path to watch (repeat for more): absolute, ~ or ~/... (the home "
                                               "of uid)", repeated=True, required=True)
    patterns: tuple[str, ...] = param(Text(), "A glob on the base name (repeat for more; any matches); none: every "
                                              "name", repeated=True)
    events: tuple[str, ...] = param(Choice(WATCH_EVENT_TYPES), "An event type to report (repeat for more); none: all",
                                    repeated=True)
    recursive: bool = param(Boolean(), "Watch every directory below, and new ones as they appear", default=False)
    one_shot: bool = param(Boolean(), "End the stream after the first event", default=False)
    debounce: Optional[float] = param(Duration(), "Coalesce events of one type and path within this window (Go "
                                                  "duration)")
    timeout: Optional[float] = param(Duration(), "End the stream after this long (Go duration)")
    max_events: Optional[int] = param(Integer(1), "End the stream after this many events")
    uid: Optional[int] = param(UserId(), "Whose home ~ is (default root; 4294967295 = not set)")

    def request(self) -> WatchRequest:
        """What to watch in the guest."""
        return WatchRequest(paths=self.paths, patterns=self.patterns, events=self.events, recursive=self.recursive,
                            debounce=self.debounce or 0.0, uid=self.uid or 0)

    def limit(self, last_event_id: int) -> Optional[int]:
        """
        How many events the stream carries at most: 1 with ``one_shot``, else
        ``max_events``, and never an id past :data:`~.inputs.events.MAX_EVENT_ID`.
        """
        limits = [MAX_EVENT_ID - last_event_id]
        if self.one_shot:
            limits.append(1)
        if self.max_events is not None:
            limits.append(self.max_events)
        return min(limits)


@implementer(IWatchSink)
class WatchCall:
    """
    One watch request in flight: the :class:`~vmservice.guestport.watch.IWatchSink`
    that turns guest events into SSE events, counts them, and says when the
    stream is over (:attr:`done`).

    :param clock: for the events' timestamps (the daemon's clock, when the
        event arrived).
    :param limit: the most events the stream carries, ``None`` for no limit.
    :ivar done: fires once the stream should end: the limit reached, the
        timeout passed, the guest ended the watch.
    """

    def __init__(self, clock: IReactorTime, limit: Optional[int]) -> None:
        self._clock = clock
        self._limit = limit
        self._stream: Optional[SseStream] = None
        self._pending: list[dict[str, Any]] = []
        self.sent = 0
        self.done: Deferred[None] = Deferred()

    def attach(self, stream: SseStream) -> None:
        """Start writing events (the ones so far first)."""
        self._stream = stream
        pending, self._pending = self._pending, []
        for data in pending:
            self._send(data)
        self._check_limit()

    def _check_limit(self) -> None:
        if self._limit is not None and self.sent >= self._limit:
            self.finish()

    def _send(self, data: dict[str, Any]) -> None:
        if self.done.called or self._stream is None:
            return
        self._stream.send(data)
        self.sent += 1
        self._check_limit()

    def finish(self) -> None:
        """End the stream (the limit, the timeout)."""
        if not self.done.called:
            self.done.callback(None)

    # -- IWatchSink ---------------------------------------------------------------------

    def event(self, event: WatchEvent) -> None:
        if self.done.called:
            return
        data: dict[str, Any] = {
            "type": event.type,
            "path": event.path,
            # To the microsecond: a float of seconds since the epoch holds no more.
            "timestamp": rfc3339_ns(round(self._clock.seconds() * 1_000_000) * 1000),
            "size": event.size,
            "isDir": event.is_dir,
        }
        if event.message is not None:
            data["message"] = event.message
        if self._stream is None:
            self._pending.append(data)
        else:
            self._send(data)

    def ended(self, error: Optional[AgentError]) -> None:
        if error is not None:
            log.warn("watch ended by the agent: {error}", error=str(error))
        self.finish()


class WatchApi:
    """
    :param fleet: the nodes of this daemon.
    :param clock: for timestamps, timeouts and heartbeats.
    :param heartbeat: seconds of silence before a heartbeat comment.
    """

    def __init__(self, fleet: Fleet, clock: IReactorTime, heartbeat: float = HEARTBEAT_INTERVAL) -> None:
        self._fleet = fleet
        self._clock = clock
        self._heartbeat = heartbeat

    def routes(self) -> list[Route]:
        return [
            Route(
                "GET", "/vm/{hostname}/fs/watch", self.watch, "Stream file-system events of the node (SSE)", "fs",
                {200: Reply("Server-Sent Events, one per file-system event, once every path is watched",
                            media="text/event-stream"),
                 400: Reply("Bad input (no paths, a relative path, an unknown event type, a bad duration, "
                            "max_events or Last-Event-ID)", ErrorResponse),
                 404: Reply("No such node, or a path that does not exist in the guest", ErrorResponse),
                 409: Reply("The node is paused, stopped or suspended", ErrorResponse),
                 503: Reply("The node's agent is not connected", ErrorResponse)},
                query=WatchQuery,
                stream="watch",
            ),
        ]

    async def watch(self, request: Request, query: WatchQuery, hostname: str) -> bytes:
        after = last_event_id(request)
        call = WatchCall(self._clock, query.limit(after))
        watch = (await self._fleet.guest(hostname)).watch(query.request(), call)
        timer = None
        stream: Optional[SseStream] = None
        try:
            await watch.ready
            stream = SseStream(request, watch, self._clock, self._heartbeat, after + 1)
            call.attach(stream)
            if request.method == b"HEAD":
                call.finish()  # the status and headers are the answer: no events follow
            if query.timeout is not None and not call.done.called:
                timer = self._clock.callLater(query.timeout, call.finish)
            await call.done
        finally:
            # Whatever ended it (the limit, the timeout, the guest, the client
            # going away, a failure): the guest removes its watches.
            watch.cancel()
            if timer is not None and timer.active():
                timer.cancel()
            if stream is not None:
                stream.close()
        return b""


__all__ = ["WatchApi", "WatchCall", "WatchQuery"]
