"""
Networking against the real daemon, real guests and real TCP connections:
isolated mode (addresses, allow and drop lists, alone and together, nothing
in from the host, VMs apart), bridge mode (VMs reach each other and the
host), address management (requested ips, exhaustion), tenants (two daemons
on UNIX sockets, overlapping ranges refused) and cleanup of every network
object.

Nothing leaves this machine: the "allowed server" listens on an address the
tests put on a veth pair of their own in the host's namespace, and no test
VM has a route anywhere else.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.integration.daemon import Daemon, SharedDaemonTestCase, ensure_image
from tests.integration.greeting import CLIENT, SERVER, HelloServer

#: The address of the tests' own server, in an `allow`ed (or dropped) CIDR.
SERVER_IP = "10.99.0.1"
SERVER_NET = "10.99.0.0/24"
#: A second address of the tests' server, inside SERVER_NET but dropped for group "iso" (allow and drop both).
DROPPED_IP = "10.99.0.2"
#: The tests' veth pair in the host's namespace (Linux here has no dummy interfaces).
TEST_LINK = "vmstsrv0"


def sh(command: str) -> str:
    return subprocess.run(command, shell=True, check=True, capture_output=True, text=True).stdout


def network_objects(prefixes: tuple[str, ...] = ("vms-", "vmh", "vmt")) -> list[str]:
    """Our namespaces and interfaces on the host (whatever daemon made them)."""
    names = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    names += [link["ifname"] for link in json.loads(sh("ip -j link show"))]
    return sorted(name for name in names if name.startswith(prefixes))


def host_address() -> str:
    """The host's first address that is not loopback and not the tests'."""
    for entry in json.loads(sh("ip -4 -j addr show")):
        for info in entry.get("addr_info", []):
            local = info.get("local", "")
            if local and not local.startswith(("127.", "10.99.")):
                return str(local)
    raise AssertionError("the host has no address to test against")


def add_test_link() -> None:
    sh(f"ip link add {TEST_LINK} type veth peer name {TEST_LINK[:-1]}1 && ip addr add {SERVER_IP}/24 dev {TEST_LINK}"
       f" && ip link set {TEST_LINK} up && ip link set {TEST_LINK[:-1]}1 up")


def remove_test_link() -> None:
    subprocess.run(["ip", "link", "delete", TEST_LINK], capture_output=True)


def connects(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=3) as s:
            return s.recv(5) == b"hello"
    except OSError:
        return False


class NetworkTestCase(SharedDaemonTestCase):
    server: HelloServer

    @classmethod
    def _stop_shared(cls) -> None:
        super()._stop_shared()
        server = getattr(cls, "server", None)
        if server is not None:
            server.close()
        remove_test_link()

    def reach(self, hostname: str, ip: str, port: int) -> bool:
        """Whether ``hostname`` can open a TCP connection to ``ip:port``."""
        code, _ = self.daemon.run(hostname, f"{CLIENT} {ip} {port}")
        return code == 0

    def serve_in(self, hostname: str, port: int) -> None:
        self.assertEqual(self.daemon.run(hostname, SERVER.format(port=port))[0], 0)
        self.daemon.wait_for("the guest server", lambda: self.reach(hostname, "127.0.0.1", port), 30)


class IsolatedTests(NetworkTestCase):
    """
    Three isolated VMs: two in a group with both lists (`allow` the tests'
    /24, `drop` one address of it), one in a group with `drop` only.
    """

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        remove_test_link()
        add_test_link()
        sh(f"ip addr add {DROPPED_IP}/24 dev {TEST_LINK}")
        cls.server = HelloServer()
        base = {"vcpu": 1, "ram_mb": 256, "storage_size": "1G"}
        iso = {"mode": "isolated", "range": "10.77.0.0/28", "allow": [SERVER_NET], "drop": [f"{DROPPED_IP}/32"]}
        cls.daemon = Daemon(groups=[
            {"name": "iso", **base, "network": iso},
            {"name": "dro", **base, "network": {"mode": "isolated", "range": "10.77.0.16/29", "drop": [SERVER_NET]}},
        ])
        cls.daemon.start()
        for group in ("iso", "iso", "dro"):
            cls.daemon.json("POST", f"/hostgroup/{group}/nodes?wait=agent&timeout=2m", {}, expect=201)

    def test_addresses(self) -> None:
        """Each VM gets the third address of its /30 in order; the guest has it on eth0 with its route."""
        nodes = self.daemon.nodes()
        self.assertEqual({h: n["ip"] for h, n in nodes.items()},
                         {"iso-1": "10.77.0.2", "iso-2": "10.77.0.6", "dro-1": "10.77.0.18"})
        code, out = self.daemon.run("iso-2", "ip -4 addr show eth0; ip route")
        self.assertEqual(code, 0)
        self.assertIn("inet 10.77.0.6/30", out)
        self.assertIn("default via 10.77.0.5", out)
        self.assertEqual(self.daemon.json("GET", "/vm/iso-2/health")["ip"], "10.77.0.6")

    def test_allowed_destination(self) -> None:
        """A VM reaches a server in its group's `allow` list."""
        self.assertTrue(self.reach("iso-1", SERVER_IP, self.server.port))

    def test_drop_carves_a_hole_in_allow(self) -> None:
        """
        With both lists, `drop` wins: the same server answers on 10.99.0.1 and
        10.99.0.2 (both in `allow`), the VM reaches the first and not the second,
        which is in `drop`; the host itself reaches both.
        """
        self.assertTrue(connects(SERVER_IP, self.server.port))
        self.assertTrue(connects(DROPPED_IP, self.server.port))
        accepted = self.server.accepted
        self.assertFalse(self.reach("iso-1", DROPPED_IP, self.server.port), "VM reached a dropped address of `allow`")
        self.assertEqual(self.server.accepted, accepted)
        self.assertTrue(self.reach("iso-1", SERVER_IP, self.server.port))

    def test_host_and_other_vms_unreachable(self) -> None:
        """VM→host, VM→VM and host→VM all fail; `drop` blocks its CIDR; the host's own addresses too."""
        self.serve_in("iso-2", 8080)
        self.assertFalse(self.reach("iso-1", "10.77.0.6", 8080), "VM reached another VM")
        self.assertFalse(self.reach("dro-1", "10.77.0.6", 8080), "VM reached a VM of another group")
        self.assertFalse(connects("10.77.0.6", 8080), "the host opened a connection into a VM")
        self.assertFalse(self.reach("iso-1", host_address(), self.server.port), "VM reached the host")
        self.assertFalse(self.reach("iso-1", "10.77.0.5", self.server.port), "VM reached its gateway")
        self.assertFalse(self.reach("dro-1", SERVER_IP, self.server.port), "VM reached a dropped CIDR")
        self.assertFalse(self.reach("dro-1", host_address(), self.server.port), "VM reached the host")

    def test_requested_ip_and_exhaustion(self) -> None:
        """A free requested ip is honoured, a taken one is 409, one outside 400; a full range is 409."""
        daemon = self.daemon

        def create(group: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            status, _, data = daemon.request("POST", f"/hostgroup/{group}/nodes", body)
            return status, json.loads(data)

        status, node = create("iso", {"ip": "10.77.0.14"})
        self.assertEqual((status, node["ip"]), (201, "10.77.0.14"))
        self.assertEqual(create("iso", {"ip": "10.77.0.2"})[1]["code"], "ip_taken")
        self.assertEqual(create("iso", {"ip": "10.77.0.13"})[1]["code"], "ip_out_of_range")
        self.assertEqual(create("iso", {"ip": "192.168.1.2"})[1]["code"], "ip_out_of_range")
        self.assertEqual(create("iso", {"ip": "nonsense"})[1]["code"], "invalid_ip")
        status, extra = create("dro", {})
        self.assertEqual((status, extra["ip"]), (201, "10.77.0.22"))
        status, body = create("dro", {})
        self.assertEqual((status, body["code"]), (409, "no_free_address"))
        for hostname, group in ((node["hostname"], "iso"), (extra["hostname"], "dro")):
            daemon.json("DELETE", f"/hostgroup/{group}/nodes/{hostname}")
        self.assertNotIn("vms-0a4d000e", network_objects())
        self.assertNotIn("vmh0a4d0016", network_objects())
        # The freed addresses are handed out again.
        status, again = create("dro", {})
        self.assertEqual((status, again["ip"]), (201, "10.77.0.22"))
        daemon.json("DELETE", f"/hostgroup/dro/nodes/{again['hostname']}")

    def test_failed_create_leaves_no_network(self) -> None:
        """A create whose wait runs out (408) removes the node's namespace and veth with everything else."""
        status, _, data = self.daemon.request("POST", "/hostgroup/iso/nodes?wait=agent&timeout=1s", {"ip": "10.77.0.10"})
        self.assertEqual(status, 408, data)
        self.assertEqual([n for n in network_objects() if n.endswith("0a4d000a")], [])
        self.assertNotIn("10.77.0.10", [n["ip"] for n in self.daemon.nodes().values()])

    def test_suspend_restore_keeps_network(self) -> None:
        """A suspended VM's namespace is removed; after restore it is back and the VM reaches its server again."""
        self.assertEqual(self.daemon.post("/vm/iso-2/suspend"), b"iso-2 suspended\n")
        self.assertNotIn("vms-0a4d0006", network_objects())
        self.daemon.post("/vm/iso-2/restore?wait=agent&timeout=60s")
        self.assertIn("vms-0a4d0006", network_objects())
        self.assertTrue(self.reach("iso-2", SERVER_IP, self.server.port))

    def test_restore_after_traffic_reaches_server_at_once(self) -> None:
        """
        A VM that used its network just before suspend reaches its server right
        after restore, like one that did not (test_suspend_restore_keeps_network).
        """
        self.assertTrue(self.reach("iso-2", SERVER_IP, self.server.port))
        self.daemon.post("/vm/iso-2/suspend")
        self.daemon.post("/vm/iso-2/restore?wait=agent&timeout=60s")
        self.assertTrue(
            self.reach("iso-2", SERVER_IP, self.server.port),
            "no network after restore: " + self.daemon.run("iso-2", "ip neigh show dev eth0")[1]
            + " vs tap0 " + sh("ip -n vms-0a4d0006 -br link show tap0"),
        )

    def test_objects_follow_nodes(self) -> None:
        """
        Each running isolated VM has exactly its namespace and host veth;
        nothing else of this daemon's range (10.77.0.x) exists (other
        modules' daemons, running side by side, have ranges of their own).
        """
        ips = ["0a4d0002", "0a4d0006", "0a4d0012"]
        expected = sorted([f"vms-{ip}" for ip in ips] + [f"vmh{ip}" for ip in ips])
        ours = ("vms-0a4d00", "vmh0a4d00", "vmt0a4d00")
        self.daemon.wait_for("network objects", lambda: network_objects(ours) == expected, 10)


class BridgeTests(NetworkTestCase):
    """Two VMs on a bridge the daemon makes: they reach each other and the host."""

    BRIDGE = "vmstbr0"

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.server = HelloServer()
        cls.daemon = Daemon(groups=[{
            "name": "br", "vcpu": 1, "ram_mb": 256, "storage_size": "1G",
            "network": {"mode": "bridge", "bridge": cls.BRIDGE, "gateway": "10.78.0.1/24", "range": "10.78.0.0/28"},
        }])
        cls.daemon.start()
        for _ in range(2):
            cls.daemon.json("POST", "/hostgroup/br/nodes?wait=agent&timeout=2m", {}, expect=201)

    @classmethod
    def _stop_shared(cls) -> None:
        super()._stop_shared()
        subprocess.run(["ip", "link", "delete", cls.BRIDGE], capture_output=True)

    def test_vms_reach_each_other_and_the_host(self) -> None:
        """br-1 → br-2 and br-1 → the gateway on the host both connect; addresses skip the gateway."""
        self.assertEqual({h: n["ip"] for h, n in self.daemon.nodes().items()}, {"br-1": "10.78.0.2", "br-2": "10.78.0.3"})
        self.serve_in("br-2", 8081)
        self.assertTrue(self.reach("br-1", "10.78.0.3", 8081))
        self.assertTrue(self.reach("br-1", "10.78.0.1", self.server.port))


class BridgeCleanupTests(SynchronousTestCase):
    def test_stop_removes_bridge_and_taps(self) -> None:
        """Deleting a node removes its tap; stopping the daemon removes the bridge it made, and its taps."""
        ensure_image()
        bridge = "vmstbr1"
        daemon = Daemon(groups=[{
            "name": "br", "vcpu": 1, "ram_mb": 256, "storage_size": "1G",
            "network": {"mode": "bridge", "bridge": bridge, "gateway": "10.78.1.1/24"},
        }])
        self.addCleanup(lambda: subprocess.run(["ip", "link", "delete", bridge], capture_output=True))
        self.addCleanup(daemon.cleanup)
        daemon.start()
        first = daemon.json("POST", "/hostgroup/br/nodes", {}, expect=201)
        daemon.json("POST", "/hostgroup/br/nodes", {}, expect=201)
        self.assertEqual(network_objects(("vmt0a4e01", bridge)), [bridge, "vmt0a4e0102", "vmt0a4e0103"])
        daemon.json("DELETE", f"/hostgroup/br/nodes/{first['hostname']}")
        self.assertEqual(network_objects(("vmt0a4e01", bridge)), [bridge, "vmt0a4e0103"])
        daemon.stop()
        self.assertEqual(network_objects(("vmt0a4e01", bridge)), [])


class TenantTests(SynchronousTestCase):
    """Two daemons, one per tenant, each on its own UNIX socket, range and state directory."""

    def tenant(self, name: str, network_range: str) -> Daemon:
        daemon = Daemon(groups=[{
            "name": "demo", "vcpu": 1, "ram_mb": 256, "storage_size": "1G",
            "network": {"mode": "isolated", "range": network_range},
        }])
        daemon.api.clear()
        daemon.api.update({"bind_address": os.path.join(daemon.root, f"{name}.sock")})
        self.addCleanup(daemon.cleanup)
        return daemon

    def refused(self, daemon: Daemon) -> str:
        return daemon.refused_start()

    def test_two_tenants(self) -> None:
        """Each tenant sees and manages only its own nodes, both named demo-1; an overlapping third is refused."""
        ensure_image()
        a = self.tenant("a", "10.79.0.0/28")
        b = self.tenant("b", "10.79.1.0/28")
        a.start()
        b.start()
        a.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=2m", {}, expect=201)
        b.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=2m", {}, expect=201)
        b.json("POST", "/hostgroup/demo/nodes", {}, expect=201)
        self.assertEqual({h: n["ip"] for h, n in a.nodes().items()}, {"demo-1": "10.79.0.2"})
        self.assertEqual(sorted(b.nodes()), ["demo-1", "demo-2"])
        self.assertEqual(a.run("demo-1", "ip -4 -o addr show eth0")[1].split()[3], "10.79.0.2/30")
        self.assertEqual(b.run("demo-1", "ip -4 -o addr show eth0")[1].split()[3], "10.79.1.2/30")
        # b's demo-2 does not exist for a: not listed, no exec, no copy, no delete.
        self.assertEqual(a.request("POST", "/vm/demo-2/exec?cmd=true")[0], 404)
        self.assertEqual(a.request("GET", "/vm/demo-2/cp?path=/etc/hostname")[0], 404)
        self.assertEqual(a.request("DELETE", "/hostgroup/demo/nodes/demo-2")[0], 404)
        # A third daemon whose range overlaps a's refuses to start, naming both.
        line = self.refused(self.tenant("c", "10.79.0.8/29"))
        self.assertIn("10.79.0.8/29 overlaps 10.79.0.0/28", line)
        self.assertIn(a.state_dir, line)
        # Deleting a's node leaves b's alone.
        a.json("DELETE", "/hostgroup/demo/nodes/demo-1")
        self.assertEqual(b.run("demo-1", "echo alive"), (0, "alive\n"))

    def test_overlap_in_one_config(self) -> None:
        """Two groups of one configuration with overlapping ranges: the daemon refuses to start."""
        daemon = Daemon(groups=[
            {"name": "one", "network": {"mode": "isolated", "range": "10.79.8.0/24"}},
            {"name": "two", "network": {"mode": "isolated", "range": "10.79.8.128/25"}},
        ])
        self.addCleanup(daemon.cleanup)
        self.assertIn("overlaps", self.refused(daemon))
