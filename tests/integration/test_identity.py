# -*- test-case-name: tests.integration.test_identity -*-
"""
``adopt`` on real guests: two nodes booted by the daemon on a bridge, then
adopted through an :class:`~vmservice.agent.client.AgentClient` of the test's
own, with the identities a clone would get, and checked by exec.

The daemon holds each node's agent socket (QEMU serves one connection at a
time), so the test takes it over the way a crash would: ``kill -9`` of the
daemon leaves the VMs running, the test connects to their agent sockets, and
afterwards a new daemon recovers the nodes and must still run commands in them.
"""

from __future__ import annotations

import signal
import subprocess
import time
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase
from zope.interface import implementer

from tests.integration.daemon import Daemon, ensure_image
from tests.integration.faults import network_objects
from tests.integration.greeting import CLIENT, HelloServer
from vmservice.agent.client import AgentClient
from vmservice.errors import AgentError
from vmservice.guestport.exec import ExecRequest, IExecSink
from vmservice.guestport.identity import GuestIdentity, GuestNet, new_identity

BRIDGE = "vmstbr7"
GATEWAY = "10.78.7.1"
GROUP = {
    "name": "adopt", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G",
    "network": {"mode": "bridge", "bridge": BRIDGE, "gateway": f"{GATEWAY}/24", "range": "10.78.7.0/28"},
}
DAY_NS = 86_400 * 10**9


@implementer(IExecSink)
class _Output:
    """An exec's stdout and exit code."""

    def __init__(self) -> None:
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.done: Deferred[tuple[int, bytes]] = Deferred()

    def started(self, pid: int) -> None:
        pass

    def output(self, name: str, data: bytes) -> None:
        (self.stdout if name == "stdout" else self.stderr).extend(data)

    def exited(self, exit_code: int, signal: str | None) -> None:
        self.done.callback((exit_code, bytes(self.stdout)))

    def failed(self, message: str, exit_code: int) -> None:
        self.done.callback((exit_code, message.encode()))

    def lost(self, error: AgentError) -> None:
        self.done.errback(error)


async def run(agent: AgentClient, line: str) -> tuple[int, str]:
    """Run a shell line in the guest through ``agent``: its exit code and stdout."""
    sink = _Output()
    agent.exec(ExecRequest(cmd=line), sink)
    code, out = await sink.done
    return code, out.decode()


def remove_network() -> None:
    for name in network_objects(("vmt0a4e07",)):
        subprocess.run(["ip", "link", "delete", name], capture_output=True)
    subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True)


class AdoptionTestCase(TestCase):
    """Takes a node's agent over from a daemon killed with ``kill -9``; checks an identity by exec."""

    timeout = 900

    async def agent(self, daemon: Daemon, hostname: str) -> AgentClient:
        client = AgentClient(reactor, f"{daemon.state_dir}/nodes/{hostname}/agent.sock")  # type: ignore[arg-type]
        client.start()
        self.addCleanup(client.stop)
        ready = client.when_ready()
        timer = reactor.callLater(120, ready.cancel)  # type: ignore[attr-defined]
        await ready
        timer.cancel()
        return client

    async def check(self, agent: AgentClient, identity: GuestIdentity, port: int, server: str = GATEWAY) -> None:
        """The guest has ``identity`` and reaches ``server`` (through its gateway) at once."""
        net = identity.net
        assert net is not None

        async def output(line: str) -> str:
            code, out = await run(agent, line)
            self.assertEqual(code, 0, f"{line}: {out}")
            return out

        self.assertEqual(await output("hostname; cat /etc/hostname"), f"{identity.hostname}\n" * 2)
        self.assertEqual(await output("cat /etc/hosts"),
                         f"127.0.0.1\tlocalhost\n127.0.1.1\t{identity.hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n")
        self.assertEqual(await output("cat /etc/machine-id"), f"{identity.machine_id}\n")
        self.assertIn(f"link/ether {net.mac} ", await output("ip link show eth0"))
        addresses = [line.split()[1] for line in (await output("ip -4 addr show eth0")).splitlines()
                     if line.strip().startswith("inet ")]
        self.assertEqual(addresses, [net.address])
        self.assertIn(f"default via {net.gateway} dev eth0", await output("ip route"))
        reached: Any = await run(agent, f"{CLIENT} {server} {port}")
        self.assertEqual(reached[0], 0, f"{server} did not answer through the gateway")


