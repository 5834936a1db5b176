"""
Tests for PCI devices and GPUs of nodes in :class:`vmservice.nodes.fleet.Fleet`
on fakes and a fake sysfs tree: devices checked at create before anything is
made, held by their node (in its record) until it is removed, given to its VM
at every start, and kept across a daemon restart.
"""

from __future__ import annotations

import os
from typing import Any, Coroutine

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from tests.devices.sysfs import FakeSysfs
from tests.fakes import FleetHarness
from tests.short_dirs import short_dir
from vmservice.config import HostGroupConfig
from vmservice.errors import BadRequest, Conflict
from vmservice.nodes.model import CreateRequest, NodeRecord, Status, Wait

MiB = 1024 * 1024
GPUS = ("0000:01:00.0", "0000:02:00.0")
NIC = "0000:05:00.0"


class DeviceTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.state_dir = short_dir()
        self.sysfs = FakeSysfs(os.path.join(self.state_dir, "host"))
        for index, address in enumerate((*GPUS, NIC)):
            self.sysfs.add(address, group=str(index + 1))
        self.sysfs.add("0000:06:00.0", driver="e1000e", group="9", device_class="0x020000")
        self.h = self.harness()

    def harness(self) -> FleetHarness:
        groups = (
            HostGroupConfig(name="demo", vcpu=2, ram_bytes=512 * MiB, gpus=GPUS),
            HostGroupConfig(name="keep", vcpu=1, ram_bytes=256 * MiB, persistent=True, gpus=GPUS[:1]),
        )
        h = FleetHarness(self.state_dir, groups, self.h.driver if hasattr(self, "h") else None, pci=self.sysfs.host)
        h.fleet.startService()
        return h

    def do(self, coroutine: Coroutine[Any, Any, Any]) -> Deferred[Any]:
        return Deferred.fromCoroutine(coroutine)

    def create(self, group: str = "demo", **request: Any) -> NodeRecord:
        return self.successResultOf(self.do(self.h.fleet.create(group, CreateRequest(**request), Wait.NONE, 300.0)))

    def refused(self, code: str, group: str = "demo", **request: Any) -> BadRequest:
        """A create refused with ``code``, which made nothing: no VM, disk, record or directory."""
        machines, stored = len(self.h.driver.machines), self.h.store.load_all()
        nodes = sorted(os.listdir(self.h.store.nodes_dir)) if os.path.isdir(self.h.store.nodes_dir) else []
        d = self.do(self.h.fleet.create(group, CreateRequest(**request), Wait.NONE, 300.0))
        error = self.failureResultOf(d, BadRequest).value
        self.assertEqual(error.code, code, str(error))
        self.assertEqual(len(self.h.driver.machines), machines)
        self.assertEqual(self.h.store.load_all(), stored)
        after = sorted(os.listdir(self.h.store.nodes_dir)) if os.path.isdir(self.h.store.nodes_dir) else []
        self.assertEqual(after, nodes)
        return error

    def test_devices_given_and_recorded(self) -> None:
        """Requested devices and GPUs go to the VM's spec and into the record on disk."""
        record = self.create(pci_devices=(NIC,), gpu_count=1)
        self.assertEqual(record.pci_devices, (NIC, GPUS[0]))
        self.assertEqual(self.h.driver.machines[0].spec.pci_devices, (NIC, GPUS[0]))
        [stored], _ = self.h.store.load_all()
        self.assertEqual(stored.pci_devices, (NIC, GPUS[0]))

    def test_no_devices(self) -> None:
        """A node asking for none gets none, whatever the group has."""
        self.assertEqual(self.create().pci_devices, ())
        self.assertEqual(self.h.driver.machines[0].spec.pci_devices, ())

    def test_held_until_removed(self) -> None:
        """A device of one node is in use for the next; its delete frees it."""
        self.create(pci_devices=(NIC,))
        error = self.refused("pci_device_in_use", pci_devices=(NIC,))
        self.assertIn("demo-1", error.message)
        self.successResultOf(self.do(self.h.fleet.delete("demo", "demo-1")))
        self.assertEqual(self.create(pci_devices=(NIC,)).pci_devices, (NIC,))

    def test_gpus_run_out(self) -> None:
        """gpu_count takes free GPUs until none are left, then is not_enough_gpus; an ended VM frees its GPU."""
        self.assertEqual(self.create(gpu_count=1).pci_devices, GPUS[:1])
        self.assertEqual(self.create(gpu_count=1).pci_devices, GPUS[1:])
        error = self.refused("not_enough_gpus", gpu_count=1)
        self.assertIn("held by node demo-1", error.message)
        self.h.driver.machines[0].end(0)
        self.assertEqual(self.create(gpu_count=1).pci_devices, GPUS[:1])

    def test_host_check_refusals(self) -> None:
        """Each failed host check is its 400, and nothing is made."""
        self.refused("pci_device_not_found", pci_devices=("0000:07:00.0",))
        self.refused("pci_device_not_vfio", pci_devices=("0000:06:00.0",))
        self.refused("not_enough_gpus", group="keep", gpu_count=2)

    def test_stopped_node_keeps_its_devices(self) -> None:
        """A persistent node whose VM ended holds its GPU and gets it again when relaunched."""
        self.create("keep", gpu_count=1)
        self.h.driver.machines[0].end(0)
        self.assertEqual(self.h.fleet.node("keep-1").status, Status.STOPPED)
        self.refused("not_enough_gpus", group="keep", gpu_count=1)
        self.successResultOf(self.do(self.h.fleet.lifecycle.relaunch("keep-1", Wait.NONE, 1)))
        self.assertEqual(self.h.driver.machines[-1].spec.pci_devices, GPUS[:1])

    def test_relaunch_checks_devices_again(self) -> None:
        """A stopped node whose GPU was rebound meanwhile is not relaunched: 409 with the check's code, still Stopped."""
        self.create("keep", gpu_count=1)
        self.h.driver.machines[0].end(0)
        link = os.path.join(self.sysfs.sys, "bus", "pci", "devices", GPUS[0], "driver")
        os.unlink(link)
        os.symlink("../../drivers/nvidia", link)
        machines = len(self.h.driver.machines)
        d = self.do(self.h.fleet.lifecycle.relaunch("keep-1", Wait.NONE, 1))
        error = self.failureResultOf(d, Conflict).value
        self.assertEqual(error.code, "pci_device_not_vfio")
        self.assertIn("nvidia", error.message)
        self.assertEqual(len(self.h.driver.machines), machines)
        self.assertEqual(self.h.fleet.node("keep-1").status, Status.STOPPED)
        self.assertEqual(self.h.fleet.node("keep-1").pci_devices, GPUS[:1])

    def test_claims_survive_restart(self) -> None:
        """After a daemon restart the adopted node still holds its devices."""
        self.create(pci_devices=(NIC,))
        self.h.crash()
        self.h = self.harness()
        self.assertEqual(self.h.fleet.node("demo-1").pci_devices, (NIC,))
        self.refused("pci_device_in_use", pci_devices=(NIC,))

    def test_no_suspend(self) -> None:
        """A node with passed-through devices cannot be suspended (their state cannot be saved)."""
        self.create(gpu_count=1)
        d = self.do(self.h.fleet.snapshots.suspend("demo-1"))
        self.assertEqual(self.failureResultOf(d, Conflict).value.code, "pci_devices_not_suspendable")
        self.assertEqual(self.h.fleet.node("demo-1").status, Status.RUNNING)
