# -*- test-case-name: tests.integration.test_devices -*-
"""
PCI devices and GPUs against the real daemon on this host, which has no
device bound to ``vfio-pci``: a create asking for a device or a GPU answers
400 naming the device and the reason, and leaves no node, record, directory
or VM behind; ``GET /hostgroup`` reports each group's configured GPUs.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tests.integration.daemon import Daemon, SharedDaemonTestCase, ensure_image

#: A device every PC host has (the host bridge, bound to no driver here): it
#: exists, so the check that fails is the one after existence.
HOST_BRIDGE = "0000:00:00.0"
#: An address no device has on this host.
ABSENT = "0000:7f:1f.7"

GROUPS: list[dict[str, Any]] = [
    {"name": "demo", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "gpus": [HOST_BRIDGE, ABSENT]},
    {"name": "plain", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G"},
]


class DeviceTests(SharedDaemonTestCase):
    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.daemon = Daemon(groups=GROUPS)
        cls.daemon.start()

    def refused(self, group: str, body: dict[str, Any], code: str, *words: str) -> None:
        """The create answers 400 with ``code`` and a message with ``words``; nothing of a node is left."""
        status, _, data = self.daemon.request("POST", f"/hostgroup/{group}/nodes?wait=agent&timeout=1m", body)
        self.assertEqual(status, 400, data)
        answer = json.loads(data)
        self.assertEqual(answer["code"], code, answer)
        for word in words:
            self.assertIn(word, answer["error"])
        self.assertEqual(self.daemon.json("GET", "/nodes"), [])
        nodes_dir = os.path.join(self.daemon.state_dir, "nodes")
        left = [name for name in os.listdir(nodes_dir) if not name.startswith(".")] if os.path.isdir(nodes_dir) else []
        self.assertEqual(left, [])
        self.assertEqual(self.daemon.vm_pids(), [])

    def test_hostgroup_gpu_count(self) -> None:
        """GET /hostgroup reports the number of GPUs each group's configuration lists."""
        groups = {group["name"]: group["gpu_count"] for group in self.daemon.json("GET", "/hostgroup")}
        self.assertEqual(groups, {"demo": 2, "plain": 0})

    def test_pci_device_not_vfio(self) -> None:
        """A device that exists but is not bound to vfio-pci is refused with the driver it has."""
        self.refused("plain", {"pci_devices": [HOST_BRIDGE]}, "pci_device_not_vfio", HOST_BRIDGE, "vfio-pci")
        self.refused("plain", {"pci_devices": ["00:00.0"]}, "pci_device_not_vfio", HOST_BRIDGE)

    def test_pci_device_not_found(self) -> None:
        """A device this host does not have is refused as not found."""
        self.refused("plain", {"pci_devices": [ABSENT]}, "pci_device_not_found", ABSENT)

    def test_pci_address_invalid(self) -> None:
        """Something that is not a PCI address is refused before the host is asked."""
        self.refused("plain", {"pci_devices": ["gpu0"]}, "invalid_pci_address", "'gpu0'")

    def test_gpu_count(self) -> None:
        """gpu_count: 1 is refused naming every configured GPU and why it cannot be used, or that there are none."""
        self.refused("demo", {"gpu_count": 1}, "not_enough_gpus", "2 GPU(s) configured", "0 free",
                     f"{HOST_BRIDGE}: not bound to vfio-pci", f"{ABSENT}: no such device")
        self.refused("plain", {"gpu_count": 1}, "not_enough_gpus", "no GPUs configured")

    def test_node_without_devices(self) -> None:
        """
        After refusals, a node of the group with GPUs that asks for none boots on plain microvm with
        only the kernel modules its devices need, and is the group's first (a refused create uses no
        hostname number); deleted, nothing is left.
        """
        self.refused("demo", {"gpu_count": 1}, "not_enough_gpus")
        created = self.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m", {"gpu_count": 0}, expect=201)
        hostname = created["hostname"]
        try:
            self.assertEqual(hostname, "demo-1")
            self.assertNotIn("pci_devices", self.daemon.json("GET", f"/vm/{hostname}"))
            [pid] = self.daemon.vm_pids()
            with open(f"/proc/{pid}/cmdline", "rb") as stream:
                argv = stream.read().split(b"\0")
            self.assertIn(b"microvm", argv)
            self.assertFalse([word for word in argv if b"vfio" in word or b"pcie" in word])
            # The initramfs loaded what the node's devices need and nothing for devices it has not:
            # no PCI bus, no NIC (the group has no network), no vsock.
            code, modules = self.daemon.run(hostname, "cut -d' ' -f1 /proc/modules")
            self.assertEqual(code, 0, modules)
            loaded = set(modules.split())
            self.assertLessEqual({"virtio_mmio", "virtio_blk", "virtio_console", "button", "evdev"}, loaded)
            self.assertFalse(loaded & {"virtio_pci", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_net",
                                       "net_failover", "failover", "vsock", "vmw_vsock_virtio_transport"}, loaded)
        finally:
            self.daemon.json("DELETE", f"/hostgroup/demo/nodes/{hostname}")
        self.assertEqual(self.daemon.json("GET", "/nodes"), [])
        self.assertEqual(self.daemon.vm_pids(), [])
