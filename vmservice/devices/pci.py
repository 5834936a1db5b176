# -*- test-case-name: tests.devices.test_pci -*-
"""
PCI devices of the host as VFIO sees them: their addresses, and whether one
can be given to a VM.

A device can be passed through to a VM (QEMU's ``-device vfio-pci,host=…``)
when all of this holds, checked in this order by :meth:`PciHost.check`:

1. it exists: ``<sysfs>/bus/pci/devices/<address>``;
2. it is bound to the ``vfio-pci`` driver (its ``driver`` link);
3. it is in an IOMMU group (its ``iommu_group`` link names the group);
4. the group is *viable*, the kernel's rule for handing a group to user
   space (``vfio_dev_driver_allowed`` and the bridge exception in
   ``drivers/vfio``): every device of ``<sysfs>/kernel/iommu_groups/<n>/devices``
   is bound to ``vfio-pci`` or to ``pci-stub``, or to no driver at all, or is
   a PCI bridge (class ``0x0604``, ``0x0607`` or ``0x0609``, whatever its
   driver, usually ``pcieport``).  A group with any other bound device (a
   host driver doing DMA) cannot be opened by QEMU;
5. the group's VFIO character device ``<dev>/vfio/<n>`` exists (``vfio-pci``
   made it; QEMU opens it).

Each failure is a :class:`~vmservice.errors.BadRequest` with its own code and
a message naming the device and the reason.  The sysfs and ``/dev`` roots are
parameters, so the tests check every rule on a fake tree.  Everything read is
a kernel attribute in memory (sysfs), so the reads do not block.
"""

from __future__ import annotations

import os
import re

from attrs import frozen

from ..errors import BadRequest

#: A PCI address as accepted from users and the configuration:
#: ``[domain:]bus:device.function`` in hexadecimal (``0000:01:00.0`` or ``01:00.0``).
PCI_ADDRESS_PATTERN = r"(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[01][0-9a-fA-F]\.[0-7]"
_ADDRESS = re.compile(PCI_ADDRESS_PATTERN)

#: Most PCI devices (explicit and GPUs together) one node is given.
MAX_NODE_DEVICES = 16

#: The driver that hands a device to user space, as QEMU needs it.
VFIO_DRIVER = "vfio-pci"
#: Drivers a device may have and still not stand in the way of its group
#: being given to user space (the kernel's allow list).
_HARMLESS_DRIVERS = (VFIO_DRIVER, "pci-stub")
#: Class codes (base class, subclass) of PCI bridges: PCI-to-PCI, CardBus,
#: semi-transparent PCI-to-PCI.  The kernel lets them stay with their driver.
_BRIDGE_CLASSES = ("0x0604", "0x0607", "0x0609")


def normalise_address(text: str) -> str:
    """
    The full, lower-case form of a PCI address (``0000:01:00.0``); a short
    one (``01:00.0``) is in domain ``0000``.

    :raise BadRequest: (``invalid_pci_address``) it is not a PCI address.
    """
    if not isinstance(text, str) or _ADDRESS.fullmatch(text) is None:
        raise BadRequest(f"{str(text)[:64]!r} is not a PCI address (expected e.g. 0000:01:00.0 or 01:00.0)",
                         code="invalid_pci_address")
    text = text.lower()
    return text if text.count(":") == 2 else f"0000:{text}"


@frozen
class PciDevice:
    """
    A device that passed every check.

    :ivar address: its full address.
    :ivar iommu_group: the number of its IOMMU group.
    """

    address: str
    iommu_group: str


def _link_name(path: str) -> str | None:
    """The last part of the target of symbolic link ``path``, or ``None`` when there is none."""
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


class PciHost:
    """
    The PCI devices of a host, as its sysfs shows them.

    :param sysfs: where sysfs is mounted (a fake tree in tests).
    :param dev: where device nodes are (``/dev``; a fake tree in tests).
    """

    def __init__(self, sysfs: str = "/sys", dev: str = "/dev") -> None:
        self.sysfs = sysfs
        self.dev = dev

    def _device(self, address: str) -> str:
        return os.path.join(self.sysfs, "bus", "pci", "devices", address)

    def driver(self, address: str) -> str | None:
        """The driver device ``address`` is bound to, or ``None``."""
        return _link_name(os.path.join(self._device(address), "driver"))

    def iommu_group(self, address: str) -> str | None:
        """The IOMMU group of device ``address``, or ``None`` when it is in none (or does not exist)."""
        return _link_name(os.path.join(self._device(address), "iommu_group"))

    def group_members(self, group: str) -> list[str]:
        """The devices of IOMMU group ``group``, sorted (none when there is no such group)."""
        try:
            return sorted(os.listdir(os.path.join(self.sysfs, "kernel", "iommu_groups", group, "devices")))
        except OSError:
            return []

    def _member_problem(self, group: str, member: str) -> str | None:
        """Why ``member`` keeps IOMMU group ``group`` from being given to a VM, or ``None``."""
        path = os.path.join(self.sysfs, "kernel", "iommu_groups", group, "devices", member)
        driver = _link_name(os.path.join(path, "driver"))
        if driver is None or driver in _HARMLESS_DRIVERS:
            return None
        try:
            with open(os.path.join(path, "class")) as stream:
                device_class = stream.read().strip().lower()
        except OSError:
            device_class = ""
        if device_class.startswith(_BRIDGE_CLASSES):
            return None
        return f"{member} is bound to {driver}"

    def check(self, address: str) -> PciDevice:
        """
        Whether the device at ``address`` (a full address) can be given to a VM.

        :raise BadRequest: ``pci_device_not_found``, ``pci_device_not_vfio``,
            ``pci_device_no_iommu_group``, ``iommu_group_not_viable`` or
            ``vfio_group_missing``, the first that applies.
        """
        if not os.path.isdir(self._device(address)):
            raise BadRequest(f"PCI device {address}: no such device on this host", code="pci_device_not_found")
        driver = self.driver(address)
        if driver != VFIO_DRIVER:
            bound = f"bound to {driver}" if driver else "bound to no driver"
            raise BadRequest(f"PCI device {address}: not bound to {VFIO_DRIVER} ({bound})", code="pci_device_not_vfio")
        group = self.iommu_group(address)
        if group is None:
            raise BadRequest(f"PCI device {address}: in no IOMMU group (is the IOMMU enabled?)",
                             code="pci_device_no_iommu_group")
        problems = [problem for member in self.group_members(group)
                    if (problem := self._member_problem(group, member)) is not None]
        if problems:
            raise BadRequest(
                f"PCI device {address}: IOMMU group {group} is not viable ({'; '.join(problems)}; every device of "
                f"the group must be bound to {VFIO_DRIVER} or pci-stub, or to no driver, or be a PCI bridge)",
                code="iommu_group_not_viable",
            )
        if not os.path.exists(os.path.join(self.dev, "vfio", group)):
            raise BadRequest(f"PCI device {address}: {os.path.join(self.dev, 'vfio', group)} does not exist",
                             code="vfio_group_missing")
        return PciDevice(address, group)


__all__ = ["MAX_NODE_DEVICES", "PCI_ADDRESS_PATTERN", "PciDevice", "PciHost", "VFIO_DRIVER", "normalise_address"]
