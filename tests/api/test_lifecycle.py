"""
Tests for the lifecycle routes (:mod:`vmservice.api.lifecycle`) through a
real Site over in-memory connections, with the fleet on fakes: status codes,
bodies and content types, the shutdown action's sources, the wait
parameters.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from treq.testing import StubTreq
from twisted.internet.defer import Deferred

from tests.api.fleet_api import ApiTestCase
from tests.fakes import FakeDriver, FleetHarness
from vmservice.api.app import Api
from vmservice.api.lifecycle import LifecycleApi
from vmservice.api.nodes import NodesApi
from vmservice.api.vm import VmApi
from vmservice.metrics import Metrics

TEXT = ["text/plain; charset=utf-8"]
JSON = ["application/json"]
OPERATIONS = ("pause", "resume", "suspend", "restore", "relaunch", "shutdown")


class LifecycleApiTestCase(ApiTestCase):
    can_suspend = True
    create_body = b"{}"

    def setUp(self) -> None:
        # A short state directory: mktemp() names are too long for the nodes' socket paths.
        state_dir = os.path.relpath(tempfile.mkdtemp(prefix="api", dir="."))
        self.h = FleetHarness(state_dir, driver=FakeDriver(can_suspend=self.can_suspend))
        self.h.fleet.startService()
        self.metrics = Metrics()
        routes: list[Any] = []
        routes += NodesApi(self.h.fleet).routes() + VmApi(self.h.fleet).routes() + LifecycleApi(self.h.fleet).routes()
        self.api = Api(self.h.reactor, routes, self.metrics, None)
        self.treq = StubTreq(self.api.resource())
        code, self.created, _ = self.call("POST", "/hostgroup/demo/nodes", self.create_body)
        self.assertEqual(code, 201)

    def post(self, operation: str, query: str = "", body: bytes | None = None, hostname: str = "demo-1") -> tuple[int, Any, Any]:
        return self.call("POST", f"/vm/{hostname}/{operation}{query}", body)

    def assertText(self, result: tuple[int, Any, Any], text: str) -> None:
        code, body, response = result
        self.assertEqual((code, body), (200, text.encode()))
        self.assertEqual(response.headers.getRawHeaders("content-type"), TEXT)

    def status(self, hostname: str = "demo-1") -> str | None:
        nodes = {n["hostname"]: n for n in self.call("GET", "/nodes")[1]}
        return nodes[hostname]["status"] if hostname in nodes else None

    @property
    def machine(self) -> Any:
        return self.h.driver.machines[-1]


class PauseResumeRouteTests(LifecycleApiTestCase):
    def test_pause_and_resume(self) -> None:
        """pause and resume answer 200 text/plain, repeats say there was nothing to do."""
        self.assertText(self.post("pause"), "demo-1 paused\n")
        self.assertEqual(self.status(), "Paused")
        self.assertText(self.post("pause"), "demo-1 is already paused\n")
        self.assertText(self.post("resume"), "demo-1 resumed\n")
        self.assertEqual(self.status(), "Running")
        self.assertText(self.post("resume"), "demo-1 is already running\n")
        self.assertEqual(self.machine.commands, ["pause", "resume"])

    def test_paused_conflicts(self) -> None:
        """A paused node: shutdown, reboot and relaunch are 409s with their codes; so is health (no agent can answer)."""
        self.post("pause")
        self.assertError(self.post("shutdown", "?action=shutdown"), 409, "paused")
        self.assertError(self.post("shutdown", "?action=reboot"), 409, "paused")
        self.assertError(self.post("relaunch"), 409, "already_running")
        self.assertError(self.post("restore"), 409, "no_snapshot")
        self.assertError(self.call("GET", "/vm/demo-1/health"), 409, "paused")

    def test_failure_is_500(self) -> None:
        """A driver failure is a JSON 500 with the operation's code."""
        self.machine.failing["pause"] = "qmp gone"
        result = self.post("pause")
        self.assertError(result, 500, "pause_failed")
        self.assertIn("qmp gone", result[1]["error"])


