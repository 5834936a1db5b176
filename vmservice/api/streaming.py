# -*- test-case-name: tests.api.test_streaming -*-
"""
Streaming in twisted.web: request bodies that are not buffered first, and
requests refused before their body is read.

twisted.web reads a whole request body (into memory or a temporary file)
before it routes the request.  :class:`StreamingRequest` asks its
:class:`StreamingSite` at header time (``HTTPChannel.allHeadersReceived``
calls ``Request.gotLength``) for a :class:`BodyPlan`
(:meth:`vmservice.api.app.Api.plan_body`: the route table and the request
gate, :mod:`.gate`), which says one of three things:

- **Refused** (a ``Host``, an ``Origin``, a token, a declared length the
  route does not take): the refusal is answered at once (on the next reactor
  turn, or as soon as the body ended), the body is never stored nor read on
  (the connection is paused, then closed after the answer: it is not
  reused), and no ``100 Continue`` is sent to a client that asked for one.
- **Streamed** (a route's ``stream_body``: exec stdin and cp uploads): the
  request is dispatched at once (on the next reactor turn, so nothing is
  written before HTTP's ``100 Continue``), its ``content`` stays empty and
  every chunk goes to :attr:`StreamingRequest.body`, a
  :class:`~.request_body.RequestBody`: a push producer that pauses the HTTP
  connection while its consumer (an agent stream) cannot take more, so the
  daemon's memory stays flat.
- **Read whole**, as twisted.web does, but only up to the plan's ``limit``:
  a body (chunked: its length was not declared) that reaches it is cut off
  there and refused (413), nothing more stored.

Limits: HTTP/1.x only.  Under HTTP/2 (which the daemon does not offer: it
serves no TLS) or with requests that do not come from an ``HTTPChannel``
the body is buffered as usual and :func:`request_body` replays it, which is
correct but not streamed; the app's view applies the gate again.

"""

from __future__ import annotations

from io import BytesIO
from typing import Any, Callable, Optional, cast

from attrs import frozen
from twisted.python.failure import Failure
from twisted.web.http_headers import Headers
from twisted.web.iweb import IRequest
from twisted.web.resource import IResource
from twisted.web.server import Request, Site

from ..errors import BodyTooLarge
from .request_body import RequestBody
from .request_line import request_line


@frozen
class BodyPlan:
    """
    What becomes of a request's body, decided when its headers arrived.

    :ivar refusal: the answer to give at once, without reading the body;
        ``None`` to serve the request.
    :ivar streamed: the body goes to the handler as it arrives.
    :ivar limit: the most bytes of a body read whole (``None``: no bound).
    """

    refusal: Exception | None = None
    streamed: bool = False
    limit: int | None = None


#: Plans a request's body at header time: ``(method, uri, headers, declared length) -> BodyPlan``.
BodyPlanner = Callable[[bytes, bytes, Headers, Optional[int]], BodyPlan]


class StreamingRequest(Request):
    """
    A request whose body is planned by its site at header time: refused
    before it is read, streamed through :attr:`body` with the request
    dispatched before it arrives, or read whole up to a limit.

    :ivar body: the streamed body, or ``None`` for an ordinary request.
    :ivar refusal: why the request is refused, or ``None``; the site's
        resource answers it (:meth:`vmservice.api.app.Api.resource`).
    """

    body: Optional[RequestBody] = None
    refusal: Optional[Exception] = None
    _line: Optional[tuple[bytes, bytes, bytes]] = None
    _dispatched = False
    _pending_dispatch: Any = None
    _limit: Optional[int] = None
    _received = 0

    def gotLength(self, length: Optional[int]) -> None:
        line = request_line(self.channel)
        site = getattr(self.channel, "site", None)
        planner: Optional[BodyPlanner] = getattr(site, "plan_body", None)
        plan = planner(line[0], line[1], self.requestHeaders, length) if line and planner else BodyPlan()
        self._line = line
        if line is not None and plan.refusal is not None:
            self._refuse(plan.refusal)
            return
        if line is None or not plan.streamed:
            self._limit = plan.limit
            super().gotLength(length)  # type: ignore[no-untyped-call]  # twisted.web's Request is not annotated
            return
        self.content = BytesIO()
        self.body = RequestBody(self._pause_network, self._resume_network)
        self._dispatch_soon()

    def _dispatch_soon(self) -> None:
        # Not now: HTTPChannel may still write "100 Continue" after gotLength returns,
        # and finishes reading the headers of a request without a body.
        if self._pending_dispatch is None and not self._dispatched:
            self._pending_dispatch = self.channel.callLater(0, self._dispatch)

    def _refuse(self, refusal: Exception) -> None:
        """
        Answer ``refusal`` as soon as possible, store no more of the body and
        read no more of it: the connection is paused, and closed once the
        answer is written.
        """
        self.refusal = refusal
        stored, self.content = self.content, BytesIO()
        if stored is not None:
            stored.close()  # what a body cut off at its limit had stored (at most the limit) goes at once
        self.channel.persistent = False
        self.setHeader(b"Connection", b"close")  # type: ignore[no-untyped-call]  # twisted.web's Request is not annotated
        # A client waiting for "100 Continue" gets the refusal instead, and sends no body.
        self.requestHeaders.removeHeader(b"expect")
        self._pause_network()
        self._dispatch_soon()

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
        if self.refusal is not None:
            return  # never stored
        if self.body is not None:
            self.body.feed(data)
            return
        self._received += len(data)
        if self._limit is not None and self._received > self._limit and self._line is not None:
            self._refuse(BodyTooLarge(f"the body is over this route's limit of {self._limit} bytes"))
            return
        super().handleContentChunk(data)  # type: ignore[no-untyped-call]  # twisted.web's Request is not annotated

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if self.body is None and self.refusal is None:
            super().requestReceived(command, path, version)  # type: ignore[no-untyped-call]  # twisted.web's Request is not annotated
            return
        if self.body is not None:
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
    A ``Site`` whose requests' bodies are planned at header time.

    :param resource: the root resource; it answers a request's
        :attr:`StreamingRequest.refusal` when there is one.
    :param plan_body: plans a request's body from its request line,
        headers and declared length (the API does:
        :meth:`vmservice.api.app.Api.plan_body`).
    """

    requestFactory = StreamingRequest

    def __init__(self, resource: IResource, plan_body: BodyPlanner, **kwargs: Any) -> None:
        super().__init__(resource, **kwargs)  # type: ignore[no-untyped-call]  # twisted.web's Request is not annotated
        self.requestFactory = StreamingRequest
        self.plan_body = plan_body


def drop_connection(request: IRequest) -> None:
    """
    Drop the connection of a response whose head is out: the client sees its
    body truncated (or its stream broken), never a clean end.
    """
    transport = getattr(getattr(request, "channel", None), "transport", None)
    if transport is not None and hasattr(transport, "abortConnection"):
        transport.abortConnection()
    else:
        cast(Request, request).loseConnection()


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


__all__ = ["BodyPlan", "BodyPlanner", "StreamingRequest", "StreamingSite", "request_body"]
