# -*- test-case-name: tests.api.test_watching -*-
"""
Server-Sent Events responses with back-pressure: each event is ``id: N`` and
``data: {json}`` lines and a blank line, written (and so flushed) as it is
sent; a comment line keeps a quiet stream alive; a client that reads slowly
pauses whoever produces the events.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from twisted.internet.interfaces import IDelayedCall, IPushProducer, IReactorTime
from twisted.web.server import Request

from .relay import UpstreamRelay

#: Seconds without anything written after which a heartbeat comment is sent.
HEARTBEAT_INTERVAL = 15.0

#: The comment a quiet stream is kept alive with.
HEARTBEAT = b": heartbeat\n\n"


def sse_event(event_id: int | None, data: dict[str, Any], name: str | None = None) -> bytes:
    """
    One event: its ``id:`` line (none for ``None``), its ``event:`` line
    (when named), one ``data:`` line of compact JSON (never a newline in
    it), a blank line.
    """
    head = b"" if event_id is None else b"id: %d\n" % event_id
    if name is not None:
        head += b"event: %s\n" % name.encode("ascii")
    return head + b"data: %s\n\n" % json.dumps(data, separators=(",", ":")).encode("utf-8")


class SseStream(UpstreamRelay):
    """
    A 200 ``text/event-stream`` response, its headers written at once.

    Each event gets the next id (from ``first_id``), in the ``id:`` line and as
    ``"id"`` in its JSON.  After ``heartbeat`` seconds without anything written,
    a ``: heartbeat`` comment goes out.  Registered as the request's push
    producer: a slow client pauses ``upstream``; a client that goes away stops
    it.

    :param request: the response to write.
    :param upstream: where the events come from.
    :param clock: for the heartbeats.
    :param heartbeat: seconds of silence before a heartbeat.
    :param first_id: the id of the first event.
    """

    def __init__(self, request: Request, upstream: IPushProducer, clock: IReactorTime, heartbeat: float,
                 first_id: int = 1) -> None:
        self._clock = clock
        self._heartbeat = heartbeat
        self.next_id = first_id
        request.setResponseCode(200)
        request.setHeader(b"Content-Type", b"text/event-stream")
        request.setHeader(b"Cache-Control", b"no-cache")
        request.setHeader(b"X-Accel-Buffering", b"no")
        request.setHeader(b"X-Content-Type-Options", b"nosniff")
        super().__init__(request, upstream)
        request.write(b"")  # the headers, now: the client knows the stream is open
        self._beat: Optional[IDelayedCall] = clock.callLater(heartbeat, self._send_heartbeat)

    def send(self, data: dict[str, Any]) -> int:
        """Write one event of ``data`` (``"id"`` first); its id."""
        event_id = self.next_id
        if not self._closed:
            self.next_id += 1
            self._write(sse_event(event_id, {"id": event_id, **data}))
        return event_id

    def send_as(self, event_id: int | None, data: dict[str, Any], name: str | None = None) -> None:
        """Write one event with an id of the caller's (``None``: no ``id:`` line) and an optional name."""
        if not self._closed:
            self._write(sse_event(event_id, data, name))

    def _write(self, data: bytes) -> None:
        self._request.write(data)
        if self._beat is not None and self._beat.active():
            self._beat.reset(self._heartbeat)

    def _send_heartbeat(self) -> None:
        self._beat = None
        if self._closed:
            return
        self._request.write(HEARTBEAT)
        self._beat = self._clock.callLater(self._heartbeat, self._send_heartbeat)

    def close(self) -> None:
        """No more events: stop the heartbeats and the relaying of flow control (the caller finishes the request)."""
        if self._beat is not None and self._beat.active():
            self._beat.cancel()
        self._beat = None
        super().close()


__all__ = ["HEARTBEAT", "HEARTBEAT_INTERVAL", "SseStream", "sse_event"]
