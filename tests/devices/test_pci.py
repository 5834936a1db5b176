"""Tests for :mod:`vmservice.devices.pci`: PCI addresses and the host checks, on a fake sysfs tree."""

from __future__ import annotations

import os

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.devices.pci import PciDevice, PciHost, normalise_address
from vmservice.errors import BadRequest

from .sysfs import FakeSysfs

GPU = "0000:01:00.0"
AUDIO = "0000:01:00.1"


class AddressTests(SynchronousTestCase):
    def test_normalise(self) -> None:
        """Full addresses are kept (lower case); short ones get domain 0000."""
        self.assertEqual(normalise_address("0000:01:00.0"), "0000:01:00.0")
        self.assertEqual(normalise_address("01:00.0"), "0000:01:00.0")
        self.assertEqual(normalise_address("0000:AF:1F.7"), "0000:af:1f.7")
        self.assertEqual(normalise_address("10de:3b:00.1"), "10de:3b:00.1")

    @given(st.from_regex(r"\A(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[01][0-9a-fA-F]\.[0-7]\Z"))
    def test_any_address(self, text: str) -> None:
        """Every address of the pattern normalises to the full lower-case form, which normalises to itself."""
        full = normalise_address(text)
        self.assertRegex(full, r"^[0-9a-f]{4}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]$")
        self.assertTrue(full.endswith(text.lower()))
        self.assertEqual(normalise_address(full), full)

    def test_refused(self) -> None:
        """Anything else is a 400 invalid_pci_address quoting it."""
        for text in ("", "01:00", "1:00.0", "01:20.0", "01:00.8", "0000:01:00.0.0", "x1:00.0", " 01:00.0",
                     "000:01:00.0", "../01:00.0"):
            error = self.assertRaises(BadRequest, normalise_address, text)
            self.assertEqual(error.code, "invalid_pci_address", text)
            self.assertIn(repr(text), error.message)


class CheckTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.sysfs = FakeSysfs(self.mktemp())

    def assertProblem(self, address: str, code: str, *words: str) -> None:
        error = self.assertRaises(BadRequest, self.sysfs.host.check, address)
        self.assertEqual(error.code, code)
        self.assertIn(address, error.message)
        for word in words:
            self.assertIn(word, error.message)

    def test_usable(self) -> None:
        """A device bound to vfio-pci, alone in its IOMMU group, with /dev/vfio/N, passes."""
        self.sysfs.add(GPU, group="7")
        self.assertEqual(self.sysfs.host.check(GPU), PciDevice(GPU, "7"))

    def test_not_found(self) -> None:
        """A device sysfs does not show is pci_device_not_found."""
        self.assertProblem(GPU, "pci_device_not_found", "no such device")

    def test_not_vfio(self) -> None:
        """A device bound to a host driver, or to none, is pci_device_not_vfio naming the driver."""
        self.sysfs.add(GPU, driver="nvidia", group="7")
        self.assertProblem(GPU, "pci_device_not_vfio", "nvidia")
        self.sysfs.add(AUDIO, driver=None, group="7")
        self.assertProblem(AUDIO, "pci_device_not_vfio", "no driver")

    def test_no_iommu_group(self) -> None:
        """A vfio-pci device in no IOMMU group is pci_device_no_iommu_group."""
        self.sysfs.add(GPU)
        self.assertProblem(GPU, "pci_device_no_iommu_group", "IOMMU")

    def test_group_with_host_driver_not_viable(self) -> None:
        """A group holding a device bound to a host driver is iommu_group_not_viable naming that device."""
        self.sysfs.add(GPU, group="7")
        self.sysfs.add(AUDIO, driver="snd_hda_intel", group="7", device_class="0x040300")
        self.assertProblem(GPU, "iommu_group_not_viable", "IOMMU group 7", AUDIO, "snd_hda_intel")

    def test_viable_groups(self) -> None:
        """Members bound to vfio-pci or pci-stub, without a driver, or bridges with theirs, keep a group viable."""
        self.sysfs.add(GPU, group="7")
        self.sysfs.add(AUDIO, driver=None, group="7", device_class="0x040300")
        self.sysfs.add("0000:01:00.2", driver="pci-stub", group="7", device_class="0x0c0330")
        self.sysfs.add("0000:00:01.0", driver="pcieport", group="7", device_class="0x060400")
        self.sysfs.add("0000:00:01.1", driver="vfio-pci", group="7", device_class="0x0c8000")
        self.assertEqual(self.sysfs.host.check(GPU), PciDevice(GPU, "7"))

    def test_not_a_bridge_class(self) -> None:
        """A host bridge (class 0x0600) with a driver is not a PCI bridge: the group is not viable."""
        self.sysfs.add(GPU, group="7")
        self.sysfs.add("0000:00:00.0", driver="amd_host", group="7", device_class="0x060000")
        self.assertProblem(GPU, "iommu_group_not_viable", "0000:00:00.0 is bound to amd_host")

    def test_vfio_node_missing(self) -> None:
        """A viable group without /dev/vfio/N is vfio_group_missing naming the path."""
        self.sysfs.add(GPU, group="7", vfio_node=False)
        self.assertProblem(GPU, "vfio_group_missing", os.path.join(self.sysfs.dev, "vfio", "7"))

    def test_order(self) -> None:
        """The first failing check is the one reported: the driver before the group."""
        self.sysfs.add(GPU, driver="nouveau")
        self.assertProblem(GPU, "pci_device_not_vfio")

    def test_queries(self) -> None:
        """driver, iommu_group and group_members read the links; absent ones are None or empty."""
        self.sysfs.add(GPU, group="3")
        self.sysfs.add(AUDIO, driver=None, group="3")
        host = self.sysfs.host
        self.assertEqual((host.driver(GPU), host.driver(AUDIO)), ("vfio-pci", None))
        self.assertEqual((host.iommu_group(GPU), host.iommu_group("0000:09:00.0")), ("3", None))
        self.assertEqual((host.group_members("3"), host.group_members("4")), ([GPU, AUDIO], []))

    def test_defaults(self) -> None:
        """By default the host's own /sys and /dev are read."""
        host = PciHost()
        self.assertEqual((host.sysfs, host.dev), ("/sys", "/dev"))
