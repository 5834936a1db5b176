# -*- test-case-name: tests.integration.test_warm -*-
"""
Warm groups against real guests: a node cloned from its group's template
runs and execs, with userdata, secrets, cp, fs, statistics, pause/resume and
reboot; the template is built at start and concurrent creates share one
build; clones adopt identities of their own (random bytes, machine-id,
hostname, clock; with a network their MAC, address and route, the gateway
reached) and never change the template's RAM file or frozen disk; a removed
template, a corrupted device state or a template over the tmpfs budget
makes the node boot cold (said in the log and in ``/metrics``); a clone
suspends and restores, and after a daemon kill -9 is adopted again and
relaunched cold from its own disk, its frozen disk deleted with it; clones
on a bridge (bridge mode) reach each other and the host at once.  Every VM
runs with a bounded translation cache under TCG (``-accel tcg,tb-size=64``).
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import signal
import threading
import time
from typing import Any

from tests.integration.daemon import CREATE_TIMEOUT, TemplatesDaemonTestCase
from tests.integration.greeting import CLIENT, SERVER, HelloServer
from tests.integration.metrics import metric

MiB = 1024 * 1024

GROUPS: list[dict[str, Any]] = [
    {"name": "warm", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "warm": True},
]


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()




class _Warm(TemplatesDaemonTestCase):
    groups = GROUPS


class WarmTests(_Warm):
    @classmethod
    def started(cls) -> None:
        # The group's template is built at start, in the background.
        cls.daemon.wait_for("the template built at start", lambda: metric(
            cls.daemon.request("GET", "/metrics")[2].decode(), "vmservice_template_builds_total", result="ok"
        ) == 1, timeout=240)

    # -- helpers ---------------------------------------------------------

    def create(self, body: dict[str, Any] | None = None) -> str:
        return self.create_node("warm", body, timeout=CREATE_TIMEOUT)

    def metrics(self) -> str:
        status, _, body = self.daemon.request("GET", "/metrics")
        self.assertEqual(status, 200)
        return body.decode()

    def templates(self) -> list[str]:
        return sorted(glob.glob(os.path.join(self.daemon.state_dir, "templates", "*")))

    def ram_files(self) -> list[str]:
        return sorted(glob.glob(os.path.join(self.shm, "vmservice-*", "*")))

    def assert_clone(self, hostname: str) -> None:
        """
        The node's VM maps a template's RAM file privately and its disk lies over the frozen disk; under
        TCG its translation cache is bounded.
        """
        argv = " ".join(self.qemu_argv(hostname))
        self.assert_accel(argv)
        self.assertIn("share=off", argv)
        self.assertNotIn("share=on", argv)
        self.assertIn("-incoming defer", argv)
        self.assertTrue(self.backing_file(hostname).startswith(os.path.join(self.daemon.state_dir, "templates")))

    def assert_accel(self, argv: str) -> None:
        """KVM, or TCG with the default bounded translation cache (``tcg_tb_size_mb: 64``)."""
        if "-accel kvm" not in argv:
            self.assertIn("-accel tcg,tb-size=64 ", argv)

    def assert_cold(self, hostname: str) -> None:
        argv = " ".join(self.qemu_argv(hostname))
        self.assert_accel(argv)
        self.assertNotIn("memory-backend", argv)
        self.assertTrue(self.backing_file(hostname).endswith("rootfs.ext4"))

    # -- tests -----------------------------------------------------------

    def test_burst_shares_one_build(self) -> None:
        """Three creates at once of a key without a template: one build, three running clones whose exec works."""
        builds = metric(self.metrics(), "vmservice_template_builds_total", result="ok")
        logged = self.daemon.log().count("building template")
        made: list[str] = []
        errors: list[BaseException] = []

        def one() -> None:
            try:
                made.append(self.create({"ram_bytes": 192 * MiB}))
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=one) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(errors, [])
        self.assertEqual(metric(self.metrics(), "vmservice_template_builds_total", result="ok"), builds + 1)
        self.assertEqual(self.daemon.log().count("building template"), logged + 1)
        for hostname in made:
            self.assert_clone(hostname)
            self.assertEqual(self.daemon.run(hostname, "echo hi; hostname >/dev/null"), (0, "hi\n"))

    def test_built_at_start(self) -> None:
        """The group's template was built at start: a create of the group's size builds none."""
        before = self.metrics()
        self.assert_clone(self.create())
        after = self.metrics()
        self.assertEqual(metric(after, "vmservice_template_builds_total", result="ok"),
                         metric(before, "vmservice_template_builds_total", result="ok"))
        # Its clone time is measured (from its disk to its VM running with its identity).
        self.assertEqual(metric(after, "vmservice_clone_duration_seconds_count", hostgroup="warm"),
                         metric(before, "vmservice_clone_duration_seconds_count", hostgroup="warm") + 1)

    def test_clones_have_their_own_identity(self) -> None:
        """
        Two clones of one template: different random bytes, machine-ids and agent sessions, each its own
        hostname (its node's, in /etc/hostname too), the host's clock; the template's hostname is gone.
        """
        seen = []
        for hostname in (self.create(), self.create()):
            self.assert_clone(hostname)
            code, out = self.daemon.run(hostname, "hostname; cat /etc/hostname /etc/machine-id; "
                                                  "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo; "
                                                  "date +%s")
            self.assertEqual(code, 0)
            name, etc_hostname, machine_id, random, clock = out.split("\n")[:5]
            self.assertEqual((name, etc_hostname), (hostname, hostname))
            self.assertLess(abs(int(clock) - time.time()), 30)
            seen.append((machine_id, random))
        self.assertNotEqual(seen[0][0], seen[1][0])
        self.assertNotEqual(seen[0][1], seen[1][1])
        self.assertNotIn("template-", self.daemon.run(hostname, "cat /etc/hosts")[1])

    def test_clone_works_like_a_node(self) -> None:
        """
        A clone with userdata and a secret: both placed (after its start, as for any node), then cp,
        fs, pause and resume, and a reboot after which its agent answers again.
        """
        import base64

        self.daemon.json("POST", "/secrets", {"name": "warm-token", "data": base64.b64encode(b"s3cret").decode()},
                         expect=201)
        self.addCleanup(self.daemon.request, "DELETE", "/secrets/warm-token")
        created = self.daemon.json("POST", f"/hostgroup/warm/nodes?wait=userdata&timeout={CREATE_TIMEOUT}",
                                   {"userdata": "echo ran > /root/userdata.txt", "secrets": ["warm-token"]},
                                   expect=201)
        hostname = created["hostname"]
        self.addCleanup(self.daemon.request, "DELETE", f"/hostgroup/warm/nodes/{hostname}")
        self.assert_clone(hostname)
        self.assertEqual(self.daemon.run(hostname, "cat /root/userdata.txt /run/secrets/warm-token"),
                         (0, "ran\ns3cret"))
        status, _, _ = self.daemon.request("POST", f"/vm/{hostname}/cp?path=/root/up.bin", b"\x00\x01payload")
        self.assertEqual(status, 200)
        entry = self.daemon.json("GET", f"/vm/{hostname}/fs/stat?path=/root/up.bin")
        self.assertEqual((entry["type"], entry["size"]), ("file", 9))
        # Its metrics agent answers on the clone's own channel, with its own hostname.
        stat = self.daemon.wait_for("the clone's statistics", lambda: (
            lambda answer: answer if "snapshot" in answer else None)(self.daemon.json("GET", f"/node/{hostname}/stats")))
        self.assertEqual(stat["snapshot"]["hostname"], hostname)
        self.daemon.post(f"/vm/{hostname}/pause")
        self.assertEqual(self.daemon.request("POST", f"/vm/{hostname}/exec?cmd=true")[0], 409)
        self.daemon.post(f"/vm/{hostname}/resume")
        self.assertEqual(self.daemon.run(hostname, "echo back"), (0, "back\n"))
        self.daemon.reboot(hostname, timeout=180)
        # Booted again from its own disk: what it wrote is there, its userdata did not run again.
        self.assertEqual(self.daemon.run(hostname, "cat /root/userdata.txt; wc -c < /root/up.bin"), (0, "ran\n9\n"))

    def test_clone_leaves_the_template_unchanged(self) -> None:
        """A clone that wrote into its memory and onto its disk changed neither the RAM file nor the frozen disk."""
        first = self.create()
        self.assert_clone(first)
        disk = self.backing_file(first)
        ram = [path for path in self.ram_files() if os.path.basename(path) == os.path.basename(os.path.dirname(disk))]
        self.assertEqual(len(ram), 1)
        before = (_sha256(ram[0]), _sha256(disk))
        script = ("dd if=/dev/urandom of=/dev/shm/fill bs=1M count=48 2>/dev/null && "
                  "dd if=/dev/urandom of=/root/fill bs=1M count=16 2>/dev/null && sync && echo done")
        self.assertEqual(self.daemon.run(first, script), (0, "done\n"))
        second = self.create()
        self.assertEqual(self.daemon.run(second, script), (0, "done\n"))
        self.assertEqual(self.daemon.run(second, "test -e /root/fill && test -e /dev/shm/fill && echo yes"),
                         (0, "yes\n"))
        self.assertEqual((_sha256(ram[0]), _sha256(disk)), before)
        self.assertEqual(oct(os.stat(disk).st_mode & 0o777), oct(0o400))

    def test_removed_template_boots_cold(self) -> None:
        """With its template's files removed under the daemon, a node boots cold; the log and /metrics say why."""
        self.create()  # a template exists
        for path in self.templates():
            shutil.rmtree(path)
        for path in self.ram_files():
            os.unlink(path)
        fallbacks = metric(self.metrics(), "vmservice_warm_fallbacks_total", hostgroup="warm", reason="missing")
        hostname = self.create()
        self.assert_cold(hostname)
        self.assertEqual(self.daemon.run(hostname, "echo hi"), (0, "hi\n"))
        self.assertIn("the template was removed under the daemon", self.daemon.log())
        self.assertEqual(
            metric(self.metrics(), "vmservice_warm_fallbacks_total", hostgroup="warm", reason="missing"),
            fallbacks + 1,
        )
        # The next one builds the template again and is a clone.
        self.assert_clone(self.create())

    def test_corrupt_device_state_boots_cold(self) -> None:
        """
        A template whose device state is corrupted: the node boots cold, and the next one gets a new template.
        A spare that was ready before the corruption had loaded the state already: a create may take it (a
        working clone); the spare started after it cannot load the state, so the create after that boots cold.
        """
        state = os.path.join(os.path.dirname(self.backing_file(self.create())), "dev.bin")
        with open(state, "r+b") as f:
            f.seek(64)
            f.write(os.urandom(4096))
        hostname = self.create()
        if "vmservice-spare-" in " ".join(self.qemu_argv(hostname)):
            self.assertEqual(self.daemon.run(hostname, "echo hi"), (0, "hi\n"))
            hostname = self.create()
        self.assert_cold(hostname)
        self.assertEqual(self.daemon.run(hostname, "echo hi"), (0, "hi\n"))
        self.assertIn("the template's state could not be loaded", self.daemon.log())
        self.assertGreaterEqual(
            metric(self.metrics(), "vmservice_warm_fallbacks_total", hostgroup="warm", reason="load_failed"), 1
        )
        self.assert_clone(self.create())

    def test_clone_suspends_and_restores(self) -> None:
        """A clone suspends and restores (under the same memory block name), keeping its files and memory."""
        hostname = self.create()
        self.assertEqual(self.daemon.run(hostname, "echo kept > /root/kept; echo mem > /dev/shm/mem; sync; echo ok"),
                         (0, "ok\n"))
        self.daemon.post(f"/vm/{hostname}/suspend")
        self.daemon.wait_status(hostname, "Suspended")
        self.daemon.post(f"/vm/{hostname}/restore?wait=agent&timeout=2m")
        self.assertEqual(self.daemon.run(hostname, "cat /root/kept /dev/shm/mem"), (0, "kept\nmem\n"))
        self.assertIn("memory-backend-ram,id=mem0", " ".join(self.qemu_argv(hostname)))


class WarmRecoveryTests(_Warm):
    """A persistent clone after a daemon kill -9: adopted again, and relaunched cold from its own disk."""

    groups = [{**GROUPS[0], "persistent": True}]

    def test_kill9_then_relaunch(self) -> None:
        daemon = self.daemon
        hostname = daemon.json("POST", f"/hostgroup/warm/nodes?wait=agent&timeout={CREATE_TIMEOUT}", {},
                               expect=201)["hostname"]
        self.assertEqual(daemon.run(hostname, "echo on-disk > /root/f; sync; echo ok"), (0, "ok\n"))
        pids = daemon.vm_pids()
        daemon.stop(signal.SIGKILL)
        daemon.start()
        daemon.json("GET", f"/vm/{hostname}")
        self.assertEqual(daemon.vm_pids(), pids)
        daemon.wait_for("the adopted clone's agent", lambda: daemon.request(
            "GET", f"/vm/{hostname}/health", timeout=10)[0] == 200, timeout=60)
        self.assertEqual(daemon.run(hostname, "cat /root/f"), (0, "on-disk\n"))
        # Its frozen disk is kept while its record names it.
        from vmservice.storage.overlay import disk_info

        info = disk_info(os.path.join(daemon.state_dir, "nodes", hostname, "disk.qcow2"))
        assert info is not None and info.backing_file is not None
        frozen = [info.backing_file]
        self.assertTrue(os.path.exists(frozen[0]))
        # Stopped and relaunched: a cold boot of its own disk (over the frozen disk).
        daemon.post(f"/vm/{hostname}/shutdown?action=shutdown")
        daemon.wait_status(hostname, "Stopped", timeout=120)
        daemon.post(f"/vm/{hostname}/relaunch?wait=agent&timeout=3m")
        self.assertEqual(daemon.run(hostname, "cat /root/f"), (0, "on-disk\n"))
        self.assertTrue(os.path.exists(frozen[0]))
        # No record names the frozen disk any more (and this run has no template of it): it goes.
        daemon.json("DELETE", f"/hostgroup/warm/nodes/{hostname}")
        self.assertFalse(os.path.exists(os.path.dirname(frozen[0])))


class WarmBudgetTests(_Warm):
    """A template that does not fit the tmpfs budget is never built: the group's nodes boot cold, counted."""

    settings = {"templates_tmpfs_budget": "128MiB"}

    def test_over_budget_boots_cold(self) -> None:
        daemon = self.daemon
        hostname = daemon.json("POST", f"/hostgroup/warm/nodes?wait=agent&timeout={CREATE_TIMEOUT}", {},
                               expect=201)["hostname"]
        self.assertEqual(daemon.run(hostname, "echo hi"), (0, "hi\n"))
        self.assertNotIn("memory-backend", " ".join(self.qemu_argv(hostname)))
        text = daemon.request("GET", "/metrics")[2].decode()
        self.assertEqual(metric(text, "vmservice_warm_fallbacks_total", hostgroup="warm", reason="budget"), 1)
        self.assertEqual(metric(text, "vmservice_template_builds_total", result="ok"), 0)
        self.assertIn("exceed templates_tmpfs_budget", daemon.log())
        # Nothing in the tmpfs but the daemon's own (empty) directories, made at start.
        self.assertEqual([os.listdir(os.path.join(self.shm, name)) for name in os.listdir(self.shm)], [[], []])
        daemon.json("DELETE", f"/hostgroup/warm/nodes/{hostname}")


class WarmNetworkTests(_Warm):
    """Clones with a network (isolated mode): each its own MAC, address and route, its gateway reached."""

    groups = [{**GROUPS[0], "name": "wnet", "network": {"mode": "isolated", "range": "10.86.9.0/28"}}]

    def test_networked_clones(self) -> None:
        daemon = self.daemon
        macs = []
        for _ in range(2):
            node = daemon.json("POST", f"/hostgroup/wnet/nodes?wait=agent&timeout={CREATE_TIMEOUT}", {}, expect=201)
            hostname, ip = node["hostname"], node["ip"]
            self.addCleanup(daemon.request, "DELETE", f"/hostgroup/wnet/nodes/{hostname}")
            argv = " ".join(self.qemu_argv(hostname))
            self.assertIn("share=off", argv)
            mac = self.assert_own_network(hostname, ip)
            macs.append(mac)
        self.assertNotEqual(macs[0], macs[1])
        self.assertNotIn("02:00:00:00:00:01", macs)


class WarmBridgeTests(_Warm):
    """
    Clones on a bridge the daemon makes (bridge mode, nothing leaves this machine): each has its own MAC
    and address on the bridge's subnet and its route via the gateway, and reaches the other clone and
    the host (the gateway's address) at once.
    """

    BRIDGE = "vmstbr5"
    GATEWAY = "10.78.5.1"
    # Clones that start their own QEMU (the guest's MAC is then that of the command line); spare VMs on a
    # bridge: tests/integration/test_spare.py.
    groups = [{**GROUPS[0], "name": "wbr", "warm_spare": False,
               "network": {"mode": "bridge", "bridge": BRIDGE, "gateway": f"{GATEWAY}/24", "range": "10.78.5.0/28"}}]
    bridge = BRIDGE

    def test_bridged_clones(self) -> None:
        daemon = self.daemon
        server = HelloServer()
        self.addCleanup(server.close)
        nodes = []
        for _ in range(2):
            node = daemon.json("POST", f"/hostgroup/wbr/nodes?wait=agent&timeout={CREATE_TIMEOUT}", {}, expect=201)
            self.addCleanup(daemon.request, "DELETE", f"/hostgroup/wbr/nodes/{node['hostname']}")
            nodes.append(node)
        macs = []
        for node in nodes:
            argv = " ".join(self.qemu_argv(node["hostname"]))
            self.assertIn("share=off", argv)
            self.assertIn("-incoming defer", argv)
            self.assertIn("-netdev tap,id=net0,ifname=", argv)
            macs.append(self.assert_own_network(node["hostname"], node["ip"], prefix=24))
        self.assertNotEqual(macs[0], macs[1])
        first, second = nodes
        self.assertNotEqual(first["ip"], second["ip"])
        self.assertEqual(daemon.run(first["hostname"], f"{CLIENT} {self.GATEWAY} {server.port}")[0], 0)
        self.assertEqual(daemon.run(second["hostname"], SERVER.format(port=8081))[0], 0)
        daemon.wait_for("the first clone reaching the second", lambda: daemon.run(
            first["hostname"], f"{CLIENT} {second['ip']} 8081")[0] == 0, timeout=30)
