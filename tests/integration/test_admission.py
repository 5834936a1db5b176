# -*- test-case-name: tests.integration.test_admission -*-
"""
Admission against real guests: a create beyond the memory budget is refused
(503 ``insufficient_memory``) and leaves nothing (no record, directory, QEMU);
a fork that does not fit is refused likewise before its parent is touched; a suspend gives the memory
back and a restore or relaunch that no longer fits is refused; ``max_nodes`` refuses creates and forks with 409; eight creates
at once with a boot concurrency of 2 all succeed, never more than two booting
at once, the others queued in ``/metrics``; a create that waits for a boot slot
past its timeout is 408 and leaves nothing.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.integration.daemon import Daemon, SharedDaemonTestCase, ensure_image

MiB = 1024**2
RAM_MB = 256
OVERHEAD_MB = 160

GROUPS: list[dict[str, Any]] = [
    {"name": "demo", "count": 0, "vcpu": 1, "ram_mb": RAM_MB, "storage_size": "1G"},
    {"name": "solo", "count": 0, "vcpu": 1, "ram_mb": RAM_MB, "storage_size": "1G", "max_nodes": 1},
]


def admission_metrics(daemon: Daemon) -> dict[str, float]:
    """The ``vmservice_admission_*`` gauges now, by name without the prefix."""
    status, _, body = daemon.request("GET", "/metrics", timeout=10)
    assert status == 200, status
    return {
        sample.name.removeprefix("vmservice_admission_"): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
        if sample.name.startswith("vmservice_admission_") and not sample.labels
    }


def node_dirs(daemon: Daemon) -> list[str]:
    """The node directories in the daemon's state directory."""
    path = os.path.join(daemon.state_dir, "nodes")
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


class BudgetTests(SharedDaemonTestCase):
    """A daemon whose budget holds two nodes of 256 MiB (each counts 256 + 160 MiB)."""

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.daemon = Daemon(groups=GROUPS, admission={
            "memory_budget": f"{2 * (RAM_MB + OVERHEAD_MB) + 100}M", "vm_overhead": f"{OVERHEAD_MB}M",
        })
        cls.daemon.start()

    def delete_all(self) -> None:
        for hostname, node in self.daemon.nodes().items():
            self.daemon.json("DELETE", f"/hostgroup/{node['hostgroup']}/nodes/{hostname}")

    def test_beyond_budget_is_refused_and_leaves_nothing(self) -> None:
        """
        Two nodes fit; a third create, and a fork, are 503 insufficient_memory with nothing made (listing,
        node directories, QEMU processes; the fork's parent runs on); /metrics shows the budget and its use; once one node is suspended
        (its memory given back) the same create succeeds, and a restore or relaunch of the suspended one is
        refused, leaving it suspended with its snapshot: it restores once the third node is gone.
        """
        self.addCleanup(self.delete_all)
        first = self.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=5m", {}, expect=201)
        self.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=5m", {}, expect=201)
        before = (sorted(self.daemon.nodes()), node_dirs(self.daemon), sorted(self.daemon.vm_pids()))
        status, _, body = self.daemon.request("POST", "/hostgroup/demo/nodes?wait=agent&timeout=5m", {})
        self.assertEqual(status, 503, body)
        answer = json.loads(body)
        self.assertEqual(answer["code"], "insufficient_memory")
        self.assertIn("budget", answer["error"])
        self.assertEqual((sorted(self.daemon.nodes()), node_dirs(self.daemon), sorted(self.daemon.vm_pids())), before)
        # A fork of one child does not fit either: refused before the parent is paused.
        status, _, body = self.daemon.request("POST", f"/vm/{first['hostname']}/fork", {"count": 1})
        self.assertEqual((status, json.loads(body)["code"]), (503, "insufficient_memory"), body)
        self.assertEqual((sorted(self.daemon.nodes()), node_dirs(self.daemon), sorted(self.daemon.vm_pids())), before)
        self.assertEqual(self.daemon.nodes()[first["hostname"]]["status"], "Running")
        self.assertEqual(self.daemon.run(first["hostname"], "echo still"), (0, "still\n"))
        gauges = admission_metrics(self.daemon)
        self.assertEqual(gauges["memory_budget_bytes"], (2 * (RAM_MB + OVERHEAD_MB) + 100) * MiB)
        self.assertEqual(gauges["memory_used_bytes"], 2 * (RAM_MB + OVERHEAD_MB) * MiB)
        self.assertEqual(gauges["memory_reserved_bytes"], 0)

        self.daemon.post(f"/vm/{first['hostname']}/suspend")
        self.assertEqual(admission_metrics(self.daemon)["memory_used_bytes"], (RAM_MB + OVERHEAD_MB) * MiB)
        third = self.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=5m", {}, expect=201)
        self.assertEqual(self.daemon.run(third["hostname"], "echo up"), (0, "up\n"))
        status, _, body = self.daemon.request("POST", f"/vm/{first['hostname']}/restore")
        self.assertEqual((status, json.loads(body)["code"]), (503, "insufficient_memory"))
        self.assertEqual(self.daemon.nodes()[first["hostname"]]["status"], "Suspended")
        # A relaunch (a cold boot of its disk, discarding the snapshot) does not fit either; the node keeps
        # its snapshot and restores once the memory is there again.
        pids = sorted(self.daemon.vm_pids())
        status, _, body = self.daemon.request("POST", f"/vm/{first['hostname']}/relaunch?wait=agent&timeout=5m")
        self.assertEqual((status, json.loads(body)["code"]), (503, "insufficient_memory"), body)
        self.assertEqual(self.daemon.nodes()[first["hostname"]]["status"], "Suspended")
        self.assertEqual(sorted(self.daemon.vm_pids()), pids)
        self.daemon.json("DELETE", f"/hostgroup/demo/nodes/{third['hostname']}")
        self.daemon.post(f"/vm/{first['hostname']}/restore?wait=agent&timeout=5m")
        self.assertEqual(self.daemon.run(first["hostname"], "echo back"), (0, "back\n"))

    def test_max_nodes(self) -> None:
        """A group at its max_nodes refuses another create, and a fork, with 409 max_nodes_reached and makes nothing."""
        self.addCleanup(self.delete_all)
        made = self.daemon.json("POST", "/hostgroup/solo/nodes", {}, expect=201)
        dirs = node_dirs(self.daemon)
        status, _, body = self.daemon.request("POST", "/hostgroup/solo/nodes", {})
        self.assertEqual((status, json.loads(body)["code"]), (409, "max_nodes_reached"), body)
        self.assertEqual(node_dirs(self.daemon), dirs)
        self.assertEqual(sorted(self.daemon.nodes()), [made["hostname"]])
        status, _, body = self.daemon.request("POST", f"/vm/{made['hostname']}/fork", {"count": 1})
        self.assertEqual((status, json.loads(body)["code"]), (409, "max_nodes_reached"), body)
        self.assertEqual(node_dirs(self.daemon), dirs)
        self.daemon.json("DELETE", f"/hostgroup/solo/nodes/{made['hostname']}")
        self.daemon.json("POST", "/hostgroup/solo/nodes", {}, expect=201)


