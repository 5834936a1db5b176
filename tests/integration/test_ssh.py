# -*- test-case-name: tests.integration.test_ssh -*-
"""
SSH logins to real guests with a key generated for the test: from the host in
bridge mode, and in isolated mode through ``vmctl forward NODE PORT:localhost:22``.
A node without keys runs no SSH server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

from tests.integration.daemon import Daemon, SharedDaemonTestCase, ensure_image

BRIDGE = "vmstbr8"
GROUPS: list[dict[str, Any]] = [
    {"name": "br", "vcpu": 1, "ram_mb": 256, "storage_size": "1G",
     "network": {"mode": "bridge", "bridge": BRIDGE, "gateway": "10.78.8.1/24", "range": "10.78.8.0/28"}},
    {"name": "iso", "vcpu": 1, "ram_mb": 256, "storage_size": "1G",
     "network": {"mode": "isolated", "range": "10.86.17.0/29"}},
]


class SshTests(SharedDaemonTestCase):
    """One daemon; one bridge node with root's key, one isolated node with alice's."""

    keys: str

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.keys = tempfile.mkdtemp(prefix="vms-ssh-", dir="/tmp")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "test", "-f",
                        os.path.join(cls.keys, "id")], check=True)
        with open(os.path.join(cls.keys, "id.pub")) as stream:
            public = stream.read().strip()
        cls.daemon = Daemon(groups=GROUPS)
        cls.daemon.start()
        cls.bridged = cls.daemon.json("POST", "/hostgroup/br/nodes?wait=agent&timeout=3m", {"ssh_keys": [public]},
                                      expect=201)
        cls.isolated = cls.daemon.json("POST", "/hostgroup/iso/nodes?wait=agent&timeout=3m",
                                       {"ssh_keys": [public], "import_user": "alice"}, expect=201)

    @classmethod
    def _stop_shared(cls) -> None:
        super()._stop_shared()
        subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True)
        shutil.rmtree(getattr(cls, "keys", "/nonexistent"), ignore_errors=True)

    def ssh(self, user: str, host: str, command: str, port: int = 22, key: str = "id") -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            ["ssh", "-i", os.path.join(self.keys, key), "-p", str(port), "-o", "BatchMode=yes",
             "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=60",
             "-o", "LogLevel=ERROR", f"{user}@{host}", command],
            capture_output=True, timeout=180)

    def test_bridge_login(self) -> None:
        """root logs in with the key straight from the host; the guest is the node (its hostname)."""
        done = self.ssh("root", self.bridged["ip"], "hostname; id -un")
        self.assertEqual((done.returncode, done.stdout), (0, f"{self.bridged['hostname']}\nroot\n".encode()), done.stderr)

    def test_other_key_refused(self) -> None:
        """Another key, or a password, does not get in."""
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(self.keys, "other")],
                       check=True)
        done = self.ssh("root", self.bridged["ip"], "true", key="other")
        self.assertEqual(done.returncode, 255, done.stderr)
        self.assertIn(b"Permission denied", done.stderr)

    def test_isolated_login_through_a_tunnel(self) -> None:
        """In isolated mode alice logs in through vmctl forward to the guest's port 22."""
        vmctl = os.path.join(os.path.dirname(sys.executable), "vmctl")
        process = subprocess.Popen(
            [vmctl, "--url", f"http://127.0.0.1:{self.daemon.port}", "forward", self.isolated["hostname"],
             "0:localhost:22"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(lambda: process.poll() is not None or (process.kill(), process.wait()))
        assert process.stdout is not None
        port = int(process.stdout.readline().decode().split()[1].rsplit(":", 1)[1])
        done = self.ssh("alice", "127.0.0.1", "id -un; pwd; stat -c %a ~/.ssh/authorized_keys", port=port)
        self.assertEqual((done.returncode, done.stdout), (0, b"alice\n/home/alice\n600\n"), done.stderr)

    def test_no_keys_no_server(self) -> None:
        """A node created without keys runs no SSH server."""
        created = self.daemon.json("POST", "/hostgroup/br/nodes?wait=agent&timeout=3m", {}, expect=201)
        self.assertEqual(self.daemon.run(created["hostname"], "pgrep -x sshd || echo none"), (0, "none\n"))
        self.assertEqual(self.daemon.run(self.bridged["hostname"], "pgrep -x sshd >/dev/null && echo running"),
                         (0, "running\n"))
        self.daemon.json("DELETE", f"/hostgroup/br/nodes/{created['hostname']}")
