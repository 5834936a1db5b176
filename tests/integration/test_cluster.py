"""
Pods as VMs, for real: the development control plane and two daemons on this machine as Nodes vms-a and
vms-b (their own state directories, network ranges and API ports). A Deployment of three VM pods spreads
over both and runs; a pod beyond capacity stays Pending with the scheduler's reason; deleting a pod
deletes its VM; killing one daemon (and its VMs) gets its pods replaced on the other; restarting it
reconciles (nothing stray, its Terminating pods deleted); a third host that never returns has its pods
collected once its Node is deleted.  The tests run in any order (the suite runs them in a random one).
Everything is removed even when a test fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Any

from tests.integration.controlplane import SharedControlPlaneTestCase
from tests.integration.daemon import Daemon, ensure_image, free_port, processes_under, wait_until
from tests.integration.faults import remove_network

#: Each daemon's network range (and the names of its network objects, for a clean-up after a kill).
RANGES = {"vms-a": ("10.88.1.0/28", ("vmh0a5801", "vms-0a5801")), "vms-b": ("10.88.2.0/28", ("vmh0a5802", "vms-0a5802")),
          "vms-c": ("10.88.3.0/28", ("vmh0a5803", "vms-0a5803"))}
#: A VM pod: tolerates the vmservice taint, selects vmservice Nodes, asks for one slot, boots the smallest VM.
TEMPLATE = {
    "metadata": {"labels": {"app": "vmpods"}},
    "spec": {
        "nodeSelector": {"type": "vmservice"},
        "tolerations": [{"key": "vmservice.io/vm", "operator": "Exists", "effect": "NoSchedule"}],
        "terminationGracePeriodSeconds": 5,
        "containers": [{"name": "vm", "image": "vmservice.io/group/vm",
                        "resources": {"limits": {"vmservice.io/slots": "1", "memory": "256Mi"}}}],
    },
}
#: A current kubectl: v1.30 or later speaks the v5.channel.k8s.io WebSocket the kubelet port serves (the
#: control plane's own v1.20 kubectl speaks SPDY/3.1 only, which it refuses).
KUBECTL = "/usr/bin/kubectl"
DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "vmpods", "namespace": "default"},
              "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "vmpods"}}, "template": TEMPLATE}}


def group(name: str) -> list[dict[str, Any]]:
    return [{"name": "vm", "vcpu": 1, "ram_mb": 256, "storage_size": "1G",
             "network": {"mode": "isolated", "range": RANGES[name][0]}}]


def running(pods: list[dict[str, Any]], count: int) -> list[dict[str, Any]] | None:
    """The Deployment's pods among ``pods`` when ``count`` of them run (and none is being deleted)."""
    mine = [p for p in pods if p["metadata"].get("labels", {}).get("app") == "vmpods"
            and "deletionTimestamp" not in p["metadata"]]
    ready = [p for p in mine if p["status"].get("phase") == "Running" and p["status"].get("podIP")]
    return ready if len(ready) == count else None


