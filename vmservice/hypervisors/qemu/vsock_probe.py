# -*- test-case-name: tests.hypervisors.qemu.test_vsock_probe -*-
"""
Whether this host can give VMs a vhost-vsock device (:func:`probe_vsock`):
``/dev/vhost-vsock`` opens read-write (the ``vhost_vsock`` module is loaded
and the daemon may use it) and QEMU's ``-device help`` lists
``vhost-vsock-device`` (the virtio-mmio one, which ``microvm`` needs).
Decided once at start-up beside the KVM/TCG decision, and logged like it.
"""

from __future__ import annotations

import os
from typing import Awaitable, Callable

#: The vhost-vsock device node.
VHOST_VSOCK = "/dev/vhost-vsock"
#: The QEMU device a microvm's vsock is.
QEMU_DEVICE = "vhost-vsock-device"


def open_check(path: str = VHOST_VSOCK) -> str | None:
    """``None`` when ``path`` opens read-write, else why not."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError as error:
        return f"cannot open {path}: {error.strerror or error}"
    os.close(fd)
    return None


async def probe_vsock(
    device_help: Callable[[], Awaitable[str]], open_device: Callable[[], str | None] = open_check,
) -> str | None:
    """
    ``None`` when VMs can have a vhost-vsock device here, else why not.

    :param device_help: runs ``qemu-system-x86_64 -device help`` and answers its output
        (only asked when the device node opens).
    :param open_device: :func:`open_check` of ``/dev/vhost-vsock``.
    """
    unusable = open_device()
    if unusable is not None:
        return unusable
    try:
        listing = await device_help()
    except Exception as error:  # the binary missing or failing: no vsock, said why
        return f"cannot list QEMU's devices: {error}"
    # Its lines read: name "vhost-vsock-device", bus virtio-bus
    if f'name "{QEMU_DEVICE}"' not in listing:
        return f"QEMU has no {QEMU_DEVICE}"
    return None


__all__ = ["QEMU_DEVICE", "VHOST_VSOCK", "open_check", "probe_vsock"]
