"""
The node lifecycle against the real daemon and real guests: pause and resume,
suspend to disk and restore, relaunch of a suspended node, reboot, shutdown
and relaunch of persistent nodes, a VM killed under the daemon, and daemon
restarts (SIGTERM and ``kill -9``) with re-adoption of running VMs, suspended
nodes kept (or restored, with ``count``), ``graceful_shutdown: false`` and
host groups with ``count``.
"""

from __future__ import annotations

import json
import os
import signal
import time

from twisted.trial.unittest import SynchronousTestCase

from tests.integration.daemon import Daemon, SharedDaemonTestCase, SharedGuestTestCase, ensure_image


def _error_code(data: bytes) -> str:
    return str(json.loads(data)["code"])


class PauseTests(SharedGuestTestCase):
    """Pause and resume of one shared guest (every test leaves it running)."""

    def post(self, path: str, expect: int = 200, body: object = None) -> bytes:
        status, _, data = self.daemon.request("POST", f"/vm/demo-1/{path}", body)
        self.assertEqual(status, expect, data)
        return data

    def test_pause_blocks_agent_operations(self) -> None:
        """While paused: listed Paused, exec/cp/fs and health 409 paused; after resume all work again."""
        self.assertIn(b"paused", self.post("pause"))
        try:
            self.assertEqual(self.daemon.nodes()["demo-1"]["status"], "Paused")
            status, _, data = self.daemon.request("POST", "/vm/demo-1/exec?cmd=true")
            self.assertEqual((status, _error_code(data)), (409, "paused"))
            status, _, data = self.daemon.request("GET", "/vm/demo-1/fs/readdir?path=/")
            self.assertEqual((status, _error_code(data)), (409, "paused"))
            status, _, data = self.daemon.request("GET", "/vm/demo-1/cp?path=/etc/hostname")
            self.assertEqual((status, _error_code(data)), (409, "paused"))
            self.assertEqual(self.daemon.request("HEAD", "/vm/demo-1/health")[0], 409)
            status, _, data = self.daemon.request("GET", "/vm/demo-1/health")
            self.assertEqual((status, _error_code(data)), (409, "paused"))
            self.assertIn(b"already paused", self.post("pause"))
            status, _, data = self.daemon.request("POST", "/vm/demo-1/shutdown?action=reboot")
            self.assertEqual((status, _error_code(data)), (409, "paused"))
        finally:
            self.post("resume")
        self.assertEqual(self.daemon.nodes()["demo-1"]["status"], "Running")
        self.assertEqual(self.daemon.run("demo-1", "echo back"), (0, "back\n"))

    def test_resume_running_is_noop(self) -> None:
        """Resume of a running node answers 200 and changes nothing."""
        self.assertIn(b"already running", self.post("resume"))

    def test_clock_set_after_resume(self) -> None:
        """The guest's clock stands still while paused; resume sets it to the host's."""
        self.post("pause")
        time.sleep(3)
        self.post("resume")

        def close_enough() -> bool:
            _, out = self.daemon.run("demo-1", "date +%s")
            return abs(int(out) - time.time()) < 2

        self.daemon.wait_for("the guest clock to be set", close_enough, 20)

    def test_bad_action(self) -> None:
        """An unknown shutdown action is a 400, in the query or in the body."""
        status, _, data = self.daemon.request("POST", "/vm/demo-1/shutdown?action=explode")
        self.assertEqual((status, _error_code(data)), (400, "invalid_action"))
        status, _, data = self.daemon.request("POST", "/vm/demo-1/shutdown", {"action": 7})
        self.assertEqual((status, _error_code(data)), (400, "invalid_action"))

    def test_restore_and_relaunch_running(self) -> None:
        """Restore of a running node is 409 no_snapshot; relaunch 409 already_running; unknown node 404."""
        status, _, data = self.daemon.request("POST", "/vm/demo-1/restore")
        self.assertEqual((status, _error_code(data)), (409, "no_snapshot"))
        status, _, data = self.daemon.request("POST", "/vm/demo-1/relaunch")
        self.assertEqual((status, _error_code(data)), (409, "already_running"))
        for op in ("pause", "resume", "suspend", "restore", "relaunch", "shutdown"):
            self.assertEqual(self.daemon.request("POST", f"/vm/nosuch-1/{op}")[0], 404, op)


