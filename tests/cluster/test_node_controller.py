"""
Tests for :mod:`vmservice.cluster.node_controller` (with its Lease,
:mod:`vmservice.cluster.lease`, and its metrics) against a fake API server
on a memory clock: registration, the Lease, the status, failures and the stop.
"""

from __future__ import annotations

import json

from twisted.trial.unittest import SynchronousTestCase

from tests.cluster.fake_api import status
from tests.cluster.node_harness import LEASE, NODE, NodeHarness, kube_config
from tests.log_capture import captured_log, logged_text
from vmservice.cluster.lease import CONFLICT_RETRIES
from vmservice.cluster.node_controller import missing_taints
from vmservice.cluster.node_service import NodeService
from vmservice.config import TaintConfig


class RegistrationTests(SynchronousTestCase):
    """The Node is made at start, or brought up to date when it exists."""

    def test_new_node(self) -> None:
        """A missing Node is created with labels, taint, capacity (with slots), conditions and addresses."""
        h = NodeHarness()
        h.controller.start()
        node = h.node
        self.assertEqual(node["metadata"]["labels"], {"type": "vmservice"})
        self.assertEqual(node["spec"]["taints"], [{"key": "vmservice.io/vm", "value": "true", "effect": "NoSchedule"}])
        status_ = node["status"]
        expected = {"cpu": "4", "memory": f"{8 * 2**20}Ki", "pods": "16", "vmservice.io/slots": "16"}
        self.assertEqual((status_["capacity"], status_["allocatable"]), (expected, expected))
        self.assertEqual(status_["addresses"], [{"type": "InternalIP", "address": "10.0.0.5"},
                                                {"type": "Hostname", "address": "vms-a"}])
        self.assertEqual(status_["daemonEndpoints"], {"kubeletEndpoint": {"Port": 10250}})
        self.assertEqual(status_["nodeInfo"]["kubeletVersion"], "v1.20.2-vmservice-0.9.0")
        self.assertEqual((status_["nodeInfo"]["operatingSystem"], status_["nodeInfo"]["architecture"]),
                         ("linux", "amd64"))
        conditions = {c["type"]: c for c in status_["conditions"]}
        self.assertEqual({t: c["status"] for t, c in conditions.items()},
                         {"Ready": "True", "MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False"})
        self.assertEqual(conditions["Ready"]["reason"], "VmserviceReady")
        self.assertEqual(conditions["Ready"]["lastHeartbeatTime"], "2023-11-14T22:13:20Z")

    def test_existing_node(self) -> None:
        """
        A Node that exists (the daemon restarted) is not deleted nor created:
        its labels are patched, its status written; the transition times of
        unchanged conditions are kept.
        """
        h = NodeHarness()
        h.api.objects[NODE] = {"kind": "Node", "metadata": {"name": "vms-a", "uid": "old-uid", "resourceVersion": "7",
                                                           "labels": {"stale": "x"}},
                               "spec": {"taints": [{"key": "vmservice.io/vm", "value": "true", "effect": "NoSchedule"}]},
                               "status": {"conditions": [{"type": "Ready", "status": "True",
                                                          "lastTransitionTime": "2020-01-01T00:00:00Z"}]}}
        h.controller.start()
        self.assertEqual((h.calls("POST", "/nodes"), h.calls("DELETE")), ([], []))
        self.assertEqual(h.node["metadata"]["labels"], {"stale": "x", "type": "vmservice"})
        ready = [c for c in h.node["status"]["conditions"] if c["type"] == "Ready"][0]
        self.assertEqual(ready["lastTransitionTime"], "2020-01-01T00:00:00Z")
        self.assertEqual(h.lease["metadata"]["ownerReferences"][0]["uid"], "old-uid")

    def test_changed_taints_warned(self) -> None:
        """Taints that differ from the Node's are not patched (NodeRestriction forbids it) but logged."""
        events = captured_log(self)
        h = NodeHarness(kube_config(taints=(TaintConfig(key="other", effect="NoExecute"),)))
        h.api.objects[NODE] = {"kind": "Node", "metadata": {"name": "vms-a", "uid": "u", "resourceVersion": "7"},
                               "spec": {}, "status": {}}
        h.controller.start()
        self.assertNotIn("taints", h.node["spec"])
        self.assertIn("the Node lacks configured taints", logged_text(events))

    def test_taints_of_the_control_plane_ignored(self) -> None:
        """The configured taints present (beside the control plane's own): nothing is said."""
        h = NodeHarness()
        node = {"spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
                                    {"key": "vmservice.io/vm", "value": "true", "effect": "NoSchedule",
                                     "timeAdded": "2020-01-01T00:00:00Z"}]}}
        self.assertEqual(missing_taints(node, h.config), [])
        self.assertEqual(len(missing_taints({"spec": {"taints": "x"}}, h.config)), 1)

    def test_hostile_conditions(self) -> None:
        """Conditions of the wrong shape, or an overlong transition time, are not taken back."""
        h = NodeHarness()
        h.api.objects[NODE] = {"kind": "Node", "metadata": {"name": "vms-a", "uid": "u", "resourceVersion": "7"},
                               "spec": {}, "status": {"conditions": 7}}
        h.controller.start()
        self.assertEqual(h.metrics.failures["register"], 0)
        h.api.objects[NODE]["status"]["conditions"] = [{"type": "Ready", "status": "True",
                                                         "lastTransitionTime": "x" * 1000}]
        h.controller.stop()
        h2 = NodeHarness()
        h2.api.objects[NODE] = h.api.objects[NODE]
        h2.controller.start()
        self.assertEqual(len(h2.node["status"]["conditions"][0]["lastTransitionTime"]), 20)

    def test_registration_retried(self) -> None:
        """A failed registration is logged with its reason, without a traceback, and tried again after a back-off."""
        events = captured_log(self)
        h = NodeHarness()
        h.api.queue("GET", "/nodes/", 500, status(500, "InternalError", "etcd down"))
        h.controller.start()
        self.assertNotIn(NODE, h.api.objects)
        self.assertEqual(h.metrics.failures["register"], 1)
        text = logged_text(events)
        self.assertIn("registration failed (500 InternalError: etcd down)", text)
        self.assertNotIn("Traceback", text)
        h.clock.advance(0.5)  # the first back-off: 1 s from its lower half, the random source giving 0
        self.assertIn(NODE, h.api.objects)


