# -*- test-case-name: tests.integration.hypervisors.test_qemu_pci -*-
"""
A real guest of the built image on the machine a node with host PCI devices
gets, ``microvm,pcie=on``.  This host has no device bound to ``vfio-pci``, so
QEMU is started through a small wrapper that records the driver's command
line, stands a virtio PCI device in for each ``vfio-pci`` one and drops
``quiet`` from the kernel's command line (so that the guest kernel's PCI
enumeration shows on the console); everything else (machine, kernel,
initramfs, disk, ACPI power button) is the real thing.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

from attrs import evolve
from twisted.internet import reactor as global_reactor
from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from tests.integration.hypervisors.tcg import BOOT_TIMEOUT
from vmservice.hypervisors.base import IMachine, MachineSpec
from vmservice.hypervisors.qemu import QemuDriver, QemuSettings, host_tsc_khz
from vmservice.images.build import build_image
from vmservice.images.store import default_image_dir
from vmservice.storage.overlay import create_overlay

_WRAPPER = """\
import json, os, sys
argv = sys.argv[1:]
with open({record!r}, "w") as stream:
    json.dump(argv, stream)
argv = ["virtio-rng-pci," + word.split(",", 2)[2] if word.startswith("vfio-pci,") else word for word in argv]
argv = [word.replace(" quiet", "") if word.startswith("console=") else word for word in argv]
os.execvp("qemu-system-x86_64", ["qemu-system-x86_64", *argv])
"""


class PcieMachineTests(TestCase):
    timeout = 4 * BOOT_TIMEOUT

    def setUp(self) -> None:
        self.image = build_image(default_image_dir(), out=lambda line: None)
        self.workdir = tempfile.mkdtemp(prefix="vms-pci-", dir="/tmp")  # short: UNIX socket paths
        self.addCleanup(shutil.rmtree, self.workdir, True)

    def path(self, name: str) -> str:
        return os.path.join(self.workdir, name)

    def console(self) -> str:
        try:
            with open(self.path("console.log"), "rb") as stream:
                return stream.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    async def test_boots_with_pci_devices(self) -> None:
        """
        A VM given a host PCI device runs microvm with its PCIe host bridge and the device as
        vfio-pci; with a PCI device on that bridge the guest kernel finds the device on the bridge,
        boots, and powers off on the power button (ACPI works), and QEMU exits 0.
        """
        spec = MachineSpec(
            name="itest-1", vcpus=1, ram_bytes=256 << 20, kernel=self.image.kernel.path,
            initrd=self.image.initrd.path, disk=self.path("disk.qcow2"), agent_socket=self.path("agent.sock"),
            qmp_socket=self.path("qmp.sock"), console_log=self.path("console.log"),
        )
        spec = evolve(spec, pci_devices=("0000:01:00.0",))
        wrapper = self.path("qemu")
        with open(wrapper, "w") as stream:
            stream.write(f"#!{sys.executable}\n" + _WRAPPER.format(record=self.path("argv.json")))
        os.chmod(wrapper, 0o755)
        await Deferred.fromCoroutine(create_overlay(global_reactor, self.image.rootfs.path, spec.disk, 2 << 30))
        with open("/proc/cpuinfo") as f:
            settings = QemuSettings(binary=wrapper, accel="tcg", tsc_khz=host_tsc_khz(f.read()))
        machine: IMachine = await QemuDriver(global_reactor, settings).start(spec, self.path("qemu.log"))
        self.addCleanup(machine.kill)
        self.assertEqual(await machine.run_state(), "running")
        with open(self.path("argv.json")) as stream:
            argv = json.load(stream)
        self.assertIn("microvm,pcie=on", argv)
        self.assertIn("vfio-pci,host=0000:01:00.0,id=hostdev0", argv)
        ended = await machine.stop(True, BOOT_TIMEOUT)
        self.assertEqual((ended.exit_code, ended.signal), (0, None), self.console()[-3000:])
        self.assertIn("vmservice-init: power button pressed", self.console())
        # The stand-in (virtio-rng-pci, vendor 1af4, transitional device 1005) as the guest enumerated it.
        self.assertRegex(self.console(), r"pci 0000:00:[0-9a-f]{2}\.0: \[1af4:1005\]")
