# -*- test-case-name: tests.integration.test_stats -*-
"""
Node statistics against real guests: every snapshot field present and plausible, memory, disk writes
and load that move when the guest works, paused and suspended nodes listed with an error, the statuses
of ``/node/{h}/stats``, a stuck or killed metrics agent (the agent and exec stay up; init respawns a
killed one), and the per-node Prometheus series appearing and vanishing with their nodes.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import termios
import time
from datetime import datetime
from typing import Any

from vmservice.durations import parse_go_duration

from tests.integration.daemon import Daemon, SharedDaemonTestCase, ensure_image

GROUPS: list[dict[str, Any]] = [
    {"name": "demo", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G"},
]

INTEGERS = ("totalCpus", "totalMemory", "memoryUsed", "memoryAvailable", "diskIOInflight", "openConnections",
            "openFiles", "entropy", "diskSpaceTotal", "diskSpaceUsed", "diskSpaceFree")
NUMBERS = ("memoryUsedPercent", "loadAvg1", "loadAvg5", "loadAvg15", "diskReadTotal", "diskWriteTotal",
           "networkReadTotal", "networkWriteTotal", "diskSpaceUsedPercent")


class StatsTests(SharedDaemonTestCase):
    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.daemon = Daemon(groups=GROUPS, stats_interval=1)
        cls.daemon.start()
        cls.node = cls.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m", {}, expect=201)["hostname"]

    node: str

    def snapshot(self, hostname: str | None = None) -> dict[str, Any]:
        """The node's snapshot, once its metrics agent answers (it starts next to the agent)."""
        hostname = hostname or self.node

        def answered() -> Any:
            stat = self.daemon.json("GET", f"/node/{hostname}/stats")
            return stat.get("snapshot")

        snapshot: dict[str, Any] = self.daemon.wait_for(f"a snapshot of {hostname}", answered, timeout=60)
        return snapshot

    def test_every_field_plausible(self) -> None:
        """Every field of the contract's Snapshot is there, of its type, and makes sense for a 256 MiB guest."""
        # The agent grows the root file system to storage_size within about a second of its first answer
        # (docs/api.md): a snapshot taken before shows the image's size. Wait for the grown one.
        def grown() -> Any:
            stat = self.daemon.json("GET", f"/node/{self.node}/stats")
            return stat if stat.get("snapshot", {}).get("diskSpaceTotal", 0) > 900 << 20 else None

        stat = self.daemon.wait_for(f"{self.node}'s root file system grown", grown, timeout=60)
        self.assertNotIn("error", stat)
        self.assertEqual((stat["hostname"], stat["hostgroup"], stat["status"]), (self.node, "demo", "Running"))
        s = stat["snapshot"]
        self.assertEqual((s["hostname"], s["arch"], s["totalCpus"]), (self.node, "x86_64", 1))
        for name in INTEGERS:
            self.assertIsInstance(s[name], int, name)
            self.assertGreaterEqual(s[name], 0, name)
        for name in NUMBERS:
            self.assertIsInstance(s[name], (int, float), name)
            self.assertGreaterEqual(s[name], 0, name)
        self.assertTrue(200 << 20 < s["totalMemory"] <= 256 << 20, s["totalMemory"])
        self.assertEqual(s["memoryUsed"] + s["memoryAvailable"], s["totalMemory"])
        self.assertAlmostEqual(s["memoryUsedPercent"], 100 * s["memoryUsed"] / s["totalMemory"], places=3)
        self.assertTrue(900 << 20 < s["diskSpaceTotal"] <= 1 << 30, s["diskSpaceTotal"])
        self.assertLessEqual(s["diskSpaceUsed"] + s["diskSpaceFree"], s["diskSpaceTotal"])
        self.assertTrue(0 < s["diskSpaceUsedPercent"] < 100)
        self.assertGreater(s["diskReadTotal"], 1 << 20)  # the boot read the root disk
        self.assertGreater(s["openFiles"], 0)
        uptime = parse_go_duration(s["uptime"])
        self.assertTrue(0 < uptime < 3600, s["uptime"])
        stamp = datetime.fromisoformat(s["timestamp"].replace("Z", "+00:00"))
        self.assertLess(abs(stamp.timestamp() - time.time()), 120)
        listed = {entry["hostname"]: entry for entry in self.daemon.json("GET", "/nodes/stats")}
        self.assertIn("snapshot", listed[self.node])

    def test_memory_disk_and_load_move(self) -> None:
        """64 MiB held by a process raise memoryUsed; a synced file raises diskWriteTotal; a busy loop the load."""
        before = self.snapshot()
        self.daemon.run(self.node, "nohup python3 -c 'b = bytearray(64 << 20); import time; time.sleep(60)' "
                                   ">/dev/null 2>&1 & sleep 3")
        during = self.snapshot()
        self.assertGreater(during["memoryUsed"] - before["memoryUsed"], 48 << 20)
        self.daemon.run(self.node, "dd if=/dev/urandom of=/root/blob bs=1M count=8 2>/dev/null; sync")
        written = self.snapshot()
        self.assertGreater(written["diskWriteTotal"] - before["diskWriteTotal"], 8 << 20)
        self.daemon.run(self.node, "nohup sh -c 'end=$(($(date +%s) + 90)); "
                                   "while [ $(date +%s) -lt $end ]; do :; done' >/dev/null 2>&1 &")

        def loaded() -> bool:
            time.sleep(1)
            return bool(self.snapshot()["loadAvg1"] > max(0.5, before["loadAvg1"] + 0.3))

        self.daemon.wait_for("the load average to rise", loaded, timeout=80)
        self.daemon.run(self.node, "pkill -f 'sleep 60' ; pkill -f 'date +%s'; rm -f /root/blob; true")

    def test_statuses_of_one_node(self) -> None:
        """An invalid hostname is 400, an unknown one 404."""
        status, _, body = self.daemon.request("GET", "/node/Not_A_Host/stats")
        self.assertEqual(status, 400, body)
        status, _, body = self.daemon.request("GET", "/node/nosuch-9/stats")
        self.assertEqual(status, 404, body)

    def test_paused_and_suspended_listed_with_error(self) -> None:
        """
        A paused and a suspended node are listed with an error, fast; the running one with its snapshot;
        resumed and restored, they answer again.
        """
        paused = self.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m", {}, expect=201)["hostname"]
        suspended = self.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m", {},
                                     expect=201)["hostname"]
        try:
            self.daemon.post(f"/vm/{paused}/pause")
            self.daemon.post(f"/vm/{suspended}/suspend")
            self.daemon.wait_status(suspended, "Suspended", timeout=120)
            self.snapshot()
            started = time.monotonic()
            listed = {entry["hostname"]: entry for entry in self.daemon.json("GET", "/nodes/stats")}
            self.assertLess(time.monotonic() - started, 10)
            self.assertEqual(listed[paused]["error"], "the node is paused")
            self.assertEqual(listed[suspended]["error"], "the node is suspended")
            self.assertNotIn("snapshot", listed[paused])
            self.assertNotIn("snapshot", listed[suspended])
            self.assertIn("snapshot", listed[self.node])
            self.assertEqual((listed[paused]["status"], listed[suspended]["status"]), ("Paused", "Suspended"))
            # Restored, its metrics channel comes back with the saved state; resumed, the paused one answers.
            self.daemon.post(f"/vm/{suspended}/restore?wait=agent&timeout=2m")
            self.daemon.post(f"/vm/{paused}/resume")
            self.assertEqual(self.snapshot(suspended)["hostname"], suspended)
            self.assertEqual(self.snapshot(paused)["hostname"], paused)
        finally:
            for hostname in (paused, suspended):
                self.daemon.request("DELETE", f"/hostgroup/demo/nodes/{hostname}", timeout=120)

    def test_stuck_and_killed_metrics_agent(self) -> None:
        """
        A stopped (SIGSTOP) metrics agent: that node's error says it did not answer, while health and exec
        work; killed, busybox init starts it again and snapshots come back.
        """
        self.snapshot()
        code, pid = self.daemon.run(self.node, "cat /run/vmservice-metrics.pid")
        self.assertEqual(code, 0)
        pid = pid.strip()
        self.daemon.run(self.node, f"kill -STOP {pid}")
        try:
            started = time.monotonic()
            stat = self.daemon.json("GET", f"/node/{self.node}/stats")
            self.assertLess(time.monotonic() - started, 10)
            self.assertIn("did not answer", stat["error"])
            self.assertNotIn("snapshot", stat)
            self.assertEqual(self.daemon.request("GET", f"/vm/{self.node}/health")[0], 200)
            self.assertEqual(self.daemon.run(self.node, "echo still"), (0, "still\n"))
            listed = {entry["hostname"]: entry for entry in self.daemon.json("GET", "/nodes/stats")}
            self.assertIn("did not answer", listed[self.node]["error"])
        finally:
            self.daemon.run(self.node, f"kill -KILL {pid}; kill -CONT {pid} 2>/dev/null; true")

        def respawned() -> bool:
            code, text = self.daemon.run(self.node, "cat /run/vmservice-metrics.pid 2>/dev/null")
            return code == 0 and text.strip() not in ("", pid)

        self.daemon.wait_for("a new metrics agent", respawned, timeout=60)
        self.assertIn("totalMemory", self.snapshot())

    def metrics(self) -> str:
        status, _, body = self.daemon.request("GET", "/metrics")
        self.assertEqual(status, 200)
        return body.decode()

    def test_prometheus_series_follow_nodes(self) -> None:
        """A new node's series appear within a few sampling rounds; deleted, they vanish."""
        other = self.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m", {}, expect=201)["hostname"]
        series = f'vmservice_node_memory_total_bytes{{hostgroup="demo",hostname="{other}"}}'
        try:
            self.daemon.wait_for(f"the series of {other}", lambda: series in self.metrics(), timeout=60)
            text = self.metrics()
            for name in ("vmservice_node_load1", "vmservice_node_disk_written_bytes_total",
                         "vmservice_node_network_received_bytes_total", "vmservice_node_disk_space_used_bytes"):
                self.assertIn(f'{name}{{hostgroup="demo",hostname="{other}"}}', text)
            self.assertIn(f'vmservice_node_stats_up{{hostgroup="demo",hostname="{other}"}} 1.0', text)
        finally:
            self.daemon.json("DELETE", f"/hostgroup/demo/nodes/{other}")
        self.assertNotIn(f'hostname="{other}"', self.metrics())

    def vmctl(self, *argv: str) -> subprocess.CompletedProcess[bytes]:
        command = [sys.executable, "-m", "vmservice.cli.main", "--url", f"http://127.0.0.1:{self.daemon.port}", *argv]
        return subprocess.run(command, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)

    def test_vmctl_stats_and_top(self) -> None:
        """vmctl stats (table and JSON, all nodes or one) and two refreshes of vmctl top."""
        self.snapshot()
        table = self.vmctl("stats")
        self.assertEqual(table.returncode, 0, table.stderr)
        lines = table.stdout.decode().splitlines()
        self.assertTrue(lines[0].startswith("HOSTNAME"), lines)
        self.assertIn(self.node, table.stdout.decode())
        one = self.vmctl("stats", self.node, "--json")
        self.assertEqual(one.returncode, 0, one.stderr)
        self.assertEqual(json.loads(one.stdout)["snapshot"]["hostname"], self.node)
        missing = self.vmctl("stats", "nosuch-9")
        self.assertNotEqual(missing.returncode, 0)
        top = self.vmctl("top", "--iterations", "2", "--interval", "0.5")
        self.assertEqual(top.returncode, 0, top.stderr)
        self.assertEqual(top.stdout.decode().count("vmctl top: "), 2)
        self.assertIn(self.node, top.stdout.decode())

    def test_vmctl_top_quits_on_q(self) -> None:
        """On a terminal, vmctl top refreshes until q is typed, then gives the terminal back as it was."""
        self.snapshot()
        master, slave = pty.openpty()
        self.addCleanup(os.close, master)
        self.addCleanup(os.close, slave)
        before = termios.tcgetattr(slave)
        command = [sys.executable, "-m", "vmservice.cli.main", "--url", f"http://127.0.0.1:{self.daemon.port}",
                   "top", "--interval", "0.5"]
        process = subprocess.Popen(command, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert process.stdout is not None
            first = process.stdout.readline()
            self.assertIn(b"vmctl top: ", first)
            self.assertIn(b"(q to quit)", first)
            os.write(master, b"q")
            self.assertEqual(process.wait(timeout=30), 0)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            process.stdout.close()  # type: ignore[union-attr]
            process.stderr.close()  # type: ignore[union-attr]
        self.assertEqual(termios.tcgetattr(slave), before)

    def test_idle_agent_is_cheap(self) -> None:
        """
        Between requests the metrics agent sleeps: over 10 s (with the daemon sampling every second) it
        uses a small part of one CPU, not a spinning loop's whole of it.
        """
        self.snapshot()
        command = "p=$(cat /run/vmservice-metrics.pid); cut -d' ' -f14,15 /proc/$p/stat"
        code, before = self.daemon.run(self.node, command)
        self.assertEqual(code, 0)
        started = time.monotonic()
        time.sleep(10)
        after = self.daemon.run(self.node, command)[1]
        elapsed = time.monotonic() - started
        user0, system0 = (int(word) for word in before.split())
        user1, system1 = (int(word) for word in after.split())
        cpu = (user1 + system1 - user0 - system0) / 100  # USER_HZ
        self.assertLess(cpu, 0.25 * elapsed, f"{cpu:.2f} s of CPU in {elapsed:.1f} s")
