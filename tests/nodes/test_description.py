"""
Tests for :mod:`vmservice.nodes.description`: a node's network as its group
says (pure), and whole descriptions on a fleet of fakes: disk, snapshot,
agent, pid, the files the VM started from, and facts left out when they are
not known.
"""

from __future__ import annotations

import os
from ipaddress import IPv4Interface, IPv4Network

from attrs import evolve
from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import FleetHarness
from tests.nodes.fleet_case import LifecycleTestCase
from vmservice.config import HostGroupConfig, NetworkConfig
from vmservice.errors import NotFound
from vmservice.nodes.description import NetworkFacts, NodeDescription, network_facts
from vmservice.nodes.model import Status

MiB = 1024 * 1024

ISOLATED = NetworkConfig(mode="isolated", range=IPv4Network("10.77.0.0/24"),
                         allow=(IPv4Network("10.0.0.0/8"),), drop=(IPv4Network("10.9.0.0/16"),))
BRIDGED = NetworkConfig(mode="bridge", bridge="br0", gateway=IPv4Interface("192.168.137.1/24"))


class NetworkFactsTests(SynchronousTestCase):
    """What a group's configuration says of its node's network."""

    def test_isolated(self) -> None:
        """Isolated: the group's lists, the /30 address, its gateway and the MAC made from the address."""
        group = HostGroupConfig(name="iso", network=ISOLATED)
        self.assertEqual(
            network_facts(group, "10.77.0.6"),
            NetworkFacts("isolated", ("10.0.0.0/8",), ("10.9.0.0/16",), "10.77.0.6/30", "10.77.0.5",
                         "52:54:0a:4d:00:06"),
        )

    def test_bridge(self) -> None:
        """Bridge: no lists, the address in the gateway's network, the bridge."""
        group = HostGroupConfig(name="lan", network=BRIDGED)
        self.assertEqual(
            network_facts(group, "192.168.137.9"),
            NetworkFacts("bridge", (), (), "192.168.137.9/24", "192.168.137.1", "52:54:c0:a8:89:09", "br0"),
        )

    def test_none(self) -> None:
        """A group without a network: mode none and nothing else."""
        self.assertEqual(network_facts(HostGroupConfig(name="plain"), ""), NetworkFacts("none"))

    def test_address_the_range_no_longer_has(self) -> None:
        """An address the group's (reconfigured) range cannot give keeps its MAC but no prefix or gateway."""
        facts = network_facts(HostGroupConfig(name="iso", network=ISOLATED), "10.99.0.2")
        self.assertEqual((facts.address, facts.gateway, facts.mac), (None, None, "52:54:0a:63:00:02"))


class DescribeTests(LifecycleTestCase):
    """Descriptions of nodes on a fleet of fakes."""

    groups = (
        HostGroupConfig(name="demo", vcpu=2, ram_bytes=512 * MiB, storage_size=3 << 30),
        HostGroupConfig(name="iso", vcpu=1, ram_bytes=256 * MiB, network=ISOLATED, image="default"),
    )

    def describe(self, hostname: str = "demo-1") -> NodeDescription:
        result: NodeDescription = self.ok(self.fleet.describe(hostname))
        return result

    def test_running(self) -> None:
        """A running node: its record, group facts, its disk as read, no snapshot, the agent once up, its pid."""
        self.create(tags=("a",), protected=True)
        description = self.describe()
        self.assertEqual(description.record, self.fleet.node("demo-1"))
        self.assertEqual((description.storage, description.image), ("image", "default"))
        self.assertEqual(description.network, NetworkFacts("none"))
        disk = description.disk
        assert disk is not None
        self.assertEqual((disk.path, disk.format, disk.size_bytes, disk.backing_file),
                         (self.path("disk.qcow2"), "qcow2", 3 << 30, self.h.image.rootfs.path))
        self.assertFalse(description.snapshot)
        self.assertFalse(description.agent_connected)
        self.h.agents[0].ready()
        self.assertTrue(self.describe().agent_connected)
        record = self.describe().record
        self.assertEqual((record.pid, record.kernel, record.initrd, record.hypervisor, record.protected),
                         (1000, self.h.image.kernel.path, self.h.image.initrd.path, "fake", True))

    def test_suspended(self) -> None:
        """A suspended node: its snapshot is there, no pid, no agent; clients' status."""
        self.create()
        self.h.agents[0].ready()
        self.ok(self.fleet.snapshots.suspend("demo-1"))
        description = self.describe()
        self.assertTrue(description.snapshot)
        self.assertFalse(description.agent_connected)
        self.assertEqual((description.record.status, description.record.pid), (Status.SUSPENDED, None))

    def test_isolated_network(self) -> None:
        """A node of an isolated group has that group's network facts for its address."""
        record = self.create("iso")
        self.assertEqual(self.describe(record.hostname).network, network_facts(self.groups[1], record.ip))
        self.assertEqual(self.describe(record.hostname).network.mode, "isolated")  # type: ignore[union-attr]

    def test_missing_disk(self) -> None:
        """A disk file that is gone is left out."""
        self.create()
        os.unlink(self.path("disk.qcow2"))
        self.assertIsNone(self.describe().disk)

    def test_group_gone(self) -> None:
        """
        A node whose group is no longer configured has no storage or network facts; its image is the one
        its record names (none for a record from before the image was recorded).
        """
        self.create("iso")
        self.h.crash()
        h = FleetHarness(self.state_dir, self.groups[:1], self.h.driver)
        h.fleet.startService()
        description: NodeDescription = self.successResultOf(Deferred.fromCoroutine(h.fleet.describe("iso-1")))
        self.assertEqual((description.storage, description.image, description.network), (None, "default", None))
        h.store.save(evolve(h.node("iso-1").record, image=""))
        h.crash()
        again = FleetHarness(self.state_dir, self.groups[:1], self.h.driver)
        again.fleet.startService()
        description = self.successResultOf(Deferred.fromCoroutine(again.fleet.describe("iso-1")))
        self.assertIsNone(description.image)

    def test_unknown(self) -> None:
        """An unknown node is NotFound."""
        self.fails(self.fleet.describe("demo-9"), NotFound, "node_not_found")