class PodVmTests(SharedControlPlaneTestCase):
    """
    One control plane, two daemons as its Nodes, and a Deployment of three VM pods made before the
    first test.  The tests run in any order: each begins by waiting for the three pods to run, and one
    that changes where they run (a lost host) leaves three running.  The host that never returns is
    a third node of its own (:meth:`test_host_never_returns`).
    """

    nodes = ("vms-a", "vms-b", "vms-c")
    daemons: dict[str, Daemon] = {}
    first: list[dict[str, Any]] = []

    @classmethod
    def node_daemon(cls, name: str) -> Daemon:
        assert cls.plane is not None
        daemon = Daemon(groups=group(name), kubernetes={
            "kubeconfig": os.path.join(cls.plane.directory, "nodes", f"{name}.kubeconfig"), "node_name": name,
            "internal_ip": "127.0.0.1", "capacity": {"pods": 3}, "default_group": "vm",
            "renew_interval_seconds": 2, "status_interval_seconds": 2, "kubelet_port": free_port(),
            "kubelet_client_ca_file": os.path.join(cls.plane.directory, "ca.crt")})
        cls.daemons[name] = daemon
        return daemon

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        super().start_shared()
        cls.daemons = {}
        for name in ("vms-a", "vms-b"):
            cls.node_daemon(name).start()
        wait_until("both Nodes Ready", lambda: cls.ready_nodes() >= {"vms-a", "vms-b"}, 60, 1.0)
        cls.kubectl_as_admin("apply", "-f", "-", stdin=json.dumps(DEPLOYMENT))
        cls.first = wait_until("3 pods Running", lambda: running(cls.all_pods(), 3), 180, 1.0)

    @classmethod
    def _stop_shared(cls) -> None:
        try:
            if cls.plane is not None:
                cls.kubectl_as_admin("delete", "deployment", "vmpods", "--ignore-not-found", "--wait=false")
        except Exception:
            pass  # the control plane may not have started
        for name, daemon in cls.daemons.items():
            daemon.cleanup()
            remove_network(RANGES[name][1])
        cls.daemons = {}
        super()._stop_shared()

    @classmethod
    def kubectl_as_admin(cls, *argv: str, stdin: str | None = None) -> str:
        assert cls.plane is not None
        kubectl = os.path.join(cls.plane.state()["bin_dir"], "kubectl")
        result = subprocess.run([kubectl, "--kubeconfig", os.path.join(cls.plane.directory, "admin.kubeconfig"), *argv],
                                capture_output=True, text=True, timeout=60, input=stdin)
        if result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(argv)}: {result.stderr}")
        return result.stdout

    @classmethod
    def all_pods(cls) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(cls.kubectl_as_admin("get", "pods", "-o", "json"))["items"]
        return items

    @classmethod
    def ready_nodes(cls) -> set[str]:
        nodes = json.loads(cls.kubectl_as_admin("get", "nodes", "-o", "json"))["items"]
        return {n["metadata"]["name"] for n in nodes
                if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])}

    def kubectl(self, *argv: str, stdin: str | None = None) -> str:
        return self.kubectl_as_admin(*argv, stdin=stdin)

    def pods(self) -> list[dict[str, Any]]:
        return self.all_pods()

    def running(self, count: int) -> list[dict[str, Any]] | None:
        """The Deployment's pods when ``count`` of them run (and none is being deleted)."""
        return running(self.pods(), count)

    def three_running(self) -> list[dict[str, Any]]:
        """The Deployment's three pods, once they run (a test before may have moved them)."""
        pods: list[dict[str, Any]] = wait_until("3 pods Running", lambda: self.running(3), 180, 1.0)
        return pods

    def vm_count(self, name: str) -> int:
        return len(self.daemons[name].json("GET", "/nodes?tag_prefix=vmservice.io/pod-uid%3D"))

    def kill(self, name: str) -> None:
        """Daemon ``name`` and its VMs killed (SIGKILL), as when its host is lost."""
        daemon = self.daemons[name]
        daemon.stop(signal.SIGKILL)
        for pid in processes_under(daemon.state_dir):
            os.kill(pid, signal.SIGKILL)

    def test_nodes_ready(self) -> None:
        """The daemons are Ready Nodes, each with its vmservice.io/api annotation."""
        self.assertLessEqual({"vms-a", "vms-b"}, self.ready_nodes())
        node = json.loads(self.kubectl("get", "node", "vms-a", "-o", "json"))
        self.assertEqual(node["metadata"]["annotations"]["vmservice.io/api"], f"http://127.0.0.1:{self.daemons['vms-a'].port}")

    def test_deployment_spreads(self) -> None:
        """The three VM pods spread over both Nodes and ran, each with its VM's address and hostname."""
        self.assertEqual({p["spec"]["nodeName"] for p in self.first}, {"vms-a", "vms-b"})
        for p in self.first:
            self.assertTrue(p["status"]["containerStatuses"][0]["containerID"].startswith("vmservice://"))
            self.assertTrue(any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"]["conditions"]))
        pods = self.three_running()
        self.assertEqual(sum(self.vm_count(name) for name in {p["spec"]["nodeName"] for p in pods}), 3)

    def current_kubectl(self, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """``kubectl ARGV`` with :data:`KUBECTL` as the administrator (its exit status not checked)."""
        assert self.plane is not None
        version = subprocess.run([KUBECTL, "version", "--client", "-o", "json"], capture_output=True, text=True,
                                 timeout=60)
        minor = json.loads(version.stdout or "{}").get("clientVersion", {}).get("minor", "0").rstrip("+")
        self.assertGreaterEqual(int(minor or 0), 30, f"{KUBECTL} is not a kubectl of v1.30 or later: {version.stdout}")
        return subprocess.run([KUBECTL, "--kubeconfig", os.path.join(self.plane.directory, "admin.kubeconfig"), *argv],
                              capture_output=True, text=True, timeout=60, input=stdin)

    def test_kubectl_logs_and_exec(self) -> None:
        """
        Through the real API server and the node's kubelet port: ``kubectl logs`` shows the VM's console,
        ``kubectl exec`` runs a command in it (its output, its error stream, its exit status, its stdin).
        """
        name = self.three_running()[0]["metadata"]["name"]
        logs = self.current_kubectl("logs", name, "--tail=20")
        self.assertEqual(logs.returncode, 0, logs.stderr)
        self.assertTrue(logs.stdout.strip(), "an empty console")
        ran = self.current_kubectl("exec", name, "--", "sh", "-c", "echo hi; echo oops >&2; exit 3")
        self.assertEqual((ran.returncode, ran.stdout), (3, "hi\n"), ran.stderr)
        self.assertIn("oops", ran.stderr)
        echoed = self.current_kubectl("exec", "-i", name, "--", "cat", stdin="from stdin\n")
        self.assertEqual((echoed.returncode, echoed.stdout), (0, "from stdin\n"), echoed.stderr)

    def test_beyond_capacity(self) -> None:
        """A pod asking for more slots than any Node has stays Pending with the scheduler's reason."""
        item = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "huge", "namespace": "default"},
                "spec": {**TEMPLATE["spec"], "containers": [{"name": "vm", "image": "vm", "resources": {
                    "limits": {"vmservice.io/slots": "9"}}}]}}
        self.kubectl("apply", "-f", "-", stdin=json.dumps(item))
        self.addCleanup(self.kubectl, "delete", "pod", "huge", "--wait=false", "--ignore-not-found")

        def reason() -> str:
            status = json.loads(self.kubectl("get", "pod", "huge", "-o", "json"))["status"]
            return " ".join(c.get("message", "") for c in status.get("conditions", []))
        self.assertIn("Insufficient vmservice.io/slots", wait_until("unschedulable", reason, 60, 1.0))

    def test_node_cannot_annotate(self) -> None:
        """NodeRestriction: a node may not change its pod's metadata (why the VM's hostname is in its status)."""
        item = self.three_running()[0]
        assert self.plane is not None
        node = item["spec"]["nodeName"]
        path = f"/api/v1/namespaces/default/pods/{item['metadata']['name']}"
        item["metadata"].setdefault("annotations", {})["vmservice.io/hostname"] = "x"
        status, answer = self.plane.request("PUT", path, self.plane.token(node), item)
        self.assertEqual(status, 403, answer)

    def test_delete_pod(self) -> None:
        """Deleting a pod deletes its VM (its daemon no longer lists it); the Deployment replaces the pod."""
        victim = self.three_running()[0]
        name, node = victim["metadata"]["name"], victim["spec"]["nodeName"]
        hostname = victim["status"]["containerStatuses"][0]["containerID"][len("vmservice://"):]
        self.kubectl("delete", "pod", name, "--wait=true", "--timeout=60s")
        wait_until("its VM deleted", lambda: hostname not in self.daemons[node].nodes(), 30, 1.0)
        self.three_running()

    def test_host_lost_and_back(self) -> None:
        """A host killed with its VMs: its pods are replaced on the other; back, it deletes what it left."""
        pods = self.three_running()
        lost = pods[0]["spec"]["nodeName"]
        other = "vms-b" if lost == "vms-a" else "vms-a"
        self.kill(lost)

        def all_on_other() -> bool:
            now = self.running(3)
            return now is not None and all(p["spec"]["nodeName"] == other for p in now)
        wait_until(f"replacements Running on {other}", all_on_other, 150, 1.0)
        self.daemons[lost].start()

        def nothing_left() -> bool:
            return not [p for p in self.pods() if p["spec"].get("nodeName") == lost]
        wait_until(f"{lost}'s Terminating pods deleted", nothing_left, 90, 1.0)
        self.assertEqual(self.vm_count(lost), 0)
        wait_until(f"{lost} Ready again", lambda: lost in self.ready_nodes(), 60, 1.0)

    def test_host_never_returns(self) -> None:
        """A host gone for good: once its Node is deleted, the pods bound to it are garbage-collected."""
        self.three_running()
        self.node_daemon("vms-c").start()
        wait_until("vms-c Ready", lambda: "vms-c" in self.ready_nodes(), 60, 1.0)
        self.kill("vms-c")
        orphan = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "orphan", "namespace": "default"},
                  "spec": {**TEMPLATE["spec"], "nodeName": "vms-c"}}
        self.kubectl("apply", "-f", "-", stdin=json.dumps(orphan))
        self.kubectl("delete", "node", "vms-c", "--wait=true", "--timeout=30s")

        def collected() -> bool:
            return "orphan" not in {p["metadata"]["name"] for p in self.pods()}
        wait_until("the pods of the deleted Node collected", collected, 120, interval=2.0)
