# -*- test-case-name: tests.hypervisors.qemu.test_vsock_probe -*-
"""
Tests for :mod:`vmservice.hypervisors.qemu.vsock_probe`: whether VMs can have
a vhost-vsock device, with the device node and QEMU's device list faked.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from vmservice.hypervisors.qemu.vsock_probe import open_check, probe_vsock

#: What ``qemu-system-x86_64 -device help`` prints of vsock (QEMU 7.2).
LISTING = '''name "vhost-user-vsock-device", bus virtio-bus
name "vhost-vsock-device", bus virtio-bus
name "vhost-vsock-pci", bus PCI
'''


class ProbeTests(SynchronousTestCase):
    def probe(self, opened: str | None, listing: str | Exception) -> str | None:
        asked: list[bool] = []

        async def device_help() -> str:
            asked.append(True)
            if isinstance(listing, Exception):
                raise listing
            return listing

        result = self.successResultOf(Deferred.fromCoroutine(probe_vsock(device_help, lambda: opened)))
        self.asked = bool(asked)
        return result

    def test_usable(self) -> None:
        """The device node opens and QEMU lists vhost-vsock-device: usable."""
        self.assertIsNone(self.probe(None, LISTING))

    def test_no_device_node(self) -> None:
        """No /dev/vhost-vsock (this machine): unusable, saying why, and QEMU is not asked."""
        reason = self.probe("cannot open /dev/vhost-vsock: No such file or directory", LISTING)
        self.assertEqual(reason, "cannot open /dev/vhost-vsock: No such file or directory")
        self.assertFalse(self.asked)

    def test_qemu_without_device(self) -> None:
        """A QEMU with only the PCI or vhost-user devices: unusable on microvm."""
        self.assertEqual(self.probe(None, 'name "vhost-vsock-pci", bus PCI\nname "vhost-user-vsock-device", bus virtio-bus\n'),
                         "QEMU has no vhost-vsock-device")

    def test_qemu_fails(self) -> None:
        """QEMU that cannot be run: unusable, saying why."""
        self.assertIn("cannot list QEMU's devices", self.probe(None, OSError("no qemu")) or "")

    def test_open_check(self) -> None:
        """open_check says why a path does not open, and nothing for one that does."""
        self.assertIn("cannot open", open_check(self.mktemp()) or "")
        self.assertIsNone(open_check("/dev/null"))
