# -*- test-case-name: tests.api.test_images -*-
"""
Tests for ``GET /images`` and ``disk_image`` at create, on the fake fleet (whose image directory holds
the image ``dev``; its ``default`` image resolves without being listed).
"""

from __future__ import annotations

from typing import Any

from treq.testing import StubTreq

from tests.api.fleet_api import ApiTestCase
from tests.fakes import FleetHarness
from vmservice.api.app import Api
from vmservice.api.images import ImagesApi
from vmservice.api.meta import MetaApi
from vmservice.api.nodes import NodesApi
from vmservice.api.openapi import openapi_document
from vmservice.api.vm import VmApi
from vmservice.metrics import Metrics


class ImagesRouteTests(ApiTestCase):
    def setUp(self) -> None:
        self.h = FleetHarness(self.mktemp())
        self.h.fleet.startService()
        self.metrics = Metrics()
        self.routes: list[Any] = []
        self.routes += MetaApi(self.metrics, lambda: self.routes).routes()
        self.routes += NodesApi(self.h.fleet).routes() + VmApi(self.h.fleet).routes() + ImagesApi(self.h.fleet).routes()
        self.api = Api(self.h.reactor, self.routes, self.metrics, self.token)
        self.treq = StubTreq(self.api.resource())

    def test_list(self) -> None:
        """GET /images answers each built image with its size, build time, source and hash."""
        code, body, _ = self.call("GET", "/images")
        self.assertEqual(code, 200)
        self.assertEqual(body, [{"name": "dev", "size": 3, "created": "2026-01-02T03:04:05Z",
                                 "source": "recipe:dev"}])

    def test_documented(self) -> None:
        """The OpenAPI document describes GET /images and the disk_image field."""
        document = openapi_document(self.routes)
        self.assertIn("get", document["paths"]["/images"])
        self.assertIn("disk_image", document["components"]["schemas"]["CreateNodeRequest"]["properties"])
        self.assertNotIn("Not supported", str(document["components"]["schemas"]["CreateNodeRequest"]
                                              ["properties"]["disk_image"]))

    def create(self, body: bytes) -> tuple[int, Any, Any]:
        return self.call("POST", "/hostgroup/demo/nodes", body, {"Content-Type": ["application/json"]})

    def test_disk_image(self) -> None:
        """
        disk_image names the image the node is made from (its description says which); empty is the
        group's; an image that is not built is 400 unknown_image naming the built ones.
        """
        code, created, _ = self.create(b'{"disk_image": "dev"}')
        self.assertEqual(code, 201, created)
        self.assertEqual(self.call("GET", f"/vm/{created['hostname']}")[1]["image"], "dev")
        code, created, _ = self.create(b'{"disk_image": ""}')
        self.assertEqual(code, 201, created)
        self.assertEqual(self.call("GET", f"/vm/{created['hostname']}")[1]["image"], "default")
        result = self.create(b'{"disk_image": "nope"}')
        self.assertError(result, 400, "unknown_image")
        self.assertIn("dev", result[1]["error"])
        self.assertError(self.create(b'{"disk_image": 3}'), 400, "invalid_body")
        self.assertEqual(len(self.h.fleet.list()), 2)
