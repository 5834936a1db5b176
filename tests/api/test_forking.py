"""
Tests for the fork route (:mod:`vmservice.api.forking`) through a real Site
over in-memory connections, with the fleet on fakes: 201 with the children's
CreateNodeResponses, 400 for a bad count or body, 404 for an unknown node,
409 for a paused one, each an ErrorResponse.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from attrs import evolve
from treq.testing import StubTreq
from twisted.internet.defer import Deferred, succeed
from zope.interface import implementer

from tests.nodes.fleets import fleet_of
from tests.api.fleet_api import ApiTestCase
from tests.fakes import FleetHarness
from vmservice.api.app import Api
from vmservice.api.forking import ForkApi
from vmservice.api.lifecycle import LifecycleApi
from vmservice.api.nodes import NodesApi
from vmservice.guestport.guest import IGuestConnection
from vmservice.hypervisors.base import NetSpec
from vmservice.metrics import Metrics
from vmservice.nodes.warm.adoption import ICloneAdoption
from vmservice.nodes.model import NodeRecord


@implementer(ICloneAdoption)
class AcceptingAdoption:
    def prepare(self, agent: IGuestConnection) -> Deferred[None]:
        return succeed(None)

    def adopt(self, record: NodeRecord, net: NetSpec | None, agent: IGuestConnection) -> Deferred[None]:
        return succeed(None)


class ForkRouteTests(ApiTestCase):
    def setUp(self) -> None:
        # A short state directory: the nodes' socket paths must fit a UNIX socket address.
        state_dir = os.path.relpath(tempfile.mkdtemp(prefix="api", dir="."))
        self.addCleanup(shutil.rmtree, state_dir, True)
        self.h = FleetHarness(state_dir)
        shm = os.path.join(state_dir, "shm")
        os.makedirs(shm)
        fleet = fleet_of(evolve(self.h.parts, config=evolve(self.h.config, templates_tmpfs_dir=shm)),
                         adoption=AcceptingAdoption())
        fleet.startService()
        self.addCleanup(fleet.stopService)
        routes: list[Any] = NodesApi(fleet).routes() + LifecycleApi(fleet).routes() + ForkApi(fleet).routes()
        self.treq = StubTreq(Api(self.h.reactor, routes, Metrics(), None).resource())
        code, _, _ = self.call("POST", "/hostgroup/demo/nodes", b"{}")
        self.assertEqual(code, 201)

    def test_fork(self) -> None:
        """201 with one CreateNodeResponse per child, in the parent's group."""
        code, body, response = self.call("POST", "/vm/demo-1/fork", b'{"count": 2, "tags": ["x"]}')
        self.assertEqual(code, 201, body)
        self.assertEqual(response.headers.getRawHeaders("content-type"), ["application/json"])
        self.assertEqual([sorted(child) for child in body], [["arch", "created_at", "hostgroup", "hostname", "ip"]] * 2)
        self.assertEqual([(child["hostname"], child["hostgroup"]) for child in body],
                         [("demo-2", "demo"), ("demo-3", "demo")])
        nodes = {node["hostname"]: node for node in self.call("GET", "/nodes")[1]}
        self.assertEqual((nodes["demo-2"]["status"], nodes["demo-2"]["tags"]), ("Running", ["x"]))

    def test_empty_body_forks_one(self) -> None:
        code, body, _ = self.call("POST", "/vm/demo-1/fork")
        self.assertEqual((code, len(body)), (201, 1))

    def test_errors(self) -> None:
        self.assertError(self.call("POST", "/vm/demo-1/fork", b'{"count": 0}'), 400, "limit_exceeded")
        self.assertError(self.call("POST", "/vm/demo-1/fork", b'{"count": 9}'), 400, "limit_exceeded")
        self.assertError(self.call("POST", "/vm/demo-1/fork", b'{"count": "2"}'), 400, "invalid_body")
        self.assertError(self.call("POST", "/vm/nope/fork", b"{}"), 404)
        self.call("POST", "/vm/demo-1/pause")
        self.assertError(self.call("POST", "/vm/demo-1/fork", b"{}"), 409, "paused")
        self.assertEqual(len(self.call("GET", "/nodes")[1]), 1)
