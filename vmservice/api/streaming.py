# -*- test-case-name: tests.api.test_streaming -*-
"""
Streaming in twisted.web: request bodies that are not buffered first, and
NDJSON responses with back-pressure.

twisted.web reads a whole request body (into memory or a temporary file)
before it routes the request.  Exec stdin and cp uploads must not wait for
that: :class:`StreamingRequest` decides at header time, by asking the
:class:`StreamingSite` (which asks the route table: a route's
``stream_body``), whether a request streams its body.  If so the request is
dispatched at once (on the next reactor turn, so nothing is written before
HTTP's ``100 Continue``), its ``content`` stays empty and every chunk goes
to :attr:`StreamingRequest.body`, a :class:`~.request_body.RequestBody`: a
push producer that pauses the HTTP connection while its consumer (an agent
stream) cannot take more, so the daemon's memory stays flat.

Limits: HTTP/1.x only.  Under HTTP/2 (or with requests that do not come from
an ``HTTPChannel``) the body is buffered as usual and :func:`request_body`
replays it, which is correct but not streamed.

"""

from __future__ import annotations

from io import BytesIO
from typing import Any, Callable, Optional

from twisted.python.failure import Failure
from twisted.web.http_headers import Headers
from twisted.web.iweb import IRequest
from twisted.web.resource import IResource
from twisted.web.server import Request, Site

from .request_body import RequestBody
from .request_line import request_line

#: Decides at header time whether a request streams its body:
#: ``(method, uri, headers) -> bool``.
BodyPredicate = Callable[[bytes, bytes, Headers], bool]


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
        line = request_line(self.channel)
        site = getattr(self.channel, "site", None)
        wants = getattr(site, "streams_body", None)
        if line is None or wants is None or not wants(line[0], line[1], self.requestHeaders):
            super().gotLength(length)  # type: ignore[no-untyped-call]  # twisted.web's Request is not annotated
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
            super().handleContentChunk(data)  # type: ignore[no-untyped-call]  # twisted.web's Request is not annotated

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if self.body is None:
            super().requestReceived(command, path, version)  # type: ignore[no-untyped-call]  # twisted.web's Request is not annotated
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
        super().finish()  # type: ignore[no-untyped-call]  # twisted.web's Request is not annotated
        if unfinished and self.body is not None:
            self.body.stopProducing()

    def connectionLost(self, reason: Failure) -> None:
        if self._pending_dispatch is not None and self._pending_dispatch.active():
            self._pending_dispatch.cancel()
        if self.body is not None:
            self.body.fail(reason)
        super().connectionLost(reason)  # type: ignore[no-untyped-call]  # twisted.web's Request is not annotated


class StreamingSite(Site):
    """
    A ``Site`` whose requests may stream their bodies.

    :param resource: the root resource.
    :param streams_body: says, from the request line and headers, whether a
        request streams its body (the API's route table does:
        :meth:`vmservice.api.app.Api.streams_body`).
    """

    requestFactory = StreamingRequest

    def __init__(self, resource: IResource, streams_body: BodyPredicate, **kwargs: Any) -> None:
        super().__init__(resource, **kwargs)  # type: ignore[no-untyped-call]  # twisted.web's Request is not annotated
        self.requestFactory = StreamingRequest
        self.streams_body = streams_body


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


__all__ = ["BodyPredicate", "StreamingRequest", "StreamingSite", "request_body"]
