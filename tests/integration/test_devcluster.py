"""
The development control plane, for real: built (or found in the cache), started on free loopback ports,
asked by its administrator and by its hosts, stopped and purged.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.integration.controlplane import ControlPlane, SharedControlPlaneTestCase
from vmservice.devcluster.state import process_start_time


def node(name: str) -> dict[str, Any]:
    """A Node object named ``name``."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"type": "vmservice"}}}


class ControlPlaneTests(SharedControlPlaneTestCase):
    """One control plane with hosts vms-a and vms-b."""

    @property
    def running(self) -> ControlPlane:
        assert self.plane is not None
        return self.plane

    def test_export_line_last(self) -> None:
        """start prints the export line of the administrator's kubeconfig last."""
        last = self.running.output.strip().splitlines()[-1]
        self.assertEqual(last, f"export KUBECONFIG={self.running.directory}/admin.kubeconfig")

    def test_readyz(self) -> None:
        """The administrator's kubeconfig works with the cached kubectl: /readyz is ok."""
        kubectl = os.path.join(self.running.state()["bin_dir"], "kubectl")
        result = subprocess.run([kubectl, "--kubeconfig", os.path.join(self.running.directory, "admin.kubeconfig"),
                                 "get", "--raw", "/readyz"], capture_output=True, text=True, timeout=60)
        self.assertEqual((result.returncode, result.stdout.strip()), (0, "ok"), result.stderr)

    def test_node_confined_to_its_node(self) -> None:
        """A host creates its own Node; another's is forbidden (the Node authorizer and NodeRestriction)."""
        token = self.running.token("vms-a")
        status, answer = self.running.request("POST", "/api/v1/nodes", token, node("vms-a"))
        self.assertEqual(status, 201, answer)
        status, answer = self.running.request("POST", "/api/v1/nodes", token, node("vms-b"))
        self.assertEqual(status, 403, answer)

    def test_lease(self) -> None:
        """A host creates its own Lease in kube-node-lease."""
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": "vms-a", "namespace": "kube-node-lease"},
                 "spec": {"holderIdentity": "vms-a", "leaseDurationSeconds": 40}}
        path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        deadline = time.monotonic() + 30
        while True:  # the API server makes kube-node-lease shortly after it is ready
            status, answer = self.running.request("POST", path, self.running.token("vms-a"), lease)
            if status != 404 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        self.assertEqual(status, 201, answer)

    def test_status(self) -> None:
        """status says every process runs and /readyz is ok."""
        result = subprocess.run([*STATUS, "--dir", self.running.directory], capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertEqual(result.stdout.count(": running"), 4)


STATUS = [sys.executable, "-m", "vmservice.devcluster", "status"]


class StopTests(SynchronousTestCase):
    def test_stop_purge(self) -> None:
        """stop --purge ends every recorded process (none runs after) and removes the directory."""
        plane = ControlPlane(("vms-a",))
        self.addCleanup(plane.stop)
        plane.start()
        processes = plane.state()["processes"]
        self.assertEqual(len(processes), 4)
        result = plane.stop()
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        for process in processes:
            self.assertNotEqual(process_start_time(process["pid"]), process["start_time"], process["name"])
        self.assertFalse(os.path.exists(plane.directory))