class LeaseTests(SynchronousTestCase):
    """The Lease: made, renewed, conflicts, failures."""

    def test_created_then_renewed(self) -> None:
        """The Lease is made at registration (held by the node, owned by its Node) and renewed every interval."""
        h = NodeHarness()
        h.controller.start()
        spec = h.lease["spec"]
        self.assertEqual((spec["holderIdentity"], spec["leaseDurationSeconds"]), ("vms-a", 40))
        self.assertEqual(spec["renewTime"], "2023-11-14T22:13:20.000000Z")
        self.assertEqual(h.lease["metadata"]["ownerReferences"],
                         [{"apiVersion": "v1", "kind": "Node", "name": "vms-a", "uid": "uid-vms-a"}])
        h.clock.advance(10)
        self.assertEqual(h.lease["spec"]["renewTime"], "2023-11-14T22:13:30.000000Z")
        self.assertEqual(len(h.calls("PUT", "leases")), 1)
        self.assertEqual((h.metrics.renewals, h.metrics.last_renewal), (2, 1_700_000_010))

    def test_conflict_reread(self) -> None:
        """A 409 on a renewal reads the Lease again and renews the version read."""
        h = NodeHarness()
        h.controller.start()
        h.api.objects[LEASE]["metadata"]["resourceVersion"] = "changed-elsewhere"
        h.clock.advance(10)
        self.assertEqual(h.lease["spec"]["renewTime"], "2023-11-14T22:13:30.000000Z")
        self.assertEqual(h.metrics.failures["lease"], 0)

    def test_conflicts_give_up_until_next_tick(self) -> None:
        """Conflicts past the retries fail the renewal; the next attempt (after a back-off) goes through."""
        events = captured_log(self)
        h = NodeHarness()
        h.controller.start()
        for _ in range(CONFLICT_RETRIES + 1):
            h.api.queue("PUT", "leases", 409)
        h.clock.advance(10)
        self.assertEqual(h.metrics.failures["lease"], 1)
        self.assertIn("lease renewal failed (409 Queued", logged_text(events))
        h.clock.advance(0.5)
        self.assertEqual(h.metrics.renewals, 2)
        self.assertIn("lease renewed again", logged_text(events))

    def test_deleted_lease_made_again(self) -> None:
        """A Lease deleted meanwhile is made again at the next renewal."""
        h = NodeHarness()
        h.controller.start()
        del h.api.objects[LEASE]
        h.clock.advance(10)
        self.assertIn(LEASE, h.api.objects)

    def test_failures_retried_without_traceback(self) -> None:
        """500, a refused connection, malformed JSON, a huge body: each logged and retried, never a traceback."""
        events = captured_log(self)
        h = NodeHarness(max_body=64 * 1024)
        h.controller.start()
        h.api.queue("PUT", "leases", 500)
        h.clock.advance(10)
        h.api.queue("PUT", "leases", 200, b"{not json")
        h.clock.advance(0.5)
        h.api.queue("PUT", "leases", 200, json.dumps({"kind": "Lease", "pad": "x" * 100_000}).encode())
        h.clock.advance(1)
        h.http.refusing = True
        h.clock.advance(2)
        self.assertEqual(h.metrics.failures["lease"], 4)
        h.http.refusing = False
        h.clock.advance(4)
        self.assertEqual(h.metrics.renewals, 2)
        text = logged_text(events)
        for words in ("500 Queued", "Malformed", "TooLarge", "ConnectionRefusedError"):
            self.assertIn(words, text)
        self.assertNotIn("Traceback", text)

    def test_backoff_capped_by_interval(self) -> None:
        """However many renewals fail, the next attempt comes within one renew interval."""
        h = NodeHarness()
        h.controller.start()
        h.http.refusing = True
        h.clock.advance(10)
        for _ in range(10):
            before = h.metrics.failures["lease"]
            h.clock.advance(10)
            self.assertGreater(h.metrics.failures["lease"], before)

    def test_unauthorized_rereads_token(self) -> None:
        """A 401 reads the token again and makes the call once more with it."""
        h = NodeHarness()
        h.controller.start()
        h.api.tokens = {"token-2"}
        h.token = "token-2"
        h.clock.advance(10)
        self.assertEqual((h.metrics.renewals, h.metrics.failures["lease"]), (2, 0))


