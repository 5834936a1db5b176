# -*- test-case-name: tests.api.test_streaming -*-
"""
Streaming in twisted.web: request bodies that are not buffered first, and
NDJSON responses with back-pressure.

twisted.web reads a whole request body (into memory or a temporary file)
before it routes the request.  Exec stdin (and cp uploads later) must not
wait for that: :class:`StreamingRequest` decides at header time, by asking the
:class:`StreamingSite`'s predicates, whether a request streams its body.  If
so the request is dispatched at once (on the next reactor turn, so nothing is
written before HTTP's ``100 Continue``), its ``content`` stays empty and every
chunk goes to :attr:`StreamingRequest.body`, a :class:`RequestBody`: a push
producer that pauses the HTTP connection while its consumer (an agent stream)
cannot take more, so the daemon's memory stays flat.

Limits: HTTP/1.x only.  Under HTTP/2 (or with requests that do not come from
an ``HTTPChannel``) the body is buffered as usual and :func:`request_body`
replays it, which is correct but not streamed.

:class:`NdjsonStream` writes one JSON object per line and passes the HTTP
transport's pause/resume on to an upstream producer (the agent stream), so a
client that reads slowly slows the guest process.
"""

from __future__ import annotations

import collections
import json
from io import BytesIO
from typing import Any, Callable, Deque, Iterable, Optional
from urllib.parse import parse_qs, urlsplit

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.http_headers import Headers
from twisted.web.iweb import IRequest
from twisted.web.resource import IResource
from twisted.web.server import Request, Site
from zope.interface import implementer

log = Logger()

#: Decides at header time whether a request streams its body:
#: ``(method, path, query, headers) -> bool``; ``query`` is parsed (bytes keys).
BodyPredicate = Callable[[bytes, bytes, dict[bytes, list[bytes]], Headers], bool]

#: Body bytes held (not yet taken by the consumer) before the connection pauses.
BODY_HIGH_WATER = 256 * 1024


@implementer(IPushProducer)
class RequestBody:
    """
    A request body arriving chunk by chunk, as a push producer.

    The network side calls :meth:`feed`, :meth:`end` and :meth:`fail`; the
    consumer side calls :meth:`deliver_to` once, and then controls the flow
    with ``pauseProducing``/``resumeProducing`` (as an ``IPushProducer``
    registered with its consumer).  While more than ``high_water`` bytes wait,
    or the consumer is paused, the network is paused.

    :param pause_network: stop reading the connection.
    :param resume_network: read it again.
    :param high_water: bytes held before the network is paused.
    :ivar received: body bytes received so far.
    :ivar complete: whether the whole body arrived.
    """

    def __init__(
        self,
        pause_network: Callable[[], None] = lambda: None,
        resume_network: Callable[[], None] = lambda: None,
        high_water: int = BODY_HIGH_WATER,
    ) -> None:
        self._pause_network = pause_network
        self._resume_network = resume_network
        self._high_water = high_water
        self._queue: Deque[bytes] = collections.deque()
        self._queued = 0
        self._write: Optional[Callable[[bytes], None]] = None
        self._done: Optional[Deferred[int]] = None
        self._paused = False
        self._network_paused = False
        self._discarding = False
        self._failure: Optional[Failure] = None
        self._delivering = False
        self.received = 0
        self.complete = False

    # -- the network side ----------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """A chunk of the body arrived."""
        if not data or self.complete:
            return
        self.received += len(data)
        if self._discarding:
            return
        self._queue.append(data)
        self._queued += len(data)
        self._pump()

    def end(self) -> None:
        """The whole body arrived."""
        if self.complete:
            return
        self.complete = True
        self._pump()

    def fail(self, reason: Failure) -> None:
        """The connection was lost before the body ended."""
        if self.complete or self._failure is not None:
            return
        self._failure = reason
        self._queue.clear()
        self._queued = 0
        done, self._done = self._done, None
        if done is not None:
            done.errback(reason)

    # -- the consumer side -------------------------------------------------------------

    def deliver_to(self, write: Callable[[bytes], None]) -> Deferred[int]:
        """
        Send every chunk (held ones first) to ``write``.

        :return: fires with the body's length once all of it was written, or
            fails with the connection's loss.
        """
        if self._write is not None or self._discarding:
            raise RuntimeError("the body is already being delivered")
        self._write = write
        self._done = Deferred()
        done = self._done
        if self._failure is not None:
            self._done = None
            done.errback(self._failure)
            return done
        self._pump()
        return done

    def pauseProducing(self) -> None:
        """The consumer is full: hold chunks and pause the network."""
        self._paused = True
        self._regulate()

    def resumeProducing(self) -> None:
        """The consumer has room again."""
        self._paused = False
        self._pump()

    def stopProducing(self) -> None:
        """The consumer is gone: discard the rest of the body (and keep reading it)."""
        self._discarding = True
        self._write = None
        self._queue.clear()
        self._queued = 0
        self._paused = False
        self._regulate()
        done, self._done = self._done, None
        if done is not None:
            done.callback(self.received)

    # -- moving data -----------------------------------------------------------------------

    def _pump(self) -> None:
        if self._delivering:
            return
        self._delivering = True
        try:
            while self._write is not None and self._queue and not self._paused:
                chunk = self._queue.popleft()
                self._queued -= len(chunk)
                self._write(chunk)
            if self._write is not None and not self._queue and self.complete:
                self._write = None
                done, self._done = self._done, None
                if done is not None:
                    done.callback(self.received)
        finally:
            self._delivering = False
        self._regulate()

    def _regulate(self) -> None:
        stuck = not self.complete and not self._discarding and (
            self._queued >= self._high_water or (self._paused and self._queued > 0)
        )
        if stuck:
            # Asserted again on every chunk: the HTTP channel itself may have
            # resumed the connection meanwhile (it does when its send buffer drains).
            self._network_paused = True
            self._pause_network()
        elif self._network_paused:
            self._network_paused = False
            self._resume_network()


