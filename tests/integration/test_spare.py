# -*- test-case-name: tests.integration.test_spare -*-
"""
Spare VMs of warm templates against real guests (``warm_spare: true``): a
create takes the template's spare (its QEMU was started before the create
and named the spare's QMP socket) and is a working node with an identity of
its own; a replacement spare starts; a fork of a spare-born node works;
after a daemon kill -9 the next start adopts the spare-born node and kills
the spare no node was handed; a removed template takes its spare with it.
A pool (``warm_spare: 3``): creates at once take a spare each, the pool is
filled again only after they answered; stop and kill -9 handle every spare.
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import threading
from ipaddress import IPv4Address
from typing import Any

from tests.integration.bulk_port import socket_connections
from tests.integration.daemon import CREATE_TIMEOUT, TemplatesDaemonTestCase
from tests.integration.greeting import CLIENT, HelloServer
from tests.integration.metrics import metric
from vmservice.network import plans

GROUPS: list[dict[str, Any]] = [
    {"name": "warm", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "warm": True, "warm_spare": True},
]


def _argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode().split("\0")
    except OSError:
        return []


class _Spares(TemplatesDaemonTestCase):
    groups = GROUPS
    group = "warm"

    @classmethod
    def started(cls) -> None:
        cls.daemon.wait_for("the template built at start", lambda: metric(
            cls.daemon.request("GET", "/metrics")[2].decode(), "vmservice_template_builds_total", result="ok"
        ) == 1, timeout=240)

    def spare_pids(self) -> list[int]:
        """Running QEMUs whose QMP socket lies in a spare directory of this daemon's templates."""
        templates = os.path.join(self.daemon.state_dir, "templates", "")
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                argv = " ".join(_argv(int(entry)))
                if "qemu-system" in argv and f"unix:{templates}" in argv and "/spare-" in argv:
                    found.append(int(entry))
        return sorted(found)

    def ready_spare(self) -> int | None:
        """A running spare VM the daemon logged as ready (none taken since: a taken one is a node's)."""
        ready = self.ready_spares()
        return ready[0] if ready else None

    def ready_spares(self) -> list[int]:
        """The running spare VMs the daemon logged as ready and that no node took."""
        log = self.daemon.log()
        found = []
        for pid in self.spare_pids():
            name = _spare_name(pid)
            if re.search(rf"spare VM {name} of template \w+ is ready", log) and f"spare VM {name}:" not in log:
                found.append(pid)
        return found

    def wait_spare(self) -> int:
        # Long enough for a template built again (after a test removed it) and then its spare.
        pid: int = self.daemon.wait_for("a ready spare VM", self.ready_spare, timeout=240)
        return pid

    def create(self) -> str:
        return self.create_node(self.group, timeout=CREATE_TIMEOUT)

    def record(self, hostname: str) -> dict[str, Any]:
        with open(os.path.join(self.daemon.state_dir, "nodes", hostname, "node.json")) as f:
            record: dict[str, Any] = json.load(f)
        return record


def _spare_name(pid: int) -> str:
    """The name of the spare directory the QMP socket of QEMU ``pid`` lies in."""
    socket = next(word for word in _argv(pid) if word.startswith("unix:") and "/qmp.sock" in word)
    return os.path.basename(os.path.dirname(socket.split(",")[0]))