class StatusTests(SynchronousTestCase):
    """The status loop: conditions from admission, transition times."""

    def test_memory_pressure(self) -> None:
        """MemoryPressure turns True when admission is short, False again after; transitions timed."""
        h = NodeHarness()
        h.controller.start()

        def pressure() -> dict[str, str]:
            return [c for c in h.node["status"]["conditions"] if c["type"] == "MemoryPressure"][0]

        h.pressure = True
        h.clock.advance(10)
        self.assertEqual((pressure()["status"], pressure()["lastTransitionTime"]), ("True", "2023-11-14T22:13:30Z"))
        h.clock.advance(10)
        self.assertEqual((pressure()["lastTransitionTime"], pressure()["lastHeartbeatTime"]),
                         ("2023-11-14T22:13:30Z", "2023-11-14T22:13:40Z"))
        h.pressure = False
        h.clock.advance(10)
        self.assertEqual((pressure()["status"], pressure()["lastTransitionTime"]), ("False", "2023-11-14T22:13:50Z"))

    def test_status_failure_retried(self) -> None:
        """A failed status write is logged and counted, and written at the next tick."""
        events = captured_log(self)
        h = NodeHarness()
        h.controller.start()
        h.api.queue("PATCH", "/status", 503)
        h.clock.advance(10)
        self.assertEqual(h.metrics.failures["status"], 1)
        h.clock.advance(10)
        self.assertIn("status written again", logged_text(events))


class StopTests(SynchronousTestCase):
    """The stop ends everything and leaves the Node."""

    def test_stop_cancels_timers(self) -> None:
        """Once the service stops, no call is pending on the clock and the Node is left Ready."""
        h = NodeHarness()
        service = NodeService(h.controller)
        service.startService()
        h.clock.advance(10)
        service.stopService()
        self.assertEqual((h.clock.getDelayedCalls(), h.controller.pending), ([], 0))
        self.assertEqual([c["status"] for c in h.node["status"]["conditions"] if c["type"] == "Ready"], ["True"])

    def test_stop_while_registering(self) -> None:
        """A stop during the back-off of a registration leaves nothing pending; nothing is registered after."""
        h = NodeHarness()
        h.http.refusing = True
        h.controller.start()
        h.controller.stop()
        h.http.refusing = False
        self.assertEqual(h.clock.getDelayedCalls(), [])
        h.clock.advance(100)
        self.assertNotIn(NODE, h.api.objects)
