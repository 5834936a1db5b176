"""
A daemon joins a real control plane as a Node: registered with its labels, taint, capacity and
addresses, Ready, its Lease renewed, and the same Node kept across a restart of the daemon.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any, Callable

from tests.integration.controlplane import SharedControlPlaneTestCase
from tests.integration.daemon import Daemon, free_port

#: Seconds a Node has to become Ready, and a Lease to be renewed (the daemon renews every 2 s here).
DEADLINE = 90.0


class JoinTests(SharedControlPlaneTestCase):
    """One daemon, host ``vms-a`` of one control plane."""

    nodes = ("vms-a",)

    @classmethod
    def start_shared(cls) -> None:
        super().start_shared()
        assert cls.plane is not None
        cls.kubelet_port = free_port()
        cls.daemon = Daemon(kubernetes={
            "kubeconfig": os.path.join(cls.plane.directory, "nodes", "vms-a.kubeconfig"),
            "node_name": "vms-a",
            "kubelet_port": cls.kubelet_port,
            "renew_interval_seconds": 2,
            "status_interval_seconds": 2,
            "labels": {"vmservice.io/pool": "test"},
            "kubelet_client_ca_file": os.path.join(cls.plane.directory, "ca.crt"),
        })
        cls.daemon.start()

    @classmethod
    def _stop_shared(cls) -> None:
        try:
            daemon = getattr(cls, "daemon", None)
            if daemon is not None:
                daemon.cleanup()
        finally:
            super()._stop_shared()

    def kubectl(self, *argv: str) -> Any:
        """The JSON ``kubectl ARGV -o json`` prints, as the control plane's administrator."""
        assert self.plane is not None
        kubectl = os.path.join(self.plane.state()["bin_dir"], "kubectl")
        result = subprocess.run([kubectl, "--kubeconfig", os.path.join(self.plane.directory, "admin.kubeconfig"),
                                 *argv, "-o", "json"], capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(argv)}: {result.stderr}")
        return json.loads(result.stdout)

    def eventually(self, what: str, probe: Callable[[], Any]) -> Any:
        """``probe()``'s first true answer within :data:`DEADLINE` (errors count as false)."""
        deadline = time.monotonic() + DEADLINE
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = probe()
            except AssertionError as error:
                last = error
            else:
                if last:
                    return last
            time.sleep(0.5)
        self.fail(f"{what} within {DEADLINE} s; last: {last!r}\n{self.daemon.log()[-3000:]}")

    def ready_node(self) -> dict[str, Any]:
        def ready() -> dict[str, Any] | None:
            node: dict[str, Any] = self.kubectl("get", "node", "vms-a")
            conditions = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
            return node if conditions.get("Ready") == "True" else None
        found: dict[str, Any] = self.eventually("the Node Ready", ready)
        return found

    def test_node_registered_and_ready(self) -> None:
        """The Node carries the configured labels, the default taint, slots, addresses and kubelet port."""
        node = self.ready_node()
        labels = node["metadata"]["labels"]
        self.assertEqual((labels["type"], labels["vmservice.io/pool"]), ("vmservice", "test"))
        self.assertIn({"key": "vmservice.io/vm", "value": "true", "effect": "NoSchedule"}, node["spec"]["taints"])
        status = node["status"]
        self.assertGreater(int(status["capacity"]["vmservice.io/slots"]), 0)
        self.assertEqual(status["allocatable"]["vmservice.io/slots"], status["capacity"]["vmservice.io/slots"])
        self.assertIn({"type": "InternalIP", "address": "127.0.0.1"}, status["addresses"])
        self.assertEqual(status["daemonEndpoints"]["kubeletEndpoint"]["Port"], self.kubelet_port)
        conditions = {c["type"]: c["status"] for c in status["conditions"]}
        self.assertEqual(conditions["MemoryPressure"], "False")

    def test_lease_renewed(self) -> None:
        """The node's Lease in kube-node-lease is held by the node and renewed."""
        self.ready_node()

        def lease() -> dict[str, Any]:
            found: dict[str, Any] = self.kubectl("get", "lease", "vms-a", "-n", "kube-node-lease")
            return found
        first = self.eventually("the Lease", lease)
        self.assertEqual(first["spec"]["holderIdentity"], "vms-a")
        owner = first["metadata"]["ownerReferences"][0]
        self.assertEqual((owner["kind"], owner["name"]), ("Node", "vms-a"))
        self.eventually("a renewal", lambda: lease()["spec"]["renewTime"] != first["spec"]["renewTime"])

    def test_restart_keeps_the_node(self) -> None:
        """A restarted daemon finds its Node (the same uid) and makes it Ready again."""
        uid = self.ready_node()["metadata"]["uid"]
        self.daemon.stop()
        self.daemon.start()
        node = self.ready_node()
        self.assertEqual(node["metadata"]["uid"], uid)
        self.assertNotIn("Traceback", self.daemon.log())
