"""
Fault injection: ``kill -9`` of the daemon at random points of create and
delete, again and again, with a restart after each.  After every restart and
at the end, the host must hold exactly what the listed nodes account for
(:func:`tests.integration.faults.accounted`): for each running node the very
QEMU process its record names, one network namespace and one veth; one
directory (disk, record saying what the listing says) per node; a snapshot
for a suspended node only; no temporary file of a write; nothing else.

The seed is printed in the failure message (set ``VMSERVICE_FAULT_SEED`` to
replay a run); the number of rounds is bounded (``VMSERVICE_FAULT_ROUNDS``,
default 10).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time

from twisted.trial.unittest import SynchronousTestCase

from tests.integration.daemon import Daemon, ensure_image
from tests.integration.faults import accounted, network_objects, remove_network

ROUNDS = int(os.environ.get("VMSERVICE_FAULT_ROUNDS", "10"))
#: The network objects of this module's range, 10.80.0.0/24.
NETWORK = ("vmh0a50", "vms-0a50")


class KillDuringCreateAndDeleteTests(SynchronousTestCase):
    def in_background(self, daemon: Daemon, method: str, path: str, body: object = None) -> threading.Thread:
        """Send a request whose answer nobody waits for (the daemon may die first)."""

        def send() -> None:
            try:
                daemon.request(method, path, body, timeout=60)
            except Exception:
                pass

        thread = threading.Thread(target=send, daemon=True)
        thread.start()
        return thread

    def accounted(self, daemon: Daemon) -> str | None:
        """Why the host does not match the listed nodes, or ``None`` when it does (:func:`.faults.accounted`)."""
        return accounted(daemon, NETWORK)

    def test_kill_9_at_random_points(self) -> None:
        """Ten kills at random points of create and delete leave no stray QEMU, disk or record."""
        seed = int(os.environ.get("VMSERVICE_FAULT_SEED", str(time.time_ns() % 1_000_000)))
        rng = random.Random(seed)
        ensure_image()
        daemon = Daemon(accel="tcg", groups=[{
            "name": "demo", "vcpu": 1, "ram_mb": 256, "storage_size": "1G",
            "network": {"mode": "isolated", "range": "10.80.0.0/24"},
        }])
        self.addCleanup(remove_network, NETWORK)  # after the daemon's cleanup, for a daemon left killed
        self.addCleanup(daemon.cleanup)
        daemon.start()
        history = []
        for round_number in range(ROUNDS):
            nodes = sorted(daemon.nodes())
            if nodes and rng.random() < 0.4:
                victim = rng.choice(nodes)
                delay = rng.uniform(0, 0.3)
                thread = self.in_background(daemon, "DELETE", f"/hostgroup/demo/nodes/{victim}")
                history.append(f"delete {victim}, kill after {delay:.3f} s")
            else:
                delay = rng.uniform(0, 4.0)
                thread = self.in_background(daemon, "POST", "/hostgroup/demo/nodes?wait=agent&timeout=2m", {})
                history.append(f"create, kill after {delay:.3f} s")
            time.sleep(delay)
            daemon.stop(signal.SIGKILL)
            thread.join(10)
            daemon.start()
            try:
                daemon.wait_for("the host to match the node list", lambda: self.accounted(daemon) is None, 30)
            except AssertionError:
                self.fail(f"seed {seed}, round {round_number}: {self.accounted(daemon)}; rounds: {history}")
        for hostname in sorted(daemon.nodes()):
            daemon.json("DELETE", f"/hostgroup/demo/nodes/{hostname}")
        daemon.stop()
        self.assertEqual(daemon.vm_pids(), [], f"seed {seed}: {history}")
        self.assertEqual(os.listdir(os.path.join(daemon.state_dir, "nodes")), [], f"seed {seed}: {history}")
        self.assertEqual(network_objects(NETWORK), [], f"seed {seed}: {history}")
