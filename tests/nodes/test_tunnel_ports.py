"""
A host group's ``tunnel_ports`` through the fleet on fakes: a boot's VM has as
many tunnel ports as its group says (none with 0), recorded in the node's
record; a restore gives the VM as many as its saved state had (none for a
record from before them), whatever the group says now; a warm group's
template is keyed by them.
"""

from __future__ import annotations

import os

from attrs import evolve
from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import FakeMachine
from tests.nodes.fleet_case import LifecycleTestCase
from tests.nodes.warm_fleets import started_fleet
from vmservice.config import HostGroupConfig
from vmservice.nodes.model import CreateRequest, Wait
from vmservice.nodes.warm.template_supply import template_key

MiB = 1024 * 1024
GROUPS = (
    HostGroupConfig(name="ported", vcpu=1, ram_bytes=256 * MiB),
    HostGroupConfig(name="two", vcpu=1, ram_bytes=256 * MiB, tunnel_ports=2),
    HostGroupConfig(name="none", vcpu=1, ram_bytes=256 * MiB, tunnel_ports=0),
    HostGroupConfig(name="warm", vcpu=1, ram_bytes=256 * MiB, warm=True),
)


class BootTests(SynchronousTestCase):
    def machine(self, group: str) -> FakeMachine:
        self.successResultOf(Deferred.fromCoroutine(self.fleet.create(group, CreateRequest(), Wait.NONE, 60)))
        return self.harness.driver.machines[-1]

    def test_group_count(self) -> None:
        """4 by default, as many as the group says, none with 0; the record keeps the count."""
        self.harness, self.fleet = started_fleet(self, GROUPS)
        counts = [len(self.machine(group).spec.tunnel_sockets) for group in ("ported", "two", "none")]
        self.assertEqual(counts, [4, 2, 0])
        self.assertEqual(os.path.basename(self.harness.driver.machines[1].spec.tunnel_sockets[1]), "tun1.sock")
        records = {record.hostgroup: record.tunnel_ports for record in self.harness.parts.store.load_all()[0]}
        self.assertEqual(records, {"ported": 4, "two": 2, "none": 0})

    def test_template_keyed(self) -> None:
        """A warm group's template key has its count: another count, another template."""
        self.harness, self.fleet = started_fleet(self, GROUPS)
        key = template_key(GROUPS[3], 256 * MiB, 1, self.harness.image, self.harness.driver)
        self.assertEqual(key.tunnel_ports, 4)
        none = template_key(evolve(GROUPS[3], tunnel_ports=0), 256 * MiB, 1, self.harness.image, self.harness.driver)
        self.assertNotEqual(key.digest(), none.digest())


class RestoreTests(LifecycleTestCase):
    """A restore gives the VM the tunnel ports its saved state was taken with."""

    groups = (HostGroupConfig(name="demo", vcpu=1, ram_bytes=256 * MiB),)

    def test_restore_keeps_the_count(self) -> None:
        """Suspended with 4, restored with 4; a record from before the ports restores without any."""
        self.create()
        self.assertEqual(len(self.h.driver.machines[0].spec.tunnel_sockets), 4)
        self.ok(self.fleet.snapshots.suspend("demo-1"))
        self.ok(self.fleet.snapshots.restore("demo-1", Wait.NONE, 300.0))
        self.assertEqual(len(self.h.driver.machines[1].spec.tunnel_sockets), 4)
        self.ok(self.fleet.snapshots.suspend("demo-1"))
        node = self.fleet._registry.find("demo-1")
        assert node is not None
        node.record = evolve(node.record, tunnel_ports=0)  # as a record written before the ports
        self.ok(self.fleet.snapshots.restore("demo-1", Wait.NONE, 300.0))
        self.assertEqual(self.h.driver.machines[2].spec.tunnel_sockets, ())
