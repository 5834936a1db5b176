"""
Tests for the fleet's networking on fakes: addresses of new nodes
(automatic, requested, refused, exhausted), attach before the disk and
all-or-nothing creates, detach on every way a VM ends (delete, own end,
suspend, failed relaunch, daemon stop), and the start-up clean-up of
leftovers with every known node's address kept.
"""

from __future__ import annotations

import os
import tempfile
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from typing import Any, Coroutine

from twisted.internet.defer import Deferred, fail
from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import FakeDriver, FakeNetwork, FleetHarness
from vmservice.config import HostGroupConfig, NetworkConfig
from vmservice.errors import BadRequest, Conflict, Internal
from vmservice.hypervisors.base import HypervisorError, NetSpec
from vmservice.network.ipam import Lease
from vmservice.nodes.model import CreateRequest, NodeRecord, Status, Wait

MiB = 1024 * 1024

#: Two VM slots: 10.77.0.2 and 10.77.0.6.
ISOLATED = NetworkConfig(mode="isolated", range=IPv4Network("10.77.0.0/29"))
BRIDGED = NetworkConfig(mode="bridge", bridge="br0", gateway=IPv4Interface("192.168.137.1/24"),
                        range=IPv4Network("192.168.137.128/25"))
GROUPS = (
    HostGroupConfig(name="iso", vcpu=1, ram_bytes=256 * MiB, network=ISOLATED),
    HostGroupConfig(name="lan", vcpu=1, ram_bytes=256 * MiB, network=BRIDGED),
    HostGroupConfig(name="plain", vcpu=1, ram_bytes=256 * MiB),
)


def short_dir() -> str:
    """A new short-named directory under trial's working directory (UNIX socket paths must stay short)."""
    return os.path.relpath(tempfile.mkdtemp(prefix="nt", dir="."))


class NetworkFleetTestCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.state_dir = short_dir()
        self.h = self.harness()

    def harness(self, driver: FakeDriver | None = None, network: FakeNetwork | None = None) -> FleetHarness:
        h = FleetHarness(self.state_dir, GROUPS, driver, network)
        h.fleet.startService()
        return h

    @property
    def fleet(self) -> Any:
        return self.h.fleet

    @property
    def network(self) -> FakeNetwork:
        return self.h.network

    def do(self, coroutine: Coroutine[Any, Any, Any]) -> Deferred[Any]:
        return Deferred.fromCoroutine(coroutine)

    def ok(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return self.successResultOf(self.do(coroutine))

    def fails(self, coroutine: Coroutine[Any, Any, Any], kind: type[Exception], code: str, status: int) -> Exception:
        error = self.failureResultOf(self.do(coroutine), kind).value
        self.assertEqual((error.code, error.status), (code, status), str(error))
        return error

    def create(self, group: str = "iso", **request: Any) -> NodeRecord:
        return self.ok(self.fleet.create(group, CreateRequest(**request), Wait.NONE, 300.0))

    def stored(self, hostname: str) -> NodeRecord | None:
        records, _ = self.h.store.load_all()
        return {r.hostname: r for r in records}.get(hostname)

    def restart(self, network: FakeNetwork | None = None) -> FleetHarness:
        """Crash the daemon (its VMs keep running) and start a new one on the same state and machines."""
        self.h.crash()
        self.h = self.harness(self.h.driver, network)
        return self.h


class AddressTests(NetworkFleetTestCase):
    def test_first_and_next_slot(self) -> None:
        """The first node takes the first /30 slot's VM address, the second the next; both are attached."""
        first = self.create()
        second = self.create()
        self.assertEqual((first.ip, second.ip), ("10.77.0.2", "10.77.0.6"))
        self.assertEqual(self.stored(first.hostname).ip, "10.77.0.2")
        self.assertEqual(self.fleet.node(second.hostname).ip, "10.77.0.6")
        self.assertEqual(self.network.attached, {
            "10.77.0.2": Lease(IPv4Interface("10.77.0.2/30"), IPv4Address("10.77.0.1")),
            "10.77.0.6": Lease(IPv4Interface("10.77.0.6/30"), IPv4Address("10.77.0.5")),
        })

    def test_spec_carries_net(self) -> None:
        """The VM is started with what attach returned."""
        self.create()
        self.assertEqual(self.h.driver.machines[0].spec.net,
                         NetSpec("tap0", "52:54:00:00:00:01", "10.77.0.2/30", "10.77.0.1", "vms-0a4d0002"))

    def test_bridge_group(self) -> None:
        """A bridge group's nodes take the range's hosts, with the gateway network's prefix."""
        record = self.create("lan")
        self.assertEqual(record.ip, "192.168.137.129")
        spec = self.h.driver.machines[0].spec.net
        self.assertEqual((spec.address, spec.gateway, spec.netns), ("192.168.137.129/24", "192.168.137.1", None))

    def test_no_network(self) -> None:
        """A group without a network gives no address and attaches nothing."""
        record = self.create("plain")
        self.assertEqual(record.ip, "")
        self.assertIsNone(self.h.driver.machines[0].spec.net)
        self.assertEqual(self.network.attached, {})

    def test_requested_ip(self) -> None:
        """A requested free VM address is used; automatic ones then skip it."""
        self.assertEqual(self.create(ip="10.77.0.6").ip, "10.77.0.6")
        self.assertEqual(self.create().ip, "10.77.0.2")
        self.assertEqual(set(self.network.attached), {"10.77.0.2", "10.77.0.6"})

    def test_requested_ip_taken(self) -> None:
        """A requested address another node holds is 409 ip_taken, and nothing is made."""
        self.create()
        self.fails(self.fleet.create("iso", CreateRequest(ip="10.77.0.2"), Wait.NONE, 300.0), Conflict, "ip_taken", 409)
        self.assertEqual(len(self.fleet.list()), 1)
        self.assertEqual(len(self.h.driver.machines), 1)

    def test_requested_ip_outside(self) -> None:
        """A requested address outside the range (or not a VM address of a slot) is 400 ip_out_of_range."""
        for ip in ("10.78.0.2", "10.77.0.1", "10.77.0.3", "192.168.137.130"):
            self.fails(self.fleet.create("iso", CreateRequest(ip=ip), Wait.NONE, 300.0), BadRequest, "ip_out_of_range", 400)
        self.fails(self.fleet.create("iso", CreateRequest(ip="ten"), Wait.NONE, 300.0), BadRequest, "invalid_ip", 400)
        self.assertEqual((self.fleet.list(), self.h.driver.machines, self.network.attached), ([], [], {}))
        self.assertEqual(self.h.store.load_all(), ([], []))

    def test_ip_without_network(self) -> None:
        """An address for a group without a network is 400 not_supported."""
        self.fails(self.fleet.create("plain", CreateRequest(ip="10.77.0.2"), Wait.NONE, 300.0), BadRequest, "not_supported", 400)
        self.assertEqual(self.fleet.list(), [])

    def test_exhausted(self) -> None:
        """Once every slot is used a create is 409 no_free_address, and nothing is left of it."""
        self.create()
        self.create()
        self.fails(self.fleet.create("iso", CreateRequest(), Wait.NONE, 300.0), Conflict, "no_free_address", 409)
        self.assertEqual(len(self.fleet.list()), 2)
        self.assertEqual(len(self.h.store.load_all()[0]), 2)

    def test_other_groups_do_not_use_slots(self) -> None:
        """Nodes of other groups (with or without a network) leave the group's slots free."""
        self.create("plain")
        self.create("lan")
        self.assertEqual(self.create().ip, "10.77.0.2")

    def test_deleted_address_reused(self) -> None:
        """A deleted node's address is free again."""
        first = self.create()
        self.create()
        self.ok(self.fleet.delete("iso", first.hostname))
        self.assertEqual(self.create().ip, "10.77.0.2")


class AttachFailureTests(NetworkFleetTestCase):
    def test_nothing_left(self) -> None:
        """An attach that fails is 500 network_failed: no record, disk, VM or attachment is left, the address is free."""
        self.network.failing = "RTNETLINK answers: Operation not permitted"
        error = self.fails(self.fleet.create("iso", CreateRequest(), Wait.NONE, 300.0), Internal, "network_failed", 500)
        self.assertIn("Operation not permitted", str(error))
        self.assertEqual(self.h.store.load_all(), ([], []))
        self.assertFalse(os.path.exists(self.h.store.node_dir("iso-1")))
        self.assertEqual(self.h.disks.created, [])
        self.assertEqual(self.h.driver.machines, [])
        self.assertEqual(self.network.attached, {})
        self.assertEqual(self.fleet.list(), [])
        self.network.failing = None
        self.assertEqual(self.create().ip, "10.77.0.2")

    def test_no_network_support(self) -> None:
        """A fleet without a network attacher refuses nodes of a network group with 500 network_failed."""
        self.patch(self.h.parts.addressing, "_network", None)
        self.fails(self.fleet.create("iso", CreateRequest(), Wait.NONE, 300.0), Internal, "network_failed", 500)
        self.assertEqual(self.h.store.load_all(), ([], []))
        self.assertEqual(self.create("plain").ip, "")


class DetachTests(NetworkFleetTestCase):
    def test_delete(self) -> None:
        """Delete detaches the node's address."""
        record = self.create()
        self.ok(self.fleet.delete("iso", record.hostname))
        self.assertEqual(self.network.detached, ["10.77.0.2"])
        self.assertEqual(self.network.attached, {})

    def test_delete_without_network(self) -> None:
        """A node without an address detaches nothing."""
        record = self.create("plain")
        self.ok(self.fleet.delete("plain", record.hostname))
        self.assertEqual(self.network.detached, [])

    def test_ephemeral_end(self) -> None:
        """An ephemeral VM that ends on its own is removed and detached."""
        self.create()
        self.h.driver.machines[0].end(0)
        self.assertEqual(self.network.detached, ["10.77.0.2"])
        self.assertEqual(self.fleet.list(), [])

    def test_persistent_end_and_relaunch(self) -> None:
        """A persistent VM that ends is Stopped and detached, keeps its address, and a relaunch attaches it again."""
        record = self.create(persistent=True)
        self.h.driver.machines[0].end(0)
        self.assertEqual(self.network.detached, ["10.77.0.2"])
        self.assertEqual((self.stored(record.hostname).status, self.stored(record.hostname).ip),
                         (Status.STOPPED, "10.77.0.2"))
        self.assertEqual(self.create().ip, "10.77.0.6", "a stopped node keeps its address")
        self.ok(self.fleet.lifecycle.relaunch(record.hostname, Wait.NONE, 0))
        self.assertIn("10.77.0.2", self.network.attached)
        self.assertEqual(self.h.driver.machines[-1].spec.net.address, "10.77.0.2/30")

    def test_suspend_and_restore(self) -> None:
        """Suspend detaches; restore attaches the same address again."""
        record = self.create()
        self.ok(self.fleet.snapshots.suspend(record.hostname))
        self.assertEqual(self.network.detached, ["10.77.0.2"])
        self.assertEqual(self.network.attached, {})
        self.ok(self.fleet.snapshots.restore(record.hostname, Wait.NONE, 0))
        self.assertIn("10.77.0.2", self.network.attached)
        self.assertEqual(self.h.driver.machines[-1].spec.net.address, "10.77.0.2/30")

    def test_relaunch_failure(self) -> None:
        """A relaunch whose VM cannot start detaches again and leaves the node Stopped."""
        record = self.create(persistent=True)
        self.h.driver.machines[0].end(0)
        self.patch(self.h.driver, "start", lambda spec, log_path=None: fail(HypervisorError("no qemu")))
        failure = self.failureResultOf(self.do(self.fleet.lifecycle.relaunch(record.hostname, Wait.NONE, 0)), Internal)
        self.assertEqual(failure.value.code, "boot_failed")
        self.assertEqual(self.network.detached, ["10.77.0.2", "10.77.0.2"])
        self.assertEqual(self.network.attached, {})
        self.assertEqual(self.stored(record.hostname).status, Status.STOPPED)

    def test_relaunch_attach_failure(self) -> None:
        """A relaunch whose attach fails is 500 network_failed and leaves the node Stopped, no VM started."""
        record = self.create(persistent=True)
        self.h.driver.machines[0].end(0)
        self.network.failing = "no"
        self.fails(self.fleet.lifecycle.relaunch(record.hostname, Wait.NONE, 0), Internal, "network_failed", 500)
        self.assertEqual(len(self.h.driver.machines), 1)
        self.assertEqual(self.stored(record.hostname).status, Status.STOPPED)

    def test_daemon_stop(self) -> None:
        """The daemon's stop detaches every running node and closes the network."""
        self.create()
        self.create(persistent=True)
        self.create("lan")
        self.create("plain")
        self.successResultOf(self.fleet.stopService())
        self.assertEqual(sorted(self.network.detached), ["10.77.0.2", "10.77.0.6", "192.168.137.129"])
        self.assertEqual(self.network.attached, {})
        self.assertTrue(self.network.closed)

    def test_daemon_stop_idle(self) -> None:
        """With no node the stop still closes the network (bridges made by this run)."""
        self.successResultOf(self.fleet.stopService())
        self.assertTrue(self.network.closed)


class RecoveryTests(NetworkFleetTestCase):
    def test_keep_surviving(self) -> None:
        """After a crash, clean_orphans keeps the adopted nodes' addresses; they are not detached."""
        self.create()
        self.create("lan")
        self.create("plain")
        network = FakeNetwork()
        self.restart(network)
        self.assertEqual(network.cleaned, [["10.77.0.2", "192.168.137.129"]])
        self.assertEqual(network.detached, [])

    def test_dead_nodes(self) -> None:
        """Nodes whose VM died meanwhile are detached; a removed ephemeral one is not kept, a Stopped persistent one is."""
        self.create()
        self.create(persistent=True)
        self.create("lan")
        # The daemon crashes, then the first two VMs die while none runs.
        self.h.crash()
        self.h.driver.machines[0].end(None, 9)
        self.h.driver.machines[1].end(None, 9)
        network = FakeNetwork()
        self.restart(network)
        self.assertEqual(sorted(network.detached), ["10.77.0.2", "10.77.0.6"])
        self.assertEqual(network.cleaned, [["10.77.0.6", "192.168.137.129"]])
        self.assertEqual([(r.ip, r.status) for r in self.fleet.list()],
                         [("10.77.0.6", Status.STOPPED), ("192.168.137.129", Status.RUNNING)])

    def test_clean_start(self) -> None:
        """A first start cleans with nothing to keep."""
        self.assertEqual(self.network.cleaned, [[]])


class _SlowDetach(FakeNetwork):
    """A network whose detaches wait for :attr:`gate` (as real ``ip`` children take a while)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: Deferred[None] = Deferred()

    async def detach(self, network: Any, ip: Any) -> None:
        await self.gate
        await super().detach(network, ip)


class DetachRaceTests(NetworkFleetTestCase):
    """A VM that ends on its own is detached in the background: what reuses its address must wait for that."""

    def setUp(self) -> None:
        self.state_dir = short_dir()
        self.h = self.harness(network=_SlowDetach())

    def test_relaunch_after_own_end(self) -> None:
        """A relaunch right after the VM ended keeps its new attachment once the old detach completes."""
        record = self.create(persistent=True)
        self.h.driver.machines[0].end(0)
        d = self.do(self.fleet.lifecycle.relaunch(record.hostname, Wait.NONE, 0))
        self.network.gate.callback(None)
        self.successResultOf(d)
        self.assertEqual(self.fleet.node(record.hostname).status, Status.RUNNING)
        self.assertIn("10.77.0.2", self.network.attached, "the running node's network was torn down")


    def test_new_node_takes_ended_address(self) -> None:
        """A new node that gets an ended ephemeral node's address keeps its attachment once the old detach completes."""
        self.create()
        self.h.driver.machines[0].end(0)
        d = self.do(self.fleet.create("iso", CreateRequest(), Wait.NONE, 300.0))
        self.assertNoResult(d)  # the new attach waits for the old detach of its address
        self.network.gate.callback(None)
        self.assertEqual(self.successResultOf(d).ip, "10.77.0.2")
        self.assertIn("10.77.0.2", self.network.attached, "the new node's network was torn down")