class SuspendTests(SharedGuestTestCase):
    """Suspend to disk and restore, on Linux."""

    def test_suspend_restore_keeps_processes_and_tmpfs(self) -> None:
        """
        A process started before suspend still runs after restore, a tmpfs file
        is still there, the QEMU process was gone meanwhile, the snapshot file
        is removed after restore and the clock is set.
        """
        daemon = self.daemon
        code, pid = daemon.run("demo-1", "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!")
        self.assertEqual(code, 0)
        pid = pid.strip()
        # What an exec leaves running the classic way (not a session of its own) survives too.
        self.assertEqual(daemon.run("demo-1", "nohup python3 -m http.server 8000 >/dev/null 2>&1 &")[0], 0)
        daemon.wait_for("the web server", lambda: daemon.run("demo-1", "curl -sf localhost:8000 >/dev/null")[0] == 0, 120)
        self.assertEqual(daemon.run("demo-1", "echo in-memory > /dev/shm/marker")[0], 0)
        before = daemon.vm_pids()
        self.assertEqual(len(before), 1)
        self.assertIn(b"suspended", daemon.request("POST", "/vm/demo-1/suspend")[2])
        state = os.path.join(daemon.state_dir, "nodes", "demo-1", "state.bin")
        self.assertTrue(os.path.exists(state))
        self.assertEqual(daemon.vm_pids(), [])
        self.assertEqual(daemon.nodes()["demo-1"]["status"], "Suspended")
        status, _, data = daemon.request("POST", "/vm/demo-1/exec?cmd=true")
        self.assertEqual((status, _error_code(data)), (409, "not_running"))
        # A suspended node has no agent: health is the contract's 409, not 503.
        status, _, data = daemon.request("GET", "/vm/demo-1/health")
        self.assertEqual((status, _error_code(data)), (409, "not_running"))
        self.assertEqual(daemon.request("HEAD", "/vm/demo-1/health")[0], 409)
        self.assertIn(b"already suspended", daemon.request("POST", "/vm/demo-1/suspend")[2])
        status, _, data = daemon.request("POST", "/vm/demo-1/pause")
        self.assertEqual((status, _error_code(data)), (409, "not_running"))
        time.sleep(3)
        status, _, data = daemon.request("POST", "/vm/demo-1/restore?wait=agent&timeout=60s")
        self.assertEqual(status, 200, data)
        self.assertEqual(daemon.nodes()["demo-1"]["status"], "Running")
        self.assertFalse(os.path.exists(state))
        self.assertEqual(len(daemon.vm_pids()), 1)
        self.assertEqual(daemon.run("demo-1", f"kill -0 {pid} && cat /dev/shm/marker"), (0, "in-memory\n"))
        self.assertEqual(daemon.run("demo-1", "curl -s -o /dev/null -w '%{http_code}' localhost:8000"), (0, "200"))

        def clock_set() -> bool:
            _, out = daemon.run("demo-1", "date +%s")
            return abs(int(out) - time.time()) < 2

        daemon.wait_for("the guest clock to be set", clock_set, 20)

    def test_relaunch_of_suspended_boots_fresh(self) -> None:
        """
        Relaunch of a Suspended node discards its snapshot and boots the guest
        from its disk: a synced file on disk is kept, a tmpfs file is gone, a
        process started before is gone, and the node is Running again.
        """
        daemon = self.daemon
        # Found by its command line, not its pid: a fresh boot hands out the same pids again.
        sleepers = "ps -o args= | awk '$0 == \"sleep 4242\"' | wc -l"
        self.assertEqual(daemon.run("demo-1", "setsid sleep 4242 </dev/null >/dev/null 2>&1 &")[0], 0)
        self.assertEqual(daemon.run("demo-1", sleepers), (0, "1\n"))
        self.assertEqual(
            daemon.run("demo-1", "echo on-disk > /root/kept && sync && echo in-memory > /dev/shm/lost"), (0, "")
        )
        daemon.post("/vm/demo-1/suspend")
        state = os.path.join(daemon.state_dir, "nodes", "demo-1", "state.bin")
        self.assertTrue(os.path.exists(state))
        self.assertEqual(daemon.nodes()["demo-1"]["status"], "Suspended")
        relaunched_at = time.monotonic()
        relaunched = daemon.json("POST", "/vm/demo-1/relaunch?wait=agent&timeout=2m")
        self.assertEqual(relaunched["hostname"], "demo-1")
        self.assertEqual(daemon.nodes()["demo-1"]["status"], "Running")
        self.assertFalse(os.path.exists(state), "the snapshot was kept after relaunch")
        self.assertEqual(len(daemon.vm_pids()), 1)
        # Booted, not restored: the guest has been up for less time than
        # has passed since the relaunch, and memory is fresh.
        health = daemon.json("GET", "/vm/demo-1/health")
        self.assertLess(health["system_uptime"], (time.monotonic() - relaunched_at) * 1e9)
        self.assertEqual(daemon.run("demo-1", "cat /root/kept; test -e /dev/shm/lost || echo tmpfs-gone"),
                         (0, "on-disk\ntmpfs-gone\n"))
        self.assertEqual(daemon.run("demo-1", sleepers), (0, "0\n"))

    def test_reboot_brings_agent_back(self) -> None:
        """action=reboot resets the guest: it boots again and its agent answers with a fresh uptime."""
        daemon = self.daemon
        status, _, data = daemon.request("POST", "/vm/demo-1/shutdown?action=reboot")
        self.assertEqual(status, 200, data)
        reset_at = time.monotonic()

        def rebooted() -> bool:
            # A guest that booted again has been up for less time than has
            # passed since the reset; the old one for longer.  Health answers
            # while the guest reboots (the daemon bounds it to 2 s): 200 or
            # 503, never a request that hangs past the client's timeout.
            status, _, data = daemon.request("GET", "/vm/demo-1/health", timeout=10)
            self.assertIn(status, (200, 503), data)
            if status != 200:
                return False
            return bool(json.loads(data)["system_uptime"] < (time.monotonic() - reset_at) * 1e9)

        daemon.wait_for("the rebooted agent", rebooted, 90)
        self.assertEqual(daemon.run("demo-1", "echo again"), (0, "again\n"))
        self.assertEqual(daemon.nodes()["demo-1"]["status"], "Running")


