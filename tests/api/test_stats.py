"""
Tests for :mod:`vmservice.api.stats`: ``GET /nodes/stats`` and ``GET /node/{hostname}/stats`` through the
real Site, with the fleet on fakes and the metrics agents' answers given by the test.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from treq.testing import StubTreq
from twisted.internet.defer import Deferred, fail, succeed

from tests.api.fleet_api import ApiTestCase
from tests.node_stats import FIELDS
from vmservice.api.app import Api
from vmservice.api.stats import StatsApi
from vmservice.nodes.model import Status
from vmservice.nodes.stats import NodeStats


class StatsRouteTests(ApiTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.call("POST", "/hostgroup/demo/nodes", b"{}")
        self.call("POST", "/hostgroup/demo/nodes", b"{}")
        # Made when asked: a failed Deferred nobody asks for would be logged as unhandled.
        self.answers: dict[str, Callable[[], Deferred[Mapping[str, Any]]]] = {
            "demo-1": lambda: succeed({**FIELDS, "hostname": "demo-1"}),
            "demo-2": lambda: fail(OSError("connection refused")),
        }
        self.h.fleet.stats = NodeStats(self.h.fleet._registry, self.h.reactor,
                                       lambda socket, deadline: self.answers[socket.split("/")[-2]]())
        routes = StatsApi(self.h.fleet).routes()
        self.treq = StubTreq(Api(self.h.reactor, routes, self.metrics, self.token).resource())

    def test_list(self) -> None:
        """Every node: its listing entry plus the camelCase snapshot, or an error (and no snapshot)."""
        code, body, _ = self.call("GET", "/nodes/stats")
        self.assertEqual(code, 200)
        first, second = body
        self.assertEqual((first["hostname"], first["status"], first["hostgroup"]), ("demo-1", "Running", "demo"))
        self.assertNotIn("error", first)
        snapshot = first["snapshot"]
        self.assertEqual(snapshot["uptime"], "1h2m3s")
        self.assertEqual(snapshot["timestamp"], "2026-11-25T20:00:00.5Z")
        expected = {name for name in FIELDS if name != "uptimeSeconds"} | {"uptime"}
        self.assertEqual(set(snapshot), expected)
        self.assertEqual((snapshot["totalCpus"], snapshot["diskWriteTotal"]), (2, 1024.0))
        self.assertEqual(second["error"], "connection refused")
        self.assertNotIn("snapshot", second)

    def test_one(self) -> None:
        """One node; a paused one has its reason; 400 for an invalid hostname, 404 for an unknown one."""
        code, body, _ = self.call("GET", "/node/demo-1/stats")
        self.assertEqual((code, body["snapshot"]["hostname"]), (200, "demo-1"))
        node = self.h.node("demo-2")
        node.record = node.record.with_status(Status.PAUSED)
        code, body, _ = self.call("GET", "/node/demo-2/stats")
        self.assertEqual((code, body["status"], body["error"]), (200, "Paused", "the node is paused"))
        self.assertError(self.call("GET", "/node/Bad_Name/stats"), 400, "invalid_hostname")
        self.assertError(self.call("GET", "/node/demo-9/stats"), 404, "node_not_found")
