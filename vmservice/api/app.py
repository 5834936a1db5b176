# -*- test-case-name: tests.api.test_app -*-
"""
The HTTP application: mounts the route table on Klein, lets the request
gate (:mod:`.gate`: Host, Origin, token, body size) refuse requests, renders
every error as an ErrorResponse, counts requests, and writes the audit log's
line of every request that can change something.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping
from urllib.parse import unquote_to_bytes

from klein import Klein
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.http import parse_qs
from twisted.web.http_headers import Headers
from twisted.web.iweb import IRequest
from twisted.web.resource import IResource
from twisted.web.server import NOT_DONE_YET, Request
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound as RouteNotFound
from zope.interface import implementer

from ..audit import AuditEntry, AuditLog
from ..auth import Tokens
from ..config import ApiConfig
from ..errors import MethodNotAllowed as MethodNotAllowedError
from ..errors import AgentError, BadRequest, NotFound, ServiceError, http_error
from ..metrics import Metrics
from .gate import RequestGate, state_changing
from .inputs.bodies import MAX_JSON_BODY
from .models.meta import ErrorResponse
from .rendering import json_body
from .query import parse_query
from .routing import PATH_KINDS, Route
from .streaming import BodyPlan

log = Logger()


#: Reason phrases of the statuses we answer that twisted.web does not name.
_REASONS = {421: b"Misdirected Request"}


def error_body(request: IRequest, error: BaseException) -> bytes:
    """Render ``error`` as an ErrorResponse on ``request`` (the one place that does)."""
    status, body = http_error(error)
    if not isinstance(error, (ServiceError, AgentError)):
        # Not one of ours: a bug, whose traceback goes to the log, never to the client.
        log.failure("internal error serving {uri}", Failure(error), uri=request.uri)
    rendered = json_body(request, ErrorResponse(body["error"], body["code"]), status)
    if status in _REASONS:
        request.setResponseCode(status, _REASONS[status])
    return rendered


def _path_value(name: str, value: str) -> None:
    """
    :raise BadRequest: a path value that cannot name anything (``invalid_hostname``
        for a node, ``invalid_path`` otherwise).
    """
    try:
        PATH_KINDS[name].parse(name, value)
    except BadRequest as error:
        code = {"hostname": "invalid_hostname", "node": "invalid_hostname",
                "secret": "invalid_secret_name"}.get(name, "invalid_path")
        raise BadRequest(f"invalid {name} {value!r} in the path", code=code) from error


class Api:
    """
    The Klein application of the daemon.

    :param reactor: an ``IReactorTime`` used to time requests.
    :param routes: every route, from all resource modules.
    :param metrics: where requests are counted.
    :param token: the valid bearer tokens (a single one may be given as a
        string), or ``None`` when authentication is off.
    :param hold: holds a node (by hostname) while a request naming it is
        served, and returns what releases it: its idle timer stands still
        meanwhile (``Fleet.hold``); nothing is held by default.
    :param listener: where the API listens and which hosts and origins it
        allows (``config.api``), for the request gate; ``None`` checks no
        ``Host`` and allows no ``Origin`` (see :class:`~.gate.RequestGate`).
    :param audit: where requests that can change something are recorded
        (``None``: nowhere).
    """

    def __init__(self, reactor: IReactorTime, routes: Iterable[Route], metrics: Metrics, token: Tokens | str | None,
                 hold: Callable[[str], Callable[[], None]] | None = None, listener: ApiConfig | None = None,
                 audit: AuditLog | None = None) -> None:
        self._reactor = reactor
        self._audit = audit
        self._hold = hold if hold is not None else _holding_nothing
        self.routes = list(routes)
        self._metrics = metrics
        self._gate = RequestGate(token, listener)
        self.app = Klein()
        for route in self.routes:
            self.app.route(route.klein_path, methods=[route.method], endpoint=f"{route.method} {route.path}")(
                self._view(route)
            )
        self.app.handle_errors(HTTPException)(self._routing_error)
        self._by_endpoint = {f"{route.method} {route.path}": route for route in self.routes}
        self._urls = self.app.url_map.bind("localhost")

    def plan_body(self, method: bytes, uri: bytes, headers: Headers, length: int | None) -> BodyPlan:
        """
        What becomes of a request's body, decided when its headers arrived
        and before any byte of it is stored: the request gate's refusal, if
        any (a request that matches no route needs a token like any route
        that is not public, and takes at most :data:`MAX_JSON_BODY`); else
        whether it streams (its route's ``stream_body``, and its query for a
        flag such as exec's ``stdin``) and the most bytes it takes.  A
        request whose query does not parse is not streamed: its handler
        reports the error once the body is read.
        """
        route = self._route_of(method, uri.partition(b"?")[0])
        streamed = route is not None and self._streams(route, uri.partition(b"?")[2])
        limit = route.body_limit(streamed) if route is not None else MAX_JSON_BODY
        try:
            self._gate.check(method, headers, route, length=length, limit=limit)
        except ServiceError as refusal:
            return BodyPlan(refusal=refusal)
        return BodyPlan(streamed=streamed, limit=limit)

    def streams_body(self, method: bytes, uri: bytes, headers: Headers) -> bool:
        """Whether a request streams its body (what :meth:`plan_body` says when it is let through)."""
        route = self._route_of(method, uri.partition(b"?")[0])
        return route is not None and self._streams(route, uri.partition(b"?")[2])

    def _route_of(self, method: bytes, path: bytes) -> Route | None:
        """The route a request line's method and path match, if any."""
        return self._match(method, path)[0]

    def _match(self, method: bytes, path: bytes) -> tuple[Route | None, dict[str, str]]:
        """The route a request line's method and path match, if any, and the path's values."""
        try:
            endpoint, values = self._urls.match(unquote_to_bytes(path).decode("utf-8"), method=method.decode("ascii"))
        except (UnicodeDecodeError, HTTPException):
            return None, {}
        return self._by_endpoint.get(endpoint), {name: str(value) for name, value in values.items()}

    def _streams(self, route: Route, query: bytes) -> bool:
        if not isinstance(route.stream_body, str):
            return route.stream_body is True
        try:
            parsed: object = parse_query(parse_qs(query, keep_blank_values=True), route.query)
        except BadRequest:
            return False
        return route.streams(parsed)

    def _refused(self, request: IRequest, refusal: Exception) -> bytes:
        """
        Answer a request the gate refused when its headers arrived (its body
        never read), and count it under its route, or ``unmatched``.
        """
        route, values = self._match(request.method, request.path)
        body = error_body(request, refusal)
        self._answered(request, route, values, 0.0, code=_code_of(refusal))
        return body

    def _answered(self, request: IRequest, route: Route | None, values: Mapping[str, str], seconds: float, *,
                  status: int | None = None, code: str | None = None) -> None:
        """
        The one place a request's outcome is counted (under its route's
        template, or ``unmatched``) and, when it can change something,
        written to the audit log.

        :param status: what was answered when it is not the request's code
            (an upgrade's 101, written by the protocol that took it over).
        :param code: the ErrorResponse's code of a refusal.
        """
        answered = status if status is not None else int(getattr(request, "code", 200))
        if route is None:
            self._metrics.observe_request("unmatched", request.method.decode(errors="replace"), answered, seconds)
        else:
            # The route's template, never the path itself: node names do not multiply the series.
            self._metrics.observe_request(route.path, route.method, answered, seconds)
        if self._audit is not None and state_changing(request.method, request.requestHeaders):
            self._audit.record(AuditEntry(
                at=self._reactor.seconds(), peer=_peer(request), token=self._gate.identity(request.requestHeaders),
                method=request.method.decode("latin-1"), route=route.path if route is not None else "unmatched",
                target=values, status=answered, code=code,
            ))

    def _view(self, route: Route) -> Any:
        async def view(request: Request, **values: str) -> bytes | IResource:
            started = self._reactor.seconds()
            # The one place open streams are counted: while the handler runs,
            # and for an upgrade (a WebSocket) until its connection closes.
            closes = [self._metrics.open_stream(route.stream)] if route.stream else []

            def stream_over() -> None:
                for close in closes:
                    close()

            handed_over = False
            refusal: str | None = None
            try:
                try:
                    # Again for requests that did not come through the site's header-time
                    # plan (the same decision; the body, already read, is bounded by its reader).
                    self._gate.check(request.method, request.requestHeaders, route)
                    if "hostname" in values:
                        # The node's idle timer stands still while it is served (a stream until it closes).
                        closes.append(self._hold(values["hostname"]))
                    for name, value in values.items():
                        _path_value(name, value)
                    query: object = parse_query(request.args, route.query)
                    body: bytes | IResource = await route.handler(request, query, **values)
                except CancelledError:
                    # The client went away: what it had been answered, or that it left first.
                    self._answered(request, route, values, self._reactor.seconds() - started,
                                   code=None if request.startedWriting else "client_gone")
                    raise
                except Exception as error:
                    if route.refusal_closes:
                        _not_reused(request)
                    body = error_body(request, error)
                    refusal = _code_of(error)
                if not isinstance(body, bytes) and route.stream:
                    body = _UntilClosed(body, stream_over)
                    handed_over = True
            finally:
                if not handed_over:
                    stream_over()
            upgraded = not isinstance(body, bytes) and request.requestHeaders.hasHeader(b"upgrade")
            self._answered(request, route, values, self._reactor.seconds() - started,
                           status=101 if upgraded else None, code=refusal)
            return body

        return view

    def _routing_error(self, request: IRequest, failure: Failure) -> bytes:
        error: BaseException | None = failure.value
        try:
            # Unknown routes need a token too: the gate's answer comes first.
            self._gate.check(request.method, request.requestHeaders, None)
        except ServiceError as refusal:
            error = refusal
        if isinstance(error, ServiceError):
            mapped: Exception = error
        elif isinstance(error, MethodNotAllowed):
            if error.valid_methods:
                request.setHeader(b"Allow", ", ".join(error.valid_methods).encode())
            mapped = MethodNotAllowedError(f"method {request.method.decode(errors='replace')} not allowed here")
        elif isinstance(error, RouteNotFound):
            mapped = NotFound(f"no route for {request.path.decode(errors='replace')}", code="route_not_found")
        else:
            mapped = error if isinstance(error, Exception) else Exception(failure.getErrorMessage())
        body = error_body(request, mapped)
        self._answered(request, None, {}, 0.0, code=_code_of(mapped))
        return body

    def resource(self) -> IResource:
        """The ``IResource`` to serve; it answers the refusal of a request the gate refused at header time."""
        return _Plain(self.app.resource(), self._refused)


def _not_reused(request: IRequest) -> None:
    """End ``request``'s connection once its answer is written (and say so in the answer)."""
    channel = getattr(request, "channel", None)
    if channel is not None:
        channel.persistent = False
    request.setHeader(b"Connection", b"close")


def _code_of(error: BaseException) -> str:
    """The code of the ErrorResponse that ``error`` is answered with."""
    return str(http_error(error)[1]["code"])


def _peer(request: IRequest) -> str:
    """Who sent ``request``: ``address:port`` (``[v6]:port``), or ``unix`` for a UNIX socket."""
    address = request.getClientAddress()
    host, port = getattr(address, "host", None), getattr(address, "port", None)
    if not isinstance(host, str):
        return "unix"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _nothing() -> None:
    """Closes no stream."""


def _holding_nothing(hostname: str) -> Callable[[], None]:
    """Holds no node."""
    return _nothing


def _closing_of(transport: object) -> Deferred[object] | None:
    """
    What fires when the connection that ``transport`` carries closes, once a
    WebSocket took it over: autobahn's ``is_closed`` of the protocol it made
    the transport's (through a protocol wrapper, if any); ``None`` when there
    is none.
    """
    protocol = getattr(transport, "wrappedProtocol", None) or getattr(transport, "protocol", None)
    protocol = getattr(protocol, "wrappedProtocol", protocol)
    closing = getattr(protocol, "is_closed", None)
    return closing if isinstance(closing, Deferred) else None


@implementer(IResource)
class _UntilClosed:
    """
    The resource a route answered an upgrade with, which calls ``over`` once
    the connection it took over closes (at once when the upgrade was refused).
    """

    isLeaf = True

    def __init__(self, inner: IResource, over: Callable[[], None]) -> None:
        self._inner = inner
        self._over = over

    def getChildWithDefault(self, name: bytes, request: IRequest) -> IResource:
        return self

    def putChild(self, path: bytes, child: IResource) -> None:
        raise NotImplementedError

    def render(self, request: IRequest) -> bytes | int:
        channel = getattr(request, "channel", None)
        transport = getattr(channel, "transport", None)
        try:
            rendered: bytes | int = self._inner.render(request)
        except BaseException:
            self._over()
            raise
        closing = _closing_of(transport) if rendered == NOT_DONE_YET else None
        if closing is None:
            self._over()
        else:
            closing.addBoth(_passing(self._over))
        return rendered


def _passing(call: Callable[[], None]) -> Callable[[object], object]:
    def through(result: object) -> object:
        call()
        return result

    return through


@implementer(IResource)
class _Plain:
    """
    Wraps Klein's resource so that nothing it renders is ever HTML: errors
    raised outside a route (e.g. while the request is read) become JSON too;
    a request refused when its headers arrived (its ``refusal``, see
    :class:`~.streaming.StreamingRequest`) is answered by ``refused`` and
    never routed.
    """

    isLeaf = True

    def __init__(self, inner: IResource, refused: Callable[[IRequest, Exception], bytes]) -> None:
        self._inner = inner
        self._refused = refused

    def getChildWithDefault(self, name: bytes, request: IRequest) -> IResource:
        return self

    def putChild(self, path: bytes, child: IResource) -> None:
        raise NotImplementedError

    def render(self, request: IRequest) -> bytes | int:
        refusal = getattr(request, "refusal", None)
        if isinstance(refusal, Exception):
            return self._refused(request, refusal)
        try:
            unquote_to_bytes(request.path).decode("utf-8")
        except UnicodeDecodeError:
            return error_body(request, BadRequest("the path is not valid UTF-8", code="invalid_path"))
        try:
            rendered: bytes | int = self._inner.render(request)
            return rendered
        except Exception as error:
            return error_body(request, error)


__all__ = ["Api", "NOT_DONE_YET", "error_body"]
