# -*- test-case-name: tests.integration.test_fork_memory -*-
"""
Nodes whose memory is a file (``fork_memory: file``) against real guests:
the VM maps its memory file shared; a fork copies that file once and the
children map the copy privately and see the parent's running process and
/tmp file, then diverge, each with its own identity, while the parent runs
on, networked children each with their own address; the daemon answers
other requests while the copy is made; the copy lives as long as a child
maps it (not a suspended one, which restores all the same).  Suspend (the file goes, the
snapshot holds the memory), restore (a new file), idle suspend and wake,
shutdown, relaunch and delete leave no memory file behind; after a daemon
kill -9 the parent and its child are adopted again with their files and a
stray file is swept; a node whose memory does not fit the tmpfs is refused
(503 ``tmpfs_full``) with nothing left.
"""

from __future__ import annotations

import glob
import os
import signal
import threading
from typing import Any

from tests.integration.daemon import TemplatesDaemonTestCase


def _too_big_gb() -> int:
    """A RAM size (GiB) larger than /dev/shm has free, for the refusal."""
    stats = os.statvfs("/dev/shm")
    return stats.f_bavail * stats.f_frsize // 2**30 + 4


GROUPS: list[dict[str, Any]] = [
    {"name": "m", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "fork_memory": "file"},
    {"name": "p", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "fork_memory": "file",
     "persistent": True},
    {"name": "i", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "fork_memory": "file",
     "idle_suspend": "3s"},
    {"name": "n", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "fork_memory": "file",
     "network": {"mode": "isolated", "range": "10.86.73.0/28"}},
    {"name": "big", "count": 0, "vcpu": 1, "ram_gb": _too_big_gb(), "storage_size": "1G", "fork_memory": "file"},
]


