# -*- test-case-name: tests.guest.test_agent -*-
"""
Finding a virtio-serial port in the guest by the name QEMU gave it (``-device virtserialport,name=...``):
the guest agent's ``agent`` and the metrics agent's ``metrics``.  Standard library only.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

__all__ = ["SYSFS_PORTS", "find_port"]

#: Where the kernel lists the virtio-serial ports, each with its ``name``.
SYSFS_PORTS = "/sys/class/virtio-ports"


def find_port(name: str, sysfs: str = SYSFS_PORTS, dev: str = "/dev") -> Optional[str]:
    """
    The device node of the virtio-serial port called ``name``, or ``None`` if there
    is none (yet: the module may still be loading, or init has not mounted /dev).
    """
    try:
        entries = sorted(os.listdir(sysfs))
    except OSError:
        return None
    for entry in entries:
        try:
            with open(os.path.join(sysfs, entry, "name"), "rb") as f:
                found = f.read().strip().decode("utf-8", "replace")
        except OSError:
            continue
        if found == name:
            device = os.path.join(dev, entry)
            return device if os.path.exists(device) else None
    return None