def _request_line(request: Request) -> Optional[tuple[bytes, bytes, bytes]]:
    """
    Method, URI and version of a request whose headers have arrived but whose
    body has not: only ``HTTPChannel`` knows them then (private attributes, read
    here and nowhere else).  ``None`` elsewhere (HTTP/2, tests).
    """
    channel = request.channel
    try:
        line = (channel._command, channel._path, channel._version)
    except AttributeError:
        return None
    if not all(isinstance(part, bytes) for part in line):
        return None
    return line


class StreamingRequest(Request):
    """
    A request that, when its site says so at header time, is dispatched before
    its body arrives and streams the body through :attr:`body`.

    :ivar body: the streamed body, or ``None`` for an ordinary request.
    """

    body: Optional[RequestBody] = None
    _line: Optional[tuple[bytes, bytes, bytes]] = None
    _dispatched = False
    _pending_dispatch: Any = None

    def gotLength(self, length: Optional[int]) -> None:
        line = _request_line(self)
        site = getattr(self.channel, "site", None)
        wants = getattr(site, "streams_body", None)
        if line is None or wants is None or not wants(line[0], line[1], self.requestHeaders):
            super().gotLength(length)
            return
        self.content = BytesIO()
        self.body = RequestBody(self._pause_network, self._resume_network)
        self._line = line
        # Not now: HTTPChannel may still write "100 Continue" after this returns.
        self._pending_dispatch = self.channel.callLater(0, self._dispatch)

    def _dispatch(self) -> None:
        self._pending_dispatch = None
        if self._dispatched or self._disconnected or self._line is None:
            return
        self._dispatched = True
        Request.requestReceived(self, *self._line)

    def _transport(self) -> Any:
        return getattr(self.channel, "transport", None)

    def _pause_network(self) -> None:
        transport = self._transport()
        if transport is not None and not self._disconnected:
            transport.pauseProducing()

    def _resume_network(self) -> None:
        transport = self._transport()
        if transport is not None and not self._disconnected:
            transport.resumeProducing()

    def handleContentChunk(self, data: bytes) -> None:
        if self.body is not None:
            self.body.feed(data)
        else:
            super().handleContentChunk(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if self.body is None:
            super().requestReceived(command, path, version)
            return
        self.body.end()
        if not self._dispatched:
            if self._pending_dispatch is not None and self._pending_dispatch.active():
                self._pending_dispatch.cancel()
            self._dispatch()

    def finish(self) -> None:
        unfinished = self.body is not None and not self.body.complete and not self._disconnected
        if unfinished:
            # The response ends before the body did: the rest of the body cannot
            # be skipped reliably, so this connection is not reused.
            self.channel.persistent = False
        super().finish()
        if unfinished and self.body is not None:
            self.body.stopProducing()

    def connectionLost(self, reason: Failure) -> None:
        if self._pending_dispatch is not None and self._pending_dispatch.active():
            self._pending_dispatch.cancel()
        if self.body is not None:
            self.body.fail(reason)
        super().connectionLost(reason)


class StreamingSite(Site):
    """
    A ``Site`` whose requests may stream their bodies.

    :param resource: the root resource.
    :param predicates: each says, from the request line and headers, whether a
        request streams its body (e.g. ``POST /vm/x/exec?stdin=true``).
    """

    requestFactory = StreamingRequest

    def __init__(self, resource: IResource, predicates: Iterable[BodyPredicate] = (), **kwargs: Any) -> None:
        super().__init__(resource, **kwargs)
        self.requestFactory = StreamingRequest
        self._predicates = list(predicates)

    def add_streamed_body(self, predicate: BodyPredicate) -> None:
        """Stream the bodies of the requests ``predicate`` accepts."""
        self._predicates.append(predicate)

    def streams_body(self, method: bytes, uri: bytes, headers: Headers) -> bool:
        """Whether a request with this line and headers streams its body."""
        parts = urlsplit(uri)
        query = parse_qs(parts.query, keep_blank_values=True)
        return any(p(method, parts.path, query, headers) for p in self._predicates)


def request_body(request: IRequest) -> RequestBody:
    """
    The body of ``request`` as a :class:`RequestBody`: the live one of a
    streamed request, else one replaying the buffered ``content``.
    """
    live = getattr(request, "body", None)
    if isinstance(live, RequestBody):
        return live
    body = RequestBody()
    content = request.content
    if content is not None:
        content.seek(0)
        while True:
            chunk = content.read(64 * 1024)
            if not chunk:
                break
            body.feed(chunk)
    body.end()
    return body


@implementer(IPushProducer)
class NdjsonStream:
    """
    A 200 ``application/x-ndjson`` response: one compact JSON object per line,
    written (and so flushed) as soon as it is sent.

    Registered as the request's push producer: when the client reads slowly the
    HTTP transport pauses us and we pause ``upstream``; when the client goes
    away ``upstream`` is stopped.

    :param request: the response to write.
    :param upstream: where the records come from.
    """

    def __init__(self, request: IRequest, upstream: IPushProducer) -> None:
        self._request = request
        self._upstream = upstream
        self._closed = False
        request.setResponseCode(200)
        request.setHeader(b"Content-Type", b"application/x-ndjson")
        request.setHeader(b"Cache-Control", b"no-store")
        request.setHeader(b"X-Content-Type-Options", b"nosniff")
        request.registerProducer(self, True)

    def send(self, record: dict[str, Any]) -> None:
        """Write ``record`` as one line."""
        if not self._closed:
            self._request.write(json.dumps(record, separators=(",", ":")).encode("utf-8") + b"\n")

    def close(self) -> None:
        """No more records: stop relaying flow control (the caller finishes the request)."""
        if not self._closed:
            self._closed = True
            self._request.unregisterProducer()

    def pauseProducing(self) -> None:
        self._upstream.pauseProducing()

    def resumeProducing(self) -> None:
        self._upstream.resumeProducing()

    def stopProducing(self) -> None:
        if not self._closed:
            self._upstream.stopProducing()


__all__ = [
    "BODY_HIGH_WATER",
    "BodyPredicate",
    "NdjsonStream",
    "RequestBody",
    "StreamingRequest",
    "StreamingSite",
    "request_body",
]