class AdoptionTests(AdoptionTestCase):
    """Two real guests on a bridge adopt new identities."""

    def identity(self, hostname: str, number: int, wall_clock_ns: int) -> GuestIdentity:
        net = GuestNet(f"52:54:00:ab:07:{number:02x}", f"10.78.7.{number}/24", GATEWAY)
        return new_identity(hostname, net, wall_clock_ns)

    async def test_adopt(self) -> None:
        """
        After adopt: the hostname (kernel, /etc/hostname, /etc/hosts), the
        machine-id, eth0's MAC, its only address and the default route are the
        new ones; the gateway answers at once; the clock is what was sent; the
        agent's nonce changed and exec works in the new session (preparing first
        changes nothing).  A second adopt
        with other entropy changes them again; two guests adopted with different
        entropy read different bytes from /dev/urandom right after.  A daemon
        started afterwards recovers the nodes and runs commands in them.
        """
        ensure_image()
        remove_network()
        self.addCleanup(remove_network)
        daemon = Daemon(groups=[GROUP])
        self.addCleanup(daemon.cleanup)
        server = HelloServer()
        self.addCleanup(server.close)
        daemon.start()
        hostnames = [daemon.json("POST", "/hostgroup/adopt/nodes?wait=agent&timeout=3m", {}, expect=201)["hostname"]
                     for _ in range(2)]
        daemon.stop(signal.SIGKILL)
        first, second = [await self.agent(daemon, hostname) for hostname in hostnames]

        # A day behind: the clock is unmistakably the one sent.
        behind = time.time_ns() - DAY_NS
        identity = self.identity("adopted-one", 12, behind)
        nonce = first.guest_nonce
        self.assertIsNotNone(nonce)
        # Preparing (what a template does) adopts nothing and keeps the session.
        await first.prepare_adoption()
        self.assertEqual(first.guest_nonce, nonce)
        self.assertNotEqual((await run(first, "hostname"))[1], "adopted-one\n")
        await first.adopt(identity)
        self.assertTrue(first.connected)
        self.assertNotIn(first.guest_nonce, (None, nonce))
        await self.check(first, identity, server.port)
        code, out = await run(first, "date +%s")
        self.assertEqual(code, 0)
        self.assertLess(abs(int(out) - behind // 10**9), 120, out)

        # Again, now with the right time, other entropy, MAC and address.
        nonce = first.guest_nonce
        identity = self.identity("adopted-two", 13, time.time_ns())
        await first.adopt(identity)
        self.assertNotIn(first.guest_nonce, (None, nonce))
        await self.check(first, identity, server.port)
        code, out = await run(first, "date +%s")
        self.assertLess(abs(int(out) - time.time()), 60, out)

        # Both guests adopted with different entropy, then read at once.
        other = self.identity("adopted-three", 14, time.time_ns())
        await second.adopt(other)
        await self.check(second, other, server.port)
        reads = []
        for agent in (first, second):
            await agent.adopt(self.identity(f"again-{len(reads)}", 12 + 2 * len(reads), time.time_ns()))
            code, out = await run(agent, "od -An -tx1 -N32 /dev/urandom | tr -d ' \\n'")
            self.assertEqual((code, len(out)), (0, 64), out)
            reads.append(out)
        self.assertNotEqual(reads[0], reads[1])
        self.assertNotEqual(first.guest_nonce, second.guest_nonce)

        # A new daemon takes the nodes back and reaches them.
        for agent in (first, second):
            await agent.stop()
        daemon.start()
        daemon.wait_for("the recovered agents", lambda: all(
            daemon.request("GET", f"/vm/{hostname}/health", timeout=10)[0] == 200 for hostname in hostnames), 120)
        self.assertEqual(daemon.run(hostnames[0], "hostname"), (0, "again-0\n"))
        self.assertEqual(daemon.run(hostnames[1], f"{CLIENT} {GATEWAY} {server.port}")[0], 0)
        for hostname in hostnames:
            daemon.json("DELETE", f"/hostgroup/adopt/nodes/{hostname}")


#: The isolated test's own server: an address on a veth pair of its own (the names differ from
#: test_network's, which may run at the same time).
ISOLATED_LINK = "vmstid0"
ISOLATED_SERVER = "10.98.7.1"


def remove_isolated_link() -> None:
    subprocess.run(["ip", "link", "delete", ISOLATED_LINK], capture_output=True)


class IsolatedAdoptionTests(AdoptionTestCase):
    """A real guest in isolated mode (its own namespace, its gateway there) adopts a new identity."""

    async def test_adopt_isolated(self) -> None:
        """
        The guest keeps its leased address (the only one its namespace routes) with
        a new MAC, hostname and machine-id: the address is flushed and added again,
        the default route is back, and a server in the group's ``allow`` list answers
        at once; a daemon started afterwards runs commands in it.
        """
        ensure_image()
        remove_isolated_link()
        subprocess.run(f"ip link add {ISOLATED_LINK} type veth peer name {ISOLATED_LINK[:-1]}1"
                       f" && ip addr add {ISOLATED_SERVER}/24 dev {ISOLATED_LINK} && ip link set {ISOLATED_LINK} up"
                       f" && ip link set {ISOLATED_LINK[:-1]}1 up", shell=True, check=True)
        self.addCleanup(remove_isolated_link)
        daemon = Daemon(groups=[{
            "name": "iso", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G",
            "network": {"mode": "isolated", "range": "10.81.7.0/28", "allow": ["10.98.7.0/24"]},
        }])
        self.addCleanup(daemon.cleanup)
        server = HelloServer()
        self.addCleanup(server.close)
        daemon.start()
        node = daemon.json("POST", "/hostgroup/iso/nodes?wait=agent&timeout=3m", {}, expect=201)
        daemon.stop(signal.SIGKILL)
        agent = await self.agent(daemon, node["hostname"])
        code, route = await run(agent, "ip route show default")
        gateway = route.split()[2]
        self.assertEqual(code, 0)
        identity = new_identity("isolated-one", GuestNet("52:54:00:ab:07:21", f"{node['ip']}/30", gateway),
                                time.time_ns())
        nonce = agent.guest_nonce
        await agent.adopt(identity)
        self.assertNotIn(agent.guest_nonce, (None, nonce))
        await self.check(agent, identity, server.port, ISOLATED_SERVER)
        await agent.stop()
        daemon.start()
        daemon.wait_for("the recovered agent", lambda: daemon.request(
            "GET", f"/vm/{node['hostname']}/health", timeout=10)[0] == 200, 120)
        self.assertEqual(daemon.run(node["hostname"], f"hostname; {CLIENT} {ISOLATED_SERVER} {server.port}"),
                         (0, "isolated-one\n"))
        daemon.json("DELETE", f"/hostgroup/iso/nodes/{node['hostname']}")
