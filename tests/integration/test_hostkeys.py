# -*- test-case-name: tests.integration.test_hostkeys -*-
"""
Every node's SSH host key is its own, against real guests on a bridge of
this module's own (``vmstbr12``, ``10.78.12.0/24``): a running node with SSH
keys forks into two children, and each child's SSH server, started again
after its adoption, serves a host key of its own, neither the parent's nor
its sibling's (read in each guest through exec, and from the host with
``ssh-keyscan`` against each node's address), and logs in with the keys it
inherited; two clones of a warm template given SSH keys have keys of their
own too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Any

from tests.integration.daemon import TemplatesDaemonTestCase

BRIDGE = "vmstbr12"
GATEWAY = "10.78.12.1"
_SHAPE: dict[str, Any] = {"count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G"}
GROUPS: list[dict[str, Any]] = [
    {**_SHAPE, "name": "hk",
     "network": {"mode": "bridge", "bridge": BRIDGE, "gateway": f"{GATEWAY}/24", "range": "10.78.12.0/28"}},
    {**_SHAPE, "name": "hkw", "warm": True, "warm_spare": 0,
     "network": {"mode": "bridge", "bridge": BRIDGE, "gateway": f"{GATEWAY}/24", "range": "10.78.12.16/28"}},
]
PUBLIC_KEY_FILE = "/etc/ssh/ssh_host_ed25519_key.pub"


class HostKeyTests(TemplatesDaemonTestCase):
    groups = GROUPS
    bridge = BRIDGE
    keys: str
    public: str

    @classmethod
    def started(cls) -> None:
        cls.keys = tempfile.mkdtemp(prefix="vms-hk-", dir="/tmp")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "test", "-f",
                        os.path.join(cls.keys, "id")], check=True)
        with open(os.path.join(cls.keys, "id.pub")) as stream:
            cls.public = stream.read().strip()

    @classmethod
    def _stop_shared(cls) -> None:
        try:
            super()._stop_shared()
        finally:
            shutil.rmtree(getattr(cls, "keys", "/nonexistent"), ignore_errors=True)

    def create_with_keys(self, group: str) -> dict[str, Any]:
        created: dict[str, Any] = self.daemon.json(
            "POST", f"/hostgroup/{group}/nodes?wait=agent&timeout=4m", {"ssh_keys": [self.public]}, expect=201)
        self.addCleanup(self.daemon.request, "DELETE", f"/hostgroup/{group}/nodes/{created['hostname']}")
        return created

    def served_key(self, hostname: str) -> str:
        """
        The public host key in ``hostname``'s file, once its SSH server runs with it (a fork's child starts
        its server again a moment after its adoption): ``TYPE BASE64``.
        """
        def ready() -> str | None:
            code, out = self.daemon.run(hostname, f"pgrep -x sshd >/dev/null && cat {PUBLIC_KEY_FILE}")
            return " ".join(out.split()[:2]) if code == 0 and out.startswith("ssh-ed25519 ") else None

        key: str = self.daemon.wait_for(f"{hostname}'s SSH server", ready, timeout=120)
        return key

    def scanned_key(self, ip: str) -> str:
        """The ed25519 host key the SSH server at ``ip`` presents, from the host: ``TYPE BASE64``."""
        done = subprocess.run(["ssh-keyscan", "-t", "ed25519", "-T", "20", ip], capture_output=True, text=True,
                              timeout=120)
        lines = [line.split() for line in done.stdout.splitlines() if line and not line.startswith("#")]
        self.assertEqual(len(lines), 1, (done.stdout, done.stderr))
        return " ".join(lines[0][1:3])

    def ssh(self, ip: str, command: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            ["ssh", "-i", os.path.join(self.keys, "id"), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
             "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=60", "-o", "LogLevel=ERROR",
             f"root@{ip}", command], capture_output=True, timeout=180)

    def test_fork_children_have_their_own_host_keys(self) -> None:
        """
        The children of a node whose SSH server runs each serve a host key of their own (in their file and
        to ``ssh-keyscan``), not the parent's and not each other's; the parent keeps its key; root logs in
        to a child with the key the child inherited.
        """
        parent = self.create_with_keys("hk")
        parent_key = self.served_key(parent["hostname"])
        self.assertEqual(self.scanned_key(parent["ip"]), parent_key)
        children = self.fork_node(parent["hostname"], {"count": 2})
        keys = {parent["hostname"]: parent_key}
        for child in children:
            keys[child["hostname"]] = self.served_key(child["hostname"])
            self.assertEqual(self.scanned_key(child["ip"]), keys[child["hostname"]], child)
        self.assertEqual(len(set(keys.values())), 3, keys)
        self.assertEqual(self.served_key(parent["hostname"]), parent_key)
        self.assertEqual(self.scanned_key(parent["ip"]), parent_key)
        child = children[0]
        done = self.ssh(child["ip"], "hostname")
        self.assertEqual((done.returncode, done.stdout), (0, f"{child['hostname']}\n".encode()), done.stderr)
        # The child's private key is the one it serves, made after its adoption.
        code, out = self.daemon.run(child["hostname"], "ssh-keygen -y -f /etc/ssh/ssh_host_ed25519_key")
        self.assertEqual((code, " ".join(out.split()[:2])), (0, keys[child["hostname"]]))

    def test_clones_have_their_own_host_keys(self) -> None:
        """Two clones of one warm template given SSH keys serve host keys of their own."""
        clones = [self.create_with_keys("hkw") for _ in range(2)]
        keys = []
        for clone in clones:
            key = self.served_key(clone["hostname"])
            self.assertEqual(self.scanned_key(clone["ip"]), key, clone)
            keys.append(key)
        self.assertNotEqual(keys[0], keys[1])