class ForkMemoryTests(TemplatesDaemonTestCase):
    groups = GROUPS
    settings = {"admission": {"memory_budget": f"{_too_big_gb() + 64}G"}}

    def create(self, group: str = "m") -> str:
        return self.create_node(group)

    def fork(self, hostname: str, body: dict[str, Any]) -> list[str]:
        return [child["hostname"] for child in self.fork_node(hostname, body)]

    def memory_files(self) -> list[str]:
        """The names in this daemon's memory directory."""
        return sorted(os.path.basename(path) for path in glob.glob(os.path.join(self.shm, "vmservice-memory-*", "*")))

    def memory_directory(self) -> str:
        (directory,) = glob.glob(os.path.join(self.shm, "vmservice-memory-*"))
        return directory

    def test_fork_children_continue_then_diverge(self) -> None:
        """
        The parent maps its memory file shared; three children map one copy of it privately, see the
        parent's process and /tmp file, have their own identities and diverge; the parent runs on; the
        copy goes with the last child, the parent's file with the parent.
        """
        parent = self.create()
        argv = " ".join(self.qemu_argv(parent))
        self.assertIn(f"mem-path={self.memory_directory()}/{parent}.ram,share=on", argv)
        self.assertEqual(self.memory_files(), [f"{parent}.ram"])
        code, out = self.daemon.run(parent, "echo from-parent > /tmp/forked.txt; "
                                            "setsid nohup sleep 1000 >/dev/null 2>&1 < /dev/null & echo $!")
        self.assertEqual(code, 0)
        pid = out.strip()
        children = self.fork(parent, {"count": 3})
        self.assertIn(f"copied the memory of {parent}.ram", self.daemon.log())
        self.assertIn(f"forked node {parent} into {', '.join(children)} after a pause of", self.daemon.log())
        (copy,) = [name for name in self.memory_files() if name.startswith(f"fork-{parent}.")]
        self.assertEqual(self.memory_files(), sorted([f"{parent}.ram", copy]))
        for child in children:
            self.assertIn(f"mem-path={self.memory_directory()}/{copy},share=off", " ".join(self.qemu_argv(child)))
        identities = []
        for name in (parent, *children):
            code, out = self.daemon.run(
                name, f"cat /tmp/forked.txt; kill -0 {pid} && echo alive; hostname; cat /etc/machine-id; "
                      "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo")
            self.assertEqual(code, 0, out)
            text, alive, hostname, machine_id, random = out.split("\n")[:5]
            self.assertEqual((text, alive, hostname), ("from-parent", "alive", name))
            identities.append((machine_id, random))
        self.assertEqual(len({machine_id for machine_id, _ in identities}), 4)
        self.assertEqual(len({random for _, random in identities}), 4)
        # They diverge: what one writes the others do not see (in memory, /tmp, and on disk).
        for name in (parent, *children):
            self.assertEqual(self.daemon.run(name, f"echo {name} > /tmp/own-{name}; echo {name} > /root/own")[0], 0)
        for name in (parent, *children):
            code, out = self.daemon.run(name, "ls /tmp | grep '^own-'; cat /root/own")
            self.assertEqual(out.split(), [f"own-{name}", name])
        # No state file of the fork is left in the tmpfs (in the daemon's memory directory).
        self.assertEqual(glob.glob(os.path.join(self.shm, "vmservice-fork-*")), [])
        self.assertEqual(glob.glob(os.path.join(self.shm, "vmservice-memory-*", "state-*")), [])
        # The parent goes (its file with it); the children run on their copy; the last one takes it.
        self.daemon.json("DELETE", f"/hostgroup/m/nodes/{parent}")
        self.assertEqual(self.memory_files(), [copy])
        first, *others = children
        self.assertEqual(self.daemon.run(first, "cat /tmp/forked.txt"), (0, "from-parent\n"))
        self.daemon.json("DELETE", f"/hostgroup/m/nodes/{first}")
        self.assertEqual(self.memory_files(), [copy])
        for child in others:
            self.assertEqual(self.daemon.run(child, "cat /tmp/forked.txt"), (0, "from-parent\n"))
            self.daemon.json("DELETE", f"/hostgroup/m/nodes/{child}")
        self.assertEqual(self.memory_files(), [])

    def test_requests_are_answered_during_the_copy(self) -> None:
        """
        The daemon answers other requests while a fork copies the parent's memory file (off its event
        loop): a list asked after the log said the copy began is answered before the log says it ended.
        Only the order of events counts; a fork whose copy no request fell into (a busy host may not
        schedule the asking thread in time) is tried again, a few times.
        """
        parent = self.create()
        # Memory in use (the guest's /tmp is in its RAM), so the copy takes a while.
        self.assertEqual(self.daemon.run(parent, "dd if=/dev/zero of=/tmp/fill bs=1M count=96 2>&1")[0], 0)
        began, ended = f"copying the memory of {parent}.ram", f"copied the memory of {parent}.ram"
        inside: list[int] = []
        for attempt in range(5):
            stop = threading.Event()

            def ask() -> None:
                while not stop.is_set():
                    log = self.daemon.log()
                    status = self.daemon.request("GET", "/hostgroup/m/nodes", timeout=60)[0]
                    after = self.daemon.log()
                    if status == 200 and log.count(began) > log.count(ended) == after.count(ended):
                        inside.append(attempt)

            askers = [threading.Thread(target=ask) for _ in range(3)]
            for thread in askers:
                thread.start()
            try:
                children = self.fork(parent, {})
            finally:
                stop.set()
                for thread in askers:
                    thread.join()
            self.assertEqual(self.daemon.log().count(ended), attempt + 1)
            for child in children:
                self.daemon.json("DELETE", f"/hostgroup/m/nodes/{child}")
            if inside:
                break
        self.assertNotEqual(inside, [], "no request was answered while a copy ran, in 5 forks")

    def test_the_copy_goes_with_the_last_running_child(self) -> None:
        """
        A suspended child no longer maps the copy: once the other children are deleted the copy is gone
        (the parent runs on), and the suspended child restores with its memory (and forks) all the same.
        """
        parent = self.create()
        self.assertEqual(self.daemon.run(parent, "echo forked > /tmp/c.txt")[0], 0)
        first, second, third = self.fork(parent, {"count": 3})
        (copy,) = [name for name in self.memory_files() if name.startswith("fork-")]
        self.assertIn(b"suspended", self.daemon.request("POST", f"/vm/{first}/suspend")[2])
        self.assertEqual(self.memory_files(), sorted([f"{parent}.ram", copy]))
        self.daemon.json("DELETE", f"/hostgroup/m/nodes/{second}")
        self.assertEqual(self.memory_files(), sorted([f"{parent}.ram", copy]))
        self.daemon.json("DELETE", f"/hostgroup/m/nodes/{third}")
        self.assertEqual(self.memory_files(), [f"{parent}.ram"])
        self.daemon.post(f"/vm/{first}/restore?wait=agent&timeout=2m")
        self.assertIn("memory-backend-ram,id=mem0", " ".join(self.qemu_argv(first)))
        self.assertEqual(self.daemon.run(first, "cat /tmp/c.txt; hostname"), (0, f"forked\n{first}\n"))
        (grandchild,) = self.fork(first, {})
        self.assertEqual(self.daemon.run(grandchild, "cat /tmp/c.txt; hostname"), (0, f"forked\n{grandchild}\n"))
        self.assertEqual(self.memory_files(), [f"{parent}.ram"])

    def test_networked_fork(self) -> None:
        """Children of a networked node with a memory file: each its own MAC, address and route, its gateway reached."""
        parent = self.create("n")
        children = self.fork(parent, {"count": 2})
        nodes = self.daemon.nodes()
        macs = {self.assert_own_network(name, nodes[name]["ip"]) for name in (parent, *children)}
        self.assertEqual(len(macs), 3)

    def test_suspend_restore_relaunch_delete(self) -> None:
        """
        Suspend removes the memory file (the snapshot holds the memory), restore maps a new one with the
        guest's /tmp and processes back and forks fast again; shutdown removes it, relaunch makes a new
        one, delete removes it.
        """
        node = self.create("p")
        self.assertEqual(self.daemon.run(node, "echo kept > /tmp/s.txt")[0], 0)
        self.assertIn(b"suspended", self.daemon.request("POST", f"/vm/{node}/suspend")[2])
        self.assertEqual(self.memory_files(), [])
        self.daemon.post(f"/vm/{node}/restore?wait=agent&timeout=2m")
        self.assertEqual(self.memory_files(), [f"{node}.ram"])
        self.assertIn("share=on", " ".join(self.qemu_argv(node)))
        self.assertEqual(self.daemon.run(node, "cat /tmp/s.txt"), (0, "kept\n"))
        (child,) = self.fork(node, {"persistent": False})
        self.assertEqual(self.daemon.run(child, "cat /tmp/s.txt; hostname"), (0, f"kept\n{child}\n"))
        # A child suspended and restored holds its memory itself (anonymous, under the copy's block name).
        self.assertIn(b"suspended", self.daemon.request("POST", f"/vm/{child}/suspend")[2])
        self.daemon.post(f"/vm/{child}/restore?wait=agent&timeout=2m")
        self.assertIn("memory-backend-ram,id=mem0", " ".join(self.qemu_argv(child)))
        self.assertEqual(self.daemon.run(child, "cat /tmp/s.txt"), (0, "kept\n"))
        self.daemon.json("DELETE", f"/hostgroup/p/nodes/{child}")
        self.assertEqual(self.memory_files(), [f"{node}.ram"])
        self.daemon.post(f"/vm/{node}/shutdown?action=shutdown")
        self.daemon.wait_status(node, "Stopped", timeout=120)
        self.assertEqual(self.memory_files(), [])
        self.daemon.json("POST", f"/vm/{node}/relaunch?wait=agent&timeout=4m")
        self.assertEqual(self.memory_files(), [f"{node}.ram"])
        self.assertEqual(self.daemon.run(node, "hostname"), (0, f"{node}\n"))
        self.daemon.json("DELETE", f"/hostgroup/p/nodes/{node}")
        self.assertEqual(self.memory_files(), [])

    def test_idle_suspend_and_wake(self) -> None:
        """An idle node is suspended (its memory file goes) and the next exec wakes it with a new one."""
        node = self.create("i")
        self.assertEqual(self.daemon.run(node, "echo idle > /tmp/i.txt")[0], 0)
        self.daemon.wait_for("the idle suspend", lambda: self.daemon.nodes()[node]["status"] == "Suspended",
                             timeout=120)
        self.assertEqual(self.memory_files(), [])
        self.assertEqual(self.daemon.run(node, "cat /tmp/i.txt"), (0, "idle\n"))
        self.assertEqual(self.memory_files(), [f"{node}.ram"])
        self.daemon.json("DELETE", f"/hostgroup/i/nodes/{node}")
        self.assertEqual(self.memory_files(), [])

    def test_survives_a_daemon_kill(self) -> None:
        """After a kill -9, parent and child are adopted with their memory file and copy; a stray file is swept."""
        parent = self.create()
        self.assertEqual(self.daemon.run(parent, "echo before > /tmp/k.txt")[0], 0)
        (child,) = self.fork(parent, {})
        pids = sorted(self.daemon.vm_pids())
        files = self.memory_files()
        self.assertEqual(len(files), 2)
        self.daemon.stop(signal.SIGKILL)
        stray = os.path.join(self.memory_directory(), "gone-1.ram")
        with open(stray, "wb") as f:
            f.write(b"x")
        self.daemon.start()
        self.daemon.wait_for("the start-up sweep", lambda: not os.path.exists(stray), timeout=60)
        self.assertEqual(sorted(self.daemon.vm_pids()), pids)
        self.assertEqual(self.memory_files(), files)
        for name in (parent, child):
            self.daemon.wait_for(f"the agent of {name}", lambda name=name: self.daemon.request(
                "GET", f"/vm/{name}/health", timeout=10)[0] == 200, timeout=60)
        self.assertEqual(self.daemon.run(child, "cat /tmp/k.txt; hostname"), (0, f"before\n{child}\n"))
        self.assertEqual(self.daemon.run(parent, "cat /tmp/k.txt; hostname"), (0, f"before\n{parent}\n"))
        for name in (parent, child):
            self.daemon.json("DELETE", f"/hostgroup/m/nodes/{name}")
        self.assertEqual(self.memory_files(), [])

    def test_no_room_in_the_tmpfs(self) -> None:
        """A node whose memory does not fit the tmpfs is refused (503 tmpfs_full); nothing is left."""
        before = sorted(self.daemon.nodes())
        status, _, body = self.daemon.request("POST", "/hostgroup/big/nodes?wait=agent&timeout=1m", {})
        self.assertEqual(status, 503, body)
        self.assertIn(b"tmpfs_full", body)
        self.assertEqual(sorted(self.daemon.nodes()), before)
        self.assertEqual([name for name in self.memory_files() if name.startswith("big-")], [])
        nodes = os.path.join(self.daemon.state_dir, "nodes")
        self.assertEqual([name for name in os.listdir(nodes) if name.startswith("big-")], [])
