# -*- test-case-name: tests.nodes.test_agent_transport -*-
"""
Tests of a host group's ``agent_transport`` (:mod:`vmservice.nodes.agent_transport`)
through the fleet on fakes: it decides whether the VM's spec has a vsock device
(with what the host can do), reaches the agent connection, keys a warm group's
template, is kept across a restore in the node's record (``vsock_channel``),
and a group that insists on vsock on a host without it is refused at create.
"""

from __future__ import annotations

from attrs import evolve
from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import FakeDriver, FakeMachine, FleetHarness
from tests.nodes.fleet_case import LifecycleTestCase
from tests.nodes.warm_fleets import started_fleet
from vmservice.config import HostGroupConfig
from vmservice.errors import Conflict
from vmservice.nodes.agent_transport import group_transport, machine_vsock
from vmservice.nodes.model import CreateRequest, Wait
from vmservice.nodes.warm.template_supply import template_key

MiB = 1024 * 1024
GROUPS = (
    HostGroupConfig(name="auto", vcpu=1, ram_bytes=256 * MiB),
    HostGroupConfig(name="serial", vcpu=1, ram_bytes=256 * MiB, agent_transport="virtio-serial"),
    HostGroupConfig(name="forced", vcpu=1, ram_bytes=256 * MiB, agent_transport="vsock"),
    HostGroupConfig(name="warm", vcpu=1, ram_bytes=256 * MiB, warm=True),
)


class DecisionTests(SynchronousTestCase):
    def test_machine_vsock(self) -> None:
        """auto follows the host; virtio-serial never; vsock always, or a Conflict saying why not."""
        usable, unusable = FakeDriver(), FakeDriver()
        usable.vsock_unusable = None
        self.assertEqual([machine_vsock(t, usable) for t in ("auto", "vsock", "virtio-serial")], [True, True, False])
        self.assertEqual([machine_vsock(t, unusable) for t in ("auto", "virtio-serial")], [False, False])
        with self.assertRaises(Conflict) as raised:
            machine_vsock("vsock", unusable)
        self.assertEqual(raised.exception.code, "vsock_unavailable")
        self.assertIn("/dev/vhost-vsock", raised.exception.message)

    def test_group_transport(self) -> None:
        """A node whose group is gone from the configuration keeps auto."""
        self.assertEqual(group_transport(None), "auto")
        self.assertEqual(group_transport(GROUPS[1]), "virtio-serial")


class FleetTests(SynchronousTestCase):
    def start(self, usable: bool) -> None:
        def usable_vsock(harness: FleetHarness) -> None:
            harness.driver.vsock_unusable = None

        self.harness, self.fleet = started_fleet(self, GROUPS, usable_vsock if usable else None)

    def machine(self, group: str) -> FakeMachine:
        before = len(self.harness.driver.machines)
        self.successResultOf(Deferred.fromCoroutine(self.fleet.create(group, CreateRequest(), Wait.NONE, 60)))
        self.assertEqual(len(self.harness.driver.machines), before + 1)
        return self.harness.driver.machines[-1]

    def test_usable_host(self) -> None:
        """Where vsock is usable: auto and vsock groups' VMs have it, recorded; the agents are told the group's word."""
        self.start(usable=True)
        self.assertTrue(self.machine("auto").spec.vsock)
        self.assertFalse(self.machine("serial").spec.vsock)
        self.assertTrue(self.machine("forced").spec.vsock)
        self.assertEqual(self.harness.transports[-3:], ["auto", "virtio-serial", "vsock"])
        records = {record.hostgroup: record.vsock_channel for record in self.harness.parts.store.load_all()[0]}
        self.assertEqual(records, {"auto": True, "serial": False, "forced": True})

    def test_unusable_host(self) -> None:
        """Where it is not: auto falls to virtio-serial; a group that insists on vsock is refused at create."""
        self.start(usable=False)
        self.assertFalse(self.machine("auto").spec.vsock)
        before = len(self.harness.driver.machines)
        failure = self.failureResultOf(Deferred.fromCoroutine(self.fleet.create("forced", CreateRequest(), Wait.NONE, 60)))
        self.assertIn("vsock", str(failure.value))
        self.assertEqual(len(self.harness.driver.machines), before)

    def test_template_keyed(self) -> None:
        """A warm group's template is keyed by vsock (its clones load its devices): another digest with it."""
        self.start(usable=False)
        image, driver = self.harness.image, self.harness.driver
        off = template_key(GROUPS[3], 256 * MiB, 1, image, driver)
        driver.vsock_unusable = None
        on = template_key(GROUPS[3], 256 * MiB, 1, image, driver)
        self.assertEqual((off.vsock, on.vsock), (False, True))
        self.assertNotEqual(off.digest(), on.digest())
        self.assertEqual(off.digest(), evolve(on, vsock=False).digest())
        self.assertFalse(on.supersedes(off) or off.supersedes(on))


class RestoreTests(LifecycleTestCase):
    """A restore gives the VM the devices its saved state was taken with, whatever the host says now."""

    groups = (HostGroupConfig(name="demo", vcpu=1, ram_bytes=256 * MiB),)

    def harness(self, driver: FakeDriver | None = None) -> FleetHarness:
        driver = driver or FakeDriver()
        driver.vsock_unusable = None
        return super().harness(driver)

    def test_restore_keeps_vsock(self) -> None:
        """Suspended with a vsock device, restored with one even after the host lost vhost-vsock (and back)."""
        self.create()
        self.assertTrue(self.h.driver.machines[0].spec.vsock)
        self.ok(self.fleet.snapshots.suspend("demo-1"))
        self.h.driver.vsock_unusable = "gone"
        self.ok(self.fleet.snapshots.restore("demo-1", Wait.NONE, 300.0))
        self.assertTrue(self.h.driver.machines[1].spec.vsock)
        self.assertTrue(self.stored().vsock_channel)  # type: ignore[union-attr]
