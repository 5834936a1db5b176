# -*- test-case-name: tests.client.test_sse,tests.integration.test_client -*-
"""
Server-Sent Events as the client reads them: :class:`SseDecoder` (the
events of a byte stream, whatever its chunking) and :func:`events_of`, a
response's events as an asynchronous iterator, the connection paused while
its consumer falls behind.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any, AsyncGenerator, cast

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from twisted.web.client import ResponseDone
from twisted.web.http import PotentialDataLoss
from twisted.web.iweb import IResponse

from .errors import WatchInterrupted

__all__ = ["SseDecoder", "events_of", "sse_headers"]


class SseDecoder:
    """
    Splits a Server-Sent Events stream into its events' data, whatever the
    chunking: ``data:`` lines (joined with ``\n``) up to a blank line make one
    event, whose data must be a JSON object; the last ``id:`` line fills in
    an ``"id"`` the JSON lacks.  Comment lines (``:``, heartbeats) and other
    fields (``event:``, ``retry:``) are skipped; lines end with LF or CRLF.
    A line longer than ``max_line`` bytes is an error rather than unbounded
    memory.

    :param max_line: the longest line accepted, in bytes.
    """

    def __init__(self, max_line: int = 1024 * 1024) -> None:
        self._max_line = max_line
        self._pending = bytearray()
        self._data: list[str] = []
        self._id: int | None = None

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """
        The events completed by ``data``.

        :raise ValueError: an event's data is not a JSON object, or a line is too long.
        """
        self._pending += data
        events = []
        start = 0
        while True:
            end = self._pending.find(b"\n", start)
            if end < 0:
                break
            line = bytes(self._pending[start:end]).removesuffix(b"\r").decode("utf-8")
            start = end + 1
            event = self._line(line)
            if event is not None:
                events.append(event)
        del self._pending[:start]
        if len(self._pending) > self._max_line:
            raise ValueError(f"a line longer than {self._max_line} bytes")
        return events

    def _line(self, line: str) -> dict[str, Any] | None:
        if not line:
            if not self._data:
                return None
            text, self._data = "\n".join(self._data), []
            value = json.loads(text)
            if not isinstance(value, dict):
                raise ValueError(f"an event's data is not a JSON object: {text[:80]!r}")
            if "id" not in value and self._id is not None:
                value["id"] = self._id
            return value
        if line.startswith(":"):
            return None
        name, _, field = line.partition(":")
        field = field[1:] if field.startswith(" ") else field
        if name == "data":
            self._data.append(field)
        elif name == "id" and field.isascii() and field.isdigit():
            self._id = int(field)
        return None


class _EventBody(Protocol):
    """
    Receives a watch response's body: decodes its events into a queue that
    :meth:`next_event` empties, pausing the connection while more than
    ``high`` events wait and resuming it below ``low``.
    """

    def __init__(self, high: int = 256, low: int = 64) -> None:
        self._decoder = SseDecoder()
        self._queue: deque[dict[str, Any]] = deque()
        self._high, self._low = high, low
        self._paused = False
        self._ended: Failure | None = None
        self._error: Exception | None = None
        self._waiter: Deferred[None] | None = None

    def dataReceived(self, data: bytes) -> None:
        if self._error is not None:
            return
        try:
            self._queue.extend(self._decoder.feed(data))
        except ValueError as error:
            self._error = WatchInterrupted(f"the daemon sent something that is not an event: {error}")
            self.stop()
        if len(self._queue) > self._high and not self._paused and self._producer is not None:
            self._paused = True
            self._producer.pauseProducing()
        self._wake()

    @property
    def _producer(self) -> IPushProducer | None:
        # A response body's transport is its connection as a push producer
        # (twisted.web._newclient's TransportProxyProducer).
        return cast(IPushProducer, self.transport) if self.transport is not None else None

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        self._ended = reason
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            waiter.callback(None)

    async def next_event(self) -> dict[str, Any] | None:
        """
        The next event, or ``None`` once the daemon closed the stream.

        :raise WatchInterrupted: the connection was lost, or the stream does not parse.
        """
        while not self._queue:
            if self._error is not None:
                raise self._error
            if self._ended is not None:
                if self._ended.check(ResponseDone, PotentialDataLoss):
                    return None
                raise WatchInterrupted(f"the connection to the daemon was lost: {self._ended.getErrorMessage()}")
            self._waiter = Deferred()
            try:
                await self._waiter
            finally:
                self._waiter = None
        event = self._queue.popleft()
        if self._paused and len(self._queue) < self._low and self._ended is None and self._producer is not None:
            self._paused = False
            self._producer.resumeProducing()
        return event

    def stop(self) -> None:
        """Close the connection, if the stream is still open (the daemon removes the watch)."""
        if self._ended is None and self._producer is not None:
            self._producer.stopProducing()


async def events_of(response: IResponse) -> AsyncGenerator[dict[str, Any], None]:
    """The events of a Server-Sent Events response, decoded, until it ends; leaving the loop stops reading."""
    body = _EventBody()
    response.deliverBody(body)
    try:
        while True:
            event = await body.next_event()
            if event is None:
                return
            yield event
    finally:
        body.stop()


def sse_headers(last_event_id: int | None) -> dict[bytes, bytes]:
    """The headers of an event stream's request, ``Last-Event-ID`` when ids should continue after one."""
    headers = {b"Accept": b"text/event-stream"}
    if last_event_id is not None:
        headers[b"Last-Event-ID"] = str(last_event_id).encode("ascii")
    return headers
