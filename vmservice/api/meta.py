# -*- test-case-name: tests.api.test_app -*-
"""
Routes about the daemon itself: ``/info``, ``/healthz``, ``/metrics``,
``/openapi.json``.
"""

from __future__ import annotations

import json
from typing import Callable

from twisted.web.iweb import IRequest

from .. import __version__
from ..metrics import Metrics
from ..version import git_commit, go_platform
from .models.meta import Info
from .openapi import openapi_document
from .query import NoQuery
from .rendering import json_body, text_body
from .routing import Reply, Route


class MetaApi:
    """
    :param metrics: the metrics to expose.
    :param routes: all routes (for the OpenAPI document), read at request time.
    :param public_metrics: whether ``/metrics`` may be read without a token
        when authentication is on (``api.auth.public_metrics``); ``/healthz``
        always may.
    """

    def __init__(self, metrics: Metrics, routes: Callable[[], list[Route]], public_metrics: bool = False) -> None:
        self._metrics = metrics
        self._routes = routes
        self._public_metrics = public_metrics
        system, arch = go_platform()
        self._info = Info(version=__version__, git_commit=git_commit(), platform=system, arch=arch)

    def routes(self) -> list[Route]:
        return [
            Route("GET", "/info", self.info, "Version of the daemon", "service", {200: Reply("The version", Info)}),
            Route(
                "GET", "/healthz", self.healthz, "Liveness of the daemon", "service",
                {200: Reply("The daemon is up", media="text/plain")}, head=True, public=True,
            ),
            Route(
                "GET", "/metrics", self.metrics, "Prometheus metrics", "service",
                {200: Reply("Metrics in the text exposition format", media="text/plain")},
                public=self._public_metrics,
            ),
            Route(
                "GET", "/openapi.json", self.openapi, "This API's OpenAPI 3.1 description", "service",
                {200: Reply("The OpenAPI document", media="application/json")},
            ),
        ]

    async def info(self, request: IRequest, query: NoQuery) -> bytes:
        return json_body(request, self._info)

    async def healthz(self, request: IRequest, query: NoQuery) -> bytes:
        return text_body(request, "OK")

    async def metrics(self, request: IRequest, query: NoQuery) -> bytes:
        body, content_type = self._metrics.render()
        request.setHeader(b"Content-Type", content_type.encode())
        return body

    async def openapi(self, request: IRequest, query: NoQuery) -> bytes:
        request.setHeader(b"Content-Type", b"application/json")
        return json.dumps(openapi_document(self._routes()), indent=1).encode()
