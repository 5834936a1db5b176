"""
The daemon's meta, node-listing and node routes over a fleet of fakes
(:class:`tests.fakes.FleetHarness`), called in memory through ``StubTreq``:
:class:`ApiTestCase`, the base of the route tests of :mod:`tests.api`.
"""

from __future__ import annotations

import json
from typing import Any

from treq.testing import StubTreq
from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import FleetHarness
from vmservice.api.app import Api
from vmservice.api.meta import MetaApi
from vmservice.api.nodes import NodesApi
from vmservice.api.vm import VmApi
from vmservice.metrics import Metrics


def fleet_routes(h: FleetHarness, metrics: Metrics) -> list[Any]:
    """The meta, node-listing and node routes over ``h``'s fleet."""
    routes: list[Any] = []
    routes += MetaApi(metrics, lambda: routes).routes()
    routes += NodesApi(h.fleet).routes() + VmApi(h.fleet).routes()
    return routes


class ApiTestCase(SynchronousTestCase):
    token: str | None = None

    def setUp(self) -> None:
        self.h = FleetHarness(self.mktemp())
        self.h.fleet.startService()
        self.metrics = Metrics()
        self.api = Api(self.h.reactor, fleet_routes(self.h, self.metrics), self.metrics, self.token)
        self.treq = StubTreq(self.api.resource())

    def call(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None) -> tuple[int, Any, Any]:
        d = self.treq.request(method, "http://x" + path, data=body, headers=headers or {})
        self.treq.flush()
        response = self.successResultOf(d)
        content = self.successResultOf(response.content())
        ctype = response.headers.getRawHeaders("content-type", [""])[0]
        if ctype.startswith("application/json") and content:
            return response.code, json.loads(content), response
        return response.code, content, response

    def assertError(self, result: tuple[int, Any, Any], status: int, code: str | None = None) -> None:
        got, body, response = result
        self.assertEqual(got, status, body)
        self.assertEqual(response.headers.getRawHeaders("content-type"), ["application/json"])
        self.assertIsInstance(body["error"], str)
        if code is not None:
            self.assertEqual(body["code"], code)
