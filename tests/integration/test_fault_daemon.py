"""
Fault injection: the daemon killed (``kill -9``) in the middle of a suspend
(while the snapshot is written), a restore (as its QEMU starts), a fork
(while the parent is frozen, and as the children's QEMUs start), a clone's
start (as its QEMU loads the template's state) and a bulk copy out of the
guest, then started again.  What the operation was doing must be finished or undone by the
start-up recovery: nothing lost (the node's guest continues with what it
had, in memory and on disk), nothing stray (no QEMU, snapshot, record,
network object or temporary file that no listed node accounts for), the
daemon answering (:func:`tests.integration.faults.settled`).

Each test has a daemon of its own (it is restarted), with an isolated network
in a range of this module's own.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import tempfile
import time
from typing import Any
from urllib.parse import urlencode

from twisted.trial.unittest import SynchronousTestCase

from tests.integration.daemon import Daemon, ensure_image
from tests.integration.faults import (
    Background, download_under_way, qemu_of, records, remove_network, run, settled, wait_until,
)

#: The network objects of this module's range, 10.87.3.0/28.
NETWORK = ("vmh0a5703", "vms-0a5703")
GROUPS: list[dict[str, Any]] = [{
    "name": "d", "vcpu": 1, "ram_mb": 256, "storage_size": "1G",
    "network": {"mode": "isolated", "range": "10.87.3.0/28"},
}]
#: A warm group (no network: its clones are what is looked at).
WARM: list[dict[str, Any]] = [{"name": "w", "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "warm": True, "warm_spare": 0}]
MARK = "echo kept > /tmp/mark; echo on-disk > /root/mark; sync; echo ok"
CHECK = "cat /tmp/mark /root/mark"


class DaemonKillTests(SynchronousTestCase):
    def daemon(self, groups: list[dict[str, Any]] = GROUPS, **settings: Any) -> Daemon:
        """A started daemon of this test's own, removed (with its QEMUs and network) when the test ends."""
        ensure_image()
        daemon = Daemon(accel="tcg", groups=groups, **settings)
        self.addCleanup(remove_network, NETWORK)  # after the daemon's cleanup, for a daemon left killed
        self.addCleanup(daemon.cleanup)
        daemon.start()
        return daemon

    def node(self, daemon: Daemon, group: str = "d") -> str:
        """A running node whose guest holds a mark in memory (/tmp) and one on its disk."""
        hostname: str = daemon.json("POST", f"/hostgroup/{group}/nodes?wait=agent&timeout=3m", {}, expect=201,
                                    timeout=240)["hostname"]
        self.assertEqual(run(daemon, hostname, MARK), (0, "ok\n"))
        return hostname

    def killed(self, daemon: Daemon, request: Background) -> None:
        """kill -9 the daemon, let the request's thread see it, start the daemon again."""
        self.assertEqual(daemon.stop(signal.SIGKILL), -signal.SIGKILL)
        self.assertTrue(request.over(30), "the request's connection outlived its daemon")
        daemon.start()

    def test_kill_during_suspend(self) -> None:
        """
        Killed while the snapshot is written: at the next start the node is
        Running in its own QEMU, or Suspended with a whole snapshot; either
        way its guest has its marks (after a restore for a suspended one).
        """
        daemon = self.daemon()
        hostname = self.node(daemon)
        partial = os.path.join(daemon.state_dir, "nodes", hostname, "state.bin.partial")
        suspend = Background(daemon, "POST", f"/vm/{hostname}/suspend")
        wait_until("the snapshot being written", lambda: os.path.exists(partial) or suspend.done, 60, 0.001)
        self.assertFalse(suspend.done, "the suspend was over before its snapshot could be seen")
        self.killed(daemon, suspend)
        settled(daemon, NETWORK, why="after the restart")
        status = daemon.nodes()[hostname]["status"]
        self.assertIn(status, ("Running", "Suspended"))
        if status == "Suspended":
            daemon.post(f"/vm/{hostname}/restore?wait=agent&timeout=2m")
        self.assertEqual(run(daemon, hostname, CHECK), (0, "kept\non-disk\n"))
        settled(daemon, NETWORK)

    def test_kill_during_restore(self) -> None:
        """
        Killed as the restore starts its QEMU: at the next start the node is
        Suspended with its snapshot (the half-started QEMU gone), and the
        next restore continues the guest with its marks.
        """
        daemon = self.daemon()
        hostname = self.node(daemon)
        daemon.post(f"/vm/{hostname}/suspend")
        restore = Background(daemon, "POST", f"/vm/{hostname}/restore?wait=agent&timeout=2m")
        wait_until("the restore's QEMU", lambda: qemu_of(daemon, hostname) or restore.done, 60, 0.001)
        self.assertFalse(restore.done, "the restore was over before its QEMU could be seen")
        self.killed(daemon, restore)
        settled(daemon, NETWORK, why="after the restart")
        self.assertEqual(daemon.nodes()[hostname]["status"], "Suspended")
        daemon.post(f"/vm/{hostname}/restore?wait=agent&timeout=2m")
        self.assertEqual(run(daemon, hostname, CHECK), (0, "kept\non-disk\n"))
        settled(daemon, NETWORK)

    def test_kill_during_fork(self) -> None:
        """
        Killed while the parent is frozen for its fork, and (another fork)
        as the children's QEMUs start: at each next start the parent is
        Running (not paused, not lost) with its marks, and every child is
        either gone or a whole node with them too.
        """
        daemon = self.daemon()
        parent = self.node(daemon)
        forks = os.path.join(daemon.state_dir, "forks")
        for moment in ("frozen", "children"):
            before = set(os.listdir(forks)) if os.path.isdir(forks) else set()
            known = set(os.listdir(os.path.join(daemon.state_dir, "nodes")))
            fork = Background(daemon, "POST", f"/vm/{parent}/fork", {"count": 2}, timeout=240)
            if moment == "frozen":
                wait_until("the parent frozen for its fork",
                           lambda: (os.path.isdir(forks) and set(os.listdir(forks)) - before) or fork.done, 60, 0.001)
            else:
                def child_qemu() -> Any:
                    new = set(os.listdir(os.path.join(daemon.state_dir, "nodes"))) - known
                    return any(qemu_of(daemon, name) for name in new) or fork.done

                wait_until("a child's QEMU", child_qemu, 120, 0.001)
            self.assertFalse(fork.done, f"the fork was over before its {moment} moment")
            self.killed(daemon, fork)
            settled(daemon, NETWORK, why=f"after the restart ({moment})")
            nodes = daemon.nodes()
            self.assertEqual(nodes[parent]["status"], "Running", f"{moment}: {nodes}")
            self.assertEqual(run(daemon, parent, CHECK), (0, "kept\non-disk\n"), moment)
            for child in set(nodes) - {parent}:
                self.assertEqual(nodes[child]["status"], "Running", f"{moment}: {nodes}")
                self.assertEqual(run(daemon, child, CHECK), (0, "kept\non-disk\n"), f"{moment}: {child}")
                daemon.json("DELETE", f"/hostgroup/d/nodes/{child}")
            self.assertEqual(sorted(records(daemon)), [parent])
        settled(daemon, NETWORK)

    def test_kill_during_clone_load(self) -> None:
        """
        Killed as a warm group's new node's QEMU loads the template's state:
        at the next start that node is a whole running node (its guest knows
        its name) or gone without a trace; the node made before keeps its
        marks, and the next create is a clone of the same template.
        """
        shm = tempfile.mkdtemp(prefix="vms-t-", dir="/dev/shm")
        self.addCleanup(shutil.rmtree, shm, True)
        daemon = self.daemon(WARM, templates_tmpfs_dir=shm)
        first = self.node(daemon, "w")  # the template is built by now
        known = set(os.listdir(os.path.join(daemon.state_dir, "nodes")))
        create = Background(daemon, "POST", "/hostgroup/w/nodes?wait=agent&timeout=3m", {}, timeout=240)

        def clone_qemu() -> Any:
            new = set(os.listdir(os.path.join(daemon.state_dir, "nodes"))) - known
            return any(qemu_of(daemon, name) for name in new) or create.done

        wait_until("the clone's QEMU", clone_qemu, 120, 0.001)
        self.assertFalse(create.done, "the create was over before its clone's QEMU could be seen")
        self.killed(daemon, create)
        settled(daemon, why="after the restart")
        nodes = daemon.nodes()
        self.assertEqual(nodes[first]["status"], "Running", nodes)
        self.assertEqual(run(daemon, first, CHECK), (0, "kept\non-disk\n"))
        for other in set(nodes) - {first}:
            self.assertEqual(nodes[other]["status"], "Running", nodes)
            self.assertEqual(run(daemon, other, "hostname"), (0, f"{other}\n"))
        third = daemon.json("POST", "/hostgroup/w/nodes?wait=agent&timeout=3m", {}, expect=201, timeout=240)
        self.assertEqual(run(daemon, third["hostname"], "hostname"), (0, f"{third['hostname']}\n"))
        [pid] = qemu_of(daemon, third["hostname"])
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            self.assertIn(b"-incoming\0defer", cmdline.read(), "the next create was not a clone")
        settled(daemon)

    def test_kill_during_download(self) -> None:
        """
        Killed during a bulk copy out of the guest: the client's download
        ends short of its Content-Length; at the next start the node runs
        with its marks and its file unchanged, and the same download is
        whole (the guest's bulk port serves again).
        """
        daemon = self.daemon()
        hostname = self.node(daemon)
        code, out = run(daemon, hostname, "head -c 48M /dev/urandom > /root/big && sha256sum /root/big")
        self.assertEqual(code, 0, out)
        digest = out.split()[0]
        sock, length, body = download_under_way(daemon, hostname, "/root/big")
        self.addCleanup(sock.close)
        self.assertEqual(daemon.stop(signal.SIGKILL), -signal.SIGKILL)
        sock.settimeout(30)
        while chunk := sock.recv(1 << 16):
            body += chunk
        self.assertLess(len(body), length)
        daemon.start()
        settled(daemon, NETWORK, why="after the restart")
        self.assertEqual(daemon.nodes()[hostname]["status"], "Running")
        self.assertEqual(run(daemon, hostname, CHECK), (0, "kept\non-disk\n"))
        status, headers, data = daemon.request("GET", f"/vm/{hostname}/cp?{urlencode({'path': '/root/big'})}", timeout=240)
        self.assertEqual((status, len(data)), (200, 48 << 20))
        self.assertEqual(hashlib.sha256(data).hexdigest(), digest)
        settled(daemon, NETWORK)

    def test_guest_waits_quietly_without_a_daemon(self) -> None:
        """
        While no daemon runs (killed), a node's guest agent waits for a host without taking the port's
        hang-up for one: it neither serves nor drops nor logs a session ten times a second (the code before
        logged "host connected" about 30 times in 3 s); the next daemon reaches it.
        """
        daemon = self.daemon()
        hostname = self.node(daemon)
        console = os.path.join(daemon.state_dir, "nodes", hostname, "console.log")
        self.assertEqual(daemon.stop(signal.SIGKILL), -signal.SIGKILL)
        wait_until("the guest to see its host go", lambda: b"host disconnected" in _read(console), 30, 0.1)
        connected = _read(console).count(b"host connected on")
        time.sleep(3)
        self.assertEqual(_read(console).count(b"host connected on"), connected)
        daemon.start()
        settled(daemon, NETWORK, why="after the restart")
        self.assertEqual(run(daemon, hostname, CHECK), (0, "kept\non-disk\n"))
        self.assertEqual(_read(console).count(b"host connected on"), connected + 1)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()