class PersistenceTests(SharedDaemonTestCase):
    """Shutdown and relaunch of a persistent node; VMs killed under the daemon."""

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.daemon = Daemon()
        cls.daemon.start()

    def create(self, persistent: bool) -> str:
        body = {"persistent": True} if persistent else {}
        node = self.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=2m", body, expect=201)
        return str(node["hostname"])

    def test_shutdown_and_relaunch_keep_the_disk(self) -> None:
        """A synced file survives shutdown and relaunch; the node keeps its name and creation time."""
        daemon = self.daemon
        host = self.create(persistent=True)
        created = daemon.nodes()[host]
        self.assertTrue(created["persistent"])
        self.assertEqual(daemon.run(host, "echo kept > /root/file && sync"), (0, ""))
        self.assertEqual(daemon.request("POST", f"/vm/{host}/shutdown", {"action": "shutdown"})[0], 200)
        daemon.wait_status(host, "Stopped")
        self.assertEqual(daemon.vm_pids(), [])
        self.assertTrue(os.path.exists(os.path.join(daemon.state_dir, "nodes", host, "disk.qcow2")))
        status, _, data = daemon.request("POST", f"/vm/{host}/exec?cmd=true")
        self.assertEqual((status, _error_code(data)), (409, "not_running"))
        relaunched = daemon.json("POST", f"/vm/{host}/relaunch?wait=agent&timeout=2m")
        self.assertEqual(relaunched["hostname"], host)
        self.assertEqual(daemon.nodes()[host]["created_at"], created["created_at"])
        self.assertEqual(daemon.run(host, "cat /root/file"), (0, "kept\n"))
        # A VM killed under the daemon: a persistent node becomes Stopped at once.
        (pid,) = daemon.vm_pids()
        os.kill(pid, signal.SIGKILL)
        daemon.wait_status(host, "Stopped", 10)
        daemon.json("POST", f"/vm/{host}/relaunch?wait=agent&timeout=2m")
        self.assertEqual(daemon.run(host, "cat /root/file"), (0, "kept\n"))
        daemon.json("DELETE", f"/hostgroup/demo/nodes/{host}")
        self.assertFalse(os.path.exists(os.path.join(daemon.state_dir, "nodes", host)))

    def test_ephemeral_vm_killed_is_removed(self) -> None:
        """An ephemeral node whose VM dies is removed with its files; a powered-off one too."""
        daemon = self.daemon
        host = self.create(persistent=False)
        (pid,) = daemon.vm_pids()
        os.kill(pid, signal.SIGKILL)
        daemon.wait_status(host, None, 10)
        self.assertFalse(os.path.exists(os.path.join(daemon.state_dir, "nodes", host)))
        host = self.create(persistent=False)
        self.assertEqual(daemon.request("POST", f"/vm/{host}/shutdown?action=shutdown")[0], 200)
        daemon.wait_status(host, None, 30)
        self.assertEqual(daemon.vm_pids(), [])


    def test_shutdown_right_after_boot(self) -> None:
        """
        A shutdown asked for as soon as the VM runs, before its agent (which acts on the power button)
        is up, answers 200 at once and ends the VM all the same: powered off by the agent once it is up
        (the host presses the button again every 2 s), else killed after the 10 s grace; never a hang
        or a 500. A persistent node is then Stopped and relaunches; an ephemeral one is removed.
        """
        daemon = self.daemon
        for persistent in (True, False):
            node = daemon.json("POST", "/hostgroup/demo/nodes", {"persistent": persistent}, expect=201)
            host = str(node["hostname"])
            status, _, data = daemon.request("POST", f"/vm/{host}/shutdown", {"action": "shutdown"}, timeout=10)
            self.assertEqual(status, 200, data)
            daemon.wait_status(host, "Stopped" if persistent else None, 60)
            self.assertEqual(daemon.vm_pids(), [])
            if persistent:
                daemon.json("POST", f"/vm/{host}/relaunch?wait=agent&timeout=2m")
                self.assertEqual(daemon.run(host, "echo up"), (0, "up\n"))
                daemon.json("DELETE", f"/hostgroup/demo/nodes/{host}")
        self.assertEqual(daemon.nodes(), {})


