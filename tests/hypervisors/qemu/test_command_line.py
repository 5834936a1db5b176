# -*- test-case-name: tests.hypervisors.qemu.test_command_line -*-
"""
Tests for the QEMU command lines (:mod:`vmservice.hypervisors.qemu.command_line`): word lists, pure.
"""

from __future__ import annotations

from attrs import evolve
from twisted.trial.unittest import SynchronousTestCase

from tests.hypervisors.qemu_argv import SPEC, flags
from vmservice.hypervisors.base import MachineExit, NetSpec
from vmservice.hypervisors.qemu import (
    QemuSettings,
    describe_exit,
    host_tsc_khz,
    kernel_cmdline,
    probe_command,
    qemu_command,
)


class CommandLineTests(SynchronousTestCase):
    def test_tcg(self) -> None:
        """Under TCG: microvm, -cpu max without the slow string copies, memory in MiB, disk, agent port, console file and QMP."""
        argv = qemu_command(SPEC, QemuSettings(accel="tcg", tsc_khz=2445424))
        self.assertEqual(argv[0], "qemu-system-x86_64")
        pairs = flags(argv)
        self.assertEqual(pairs["-machine"], ["microvm"])
        self.assertEqual(pairs["-accel"], ["tcg"])
        self.assertEqual(pairs["-cpu"], ["max,-erms,-fsrm"])
        self.assertEqual(pairs["-m"], ["256"])
        self.assertEqual(pairs["-smp"], ["2"])
        self.assertEqual(pairs["-kernel"], ["/img/vmlinux"])
        self.assertEqual(pairs["-initrd"], ["/img/initrd.img"])
        self.assertIn("id=root,file=/s/demo-1/disk.qcow2,format=qcow2,if=none,discard=unmap", pairs["-drive"])
        self.assertIn("socket,id=agent,path=/s/demo-1/agent.sock,server=on,wait=off", pairs["-chardev"])
        self.assertIn("virtserialport,chardev=agent,name=agent", pairs["-device"])
        # Appended to (O_APPEND): the daemon's truncation of a full log moves QEMU's writes back to its start.
        self.assertIn("file,id=console,path=/s/demo-1/console.log,append=on", pairs["-chardev"])
        self.assertEqual(pairs["-serial"], ["chardev:console"])
        self.assertEqual(pairs["-qmp"], ["unix:/s/demo-1/qmp.sock,server=on,wait=off"])
        self.assertEqual(pairs["-name"], ["vmservice-demo-1"])
        self.assertIn("-nodefaults", argv)
        append = pairs["-append"][0].split()
        self.assertIn("tsc_early_khz=2445424", append)
        self.assertIn("root=/dev/vda", append)
        self.assertIn("vmservice.hostname=demo-1", append)
        self.assertIn("console=ttyS0", append)

    def test_pci_devices(self) -> None:
        """Host PCI devices: microvm with its PCIe host bridge, one vfio-pci device each, virtio-mmio kept."""
        from attrs import evolve

        argv = qemu_command(evolve(SPEC, pci_devices=("0000:01:00.0", "0000:41:00.1")), QemuSettings(accel="kvm"))
        pairs = flags(argv)
        self.assertEqual(pairs["-machine"], ["microvm,pcie=on"])
        self.assertEqual([d for d in pairs["-device"] if d.startswith("vfio-pci")],
                         ["vfio-pci,host=0000:01:00.0,id=hostdev0", "vfio-pci,host=0000:41:00.1,id=hostdev1"])
        self.assertIn("virtio-blk-device,drive=root", pairs["-device"])
        self.assertFalse(any(d.startswith("vfio-pci") for d in flags(qemu_command(SPEC, QemuSettings()))["-device"]))

    def test_metrics_channel(self) -> None:
        """A metrics socket adds a second virtio-serial port, ``metrics``, served on it; none without one."""
        from attrs import evolve

        pairs = flags(qemu_command(evolve(SPEC, metrics_socket="/s/demo-1/stats.sock"), QemuSettings()))
        self.assertIn("socket,id=metrics,path=/s/demo-1/stats.sock,server=on,wait=off", pairs["-chardev"])
        self.assertIn("virtserialport,chardev=metrics,name=metrics", pairs["-device"])
        self.assertFalse(any("metrics" in word for word in qemu_command(SPEC, QemuSettings())))

    def test_bulk_port(self) -> None:
        """A bulk socket adds a virtio-serial port, ``bulk``, served on it; none without one."""
        from attrs import evolve

        pairs = flags(qemu_command(evolve(SPEC, bulk_socket="/s/demo-1/bulk.sock"), QemuSettings()))
        self.assertIn("socket,id=bulk,path=/s/demo-1/bulk.sock,server=on,wait=off", pairs["-chardev"])
        self.assertIn("virtserialport,chardev=bulk,name=bulk", pairs["-device"])
        self.assertFalse(any("bulk" in word for word in qemu_command(SPEC, QemuSettings())))

    def test_tunnel_ports(self) -> None:
        """Tunnel sockets add one virtio-serial port each, ``tunnel0``.., served on them; none without."""
        from attrs import evolve

        sockets = ("/s/demo-1/tun0.sock", "/s/demo-1/tun1.sock")
        pairs = flags(qemu_command(evolve(SPEC, tunnel_sockets=sockets), QemuSettings()))
        for index, socket in enumerate(sockets):
            self.assertIn(f"socket,id=tunnel{index},path={socket},server=on,wait=off", pairs["-chardev"])
            self.assertIn(f"virtserialport,chardev=tunnel{index},name=tunnel{index}", pairs["-device"])
        self.assertFalse(any("tunnel" in word for word in qemu_command(SPEC, QemuSettings())))

    def test_kvm(self) -> None:
        """Under KVM the host CPU model is used."""
        pairs = flags(qemu_command(SPEC, QemuSettings(accel="kvm")))
        self.assertEqual((pairs["-accel"], pairs["-cpu"]), (["kvm"], ["host"]))
        self.assertNotIn("tsc_early_khz", pairs["-append"][0])

    def test_reliable_tsc(self) -> None:
        """
        Under TCG the guest's TSC is the host's: the guest kernel is told it is reliable (its clocksource
        watchdog, which would trade it for jiffies on a busy host, is off); under KVM it is left to decide.
        """
        self.assertIn("tsc=reliable", flags(qemu_command(SPEC, QemuSettings(accel="tcg")))["-append"][0].split())
        self.assertNotIn("tsc=reliable", flags(qemu_command(SPEC, QemuSettings(accel="kvm")))["-append"][0])
        self.assertNotIn("tsc=reliable", kernel_cmdline("h", None))
        self.assertNotIn("tsc=reliable", flags(probe_command("qemu", "/k", "/i", "kvm", 1000, "/p/qmp.sock"))["-append"][0])

    def test_tb_size(self) -> None:
        """Under TCG a size bounds the translation cache; 0 leaves QEMU's default; KVM has none."""
        pairs = flags(qemu_command(SPEC, QemuSettings(accel="tcg", tb_size_mb=64)))
        self.assertEqual(pairs["-accel"], ["tcg,tb-size=64"])
        self.assertEqual(flags(qemu_command(SPEC, QemuSettings(accel="tcg", tb_size_mb=0)))["-accel"], ["tcg"])
        self.assertEqual(flags(qemu_command(SPEC, QemuSettings(accel="kvm", tb_size_mb=64)))["-accel"], ["kvm"])

    def test_tb_size_template_and_clone(self) -> None:
        """Templates and clones have the same bounded translation cache as cold boots (it is not migrated)."""
        from attrs import evolve
        from vmservice.hypervisors.base import RamBacking

        settings = QemuSettings(accel="tcg", tb_size_mb=64)
        for memory, incoming in ((RamBacking("/dev/shm/t/ram", shared=True), False),
                                 (RamBacking("/dev/shm/t/ram", shared=False), True)):
            argv = qemu_command(evolve(SPEC, memory=memory, defer_incoming=incoming), settings)
            self.assertEqual(flags(argv)["-accel"], ["tcg,tb-size=64"])

    def test_probe(self) -> None:
        """
        The probe boots the initramfs in probe mode, console on stdout, no disk, no reboot; it is named
        vmservice-probe and has a monitor in its directory, which is how a sweep finds it.
        """
        argv = probe_command("qemu", "/k", "/i", "kvm", None, "/s/probe/qmp.sock")
        pairs = flags(argv)
        self.assertEqual(pairs["-serial"], ["stdio"])
        self.assertEqual(pairs["-name"], ["vmservice-probe"])
        self.assertEqual(pairs["-qmp"], ["unix:/s/probe/qmp.sock,server=on,wait=off"])
        self.assertIn("vmservice.probe=1", pairs["-append"][0])
        self.assertNotIn("-drive", pairs)
        self.assertIn("-no-reboot", argv)

    def test_cmdline(self) -> None:
        """The kernel command line carries what init needs, without a root in probe mode."""
        self.assertEqual(kernel_cmdline("h", None), "console=ttyS0 quiet reboot=t root=/dev/vda rw vmservice.hostname=h")
        self.assertNotIn("root=", kernel_cmdline(None, 1000, probe=True))

    def test_cmdline_modules(self) -> None:
        """
        The initramfs loads the network and PCI drivers only for machines that have such devices: the
        command line says so with vmservice.nic=1 (a node's network, or a template's loose NIC) and
        vmservice.pci=1 (host PCI devices).
        """
        from attrs import evolve

        plain = flags(qemu_command(SPEC, QemuSettings()))["-append"][0].split()
        self.assertNotIn("vmservice.nic=1", plain)
        self.assertNotIn("vmservice.pci=1", plain)
        loose = flags(qemu_command(evolve(SPEC, loose_nic="02:00:00:00:00:01"), QemuSettings()))["-append"][0]
        self.assertIn("vmservice.nic=1", loose.split())
        net = NetSpec(tap="vms-t", mac="02:00:00:00:00:02", address="10.77.0.6/30", gateway="10.77.0.5")
        self.assertIn("vmservice.nic=1", flags(qemu_command(evolve(SPEC, net=net), QemuSettings()))["-append"][0].split())
        pci = flags(qemu_command(evolve(SPEC, pci_devices=("0000:01:00.0",)), QemuSettings()))["-append"][0]
        self.assertIn("vmservice.pci=1", pci.split())
        self.assertNotIn("vmservice.nic=1", pci.split())
        self.assertEqual(kernel_cmdline("h", None, nic=True, pci=True),
                         "console=ttyS0 quiet reboot=t root=/dev/vda rw vmservice.nic=1 vmservice.pci=1 vmservice.hostname=h")

    def test_cmdline_aslr(self) -> None:
        """A guest without address space randomization boots with ``norandmaps``; with it (the default), without."""
        self.assertIn("norandmaps", kernel_cmdline("h", None, aslr=False).split())
        self.assertNotIn("norandmaps", kernel_cmdline("h", None).split())
        settings = QemuSettings(accel="tcg", tsc_khz=None)
        self.assertIn("norandmaps", flags(qemu_command(evolve(SPEC, aslr=False), settings))["-append"][0].split())
        self.assertNotIn("norandmaps", flags(qemu_command(SPEC, settings))["-append"][0].split())

    def test_vsock(self) -> None:
        """A VM with vsock and a CID: vhost-vsock-device (virtio-mmio: microvm has no PCI) and vmservice.vsock=1."""
        settings = QemuSettings(accel="tcg", tsc_khz=None)
        argv = qemu_command(evolve(SPEC, vsock=True), settings, 12345)
        self.assertIn("vhost-vsock-device,id=vsock0,guest-cid=12345", flags(argv)["-device"])
        self.assertIn("vmservice.vsock=1", flags(argv)["-append"][0].split())
        plain = qemu_command(SPEC, settings, 12345)
        self.assertFalse([word for word in plain if "vsock" in word])
        loopback_only = qemu_command(evolve(SPEC, vsock=True), settings)
        self.assertFalse([word for word in flags(loopback_only)["-device"] if "vsock" in word])
        self.assertIn("vmservice.vsock=1", flags(loopback_only)["-append"][0].split())

    def test_tsc(self) -> None:
        """The TSC frequency comes from the first 'cpu MHz' line."""
        self.assertEqual(host_tsc_khz("processor: 0\ncpu MHz\t\t: 2445.424\n"), 2445424)
        self.assertIsNone(host_tsc_khz("nothing"))

    def test_describe_exit(self) -> None:
        """An exit is described with its status or signal and the first stderr line."""
        self.assertEqual(describe_exit(MachineExit(1, None, "\nqemu: bad thing\nmore\n")), "the VM process exited with status 1: qemu: bad thing")
        self.assertEqual(describe_exit(MachineExit(None, 9, "")), "the VM process was killed by signal 9")