class SuspendRestoreRouteTests(LifecycleApiTestCase):
    def test_suspend_and_restore(self) -> None:
        """suspend and restore answer 200 text/plain; the listing follows."""
        self.assertText(self.post("suspend"), "demo-1 suspended\n")
        self.assertEqual(self.status(), "Suspended")
        self.assertText(self.post("suspend"), "demo-1 is already suspended\n")
        self.assertError(self.post("pause"), 409, "not_running")
        self.assertError(self.post("resume"), 409, "not_running")
        self.assertError(self.post("shutdown"), 409, "not_running")
        # No agent can answer: health is the contract's 409 (not 503, which means "should answer, does not").
        self.assertError(self.call("GET", "/vm/demo-1/health"), 409, "not_running")
        self.assertEqual(self.call("HEAD", "/vm/demo-1/health")[:2], (409, b""))
        self.assertText(self.post("restore"), "demo-1 restored\n")
        self.assertEqual(self.status(), "Running")
        self.assertError(self.post("restore"), 409, "no_snapshot")

    def test_suspend_failure(self) -> None:
        """A failed save is a 500 suspend_failed and the node stays Running."""
        self.machine.failing["save_state"] = "migration failed"
        self.assertError(self.post("suspend"), 500, "suspend_failed")
        self.assertEqual(self.status(), "Running")

    def test_busy(self) -> None:
        """While a suspend is in flight, other operations are 409 busy; the suspend then answers 200."""
        self.machine.hold_save = Deferred()
        d = self.treq.request("POST", "http://x/vm/demo-1/suspend")
        self.treq.flush()
        self.assertNoResult(d)
        self.assertEqual(self.status(), "Running")
        for operation in OPERATIONS:
            self.assertError(self.post(operation), 409, "busy")
        self.assertError(self.call("DELETE", "/hostgroup/demo/nodes/demo-1"), 409, "busy")
        self.machine.hold_save.callback(None)
        self.treq.flush()
        response = self.successResultOf(d)
        self.assertEqual((response.code, self.successResultOf(response.content())), (200, b"demo-1 suspended\n"))

    def test_restore_wait_params(self) -> None:
        """restore's wait and timeout are checked before anything is done: bad values are 400."""
        self.post("suspend")
        self.assertError(self.post("restore", "?wait=later"), 400, "invalid_query")
        self.assertError(self.post("restore", "?wait=agent&timeout=soon"), 400, "invalid_query")
        self.assertError(self.post("restore", "?wait=agent&timeout=0s"), 400, "invalid_query")
        self.assertEqual(self.status(), "Suspended")
        self.assertEqual(len(self.h.driver.machines), 1)

    def test_restore_wait_agent(self) -> None:
        """wait=agent answers once the agent is up."""
        self.post("suspend")
        d = self.treq.request("POST", "http://x/vm/demo-1/restore?wait=agent&timeout=1m")
        self.treq.flush()
        self.assertNoResult(d)
        self.h.agents[-1].ready()
        self.treq.flush()
        self.assertEqual(self.successResultOf(d).code, 200)

    def test_restore_wait_timeout(self) -> None:
        """A wait that runs out is 408 wait_timeout and leaves the node Running."""
        self.post("suspend")
        d = self.treq.request("POST", "http://x/vm/demo-1/restore?wait=agent&timeout=2s")
        self.treq.flush()
        self.h.reactor.advance(2)
        self.treq.flush()
        response = self.successResultOf(d)
        self.assertEqual(response.code, 408)
        self.assertEqual(json.loads(self.successResultOf(response.content()))["code"], "wait_timeout")
        self.assertEqual(self.status(), "Running")

    def test_delete_suspended(self) -> None:
        """A suspended node can be deleted."""
        self.post("suspend")
        code, body, _ = self.call("DELETE", "/hostgroup/demo/nodes/demo-1")
        self.assertEqual((code, body["disk_removed"]), (200, "true"))
        self.assertIsNone(self.status())