class BootQueueTests(SharedDaemonTestCase):
    """A daemon that boots two guests at a time."""

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.daemon = Daemon(groups=GROUPS[:1], admission={"boot_concurrency": 2})
        cls.daemon.start()

    def test_eight_at_once(self) -> None:
        """
        Eight creates at once all answer 201 and run; /metrics never shows more than two boots holding
        a slot and shows the others queued; a ninth create with a short timeout, queued behind them, is
        408 and leaves nothing; afterwards no boot holds a slot or waits.
        """
        results: list[tuple[int, bytes]] = []
        lock = threading.Lock()

        def create(timeout: str) -> None:
            status, _, body = self.daemon.request("POST", f"/hostgroup/demo/nodes?wait=agent&timeout={timeout}", {},
                                                  timeout=600)
            with lock:
                results.append((status, body))

        threads = [threading.Thread(target=create, args=("8m",)) for _ in range(8)]
        for thread in threads:
            thread.start()
        samples = []
        late: threading.Thread | None = None
        while any(thread.is_alive() for thread in threads):
            gauges = admission_metrics(self.daemon)
            samples.append(gauges)
            if late is None and gauges["boot_queue_length"] >= 2:
                late = threading.Thread(target=create, args=("2s",))
                late.start()
            time.sleep(0.2)
        for thread in threads:
            thread.join()
        self.assertIsNotNone(late)
        assert late is not None
        late.join()
        statuses = sorted(status for status, _ in results)
        self.assertEqual(statuses, [201] * 8 + [408], results)
        refused = [json.loads(body) for status, body in results if status == 408][0]
        self.assertIn("cold boot slots", refused["error"])
        self.assertEqual(max(s["boot_slots_in_use"] for s in samples), 2)
        self.assertGreaterEqual(max(s["boot_queue_length"] for s in samples), 2)
        self.assertEqual({s["boot_slots"] for s in samples}, {2})
        created = [json.loads(body)["hostname"] for status, body in results if status == 201]
        self.assertEqual(sorted(self.daemon.nodes()), sorted(created))
        self.assertEqual(len(self.daemon.vm_pids()), 8)
        self.assertEqual(len(node_dirs(self.daemon)), 8)
        for hostname in created:
            self.assertEqual(self.daemon.json("GET", f"/vm/{hostname}/health")["hostname"], hostname)
        after = admission_metrics(self.daemon)
        self.assertEqual((after["boot_slots_in_use"], after["boot_queue_length"]), (0, 0))
        self.assertEqual(after["memory_used_bytes"], 8 * (RAM_MB + OVERHEAD_MB) * MiB)
        for hostname in created:
            self.daemon.json("DELETE", f"/hostgroup/demo/nodes/{hostname}")
        self.assertEqual(admission_metrics(self.daemon)["memory_used_bytes"], 0)