class IncomingTests(SynchronousTestCase):
    def test_incoming(self) -> None:
        """A VM started from a saved state loads it through exec:cat, the path quoted for the shell."""
        from attrs import evolve

        argv = qemu_command(evolve(SPEC, incoming="/s/demo 1/state.bin"), QemuSettings())
        self.assertEqual(flags(argv)["-incoming"], ["exec:cat '/s/demo 1/state.bin'"])
        self.assertNotIn("-incoming", qemu_command(SPEC, QemuSettings()))


class MemoryBackendTests(SynchronousTestCase):
    """The command lines of templates, clones and restored clones, as word lists."""

    def _memory(self, argv: list[str]) -> tuple[str, list[str]]:
        pairs = flags(argv)
        return pairs["-machine"][0], pairs.get("-object", [])

    def test_plain(self) -> None:
        """A node of its own has no memory backend."""
        machine, objects = self._memory(qemu_command(SPEC, QemuSettings()))
        self.assertEqual((machine, objects), ("microvm", []))

    def test_template(self) -> None:
        """A template maps its RAM file shared: its memory is written into the file."""
        from attrs import evolve
        from vmservice.hypervisors.base import RamBacking

        spec = evolve(SPEC, memory=RamBacking("/dev/shm/t/ram", shared=True))
        machine, objects = self._memory(qemu_command(spec, QemuSettings()))
        self.assertEqual(machine, "microvm,memory-backend=mem0")
        self.assertEqual(objects, ["memory-backend-file,id=mem0,size=256M,mem-path=/dev/shm/t/ram,share=on"])
        self.assertNotIn("-incoming", qemu_command(spec, QemuSettings()))

    def test_clone(self) -> None:
        """A clone maps the same file private (share=off, never on) and waits for its device state."""
        from attrs import evolve
        from vmservice.hypervisors.base import RamBacking

        spec = evolve(SPEC, memory=RamBacking("/dev/shm/t/ram", shared=False), defer_incoming=True)
        argv = qemu_command(spec, QemuSettings())
        machine, objects = self._memory(argv)
        self.assertEqual(machine, "microvm,memory-backend=mem0")
        self.assertEqual(objects, ["memory-backend-file,id=mem0,size=256M,mem-path=/dev/shm/t/ram,share=off"])
        self.assertEqual(flags(argv)["-incoming"], ["defer"])
        self.assertNotIn("share=on", " ".join(argv))

    def test_restored_clone(self) -> None:
        """A restored clone's memory is anonymous under the clone's block name, loaded from its snapshot."""
        from attrs import evolve
        from vmservice.hypervisors.base import RamBacking

        spec = evolve(SPEC, memory=RamBacking(None), incoming="/s/demo-1/state.bin")
        argv = qemu_command(spec, QemuSettings())
        machine, objects = self._memory(argv)
        self.assertEqual(machine, "microvm,memory-backend=mem0")
        self.assertEqual(objects, ["memory-backend-ram,id=mem0,size=256M"])
        self.assertEqual(flags(argv)["-incoming"], ["exec:cat /s/demo-1/state.bin"])


class LooseNicTests(SynchronousTestCase):
    def test_template_nic(self) -> None:
        """A template of networked nodes has their network device, on a hub port that reaches nothing."""
        from attrs import evolve

        argv = qemu_command(evolve(SPEC, loose_nic="02:00:00:00:00:01"), QemuSettings())
        self.assertEqual(flags(argv)["-netdev"], ["hubport,id=net0,hubid=0"])
        self.assertIn("virtio-net-device,netdev=net0,mac=02:00:00:00:00:01", flags(argv)["-device"])
        self.assertNotIn("-netdev", qemu_command(SPEC, QemuSettings()))
