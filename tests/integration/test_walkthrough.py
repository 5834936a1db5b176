"""
The README's walkthrough against the real daemon with real guests: create
with ``wait=agent``, list, health from the agent, console logs, delete that
leaves nothing behind, the 408 of a wait that times out, and SIGTERM with
running nodes.
"""

from __future__ import annotations

import json
import os
import signal
import time

from twisted.trial.unittest import SynchronousTestCase

from tests.integration.daemon import Daemon, SharedGuestTestCase, ensure_image, processes_under


class WalkthroughTests(SharedGuestTestCase):
    """One daemon and one booted node shared by the tests that only read it."""

    create_body = {"tags": ["team=blue", "walkthrough"]}

    def test_created(self) -> None:
        """The first node of group demo is demo-1, with no ip and an RFC 3339 creation time."""
        self.assertEqual(self.created["hostname"], "demo-1")
        self.assertEqual(self.created["hostgroup"], "demo")
        self.assertEqual(self.created["ip"], "")
        self.assertRegex(self.created["created_at"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")

    def test_listed_running(self) -> None:
        """GET /nodes and the group's list show the node as Running with its tags."""
        nodes = self.daemon.json("GET", "/nodes")
        node = next(n for n in nodes if n["hostname"] == "demo-1")
        self.assertEqual(node["status"], "Running")
        self.assertEqual(node["tags"], ["team=blue", "walkthrough"])
        self.assertEqual(node["ram_bytes"], 256 * 1024 * 1024)
        self.assertIn("demo-1", [n["hostname"] for n in self.daemon.json("GET", "/hostgroup/demo/nodes")])

    def test_filters(self) -> None:
        """tag and tag_prefix filter real nodes; both at once is 400; unknown group 404."""
        names = lambda q: [n["hostname"] for n in self.daemon.json("GET", "/nodes" + q)]
        self.assertIn("demo-1", names("?tag=walkthrough"))
        self.assertNotIn("demo-1", names("?tag=walk"))
        self.assertIn("demo-1", names("?tag_prefix=team%3D"))
        self.assertEqual(self.daemon.request("GET", "/nodes?tag=a&tag_prefix=b")[0], 400)
        self.assertEqual(self.daemon.request("GET", "/hostgroup/nope/nodes")[0], 404)

    def test_health_from_agent(self) -> None:
        """GET health answers from the agent in the guest; HEAD is 200 with no body."""
        health = self.daemon.json("GET", "/vm/demo-1/health")
        self.assertEqual(health["hostname"], "demo-1")
        self.assertEqual(health["agent_version"], "0.1.0")
        self.assertIsInstance(health["agent_uptime"], int)
        self.assertGreater(health["system_uptime"], health["agent_uptime"])
        # A node without userdata has nothing left to run: its userdata is over as soon as the agent answers.
        self.assertTrue(health["userdata_ran"])
        self.assertNotIn("userdata_exit_code", health)
        status, _, body = self.daemon.request("HEAD", "/vm/demo-1/health")
        self.assertEqual((status, body), (200, b""))

    def test_logs_show_console(self) -> None:
        """The console log holds our init's steps; lines limits it; bad lines is 400."""
        everything = self.daemon.json("GET", "/vm/demo-1/logs?lines=0")
        self.assertIn("vmservice-init:", everything["content"])
        self.assertEqual(everything["lines"], everything["content"].count("\n"))
        two = self.daemon.json("GET", "/vm/demo-1/logs?lines=2")
        self.assertLessEqual(two["lines"], 2)
        self.assertTrue(everything["content"].endswith(two["content"]))
        self.assertEqual(self.daemon.request("GET", "/vm/demo-1/logs?lines=-3")[0], 400)
        self.assertEqual(self.daemon.request("GET", "/vm/nope/logs")[0], 404)

    def test_hostgroups(self) -> None:
        """GET /hostgroup lists the configured group."""
        self.assertEqual(
            self.daemon.json("GET", "/hostgroup"),
            [{"name": "demo", "count": 0, "ram_bytes": 256 * 1024 * 1024, "cpus": 1, "gpu_count": 0, "arch": "x86_64"}],
        )

    def test_delete_leaves_nothing(self) -> None:
        """Deleting a node kills its QEMU and removes its disk, sockets and record."""
        created = self.daemon.json("POST", "/hostgroup/demo/nodes", {}, expect=201)
        hostname = created["hostname"]
        node_dir = os.path.join(self.daemon.state_dir, "nodes", hostname)
        self.assertTrue(os.path.exists(os.path.join(node_dir, "disk.qcow2")))
        before = set(processes_under(node_dir))
        self.assertEqual(len(before), 1)
        result = self.daemon.json("DELETE", f"/hostgroup/demo/nodes/{hostname}")
        self.assertEqual(result, {"message": f"node {hostname} deleted", "disk_removed": "true", "error": ""})
        self.assertFalse(os.path.exists(node_dir))
        self.assertEqual(processes_under(node_dir), [])
        self.assertNotIn(hostname, [n["hostname"] for n in self.daemon.json("GET", "/nodes")])
        self.assertEqual(self.daemon.request("DELETE", f"/hostgroup/demo/nodes/{hostname}")[0], 404)

    def test_wait_timeout_408(self) -> None:
        """A wait that times out answers 408 and leaves no process, disk or record."""
        nodes_dir = os.path.join(self.daemon.state_dir, "nodes")
        before = set(os.listdir(nodes_dir))
        pids_before = set(processes_under(nodes_dir))
        status, _, body = self.daemon.request("POST", "/hostgroup/demo/nodes?wait=agent&timeout=200ms", b"{}")
        self.assertEqual(status, 408, body)
        self.assertEqual(json.loads(body)["code"], "wait_timeout")
        self.assertEqual(set(os.listdir(nodes_dir)), before)
        self.assertEqual(set(processes_under(nodes_dir)) - pids_before, set())


class SigtermTests(SynchronousTestCase):
    def test_sigterm_stops_every_vm(self) -> None:
        """
        SIGTERM with running nodes: the daemon exits (twistd re-raises the
        signal, so the status is -SIGTERM), no QEMU and no ephemeral node is left.
        """
        ensure_image()
        daemon = Daemon()
        self.addCleanup(daemon.cleanup)
        daemon.start()
        for _ in range(2):
            daemon.json("POST", "/hostgroup/demo/nodes?wait=agent", {}, expect=201)
        self.assertEqual(len(processes_under(daemon.state_dir)), 2)
        started = time.monotonic()
        self.assertIn(daemon.stop(signal.SIGTERM), (0, -signal.SIGTERM))
        self.assertEqual(processes_under(daemon.state_dir), [])
        self.assertEqual(os.listdir(os.path.join(daemon.state_dir, "nodes")), [])
        self.assertLess(time.monotonic() - started, 60)
        self.assertIn("stopping 2 node(s)", daemon.log())


class StartupTests(SynchronousTestCase):
    def test_accelerator_logged(self) -> None:
        """At start the daemon logs which accelerator it uses and why (here KVM cannot boot a guest)."""
        ensure_image()
        daemon = Daemon()
        self.addCleanup(daemon.cleanup)
        daemon.start()
        daemon.json("POST", "/hostgroup/demo/nodes?wait=agent", {}, expect=201)
        self.assertRegex(daemon.log(), r"accelerator: (kvm|tcg): ")

    def refused(self, daemon: Daemon) -> str:
        """Run twistd with the daemon's configuration; it must exit 1 with one line, returned."""
        self.addCleanup(daemon.cleanup)
        return daemon.refused_start()

    def test_bad_config_exits_1_with_one_line(self) -> None:
        """A bad configuration stops twistd with status 1 and one line naming the key."""
        line = self.refused(Daemon(groups=[{"name": "demo", "storage_size": "2X"}]))
        self.assertIn("config.host_groups[0].storage_size", line)

    def test_auth_token(self) -> None:
        """With auth on, the token is made in <state_dir>/auth/token (0600) and required."""
        daemon = Daemon(api={"auth": {"enabled": True}})
        self.addCleanup(daemon.cleanup)
        daemon.start()
        path = os.path.join(daemon.state_dir, "auth", "token")
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        self.assertEqual(daemon.request("GET", "/nodes")[0], 401)
        self.assertEqual(daemon.request("GET", "/healthz")[0], 200)
        with open(path) as f:
            daemon.token = f.read().strip()
        self.assertEqual(daemon.request("GET", "/nodes")[0], 200)

    def test_unix_socket(self) -> None:
        """bind_address as a path serves on a UNIX socket with mode 0660, auth off."""
        import http.client
        import socket as sockets

        daemon = Daemon()
        self.addCleanup(daemon.cleanup)
        path = os.path.join(daemon.root, "api.sock")
        daemon.api.clear()
        daemon.api.update({"bind_address": path})
        daemon.write_config()
        import subprocess

        daemon.process = subprocess.Popen(daemon.command(), cwd=daemon.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o660)

        class UnixConnection(http.client.HTTPConnection):
            def connect(self) -> None:
                self.sock = sockets.socket(sockets.AF_UNIX)
                self.sock.connect(path)

        connection = UnixConnection("unix")
        connection.request("GET", "/nodes")
        response = connection.getresponse()
        self.assertEqual((response.status, json.loads(response.read())), (200, []))
        connection.close()