class SpareTests(_Spares):
    def test_create_takes_the_spare(self) -> None:
        """
        The spare's QEMU becomes the node (same pid, its record names the
        spare's QMP socket); it execs, has its own hostname, random bytes and
        machine-id (unlike another clone's); a new spare starts.
        """
        daemon = self.daemon
        spare = self.wait_spare()
        first = self.create()
        record = self.record(first)
        self.assertEqual(record["pid"], spare)
        self.assertIn("/spare-", record["started_qmp"])
        self.assertIn(f"-qmp unix:{record['started_qmp']}", " ".join(_argv(spare)))
        self.assertIn("cloned from spare VM", daemon.log())
        replacement = self.wait_spare()
        self.assertNotEqual(replacement, spare)
        second = self.create()
        self.assertEqual(self.record(second)["pid"], replacement)
        reads = {}
        for hostname in (first, second):
            code, out = daemon.run(hostname, "hostname; head -c 16 /dev/urandom | od -An -tx1; cat /etc/machine-id")
            self.assertEqual(code, 0)
            lines = out.split("\n")
            self.assertEqual(lines[0], hostname)
            reads[hostname] = lines[1:]
        self.assertNotEqual(reads[first], reads[second])
        # Its copy and metrics channels are the spare's, renamed: they work under the node's names.
        payload = os.urandom(256 * 1024)
        status, _, _ = daemon.request("POST", f"/vm/{first}/cp?path=/root/up.bin", payload)
        self.assertEqual(status, 200)
        self.assertEqual(daemon.request("GET", f"/vm/{first}/cp?path=/root/up.bin")[2], payload)
        # A download over the bulk port, which the spare's agent connection now finds beside the node's agent
        # socket: held open while this client does not read (64 MiB do not fit in the buffers on the way).
        self.assertEqual(daemon.run(first, "head -c 64M /dev/zero > /root/big.bin"), (0, ""))
        download = daemon._connection(60)
        try:
            download.request("GET", f"/vm/{first}/cp?path=/root/big.bin")
            answer = download.getresponse()
            self.assertEqual((answer.status, len(answer.read(65536))), (200, 65536))
            bound = os.path.join(os.path.dirname(record["started_qmp"]), "bulk.sock")  # QEMU bound it there
            daemon.wait_for("the download on the bulk port", lambda: socket_connections(bound) == 1)
            self.assertEqual(len(answer.read()), 64 * 1024 * 1024 - 65536)
        finally:
            download.close()
        stat = daemon.wait_for("the node's statistics", lambda: (
            lambda answer: answer if "snapshot" in answer else None)(daemon.json("GET", f"/node/{first}/stats")))
        self.assertEqual(stat["snapshot"]["hostname"], first)

    def test_fork_of_a_spare_born_node(self) -> None:
        """A fork switches the disk QEMU opened by the spare's name: parent and child run on."""
        daemon = self.daemon
        self.wait_spare()
        parent = self.create()
        self.assertTrue(self.record(parent)["started_qmp"])
        self.assertEqual(daemon.run(parent, "echo before > /root/f; sync; echo ok"), (0, "ok\n"))
        children = daemon.json("POST", f"/vm/{parent}/fork", {"count": 1}, expect=201, timeout=300)
        child = children[0]["hostname"]
        self.addCleanup(daemon.request, "DELETE", f"/hostgroup/warm/nodes/{child}")
        self.assertEqual(daemon.run(child, "cat /root/f; hostname"), (0, f"before\n{child}\n"))
        self.assertEqual(daemon.run(parent, "echo after >> /root/f; sync; cat /root/f"), (0, "before\nafter\n"))
        self.assertEqual(daemon.run(child, "cat /root/f"), (0, "before\n"))

    def test_delete_removes_the_spare_directory(self) -> None:
        self.wait_spare()
        hostname = self.create()
        directory = os.path.dirname(self.record(hostname)["started_qmp"])
        self.assertTrue(os.path.isdir(directory))
        self.daemon.json("DELETE", f"/hostgroup/warm/nodes/{hostname}")
        self.assertFalse(os.path.exists(directory))

    def test_kill9_readopts_and_sweeps(self) -> None:
        """
        A daemon killed with -9: the next start adopts the spare-born node by
        its recorded QMP socket (same pid, exec works) and kills the spare no
        node was handed; its own template's spare is started anew.
        """
        daemon = self.daemon
        self.wait_spare()
        hostname = self.create()
        pid = self.record(hostname)["pid"]
        left = self.wait_spare()
        daemon.stop(signal.SIGKILL)
        daemon.start()
        daemon.json("GET", f"/vm/{hostname}")
        daemon.wait_for("the old spare killed", lambda: left not in self.spare_pids(), timeout=30)
        self.assertEqual(self.record(hostname)["pid"], pid)
        self.assertTrue(os.path.exists(f"/proc/{pid}"))
        daemon.wait_for("the adopted node's agent", lambda: daemon.request(
            "GET", f"/vm/{hostname}/health", timeout=10)[0] == 200, timeout=60)
        self.assertEqual(daemon.run(hostname, "echo alive"), (0, "alive\n"))
        # The new run builds its template again and starts a spare of it.
        daemon.wait_for("a template built by the new run", lambda: metric(
            daemon.request("GET", "/metrics")[2].decode(), "vmservice_template_builds_total", result="ok") == 1,
            timeout=240)
        self.wait_spare()

    def test_removed_template_kills_its_spare(self) -> None:
        """
        A template whose files were removed is dropped at the next create, and
        its spare killed with it; a new template and spare follow without
        another create.
        """
        daemon = self.daemon
        spare = self.wait_spare()
        for path in glob.glob(os.path.join(daemon.state_dir, "templates", "*", "dev.bin")):
            os.unlink(path)
        hostname = self.create()
        self.assertEqual(daemon.run(hostname, "echo ok"), (0, "ok\n"))
        daemon.wait_for("the spare killed", lambda: spare not in self.spare_pids(), timeout=30)
        self.assertNotEqual(self.record(hostname)["pid"], spare)
        self.assertIn("host group warm gets a new template in the background", daemon.log())
        self.assertNotEqual(self.wait_spare(), spare)

    def test_stop_kills_the_spare(self) -> None:
        """A daemon that stops kills its spare VMs (and leaves no spare directory no node needs)."""
        daemon = self.daemon
        # A create makes sure there is a template (an earlier test may have removed it), then a spare of it.
        self.daemon.json("DELETE", f"/hostgroup/warm/nodes/{self.create()}")
        spare = self.wait_spare()
        socket = next(word for word in _argv(spare) if word.startswith("unix:") and "/qmp.sock" in word)
        directory = os.path.dirname(socket[len("unix:"):].split(",")[0])
        daemon.stop()
        daemon.wait_for("the spare gone", lambda: spare not in self.spare_pids(), timeout=10)
        daemon.start()
        daemon.wait_for("its directory removed", lambda: not os.path.exists(directory), timeout=30)


