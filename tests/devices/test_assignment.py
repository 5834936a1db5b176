"""Tests for :mod:`vmservice.devices.assignment`: which devices a new node gets, on a fake sysfs tree."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from vmservice.devices import assign
from vmservice.devices.pci import MAX_NODE_DEVICES
from vmservice.errors import BadRequest

from .sysfs import FakeSysfs

GPUS = ("0000:01:00.0", "0000:02:00.0", "0000:03:00.0")


class AssignTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.sysfs = FakeSysfs(self.mktemp())
        for index, address in enumerate(GPUS):
            self.sysfs.add(address, group=str(10 + index))
        self.sysfs.add("0000:05:00.0", group="20")
        self.sysfs.add("0000:05:00.1", group="20", device_class="0x040300")

    def assign(self, requested: tuple[str, ...] = (), gpu_count: int = 0, gpus: tuple[str, ...] = GPUS,
               claims: dict[str, str] | None = None) -> tuple[str, ...]:
        return assign(self.sysfs.host, requested, gpu_count, "demo", gpus, claims or {})

    def refused(self, code: str, *words: str, **kwargs: object) -> BadRequest:
        error = self.assertRaises(BadRequest, self.assign, **kwargs)
        self.assertEqual(error.code, code)
        for word in words:
            self.assertIn(word, error.message)
        return error

    def test_nothing(self) -> None:
        """No devices asked, none given (whatever the host has)."""
        self.assertEqual(self.assign(), ())
        self.assertEqual(assign(FakeSysfs(self.mktemp()).host, (), 0, "demo", (), {}), ())

    def test_requested(self) -> None:
        """Requested devices are given in their order, short addresses made full, duplicates once."""
        self.assertEqual(self.assign(("05:00.1", "0000:05:00.0", "05:00.1")), ("0000:05:00.1", "0000:05:00.0"))

    def test_requested_check_fails(self) -> None:
        """A requested device that fails a host check is that check's 400."""
        self.refused("pci_device_not_found", "0000:09:00.0", requested=("09:00.0",))
        self.refused("invalid_pci_address", requested=("nine",))

    def test_gpus_in_order(self) -> None:
        """gpu_count takes the group's first free GPUs, after the requested devices."""
        self.assertEqual(self.assign(gpu_count=2), GPUS[:2])
        self.assertEqual(self.assign(("05:00.0",), gpu_count=1), ("0000:05:00.0", GPUS[0]))
        self.assertEqual(self.assign((GPUS[0],), gpu_count=1), (GPUS[0], GPUS[1]))

    def test_claimed_skipped(self) -> None:
        """GPUs held by other nodes are skipped."""
        self.assertEqual(self.assign(gpu_count=1, claims={GPUS[0]: "demo-1"}), (GPUS[1],))

    def test_claimed_requested(self) -> None:
        """A requested device held by another node is pci_device_in_use naming that node."""
        self.refused("pci_device_in_use", GPUS[0], "demo-1", requested=(GPUS[0],), claims={GPUS[0]: "demo-1"})

    def test_claimed_group(self) -> None:
        """A device whose IOMMU group another node holds a device of is in use too."""
        error = self.refused("pci_device_in_use", "0000:05:00.1", "group 20", "demo-2",
                             requested=("05:00.1",), claims={"0000:05:00.0": "demo-2"})
        self.assertIn("0000:05:00.0", error.message)

    def test_not_enough_gpus(self) -> None:
        """Fewer free, usable GPUs than gpu_count is not_enough_gpus saying why each other one is not."""
        error = self.refused("not_enough_gpus", "gpu_count 3", "3 GPU(s) configured", "2 free",
                             f"{GPUS[0]}: held by node demo-1", gpu_count=3, claims={GPUS[0]: "demo-1"})
        self.assertIn("'demo'", error.message)

    def test_broken_gpu_skipped(self) -> None:
        """A configured GPU that fails a check is passed over for the next; named when too few remain."""
        self.sysfs.add("0000:04:00.0", driver="nvidia", group="30")
        gpus = ("0000:04:00.0", *GPUS)
        self.assertEqual(self.assign(gpu_count=1, gpus=gpus), (GPUS[0],))
        self.refused("not_enough_gpus", "0000:04:00.0", "nvidia", gpu_count=4, gpus=gpus)

    def test_no_gpus_configured(self) -> None:
        """gpu_count in a group without GPUs is not_enough_gpus saying none are configured."""
        self.refused("not_enough_gpus", "no GPUs configured", gpu_count=1, gpus=())

    def test_too_many(self) -> None:
        """More than MAX_NODE_DEVICES devices together is too_many_pci_devices."""
        self.refused("too_many_pci_devices", requested=("05:00.0",), gpu_count=MAX_NODE_DEVICES)