class RestartTests(SynchronousTestCase):
    """Daemon restarts: each test runs a daemon of its own."""

    def daemon(self, groups: list[dict[str, object]] | None = None) -> Daemon:
        ensure_image()
        daemon = Daemon(groups=groups)
        self.addCleanup(daemon.cleanup)
        daemon.start()
        return daemon

    def test_kill_9_then_adopt(self) -> None:
        """After kill -9 of the daemon, the next one adopts the running and the paused VM (same pids)."""
        daemon = self.daemon()
        for _ in range(2):
            daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=2m", {}, expect=201)
        daemon.post("/vm/demo-2/pause")
        pids = sorted(daemon.vm_pids())
        self.assertEqual(daemon.stop(signal.SIGKILL), -signal.SIGKILL)
        self.assertEqual(sorted(daemon.vm_pids()), pids)
        daemon.start()
        daemon.wait_for("adoption", lambda: daemon.nodes().get("demo-2", {}).get("status") == "Paused", 30)
        self.assertEqual(daemon.nodes()["demo-1"]["status"], "Running")
        self.assertEqual(sorted(daemon.vm_pids()), pids)
        daemon.wait_for("the adopted agent", lambda: daemon.request("HEAD", "/vm/demo-1/health")[0] == 200, 30)
        self.assertEqual(daemon.run("demo-1", "hostname"), (0, "demo-1\n"))
        daemon.post("/vm/demo-2/resume")
        daemon.wait_for("the resumed agent", lambda: daemon.request("HEAD", "/vm/demo-2/health")[0] == 200, 30)
        self.assertEqual(daemon.run("demo-2", "hostname"), (0, "demo-2\n"))
        # The adopted VM is watched: killing it is noticed.
        os.kill(pids[0], signal.SIGKILL)
        daemon.wait_status("demo-1", None, 10)
        self.assertIn("adopted node demo-1", daemon.log())

    def test_sigterm_keeps_persistent_stopped(self) -> None:
        """SIGTERM removes ephemeral nodes and leaves persistent ones Stopped, across the restart."""
        daemon = self.daemon()
        daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=2m", {}, expect=201)
        daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=2m", {"persistent": True}, expect=201)
        self.assertEqual(daemon.stop(), -signal.SIGTERM)
        self.assertEqual(daemon.vm_pids(), [])
        daemon.start()
        nodes = daemon.nodes()
        self.assertEqual({h: n["status"] for h, n in nodes.items()}, {"demo-2": "Stopped"})
        self.assertEqual(sorted(os.listdir(os.path.join(daemon.state_dir, "nodes"))), ["demo-2"])

    def test_count_keeps_protected_nodes(self) -> None:
        """count: 2 makes two protected persistent nodes; they cannot be deleted and come back after a restart."""
        daemon = self.daemon([{"name": "pool", "count": 2, "vcpu": 1, "ram_mb": 256, "storage_size": "1G"}])

        def both(status: str) -> bool:
            nodes = daemon.nodes()
            return sorted(nodes) == ["pool-1", "pool-2"] and all(n["status"] == status for n in nodes.values())

        daemon.wait_for("two Running nodes", lambda: both("Running"), 60)
        self.assertTrue(all(n["persistent"] for n in daemon.nodes().values()))
        status, _, data = daemon.request("DELETE", "/hostgroup/pool/nodes/pool-1")
        self.assertEqual(status, 403, data)
        daemon.stop()
        self.assertEqual(daemon.vm_pids(), [])
        daemon.start()
        daemon.wait_for("both relaunched", lambda: both("Running"), 60)
        self.assertEqual(len(daemon.vm_pids()), 2)

    def test_suspended_survives_sigterm_and_kill_9(self) -> None:
        """
        A Suspended node stays Suspended, with its snapshot, across a SIGTERM
        restart and a kill -9 restart of the daemon (ephemeral as it is); its
        restore then brings back a process started before the suspend.
        """
        daemon = self.daemon()
        daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=2m", {}, expect=201)
        code, pid = daemon.run("demo-1", "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!")
        self.assertEqual(code, 0)
        pid = pid.strip()
        # What an exec leaves running the classic way (not a session of its own) survives too.
        self.assertEqual(daemon.run("demo-1", "nohup python3 -m http.server 8000 >/dev/null 2>&1 &")[0], 0)
        daemon.wait_for("the web server", lambda: daemon.run("demo-1", "curl -sf localhost:8000 >/dev/null")[0] == 0, 30)
        daemon.post("/vm/demo-1/suspend")
        state = os.path.join(daemon.state_dir, "nodes", "demo-1", "state.bin")
        size = os.path.getsize(state)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            self.assertEqual(daemon.stop(sig), -sig, signal.Signals(sig).name)
            self.assertEqual(daemon.vm_pids(), [])
            daemon.start()
            self.assertEqual({h: n["status"] for h, n in daemon.nodes().items()}, {"demo-1": "Suspended"},
                             signal.Signals(sig).name)
            self.assertEqual(os.path.getsize(state), size, signal.Signals(sig).name)
            self.assertEqual(daemon.vm_pids(), [], signal.Signals(sig).name)
        # The start-up recovery may still hold the node for a moment.
        def restored() -> bool:
            status, _, data = daemon.request("POST", "/vm/demo-1/restore?wait=agent&timeout=60s")
            if status == 409 and _error_code(data) == "busy":
                return False
            self.assertEqual(status, 200, data)
            return True

        daemon.wait_for("the restore", restored, 30)
        self.assertEqual(daemon.nodes()["demo-1"]["status"], "Running")
        self.assertFalse(os.path.exists(state))
        self.assertEqual(len(daemon.vm_pids()), 1)
        self.assertEqual(daemon.run("demo-1", f"kill -0 {pid} && echo alive"), (0, "alive\n"))

    def test_no_graceful_shutdown_kills_at_once(self) -> None:
        """
        With graceful_shutdown: false in its group, SIGTERM stops a persistent
        VM at once, well within the 10 s grace a graceful stop would wait for
        a guest that does not power off (its agent, which watches the power
        button, is frozen here, so a graceful stop would take the whole grace); the node is
        Stopped after the restart and relaunches.
        """
        daemon = self.daemon([{
            "name": "demo", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "graceful_shutdown": False,
        }])
        daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=2m", {"persistent": True}, expect=201)
        # Freeze the guest agent, which also watches the power button (SIGSTOP: init does not respawn a
        # stopped process), so only a kill can end this VM quickly. The exec answers first: the agent is
        # stopped a second later, from a session of its own; health then finds it silent (503).
        code, out = daemon.run("demo-1", "setsid sh -c 'sleep 1; kill -STOP $(pgrep -f \"guest[.]agent\")'"
                                         " >/dev/null 2>&1 </dev/null &")
        self.assertEqual(code, 0, out)
        daemon.wait_for("the frozen agent", lambda: daemon.request("GET", "/vm/demo-1/health", timeout=10)[0] == 503)
        started = time.monotonic()
        self.assertEqual(daemon.stop(), -signal.SIGTERM)
        elapsed = time.monotonic() - started
        self.assertLess(elapsed, 4.0, f"the daemon took {elapsed:.1f} s to stop")
        self.assertEqual(daemon.vm_pids(), [])
        daemon.start()
        self.assertEqual({h: n["status"] for h, n in daemon.nodes().items()}, {"demo-1": "Stopped"})
        daemon.json("POST", "/vm/demo-1/relaunch?wait=agent&timeout=2m")
        self.assertEqual(daemon.run("demo-1", "hostname"), (0, "demo-1\n"))

    def test_count_node_suspended_is_restored_at_start(self) -> None:
        """
        A count: 1 node that was suspended when the daemon stopped is restored
        (not booted again) at the next start: Running, its process still there.
        """
        daemon = self.daemon([{"name": "pool", "count": 1, "vcpu": 1, "ram_mb": 256, "storage_size": "1G"}])
        daemon.wait_for("pool-1 Running", lambda: daemon.nodes().get("pool-1", {}).get("status") == "Running", 60)
        daemon.wait_for("pool-1's agent", lambda: daemon.request("HEAD", "/vm/pool-1/health")[0] == 200, 90)
        code, pid = daemon.run("pool-1", "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!")
        self.assertEqual(code, 0)
        pid = pid.strip()
        self.assertEqual(daemon.run("pool-1", "echo in-memory > /dev/shm/marker")[0], 0)
        daemon.post("/vm/pool-1/suspend")
        state = os.path.join(daemon.state_dir, "nodes", "pool-1", "state.bin")
        self.assertTrue(os.path.exists(state))
        self.assertEqual(daemon.stop(), -signal.SIGTERM)
        self.assertTrue(os.path.exists(state))
        daemon.start()
        daemon.wait_for("pool-1 Running", lambda: daemon.nodes().get("pool-1", {}).get("status") == "Running", 60)
        daemon.wait_for("pool-1's agent", lambda: daemon.request("HEAD", "/vm/pool-1/health")[0] == 200, 60)
        self.assertEqual(sorted(daemon.nodes()), ["pool-1"])
        self.assertFalse(os.path.exists(state))
        self.assertEqual(len(daemon.vm_pids()), 1)
        self.assertEqual(daemon.run("pool-1", f"kill -0 {pid} && cat /dev/shm/marker"), (0, "in-memory\n"))