class NotSupportedRouteTests(LifecycleApiTestCase):
    can_suspend = False

    def test_not_supported(self) -> None:
        """With a driver that cannot suspend, suspend and restore are 501 not_supported."""
        self.assertError(self.post("suspend"), 501, "not_supported")
        self.assertError(self.post("restore"), 501, "not_supported")
        self.assertEqual(self.status(), "Running")


class RelaunchRouteTests(LifecycleApiTestCase):
    create_body = b'{"persistent": true, "tags": ["t"]}'

    def test_relaunch(self) -> None:
        """A stopped persistent node is relaunched: 200 JSON CreateNodeResponse with the same identity."""
        self.assertText(self.post("shutdown", "?action=shutdown"), "demo-1 is shutting down\n")
        self.assertEqual(self.status(), "Stopped")
        code, body, response = self.post("relaunch")
        self.assertEqual(code, 200)
        self.assertEqual(response.headers.getRawHeaders("content-type"), JSON)
        self.assertEqual(body, self.created)
        self.assertEqual(set(body), {"hostname", "hostgroup", "ip", "created_at", "arch"})
        self.assertEqual(self.status(), "Running")
        node = self.call("GET", "/nodes")[1][0]
        self.assertEqual((node["tags"], node["created_at"], node["persistent"]), (["t"], self.created["created_at"], True))
        self.assertEqual(len(self.h.driver.machines), 2)

    def test_relaunch_running(self) -> None:
        """Relaunch of a running node is 409 already_running."""
        self.assertError(self.post("relaunch"), 409, "already_running")

    def test_relaunch_suspended(self) -> None:
        """A suspended node may be relaunched (its snapshot discarded); restore is then 409 no_snapshot."""
        self.post("suspend")
        self.assertEqual(self.post("relaunch")[0], 200)
        self.assertError(self.post("restore"), 409, "no_snapshot")

    def test_relaunch_wait_params(self) -> None:
        """relaunch's wait and timeout are checked like restore's."""
        self.post("shutdown", "?action=shutdown")
        self.assertError(self.post("relaunch", "?wait=agent&timeout=x"), 400, "invalid_query")
        self.assertEqual(self.status(), "Stopped")

    def test_relaunch_wait_agent(self) -> None:
        """relaunch?wait=agent answers once the agent is up; a wait that runs out is 408, the node kept."""
        self.post("shutdown", "?action=shutdown")
        d = self.treq.request("POST", "http://x/vm/demo-1/relaunch?wait=agent&timeout=5s")
        self.treq.flush()
        self.assertNoResult(d)
        self.h.reactor.advance(5)
        self.treq.flush()
        self.assertEqual(self.successResultOf(d).code, 408)
        self.assertEqual(self.status(), "Running")

    def test_stopped_conflicts(self) -> None:
        """A stopped node: pause, resume, suspend, restore, shutdown and health are 409s."""
        self.post("shutdown", "?action=shutdown")
        self.assertError(self.call("GET", "/vm/demo-1/health"), 409, "not_running")
        self.assertEqual(self.call("HEAD", "/vm/demo-1/health")[:2], (409, b""))
        self.assertError(self.post("pause"), 409, "not_running")
        self.assertError(self.post("resume"), 409, "not_running")
        self.assertError(self.post("suspend"), 409, "not_running")
        self.assertError(self.post("restore"), 409, "no_snapshot")
        self.assertError(self.post("shutdown", "?action=reboot"), 409, "not_running")


