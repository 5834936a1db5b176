# -*- test-case-name: tests.api.test_openapi -*-
"""
The route table: each route's method, path, handler and documentation.

Resource modules describe their routes as :class:`Route` records; the app
mounts them on Klein and the OpenAPI document is generated from the same
records, so the two cannot drift apart.
"""

from __future__ import annotations

import re
from typing import Awaitable, Callable

from attrs import field, frozen

Handler = Callable[..., Awaitable[bytes]]


@frozen
class Param:
    """
    A query parameter.

    :ivar kind: its JSON-schema type (``string``, ``integer``, ``boolean``).
    :ivar repeated: given once per value (``args=a&args=b``).
    :ivar enum: the allowed values, when it is an enumeration.
    """

    name: str
    description: str
    kind: str = "string"
    required: bool = False
    repeated: bool = False
    enum: tuple[str, ...] = ()


@frozen
class Reply:
    """
    One documented response of a route.

    :ivar model: an attrs class for a JSON body, ``None`` for no body.
    :ivar array: the body is a JSON array of ``model``.
    :ivar media: the content type when the body is not JSON.
    """

    description: str
    model: type | None = None
    array: bool = False
    media: str | None = None


@frozen
class Route:
    """
    One HTTP route.

    :ivar method: ``GET``, ``POST``, ``DELETE`` ...
    :ivar path: an OpenAPI path template, e.g. ``/vm/{hostname}/logs``.
    :ivar handler: ``async (request, **path_values) -> bytes``.
    :ivar head: GET route that also answers HEAD (documented apart).
    :ivar public: needs no authentication.
    """

    method: str
    path: str
    handler: Handler = field(eq=False, repr=False)
    summary: str
    tag: str
    replies: dict[int, Reply]
    query: tuple[Param, ...] = ()
    body: type | None = None
    head: bool = False
    public: bool = False

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


__all__ = ["Handler", "Param", "Reply", "Route", "documented_methods"]
