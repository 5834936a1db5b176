"""
A fake sysfs (and ``/dev``) tree in a temporary directory, shaped like the
kernel's: ``bus/pci/devices/<address>`` with ``class``, a ``driver`` link into
``bus/pci/drivers`` and an ``iommu_group`` link into ``kernel/iommu_groups``,
whose ``devices`` directory links back to the device.
"""

from __future__ import annotations

import os

from vmservice.devices.pci import PciHost


class FakeSysfs:
    """
    :param root: an empty directory; ``root/sys`` and ``root/dev`` are made in it.
    """

    def __init__(self, root: str) -> None:
        self.sys = os.path.join(root, "sys")
        self.dev = os.path.join(root, "dev")
        os.makedirs(os.path.join(self.sys, "bus", "pci", "devices"), exist_ok=True)
        os.makedirs(os.path.join(self.sys, "kernel", "iommu_groups"), exist_ok=True)
        os.makedirs(self.dev, exist_ok=True)
        self.host = PciHost(self.sys, self.dev)

    def add(
        self,
        address: str,
        driver: str | None = "vfio-pci",
        group: str | None = None,
        device_class: str = "0x030000",
        vfio_node: bool = True,
    ) -> None:
        """
        A PCI device at ``address`` bound to ``driver`` (none for ``None``), in
        IOMMU group ``group`` (none for ``None``); ``/dev/vfio/<group>`` exists
        when ``vfio_node``.
        """
        device = os.path.join(self.sys, "bus", "pci", "devices", address)
        os.makedirs(device)
        with open(os.path.join(device, "class"), "w") as stream:
            stream.write(device_class + "\n")
        if driver is not None:
            drivers = os.path.join(self.sys, "bus", "pci", "drivers", driver)
            os.makedirs(drivers, exist_ok=True)
            os.symlink(os.path.relpath(drivers, device), os.path.join(device, "driver"))
        if group is not None:
            members = os.path.join(self.sys, "kernel", "iommu_groups", group, "devices")
            os.makedirs(members, exist_ok=True)
            os.symlink(os.path.relpath(os.path.dirname(members), device), os.path.join(device, "iommu_group"))
            os.symlink(os.path.relpath(device, members), os.path.join(members, address))
            if vfio_node:
                os.makedirs(os.path.join(self.dev, "vfio"), exist_ok=True)
                with open(os.path.join(self.dev, "vfio", group), "w"):
                    pass
