# -*- test-case-name: tests.integration.cli.test_pods -*-
"""
``vmctl`` with ``pod/NAME``, for real: the development control plane, one daemon as its Node vms-a, one VM
pod Running on it; ``vmctl`` run as a program finds the pod through the Kubernetes API (the admin's token
kubeconfig through ``$KUBECONFIG``, and a client-certificate kubeconfig through ``--kubeconfig``), then
execs and copies on the host's vmservice API.  Everything is removed even when a test fails.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from tests.integration.controlplane import SharedControlPlaneTestCase
from tests.integration.daemon import Daemon, ensure_image, free_port, wait_until
from tests.integration.faults import remove_network
from vmservice.devcluster.certificates import CA, KeyPair, issue

#: The daemon's network range, and the names of its network objects (for a clean-up after a failure).
RANGE, NETWORK_OBJECTS = "10.88.7.0/28", ("vmh0a5807", "vms-0a5807")
#: The VM pod: tolerates the vmservice taint, selects vmservice Nodes, boots the smallest VM.
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vmctl-web", "namespace": "default"}, "spec": {
    "nodeSelector": {"type": "vmservice"},
    "tolerations": [{"key": "vmservice.io/vm", "operator": "Exists", "effect": "NoSchedule"}],
    "terminationGracePeriodSeconds": 5,
    "containers": [{"name": "vm", "image": "vmservice.io/group/vm",
                    "resources": {"limits": {"vmservice.io/slots": "1", "memory": "256Mi"}}}]}}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class VmctlPodTests(SharedControlPlaneTestCase):
    """One control plane, one daemon as its Node, one VM pod; vmctl reaches the VM by the pod's name."""

    nodes = ("vms-a",)
    node_daemon: Daemon | None = None

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        super().start_shared()
        assert cls.plane is not None
        cls.node_daemon = Daemon(
            groups=[{"name": "vm", "vcpu": 1, "ram_mb": 256, "storage_size": "1G",
                     "network": {"mode": "isolated", "range": RANGE}}],
            kubernetes={"kubeconfig": os.path.join(cls.plane.directory, "nodes", "vms-a.kubeconfig"),
                        "node_name": "vms-a", "internal_ip": "127.0.0.1", "capacity": {"pods": 2},
                        "default_group": "vm", "renew_interval_seconds": 2, "status_interval_seconds": 2,
                        "kubelet_port": free_port(),
                        "kubelet_client_ca_file": os.path.join(cls.plane.directory, "ca.crt")})
        cls.node_daemon.start()
        cls.kubectl("apply", "-f", "-", stdin=json.dumps(POD))
        wait_until("the VM pod Running", cls.running, 180, 1.0)

    @classmethod
    def _stop_shared(cls) -> None:
        """The daemon and its VM killed and removed, its network too, then the control plane (the pod with it)."""
        daemon, cls.node_daemon = cls.node_daemon, None
        if daemon is not None:
            daemon.cleanup()
        remove_network(NETWORK_OBJECTS)
        super()._stop_shared()

    @classmethod
    def kubectl(cls, *argv: str, stdin: str | None = None) -> str:
        assert cls.plane is not None
        return cls.plane.kubectl(*argv, stdin=stdin)

    @classmethod
    def running(cls) -> dict[str, Any] | None:
        pod: dict[str, Any] = json.loads(cls.kubectl("get", "pod", "vmctl-web", "-o", "json"))
        statuses = pod["status"].get("containerStatuses") or [{}]
        ready = pod["status"].get("phase") == "Running" and statuses[0].get("containerID", "").startswith("vmservice://")
        return pod if ready else None

    def vmctl(self, *argv: str, kubeconfig: str = "admin.kubeconfig") -> subprocess.CompletedProcess[str]:
        """Run vmctl as a program, with ``$KUBECONFIG`` the control plane's ``kubeconfig``."""
        assert self.plane is not None
        environ = {name: value for name, value in os.environ.items() if not name.startswith("VMSERVICE_")}
        environ["KUBECONFIG"] = os.path.join(self.plane.directory, kubeconfig)
        return subprocess.run([sys.executable, "-m", "vmservice.cli.main", *argv], capture_output=True, text=True,
                              timeout=60, env=environ, stdin=subprocess.DEVNULL)

    def client_certificate_kubeconfig(self) -> str:
        """A kubeconfig of a client certificate (in system:masters) signed by the control plane's CA, all inline."""
        assert self.plane is not None
        with open(os.path.join(self.plane.directory, "ca.crt"), "rb") as f:
            ca_pem = f.read()
        with open(os.path.join(self.plane.directory, "ca.key"), "rb") as f:
            key = serialization.load_pem_private_key(f.read(), None)
        ca = CA(key, x509.load_pem_x509_certificate(ca_pem))  # type: ignore[arg-type]
        issued = issue(ca, KeyPair("vmctl", "vmctl-test", "system:masters", server=False, client=True))
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "k", "cluster": {"server": self.plane.state()["api_url"],
                                                   "certificate-authority-data": b64(ca_pem)}}],
            "users": [{"name": "u", "user": {
                "client-certificate-data": b64(issued.certificate.public_bytes(serialization.Encoding.PEM)),
                "client-key-data": b64(issued.key.private_bytes(serialization.Encoding.PEM,
                                                                serialization.PrivateFormat.PKCS8,
                                                                serialization.NoEncryption()))}}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "default"}}],
        }
        path = os.path.join(self.plane.top, "client-certificate.kubeconfig")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            yaml.safe_dump(config, f)
        self.addCleanup(os.remove, path)
        return path

    def test_exec(self) -> None:
        """vmctl exec pod/NAME runs the command in the pod's VM."""
        result = self.vmctl("exec", "pod/vmctl-web", "--", "echo", "hi")
        self.assertEqual((result.returncode, result.stdout), (0, "hi\n"), result.stderr)

    def test_cp_round_trip(self) -> None:
        """A file copied to pod/NAMESPACE/NAME:PATH (a client certificate's kubeconfig) comes back the same."""
        kubeconfig = self.client_certificate_kubeconfig()
        directory = self.mktemp()
        os.makedirs(directory)
        original, back = os.path.join(directory, "sent"), os.path.join(directory, "back")
        with open(original, "wb") as f:
            f.write(os.urandom(4096) + b"end\n")
        sent = self.vmctl("cp", original, "pod/default/vmctl-web:/tmp/x", "--kubeconfig", kubeconfig)
        self.assertEqual(sent.returncode, 0, sent.stderr)
        fetched = self.vmctl("cp", "pod/vmctl-web:/tmp/x", back)
        self.assertEqual(fetched.returncode, 0, fetched.stderr)
        with open(original, "rb") as a, open(back, "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_unknown_pod(self) -> None:
        """A pod that does not exist: exit 1, one line saying so, no traceback."""
        result = self.vmctl("exec", "pod/nope", "--", "true")
        self.assertEqual((result.returncode, result.stdout), (1, ""))
        self.assertEqual(result.stderr,
                         "vmctl: pod/nope: no pod default/nope (pod/NAMESPACE/NAME names another namespace)\n")
