# -*- test-case-name: tests.api.test_openapi -*-
"""
The route table: each route's method, path, handler and documentation.

Resource modules describe their routes as :class:`Route` records; the app
mounts them on Klein, parses their query parameters from the route's query
class (:mod:`.query`) and decides from the route whether a request body is
streamed; the OpenAPI document is generated from the same records, so none
of them can drift apart.
"""

from __future__ import annotations

import re
from typing import Any, Awaitable, Callable

from attrs import field, frozen
from twisted.web.resource import IResource

from ..nodes.model import HOSTNAME_PATTERN, SECRET_NAME_PATTERN
from .inputs.bodies import MAX_JSON_BODY
from .query import Kind, NoQuery, Text

#: What each path parameter takes: a node's hostname, a host group's name, a background exec's id.
PATH_KINDS: dict[str, Kind] = {
    "hostname": Text(1, HOSTNAME_PATTERN, "a hostname (lowercase letters, digits and '-')"),
    "node": Text(1, HOSTNAME_PATTERN, "a hostname (lowercase letters, digits and '-')"),
    "name": Text(1),
    "secret": Text(1, SECRET_NAME_PATTERN, "a secret's name"),
    "exec_id": Text(1, r"[A-Za-z0-9_-]{1,64}", "an exec id (ex_ and hexadecimal digits)"),
}

#: ``async (request, query, **path_values) -> bytes``, or an ``IResource``
#: that Klein renders (a WebSocket upgrade, see :mod:`.websocket`).
Handler = Callable[..., Awaitable[bytes | IResource]]


@frozen
class Reply:
    """
    One documented response of a route.

    :ivar model: an attrs class for a JSON body, ``None`` for no body.
    :ivar array: the body is a JSON array of ``model``.
    :ivar media: the content type when the body is not JSON.
    :ivar also: other content types the same status may have (a buffered
        exec's JSON beside the streamed NDJSON), without a model.
    """

    description: str
    model: type | None = None
    array: bool = False
    media: str | None = None
    also: tuple[str, ...] = ()


@frozen
class Route:
    """
    One HTTP route.

    :ivar method: ``GET``, ``POST``, ``DELETE`` ...
    :ivar path: an OpenAPI path template, e.g. ``/vm/{hostname}/logs``.
    :ivar handler: ``async (request, query, **path_values) -> bytes``;
        ``query`` is an instance of :attr:`query`.
    :ivar query: the attrs class of its query parameters (see :mod:`.query`).
    :ivar body: the attrs class of its JSON body, if it takes one.
    :ivar stream_body: the request body is streamed to the handler as it
        arrives instead of read first: ``True`` always, or the name of a
        boolean query parameter that turns streaming on (exec's ``stdin``).
    :ivar head: GET route that also answers HEAD (documented apart).
    :ivar public: needs no authentication.
    :ivar stream: the kind of stream a request of this route is while it is
        served (``vmservice_open_streams{kind}``), empty for none.
    :ivar max_body: the most bytes of request body taken (413 past it);
        ``None``: :data:`MAX_JSON_BODY` for a body read whole, no bound for a
        streamed one (see :meth:`body_limit`).
    :ivar refusal_closes: an error answer ends the connection (a tunnel's
        client may send its first bytes right after the head: they are no
        HTTP request, and a client waiting for the end of a refusal must
        not wait for the connection to be reused).
    """

    method: str
    path: str
    handler: Handler = field(eq=False, repr=False)
    summary: str
    tag: str
    replies: dict[int, Reply]
    query: type = NoQuery
    body: type | None = None
    stream_body: bool | str = False
    head: bool = False
    public: bool = False
    stream: str = ""
    max_body: int | None = None
    refusal_closes: bool = False

    def streams(self, query: Any) -> bool:
        """Whether a request with the parsed ``query`` streams its body."""
        if isinstance(self.stream_body, str):
            return bool(getattr(query, self.stream_body))
        return self.stream_body

    def body_limit(self, streamed: bool) -> int | None:
        """
        The most bytes of body a request takes: :attr:`max_body` if
        declared, else :data:`MAX_JSON_BODY` when the body is read whole
        (twisted.web would store it all before the handler runs) and no
        bound when it is streamed (uploads, stdin: the handler takes it at
        its own pace).
        """
        if self.max_body is not None:
            return self.max_body
        return None if streamed else MAX_JSON_BODY

    @property
    def klein_path(self) -> str:
        """The path in Klein's (werkzeug's) syntax: ``/vm/<hostname>/logs``."""
        return re.sub(r"\{(\w+)\}", r"<\1>", self.path)

    @property
    def operation_id(self) -> str:
        words = re.sub(r"[{}]", "", self.path).strip("/").replace("/", "_").replace("-", "_")
        return f"{self.method.lower()}_{words or 'root'}"


def documented_methods(route: Route) -> list[str]:
    """The methods a route is documented for (GET routes may add HEAD)."""
    return [route.method, "HEAD"] if route.head else [route.method]


__all__ = ["Handler", "PATH_KINDS", "Reply", "Route", "documented_methods"]
