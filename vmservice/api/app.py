# -*- test-case-name: tests.api.test_app -*-
"""
The HTTP application: mounts the route table on Klein, authenticates,
renders every error as an ErrorResponse, and counts requests.
"""

from __future__ import annotations

from typing import Any, Iterable

from klein import Klein
from twisted.internet.defer import CancelledError
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest
from twisted.web.resource import IResource
from twisted.web.server import NOT_DONE_YET
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound as RouteNotFound
from zope.interface import implementer

from ..auth import bearer_matches
from ..errors import MethodNotAllowed as MethodNotAllowedError
from ..errors import NotFound, Unauthorized, http_error
from ..metrics import Metrics
from .models import ErrorResponse
from .rendering import json_body
from .routing import Route

log = Logger()


def error_body(request: IRequest, error: BaseException) -> bytes:
    """Render ``error`` as an ErrorResponse on ``request`` (the one place that does)."""
    status, body = http_error(error)
    if status >= 500 and not getattr(error, "status", None):
        log.failure("internal error serving {uri}", Failure(error), uri=request.uri)
    return json_body(request, ErrorResponse(body["error"], body["code"]), status)


class Api:
    """
    The Klein application of the daemon.

    :param reactor: an ``IReactorTime`` used to time requests.
    :param routes: every route, from all resource modules.
    :param metrics: where requests are counted.
    :param token: the bearer token, or ``None`` when authentication is off.
    """

    def __init__(self, reactor: Any, routes: Iterable[Route], metrics: Metrics, token: str | None) -> None:
        self._reactor = reactor
        self.routes = list(routes)
        self._metrics = metrics
        self._token = token
        self.app = Klein()
        for route in self.routes:
            self.app.route(route.klein_path, methods=[route.method], endpoint=f"{route.method} {route.path}")(
                self._view(route)
            )
        self.app.handle_errors(HTTPException)(self._routing_error)

    def _view(self, route: Route) -> Any:
        async def view(request: IRequest, **values: str) -> bytes:
            started = self._reactor.seconds()
            try:
                if not route.public and not self._authorized(request):
                    raise Unauthorized("missing or invalid bearer token")
                body = await route.handler(request, **values)
            except CancelledError:
                raise
            except Exception as error:
                body = error_body(request, error)
            self._metrics.observe_request(route.path, route.method, request.code, self._reactor.seconds() - started)
            return body

        return view

    def _authorized(self, request: IRequest) -> bool:
        if self._token is None:
            return True
        return bearer_matches(request.getHeader(b"authorization"), self._token)

    def _routing_error(self, request: IRequest, failure: Failure) -> bytes:
        error = failure.value
        if isinstance(error, MethodNotAllowed):
            if error.valid_methods:
                request.setHeader(b"Allow", ", ".join(error.valid_methods).encode())
            mapped: Exception = MethodNotAllowedError(f"method {request.method.decode()} not allowed here")
        elif isinstance(error, RouteNotFound):
            mapped = NotFound(f"no route for {request.path.decode(errors='replace')}", code="route_not_found")
        else:
            mapped = error
        body = error_body(request, mapped)
        self._metrics.observe_request("unmatched", request.method.decode(errors="replace"), request.code, 0.0)
        return body

    def resource(self) -> IResource:
        """The ``IResource`` to serve."""
        return _Plain(self.app.resource())


@implementer(IResource)
class _Plain:
    """
    Wraps Klein's resource so that nothing it renders is ever HTML: errors
    raised outside a route (e.g. while the request is read) become JSON too.
    """

    isLeaf = True

    def __init__(self, inner: IResource) -> None:
        self._inner = inner

    def getChildWithDefault(self, name: bytes, request: IRequest) -> IResource:
        return self

    def putChild(self, path: bytes, child: IResource) -> None:
        raise NotImplementedError

    def render(self, request: IRequest) -> bytes | int:
        try:
            return self._inner.render(request)
        except Exception as error:
            return error_body(request, error)


__all__ = ["Api", "NOT_DONE_YET", "error_body"]
