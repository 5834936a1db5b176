# -*- test-case-name: tests.e2b.test_site -*-
"""
The control plane's routes (E2B's REST API for sandboxes), thin over
:class:`~.sandboxes.Sandboxes`: each reads its input (:mod:`.inputs`,
:mod:`.listing`), calls the sandboxes, renders (:mod:`.rendering`); every
error is answered by :func:`~.failures.failure_of` with the statuses the
call's client parses.

======  ====================================  =====================
POST    /sandboxes, /v2/sandboxes             201 Sandbox
GET     /sandboxes, /v2/sandboxes             200 [ListedSandbox]
GET     /sandboxes/{id}                       200 SandboxDetail
DELETE  /sandboxes/{id}                       204
POST    /sandboxes/{id}/timeout               204
POST    /sandboxes/{id}/connect (and /v2/..)  200 running, 201 resumed
POST    /sandboxes/{id}/pause                 204 (409 already paused)
GET     /sandboxes/{id}/metrics               200 [SandboxMetric]
======  ====================================  =====================
"""

from __future__ import annotations

import re
from typing import Awaitable, Callable

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.web.iweb import IRequest
from twisted.web.server import NOT_DONE_YET

from ..config import E2bConfig
from ..errors import MethodNotAllowed, NotFound, ServiceError
from . import inputs, rendering
from .failures import Call, failure_of
from .listing import list_query, page
from .sandbox import SANDBOX_ID
from .sandboxes import Sandboxes

log = Logger(namespace="vmservice.e2b")

#: What a handler answers: its status, its JSON body (``None``: none) and extra headers.
Answer = tuple[int, object, dict[bytes, bytes]]
Handler = Callable[["ControlPlane", IRequest, str], Awaitable[Answer]]


@frozen
class _Route:
    method: bytes
    path: re.Pattern[str]
    call: Call
    handler: Handler


class ControlPlane:
    """
    The control plane's routes.

    :param sandboxes: the sandboxes.
    :param config: the ``e2b:`` section (the envd version reported, the longest timeout).
    """

    def __init__(self, sandboxes: Sandboxes, config: E2bConfig) -> None:
        self.sandboxes = sandboxes
        self.config = config

    # -- handlers --------------------------------------------------------------

    async def create(self, request: IRequest, sandbox_id: str) -> Answer:
        new = inputs.new_sandbox(body_of(request), self.config.max_timeout_seconds)
        view = await self.sandboxes.create(new)
        return 201, rendering.created(view, self.config.envd_version), {}

    async def list(self, request: IRequest, sandbox_id: str) -> Answer:
        shown, token = page(self.sandboxes.all(), list_query(request.args or {}))
        headers = {} if token is None else {b"X-Next-Token": token.encode()}
        return 200, [rendering.listed(view, self.config.envd_version) for view in shown], headers

    async def info(self, request: IRequest, sandbox_id: str) -> Answer:
        return 200, rendering.detail(self.sandboxes.get(sandbox_id), self.config.envd_version), {}

    async def kill(self, request: IRequest, sandbox_id: str) -> Answer:
        await self.sandboxes.kill(sandbox_id)
        return 204, None, {}

    async def timeout(self, request: IRequest, sandbox_id: str) -> Answer:
        self.sandboxes.set_timeout(sandbox_id, inputs.set_timeout(body_of(request), self.config.max_timeout_seconds))
        return 204, None, {}

    async def connect(self, request: IRequest, sandbox_id: str) -> Answer:
        timeout = inputs.connect(body_of(request), self.config.max_timeout_seconds)
        view, resumed = await self.sandboxes.connect(sandbox_id, timeout)
        return 201 if resumed else 200, rendering.created(view, self.config.envd_version), {}

    async def pause(self, request: IRequest, sandbox_id: str) -> Answer:
        inputs.pause(body_of(request))
        await self.sandboxes.pause(sandbox_id)
        return 204, None, {}

    async def metrics(self, request: IRequest, sandbox_id: str) -> Answer:
        snapshot = await self.sandboxes.metrics(sandbox_id)
        return 200, [] if snapshot is None else [rendering.metric(snapshot)], {}

    # -- routing ---------------------------------------------------------------

    def render(self, request: IRequest) -> int:
        """Answer ``request`` (later: the handlers are asynchronous)."""
        Deferred.fromCoroutine(self._serve(request))
        return NOT_DONE_YET

    async def _serve(self, request: IRequest) -> None:
        call = Call.OTHER
        try:
            route, sandbox_id = _route_of(request)
            call = route.call
            status, body, headers = await route.handler(self, request, sandbox_id)
        except Exception as error:
            if not isinstance(error, ServiceError):
                log.failure("E2B {method} {path} failed", method=request.method, path=request.path)
            status, payload = failure_of(error, call)
            answer(request, status, payload)
            return
        answer(request, status, None if body is None else rendering.as_bytes(body), headers)


def body_of(request: IRequest) -> bytes:
    """The request's body (read whole, within the site's bound)."""
    content = request.content
    if content is None:
        return b""
    content.seek(0)
    return bytes(content.read())


def answer(request: IRequest, status: int, body: bytes | None, headers: dict[bytes, bytes] | None = None) -> None:
    """Write the answer (a JSON body, or none), unless the client has gone."""
    if getattr(request, "_disconnected", False):
        return
    request.setResponseCode(status)
    for name, value in (headers or {}).items():
        request.setHeader(name, value)
    if body is not None:
        request.setHeader(b"Content-Type", b"application/json")
        request.write(body)
    request.finish()


_ID = r"(?P<id>[^/]+)"
ROUTES: tuple[_Route, ...] = tuple(_Route(method, re.compile(path), call, handler) for method, path, call, handler in (
    (b"POST", r"/(?:v2/)?sandboxes", Call.CREATE, ControlPlane.create),
    (b"GET", r"/(?:v2/)?sandboxes", Call.LIST, ControlPlane.list),
    (b"GET", rf"/sandboxes/{_ID}", Call.INFO, ControlPlane.info),
    (b"DELETE", rf"/sandboxes/{_ID}", Call.KILL, ControlPlane.kill),
    (b"POST", rf"/sandboxes/{_ID}/timeout", Call.TIMEOUT, ControlPlane.timeout),
    (b"POST", rf"/(?:v2/)?sandboxes/{_ID}/connect", Call.CONNECT, ControlPlane.connect),
    (b"POST", rf"/sandboxes/{_ID}/pause", Call.PAUSE, ControlPlane.pause),
    (b"GET", rf"/sandboxes/{_ID}/metrics", Call.METRICS, ControlPlane.metrics),
))


def _route_of(request: IRequest) -> tuple[_Route, str]:
    """
    The route of ``request`` and the sandbox id in its path (empty when it
    names none); an id that is no sandbox id is no sandbox (404).
    """
    path = (request.path or b"").decode("latin-1")
    matched = [(route, found) for route in ROUTES if (found := route.path.fullmatch(path)) is not None]
    if not matched:
        raise NotFound(f"no such path: {path[:200]!r}")
    for route, found in matched:
        if route.method == request.method:
            sandbox_id = found.groupdict().get("id") or ""
            if sandbox_id and not SANDBOX_ID.fullmatch(sandbox_id):
                raise NotFound(f"sandbox {sandbox_id[:64]!r} not found", code="sandbox_not_found")
            return route, sandbox_id
    raise MethodNotAllowed(f"{request.method!r} is not allowed on {path[:200]!r}")


__all__ = ["ControlPlane", "ROUTES", "answer", "body_of"]