class ShutdownRouteTests(LifecycleApiTestCase):
    REBOOTING = "demo-1 is rebooting\n"
    STOPPING = "demo-1 is shutting down\n"

    def hold(self) -> None:
        """Let graceful stops wait, so the node stays Running after a shutdown."""
        self.machine.hold_stop = True

    def test_default_is_reboot(self) -> None:
        """Without an action (no query, no body, an empty body or {}) it reboots: the VM is reset."""
        for body in (None, b"", b"{}", b'{"action": null}', b'{"action": ""}'):
            self.assertText(self.post("shutdown", body=body), self.REBOOTING)
        self.assertText(self.post("shutdown", "?action="), self.REBOOTING)
        self.assertEqual(self.machine.commands, ["reset"] * 6)
        self.assertEqual(self.machine.stops, [])
        self.assertEqual(self.status(), "Running")

    def test_action_from_query(self) -> None:
        """?action=reboot resets; ?action=shutdown stops the VM gracefully."""
        self.hold()
        self.assertText(self.post("shutdown", "?action=reboot"), self.REBOOTING)
        self.assertText(self.post("shutdown", "?action=shutdown"), self.STOPPING)
        self.assertEqual((self.machine.commands, self.machine.stops), (["reset"], [(True, 10.0)]))

    def test_action_from_body(self) -> None:
        """A JSON body {"action": ...} is read when the query has none."""
        self.hold()
        self.assertText(self.post("shutdown", "?action=", b'{"action": "reboot"}'), self.REBOOTING)
        self.assertText(self.post("shutdown", body=b'{"action": "shutdown"}'), self.STOPPING)
        self.assertEqual((self.machine.commands, self.machine.stops), (["reset"], [(True, 10.0)]))

    def test_query_wins(self) -> None:
        """With both, the query's action is taken (and the body not even parsed)."""
        self.hold()
        self.assertText(self.post("shutdown", "?action=reboot", b'{"action": "shutdown"}'), self.REBOOTING)
        self.assertText(self.post("shutdown", "?action=reboot", b"{not json"), self.REBOOTING)
        self.assertEqual(self.machine.stops, [])
        self.assertText(self.post("shutdown", "?action=shutdown", b'{"action": "reboot"}'), self.STOPPING)
        self.assertEqual((self.machine.commands, self.machine.stops), (["reset", "reset"], [(True, 10.0)]))

    def test_invalid_action(self) -> None:
        """Any other action, in the query or the body, is 400 invalid_action; bad bodies are 400 too."""
        self.assertError(self.post("shutdown", "?action=explode"), 400, "invalid_action")
        self.assertError(self.post("shutdown", "?action=Reboot"), 400, "invalid_action")
        self.assertError(self.post("shutdown", body=b'{"action": "halt"}'), 400, "invalid_action")
        self.assertError(self.post("shutdown", body=b'{"action": 7}'), 400, "invalid_action")
        self.assertError(self.post("shutdown", body=b'{"action": ["reboot"]}'), 400, "invalid_action")
        self.assertError(self.post("shutdown", body=b"{"), 400, "invalid_json")
        self.assertError(self.post("shutdown", body=b'["reboot"]'), 400, "invalid_body")
        self.assertEqual((self.machine.commands, self.machine.stops), ([], []))

    def test_invalid_action_of_unknown_node(self) -> None:
        """The action is checked first: an invalid one is 400 even for an unknown node."""
        self.assertError(self.post("shutdown", "?action=explode", hostname="nope"), 400, "invalid_action")

    def test_shutdown_ephemeral_removes_node(self) -> None:
        """Once the VM of an ephemeral node has stopped, the node is gone."""
        self.hold()
        self.post("shutdown", "?action=shutdown")
        self.assertEqual(self.status(), "Running")
        self.machine.end(0)
        self.assertIsNone(self.status())
        self.assertError(self.post("pause"), 404, "node_not_found")


class UnknownNodeTests(LifecycleApiTestCase):
    def test_unknown_node(self) -> None:
        """Every lifecycle route answers a JSON 404 node_not_found for an unknown node."""
        for operation in OPERATIONS:
            self.assertError(self.post(operation, hostname="nope"), 404, "node_not_found")
        self.assertError(self.post("shutdown", "?action=shutdown", hostname="nope"), 404, "node_not_found")

    def test_post_only(self) -> None:
        """The lifecycle routes answer only POST: GET is a 405 naming POST."""
        for operation in OPERATIONS:
            result = self.call("GET", f"/vm/demo-1/{operation}")
            self.assertError(result, 405, "method_not_allowed")
            self.assertIn("POST", result[2].headers.getRawHeaders("allow")[0])
