"""
Tests for :mod:`vmservice.cluster.node_object`: the Node and Lease as written (pure).
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.cluster.node_harness import kube_config
from vmservice.cluster.node_object import (
    lease_manifest, micro_time, node_manifest, rfc3339, stamp_conditions, taints, verdicts,
)
from vmservice.config import TaintConfig


class NodeObjectTests(SynchronousTestCase):
    """Times, conditions, taints, manifests."""

    def test_times(self) -> None:
        """Whole seconds for conditions, microseconds for a Lease, both UTC."""
        self.assertEqual(rfc3339(1_700_000_000.9), "2023-11-14T22:13:20Z")
        self.assertEqual(micro_time(1_700_000_000.25), "2023-11-14T22:13:20.250000Z")

    def test_transition_kept_or_moved(self) -> None:
        """An unchanged status keeps its transition time; a changed one, or garbage before, takes now."""
        before = stamp_conditions(100, verdicts(False), [])
        after = stamp_conditions(200, verdicts(True), before)
        by_type = {c["type"]: c for c in after}
        self.assertEqual(by_type["Ready"]["lastTransitionTime"], rfc3339(100))
        self.assertEqual(by_type["MemoryPressure"]["lastTransitionTime"], rfc3339(200))
        self.assertEqual(by_type["Ready"]["lastHeartbeatTime"], rfc3339(200))
        odd = stamp_conditions(300, verdicts(False), ["x", {"type": "Ready", "status": "True",
                                                             "lastTransitionTime": 5}])
        self.assertEqual(odd[0]["lastTransitionTime"], rfc3339(300))

    def test_taints(self) -> None:
        """A taint without a value is written without one."""
        config = kube_config(taints=(TaintConfig(key="a", effect="NoExecute"), TaintConfig(key="b", value="v")))
        self.assertEqual(taints(config), [{"key": "a", "effect": "NoExecute"},
                                          {"key": "b", "value": "v", "effect": "NoSchedule"}])

    def test_manifests(self) -> None:
        """The Node's name, labels and status; the Lease held by the node and owned by its Node."""
        config = kube_config()
        node = node_manifest(config, {"conditions": []})
        self.assertEqual((node["kind"], node["metadata"]), ("Node", {"name": "vms-a", "labels": {"type": "vmservice"}}))
        lease = lease_manifest(config, "uid-1", 0)
        self.assertEqual(lease["metadata"]["namespace"], "kube-node-lease")
        self.assertEqual(lease["metadata"]["ownerReferences"][0]["uid"], "uid-1")
        self.assertEqual(lease["spec"]["renewTime"], "1970-01-01T00:00:00.000000Z")

    def test_api_annotation(self) -> None:
        """The host's vmservice API is the Node's vmservice.io/api annotation."""
        node = node_manifest(kube_config(vmservice_api="http://10.0.0.5:8081"), {"conditions": []})
        self.assertEqual(node["metadata"]["annotations"], {"vmservice.io/api": "http://10.0.0.5:8081"})
