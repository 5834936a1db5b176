# -*- test-case-name: tests.integration.test_fork -*-
"""
Hot fork against real guests: a running node with a background process and
a file in /tmp forks into two children that both see them, then diverge;
each child has its own hostname, machine-id, random bytes and agent session;
the parent runs on (exec works, its disk now an overlay over the fork's
frozen disk); deleting the parent leaves the children working (their disk
chain read after the page cache is dropped) and deleting them all removes
the frozen files and the state file; a paused node answers 409, an unknown
one 404, a count of 0 or 9 is 400.  A clone forks twice and is relaunched
from its disk chain; after a daemon kill -9 a parent and its child are
adopted again; children of a networked node get their own MAC, address and
route; ``vmctl fork`` prints the new nodes.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
from typing import Any

from tests.integration.daemon import TemplatesDaemonTestCase

GROUPS: list[dict[str, Any]] = [
    {"name": "f", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G"},
    # No spares: a spare's warm-up adopts an identity too, and would start guest sessions the fork tests count.
    {"name": "w", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "warm": True, "persistent": True,
     "warm_spare": 0},
    {"name": "n", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G",
     "network": {"mode": "isolated", "range": "10.86.41.0/28"}},
]


class ForkTests(TemplatesDaemonTestCase):
    groups = GROUPS

    def create(self, group: str = "f") -> str:
        return self.create_node(group)

    def fork(self, hostname: str, body: dict[str, Any]) -> list[str]:
        children = self.fork_node(hostname, body)
        for child in children:
            self.assertEqual(sorted(child), ["arch", "created_at", "hostgroup", "hostname", "ip"])
        return [child["hostname"] for child in children]

    def forks(self) -> list[str]:
        return sorted(glob.glob(os.path.join(self.daemon.state_dir, "forks", "*")))


    def test_fork_children_continue_then_diverge(self) -> None:
        """
        Two children see the parent's file and process, have their own identities and diverge; the
        parent runs on; deleting the parent leaves the children working; deleting all removes the files.
        """
        parent = self.create()
        code, out = self.daemon.run(parent, "echo from-parent > /tmp/forked.txt; "
                                            "setsid nohup sleep 1000 >/dev/null 2>&1 < /dev/null & echo $!")
        self.assertEqual(code, 0)
        pid = out.strip()
        sessions = self.daemon.log().count("guest agent started a new session")
        children = self.fork(parent, {"count": 2, "tags": ["forked"]})
        # Each child's agent started a new session (a new nonce) when it adopted its identity.
        self.assertEqual(self.daemon.log().count("guest agent started a new session"), sessions + 2)
        self.assertEqual({self.daemon.nodes()[child]["hostgroup"] for child in children}, {"f"})
        self.assertEqual(len(children), 2)
        # The parent's pause is logged (its length is not asserted: the machine is shared).
        self.assertIn(f"forked node {parent} into {', '.join(children)} after a pause of", self.daemon.log())
        self.assertNotIn(parent, children)
        # The fork's frozen disk is the backing file of the parent's and of every child's disk.
        (frozen,) = self.forks()
        for name in (parent, *children):
            self.assertEqual(os.path.dirname(self.backing_file(name)), frozen)
        listed = self.daemon.nodes()
        identities = []
        for name in (parent, *children):
            self.assertEqual(listed[name]["status"], "Running")
            code, out = self.daemon.run(
                name, f"cat /tmp/forked.txt; kill -0 {pid} && echo alive; hostname; cat /etc/machine-id; "
                      "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo")
            self.assertEqual(code, 0, out)
            text, alive, hostname, machine_id, random = out.split("\n")[:5]
            self.assertEqual((text, alive, hostname), ("from-parent", "alive", name))
            identities.append((machine_id, random))
        for child in children:
            self.assertEqual(listed[child]["tags"], ["forked"])
        # Each its own machine-id and random bytes.
        self.assertEqual(len({machine_id for machine_id, _ in identities}), 3)
        self.assertEqual(len({random for _, random in identities}), 3)

        # They diverge: what one writes the others do not see.
        for name in (parent, *children):
            self.assertEqual(self.daemon.run(name, f"echo {name} > /tmp/own-{name}; sync")[0], 0)
        for name in (parent, *children):
            code, out = self.daemon.run(name, "ls /tmp | grep '^own-'")
            self.assertEqual(out.split(), [f"own-{name}"])
        # The state file was deleted: nothing of the fork is left in the tmpfs (in the daemon's memory directory).
        self.assertEqual(glob.glob(os.path.join(self.shm, "vmservice-fork-*")), [])
        self.assertEqual(glob.glob(os.path.join(self.shm, "vmservice-memory-*", "state-*")), [])

        # The parent goes; the children read their disk chain (the page cache dropped) and run.
        self.daemon.json("DELETE", f"/hostgroup/f/nodes/{parent}")
        self.assertEqual(self.forks(), [frozen])
        for child in children:
            code, out = self.daemon.run(child, "echo 3 > /proc/sys/vm/drop_caches; cat /tmp/forked.txt; "
                                               "md5sum /bin/ls >/dev/null && echo read")
            self.assertEqual((code, out), (0, "from-parent\nread\n"))
        for child in children:
            self.daemon.json("DELETE", f"/hostgroup/f/nodes/{child}")
        self.assertEqual(self.forks(), [])

    def test_fork_refused(self) -> None:
        """A paused node: 409 (it resumes fine after); an unknown one: 404; count 0 or 9: 400; nothing left."""
        parent = self.create()
        self.daemon.post(f"/vm/{parent}/pause")
        status, _, body = self.daemon.request("POST", f"/vm/{parent}/fork", {"count": 1})
        self.assertEqual(status, 409, body)
        self.daemon.post(f"/vm/{parent}/resume")
        status, _, body = self.daemon.request("POST", "/vm/no-such-node/fork", {})
        self.assertEqual(status, 404, body)
        for count in (0, 9):
            status, _, body = self.daemon.request("POST", f"/vm/{parent}/fork", {"count": count})
            self.assertEqual(status, 400, body)
        self.assertEqual(sorted(self.daemon.nodes()), [parent])
        self.assertEqual(self.forks(), [])
        self.assertEqual(self.daemon.run(parent, "echo ok"), (0, "ok\n"))

    def test_fork_survives_a_daemon_kill(self) -> None:
        """After a kill -9 of the daemon, the parent and its child are adopted again and run; the frozen disk stays."""
        parent = self.create()
        self.assertEqual(self.daemon.run(parent, "echo before > /tmp/k.txt")[0], 0)
        (child,) = self.fork(parent, {})
        pids = sorted(self.daemon.vm_pids())
        self.daemon.stop(signal.SIGKILL)
        self.daemon.start()
        self.assertEqual(sorted(self.daemon.vm_pids()), pids)
        for name in (parent, child):
            self.daemon.wait_for(f"the agent of {name}", lambda name=name: self.daemon.request(
                "GET", f"/vm/{name}/health", timeout=10)[0] == 200, timeout=60)
        self.assertEqual(self.daemon.run(child, "cat /tmp/k.txt; hostname"), (0, f"before\n{child}\n"))
        self.assertEqual(len(self.forks()), 1)
        for name in (parent, child):
            self.daemon.json("DELETE", f"/hostgroup/f/nodes/{name}")
        self.assertEqual(self.forks(), [])

    def test_networked_fork(self) -> None:
        """Children of a networked node: each its own MAC, address and route, its gateway reached; the parent's kept."""
        parent = self.create("n")
        children = self.fork(parent, {"count": 2})
        nodes = self.daemon.nodes()
        macs = []
        for name in (parent, *children):
            ip = nodes[name]["ip"]
            mac = self.assert_own_network(name, ip)
            macs.append(mac)
        self.assertEqual(len(set(macs)), 3)

    def test_vmctl_fork(self) -> None:
        """vmctl fork NODE -n 1 --tag T prints the new node's hostname; the child runs with the tag."""
        parent = self.create()
        self.assertEqual(self.daemon.run(parent, "echo cli > /tmp/cli.txt")[0], 0)
        done = subprocess.run(
            [sys.executable, "-m", "vmservice.cli.main", "--url", f"http://127.0.0.1:{self.daemon.port}",
             "fork", parent, "-n", "1", "--tag", "cli"],
            capture_output=True, timeout=300, stdin=subprocess.DEVNULL)
        self.assertEqual(done.returncode, 0, done.stderr)
        child = done.stdout.decode().strip()
        self.addCleanup(self.daemon.request, "DELETE", f"/hostgroup/f/nodes/{child}")
        self.assertEqual(self.daemon.nodes()[child]["tags"], ["cli"])
        self.assertEqual(self.daemon.run(child, "cat /tmp/cli.txt; hostname"), (0, f"cli\n{child}\n"))

    def test_fork_a_clone_twice_then_relaunch(self) -> None:
        """
        A clone of a warm group's template forks twice (its children get the clone's memory block
        name); each child sees what the parent had written by then; the parent, shut down and
        relaunched, boots its own disk, whose chain goes through both frozen disks.
        """
        parent = self.create("w")
        argv = self.qemu_argv(parent)
        self.assertIn("share=off", " ".join(argv))
        self.assertEqual(self.daemon.run(parent, "echo one > /root/kept; sync")[0], 0)
        (first,) = self.fork(parent, {})
        self.assertEqual(self.daemon.run(parent, "echo two >> /root/kept; sync")[0], 0)
        (second,) = self.fork(parent, {"persistent": False})
        self.assertEqual(self.daemon.run(first, "cat /root/kept; hostname"), (0, f"one\n{first}\n"))
        self.assertEqual(self.daemon.run(second, "cat /root/kept; hostname"), (0, f"one\ntwo\n{second}\n"))
        self.assertIn("memory-backend-ram,id=mem0", " ".join(self.qemu_argv(second)))
        self.assertEqual((self.daemon.nodes()[first]["persistent"], self.daemon.nodes()[second]["persistent"]),
                         (True, False))
        self.assertEqual(len(self.forks()), 2)
        directory = os.path.join(self.daemon.state_dir, "nodes", parent)
        self.assertEqual(len([name for name in os.listdir(directory) if name.startswith("disk.")]), 2)
        self.daemon.post(f"/vm/{parent}/shutdown?action=shutdown")
        self.daemon.wait_status(parent, "Stopped", timeout=120)
        self.daemon.json("POST", f"/vm/{parent}/relaunch?wait=agent&timeout=4m")
        self.assertEqual(self.daemon.run(parent, "cat /root/kept; hostname"), (0, f"one\ntwo\n{parent}\n"))
        self.assertEqual(self.daemon.run(second, "echo 3 > /proc/sys/vm/drop_caches; cat /root/kept"),
                         (0, "one\ntwo\n"))