class BridgedSpareTests(_Spares):
    """
    A bridged group's spare holds a tap its QEMU made; the hand-over renames
    it to the node's tap on the bridge: the node has its own MAC and address
    and reaches its gateway (the host) at once.
    """

    BRIDGE = "vmstbr6"
    GATEWAY = "10.78.6.1"
    group = "sbr"
    groups = [{**GROUPS[0], "name": "sbr",
               "network": {"mode": "bridge", "bridge": BRIDGE, "gateway": f"{GATEWAY}/24", "range": "10.78.6.0/28"}}]
    bridge = BRIDGE

    def test_bridged_spare(self) -> None:
        daemon = self.daemon
        server = HelloServer()
        self.addCleanup(server.close)
        spare = self.wait_spare()
        argv = " ".join(_argv(spare))
        self.assertIn("-netdev tap,id=net0,ifname=vmp", argv)
        hostname = self.create()
        record = self.record(hostname)
        self.assertEqual(record["pid"], spare)
        tap = plans.tap_name(IPv4Address(record["ip"]))
        link = subprocess.run(["ip", "-j", "link", "show", tap], capture_output=True, text=True, check=True).stdout
        self.assertEqual(json.loads(link)[0].get("master"), self.BRIDGE)
        code, out = daemon.run(hostname, "cat /sys/class/net/eth0/address; ip -4 addr show eth0; ip route")
        self.assertEqual(code, 0)
        self.assertEqual(out.split("\n")[0], plans.mac_address(IPv4Address(record["ip"])).lower())
        self.assertIn(f"inet {record['ip']}/24", out)
        self.assertIn(f"default via {self.GATEWAY}", out)
        self.assertEqual(daemon.run(hostname, f"{CLIENT} {self.GATEWAY} {server.port}")[0], 0)
        # Deleted: the tap goes with its QEMU.
        daemon.json("DELETE", f"/hostgroup/{self.group}/nodes/{hostname}")
        self.assertNotEqual(subprocess.run(["ip", "link", "show", tap], capture_output=True).returncode, 0)


