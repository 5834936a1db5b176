# -*- test-case-name: tests.hypervisors.qemu.test_network -*-
"""
Tests for the QEMU driver's networking: the tap netdev and virtio-net device
on the command line, the guest address on the kernel command line, and QEMU
started inside the VM's network namespace.
"""

from __future__ import annotations

import os

from attrs import evolve
from twisted.trial.unittest import SynchronousTestCase

from tests.hypervisors.qemu_argv import SPEC, flags
from tests.processes import ProcessReactor
from vmservice.hypervisors.base import NetSpec
from vmservice.hypervisors.qemu import QemuDriver, QemuSettings, kernel_cmdline, qemu_command

NS = "vms-0a4d0006"
ISOLATED_NET = NetSpec("tap0", "52:54:0a:4d:00:06", "10.77.0.6/30", "10.77.0.5", NS)
BRIDGED_NET = NetSpec("vmtc0a88982", "52:54:c0:a8:89:82", "192.168.137.130/24", "192.168.137.1", None)


class CommandLineTests(SynchronousTestCase):
    def test_netdev_and_device(self) -> None:
        """A NetSpec adds a tap netdev (no scripts) and a virtio-net device with the MAC, once each."""
        argv = qemu_command(evolve(SPEC, net=ISOLATED_NET), QemuSettings())
        pairs = flags(argv)
        self.assertEqual(pairs["-netdev"], ["tap,id=net0,ifname=tap0,script=no,downscript=no"])
        self.assertEqual([d for d in pairs["-device"] if d.startswith("virtio-net")],
                         ["virtio-net-device,netdev=net0,mac=52:54:0a:4d:00:06"])

    def test_kernel_command_line(self) -> None:
        """The guest's address (with prefix) and gateway are on the kernel command line."""
        append = flags(qemu_command(evolve(SPEC, net=ISOLATED_NET), QemuSettings()))["-append"][0].split()
        self.assertIn("vmservice.ip=10.77.0.6/30", append)
        self.assertIn("vmservice.gateway=10.77.0.5", append)
        self.assertIn("vmservice.hostname=demo-1", append)
        self.assertIn("root=/dev/vda", append)

    def test_bridge_tap(self) -> None:
        """A bridged VM's tap is named after its address."""
        pairs = flags(qemu_command(evolve(SPEC, net=BRIDGED_NET), QemuSettings()))
        self.assertEqual(pairs["-netdev"], ["tap,id=net0,ifname=vmtc0a88982,script=no,downscript=no"])
        self.assertIn("vmservice.ip=192.168.137.130/24", pairs["-append"][0].split())

    def test_without_net(self) -> None:
        """Without a NetSpec there is no network device and no address on the kernel command line."""
        argv = qemu_command(SPEC, QemuSettings())
        self.assertNotIn("-netdev", argv)
        self.assertFalse(any("virtio-net" in word for word in argv))
        self.assertFalse(any("vmservice.ip=" in word or "vmservice.gateway=" in word for word in argv))

    def test_kernel_cmdline_net(self) -> None:
        """The guest's address and gateway come last on the kernel command line, after the hostname."""
        self.assertEqual(
            kernel_cmdline("h", None, net=ISOLATED_NET),
            "console=ttyS0 quiet reboot=t root=/dev/vda rw vmservice.hostname=h "
            "vmservice.ip=10.77.0.6/30 vmservice.gateway=10.77.0.5",
        )

    def test_restore_keeps_net(self) -> None:
        """A restore (incoming state) has the same network device, the -incoming last."""
        argv = qemu_command(evolve(SPEC, net=ISOLATED_NET, incoming="/s/demo-1/state.bin"), QemuSettings())
        self.assertIn("-netdev", argv)
        self.assertEqual(argv[-2:], ["-incoming", "exec:cat /s/demo-1/state.bin"])


class StartTests(SynchronousTestCase):
    def test_in_netns(self) -> None:
        """With a namespace QEMU is spawned as: setsid ip netns exec NS qemu..."""
        reactor = ProcessReactor()
        spec = evolve(SPEC, net=ISOLATED_NET)
        machine = self.successResultOf(QemuDriver(reactor, QemuSettings()).start(spec, self.mktemp()))
        _, argv, _ = reactor.spawned[0]
        self.assertEqual(os.path.basename(argv[0]), "setsid")
        self.assertEqual(argv[1:], ["ip", "netns", "exec", NS, *qemu_command(spec, QemuSettings())])
        self.assertEqual(machine.pid, 4242)

    def test_without_netns(self) -> None:
        """A bridged VM (no namespace) and a VM without network start QEMU directly under setsid."""
        for net in (BRIDGED_NET, None):
            reactor = ProcessReactor()
            spec = evolve(SPEC, net=net)
            self.successResultOf(QemuDriver(reactor, QemuSettings()).start(spec, self.mktemp()))
            _, argv, _ = reactor.spawned[0]
            self.assertEqual(os.path.basename(argv[0]), "setsid")
            self.assertEqual(argv[1:], qemu_command(spec, QemuSettings()))