class PoolTests(_Spares):
    """``warm_spare: 3``: a pool of three spare VMs of the template."""

    group = "pool"
    groups = [{**GROUPS[0], "name": "pool", "warm_spare": 3}]

    def wait_pool(self) -> list[int]:
        pool: list[int] = self.daemon.wait_for("three ready spare VMs", lambda: (
            lambda ready: ready if len(ready) == 3 else None)(self.ready_spares()), timeout=180)
        return pool

    def test_creates_at_once_take_a_spare_each(self) -> None:
        """
        Three creates at once: each node is one of the pool's VMs (its pid,
        its record naming that spare's QMP socket), with an identity of its
        own; the pool's new spares are started only after all three answered.
        """
        daemon = self.daemon
        pool = self.wait_pool()
        results: list[Any] = [None] * 3

        def create(index: int) -> None:
            try:
                results[index] = daemon.json("POST", f"/hostgroup/{self.group}/nodes?wait=agent&timeout={CREATE_TIMEOUT}",
                                             {}, expect=201)["hostname"]
            except BaseException as error:  # raised below, in the test's thread
                results[index] = error

        threads = [threading.Thread(target=create, args=(index,)) for index in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for result in results:
            if isinstance(result, str):
                self.addCleanup(daemon.request, "DELETE", f"/hostgroup/{self.group}/nodes/{result}")
        for result in results:
            if not isinstance(result, str):
                raise AssertionError(f"a create failed: {result!r}")
        records = [self.record(hostname) for hostname in results]
        self.assertEqual(sorted(record["pid"] for record in records), sorted(pool))
        self.assertEqual(sorted(os.path.basename(os.path.dirname(record["started_qmp"])) for record in records),
                         sorted(_spare_name(pid) for pid in pool))
        reads = set()
        for hostname in results:
            code, out = daemon.run(hostname, "hostname; head -c 16 /dev/urandom | od -An -tx1")
            self.assertEqual(code, 0)
            self.assertEqual(out.split("\n")[0], hostname)
            reads.add(out)
        self.assertEqual(len(reads), 3)
        refilled = self.wait_pool()
        self.assertEqual(set(refilled) & set(pool), set())
        lines = daemon.log().splitlines()
        taken = max(index for index, line in enumerate(lines) if "cloned from spare VM" in line)
        for pid in refilled:
            ready = next(index for index, line in enumerate(lines)
                         if f"spare VM {_spare_name(pid)} of template" in line and "is ready" in line)
            self.assertGreater(ready, taken)

    def test_kill9_sweeps_the_pool(self) -> None:
        """
        A daemon killed with -9 while its pool waits: the next start adopts
        the spare-born node, kills every spare no node was handed and fills a
        new pool.
        """
        daemon = self.daemon
        self.wait_pool()
        hostname = self.create()
        pid = self.record(hostname)["pid"]
        left = self.wait_pool()
        daemon.stop(signal.SIGKILL)
        daemon.start()
        daemon.json("GET", f"/vm/{hostname}")
        daemon.wait_for("the old spares killed", lambda: not set(left) & set(self.spare_pids()), timeout=30)
        self.assertEqual(self.record(hostname)["pid"], pid)
        daemon.wait_for("the adopted node's agent", lambda: daemon.request(
            "GET", f"/vm/{hostname}/health", timeout=10)[0] == 200, timeout=60)
        self.assertEqual(daemon.run(hostname, "echo alive"), (0, "alive\n"))
        self.assertEqual(set(self.wait_pool()) & set(left), set())

    def test_stop_kills_the_pool(self) -> None:
        """A daemon that stops kills every spare of the pool; the next start removes their directories."""
        daemon = self.daemon
        daemon.json("DELETE", f"/hostgroup/{self.group}/nodes/{self.create()}")
        pool = self.wait_pool()
        directories = [os.path.join(os.path.dirname(os.path.dirname(
            next(word for word in _argv(pid) if "/qmp.sock" in word)[len("unix:"):].split(",")[0])), _spare_name(pid))
            for pid in pool]
        daemon.stop()
        daemon.wait_for("the spares gone", lambda: not set(pool) & set(self.spare_pids()), timeout=10)
        daemon.start()
        daemon.wait_for("their directories removed", lambda: not any(map(os.path.exists, directories)), timeout=30)
        self.wait_pool()
