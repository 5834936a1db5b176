# -*- test-case-name: tests.hypervisors.test_qemu -*-
"""
Tests for the QEMU driver's pure parts and its process handling, with a
fake process reactor (no process is started: adoption and orphans with real
processes are in :mod:`tests.integration.hypervisors.test_qemu`).
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

from attrs import evolve
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.hypervisors.descriptor_transport import DescriptorTransport
from tests.hypervisors.qemu_argv import SPEC, flags
from vmservice.hypervisors.base import HypervisorError, MachineExit, NetSpec
from tests.processes import ProcessReactor
from vmservice.hypervisors.qemu import (
    QemuDriver,
    QemuProcesses,
    QemuSettings,
    describe_exit,
    host_tsc_khz,
    kernel_cmdline,
    probe_accel,
    probe_command,
    qemu_command,
    sweep_probes,
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

    def test_tsc(self) -> None:
        """The TSC frequency comes from the first 'cpu MHz' line."""
        self.assertEqual(host_tsc_khz("processor: 0\ncpu MHz\t\t: 2445.424\n"), 2445424)
        self.assertIsNone(host_tsc_khz("nothing"))

    def test_describe_exit(self) -> None:
        """An exit is described with its status or signal and the first stderr line."""
        self.assertEqual(describe_exit(MachineExit(1, None, "\nqemu: bad thing\nmore\n")), "the VM process exited with status 1: qemu: bad thing")
        self.assertEqual(describe_exit(MachineExit(None, 9, "")), "the VM process was killed by signal 9")


class DriverTests(SynchronousTestCase):
    def test_start_and_kill(self) -> None:
        """start spawns QEMU with the built argv; kill sends SIGKILL and fires once reaped."""
        reactor = ProcessReactor()
        driver = QemuDriver(reactor, QemuSettings())
        machine = self.successResultOf(driver.start(SPEC, self.mktemp()))
        protocol, argv, fds = reactor.spawned[0]
        self.assertEqual(argv[-len(qemu_command(SPEC, QemuSettings())):], qemu_command(SPEC, QemuSettings()))
        self.assertEqual(os.path.basename(argv[0]), "setsid")
        self.assertIsInstance(fds[1], int)
        self.assertEqual(machine.pid, 4242)
        d = machine.kill()
        self.assertNoResult(d)
        self.assertEqual(reactor.transports[0].signals, ["KILL"])
        protocol.processEnded(Failure(ProcessTerminated(None, 9, None)))
        self.assertEqual(self.successResultOf(d).signal, 9)
        self.assertEqual(self.successResultOf(machine.ended).signal, 9)


    def test_ended_within_the_spawn(self) -> None:
        """
        A QEMU that ends as it starts (killed at once), reaped within
        spawnProcess so that its transport no longer has a pid: still a
        machine with its pid, that has ended (a HypervisorError for whoever
        drives it, never a TypeError).
        """

        class EndingAtOnce(ProcessReactor):
            def spawnProcess(self, protocol: Any, *args: Any, **kwargs: Any) -> Any:
                transport = super().spawnProcess(protocol, *args, **kwargs)
                transport.pid = None  # reaped: Twisted's process forgets its pid
                protocol.processEnded(Failure(ProcessTerminated(None, 9, None)))
                return transport

        machine = self.successResultOf(QemuDriver(EndingAtOnce(), QemuSettings()).start(SPEC, self.mktemp()))
        self.assertEqual(machine.pid, 4242)
        self.assertEqual(self.successResultOf(machine.ended).signal, 9)
        self.failureResultOf(machine.run_state(), HypervisorError)


class ProbeTests(SynchronousTestCase):
    def run_probe(self, reactor: Any, **kw: Any) -> Deferred:
        kw.setdefault("directory", self.mktemp())
        return Deferred.fromCoroutine(probe_accel(reactor, "qemu", "/k", "/i", kw.pop("requested", "auto"), None, **kw))

    def kvm(self) -> str:
        """A file standing in for a usable /dev/kvm."""
        kvm = self.mktemp()
        open(kvm, "w").close()
        return kvm

    def test_configured(self) -> None:
        """A configured accelerator is used without a probe."""
        reactor = ProcessReactor()
        self.assertEqual(self.successResultOf(self.run_probe(reactor, requested="tcg")).accel, "tcg")
        self.assertEqual(reactor.spawned, [])

    def test_no_device(self) -> None:
        """Without a usable /dev/kvm, TCG is chosen and the reason names the device."""
        choice = self.successResultOf(self.run_probe(ProcessReactor(), kvm_path="/nonexistent/kvm"))
        self.assertEqual(choice.accel, "tcg")
        self.assertIn("/nonexistent/kvm", choice.reason)

    def test_probe_crashes(self) -> None:
        """A probe QEMU that aborts (as nested KVM does here) means TCG, with QEMU's error."""
        reactor = ProcessReactor()
        kvm = self.mktemp()
        open(kvm, "w").close()
        d = self.run_probe(reactor, kvm_path=kvm)
        protocol = reactor.spawned[0][0]
        protocol.errReceived(b"error: failed to set MSR 0x10a to 0x0\n")
        protocol.processEnded(Failure(ProcessTerminated(134, None, None)))
        choice = self.successResultOf(d)
        self.assertEqual(choice.accel, "tcg")
        self.assertIn("failed to set MSR", choice.reason)

    def test_probe_boots(self) -> None:
        """A probe guest that prints the marker means KVM; the probe QEMU is then reaped."""
        reactor = ProcessReactor()
        kvm = self.mktemp()
        open(kvm, "w").close()
        d = self.run_probe(reactor, kvm_path=kvm)
        protocol = reactor.spawned[0][0]
        protocol.outReceived(b"booting...\nVMSERVICE_PRO")
        protocol.outReceived(b"BE_OK\n")
        self.assertNoResult(d)
        self.assertEqual(reactor.transports[0].signals, ["KILL"])
        protocol.processEnded(Failure(ProcessDone(0)))
        self.assertEqual(self.successResultOf(d).accel, "kvm")

    def test_probe_leaves_no_timer(self) -> None:
        """Once the probe is decided (here by the marker), its timeout is cancelled."""
        reactor = ProcessReactor()
        kvm = self.mktemp()
        open(kvm, "w").close()
        d = self.run_probe(reactor, kvm_path=kvm, timeout=10)
        self.assertEqual(len(reactor.getDelayedCalls()), 1)
        reactor.spawned[0][0].outReceived(b"VMSERVICE_PROBE_OK\n")
        self.assertEqual(reactor.getDelayedCalls(), [])
        reactor.spawned[0][0].processEnded(Failure(ProcessDone(0)))
        self.assertEqual(self.successResultOf(d).accel, "kvm")

    def test_probe_hangs(self) -> None:
        """A probe guest that shows no sign of life in time means TCG."""
        reactor = ProcessReactor()
        kvm = self.mktemp()
        open(kvm, "w").close()
        d = self.run_probe(reactor, kvm_path=kvm, timeout=10)
        reactor.advance(10)
        reactor.spawned[0][0].processEnded(Failure(ProcessTerminated(None, 9, None)))
        choice = self.successResultOf(d)
        self.assertEqual(choice.accel, "tcg")
        self.assertIn("no sign of life", choice.reason)

    def test_probe_cancelled(self) -> None:
        """
        A probe cancelled while its guest runs (the daemon stops) kills its QEMU and ends only once the
        QEMU is gone, with CancelledError; its timeout is cancelled.
        """
        reactor = ProcessReactor()
        d = self.run_probe(reactor, kvm_path=self.kvm(), timeout=10)
        d.cancel()
        self.assertEqual(reactor.transports[0].signals, ["KILL"])
        self.assertNoResult(d)
        self.assertEqual(reactor.getDelayedCalls(), [])
        reactor.spawned[0][0].processEnded(Failure(ProcessTerminated(None, 9, None)))
        self.failureResultOf(d, CancelledError)

    def test_probe_dies_with_its_parent(self) -> None:
        """
        The probe QEMU is started through setpriv with a parent-death signal, SIGKILL, which setpriv
        sets before it execs QEMU in place: a daemon killed by kill -9 takes its probe with it.
        """
        import shutil

        setpriv = shutil.which("setpriv")
        self.assertIsNotNone(setpriv, "setpriv (util-linux) is not on PATH, where the daemon needs it for its probe"
                                      " QEMU to die with it (docs/security.md): install util-linux")
        reactor = ProcessReactor()
        self.run_probe(reactor, kvm_path=self.kvm())
        _, argv, _ = reactor.spawned[0]
        self.assertEqual(argv[:4], [setpriv, "--pdeathsig", "KILL", "qemu"])
        reactor.spawned[0][0].processEnded(Failure(ProcessTerminated(1, None, None)))

    def test_probe_directory(self) -> None:
        """
        The probe's directory is made 0700 and holds its monitor socket; a link in its place is not
        followed: no probe, TCG, and the reason says why.
        """
        reactor = ProcessReactor()
        directory = self.mktemp()
        self.run_probe(reactor, kvm_path=self.kvm(), directory=directory)
        self.assertEqual(os.stat(directory).st_mode & 0o777, 0o700)
        self.assertIn(f"unix:{directory}/qmp.sock,server=on,wait=off", reactor.spawned[0][1])
        reactor.spawned[0][0].processEnded(Failure(ProcessTerminated(1, None, None)))
        elsewhere = self.mktemp()
        os.makedirs(elsewhere)
        linked = self.mktemp()
        os.symlink(elsewhere, linked)
        choice = self.successResultOf(self.run_probe(reactor, kvm_path=self.kvm(), directory=linked))
        self.assertEqual(choice.accel, "tcg")
        self.assertIn("not a directory", choice.reason)
        self.assertEqual(len(reactor.spawned), 1)


class _RecordingMachine:
    """Builds a QemuMachine whose QMP commands are recorded instead of sent."""

    @staticmethod
    def make(reactor: ProcessReactor, testcase: SynchronousTestCase) -> Any:
        from vmservice.hypervisors.qemu import QemuMachine

        class Recording(QemuMachine):
            commands: list[str] = []

            async def qmp(self, command: str, **arguments: Any) -> Any:
                self.commands.append(command)
                return {}

        driver = QemuDriver(reactor, QemuSettings())
        machine = testcase.successResultOf(driver.start(SPEC, testcase.mktemp()))
        recording = Recording(reactor, reactor.spawned[-1][0], SPEC.qmp_socket)
        recording.commands = []
        del machine
        return recording


class GracefulStopTests(SynchronousTestCase):
    def test_power_button_pressed_until_exit(self) -> None:
        """A graceful stop presses the ACPI power button, again every 2 s, and does not kill a VM that exits."""
        reactor = ProcessReactor()
        machine = _RecordingMachine.make(reactor, self)
        d = machine.stop(True, 10.0)
        self.assertEqual(machine.commands, ["system_powerdown"])
        reactor.advance(2)
        reactor.advance(2)
        self.assertEqual(machine.commands, ["system_powerdown"] * 3)
        reactor.spawned[-1][0].processEnded(Failure(ProcessDone(0)))
        self.assertEqual(self.successResultOf(d).exit_code, 0)
        self.assertEqual(reactor.transports[-1].signals, [])
        reactor.advance(10)
        self.assertEqual(len(machine.commands), 3)

    def test_killed_after_grace(self) -> None:
        """A guest that ignores the power button is killed once the grace has passed."""
        reactor = ProcessReactor()
        machine = _RecordingMachine.make(reactor, self)
        d = machine.stop(True, 5.0)
        reactor.advance(5)
        self.assertEqual(reactor.transports[-1].signals, ["KILL"])
        reactor.spawned[-1][0].processEnded(Failure(ProcessTerminated(None, 9, None)))
        self.assertEqual(self.successResultOf(d).signal, 9)

    def test_not_graceful_kills(self) -> None:
        """A stop that is not graceful kills at once, without QMP."""
        reactor = ProcessReactor()
        machine = _RecordingMachine.make(reactor, self)
        machine.stop(False, 5.0)
        self.assertEqual((machine.commands, reactor.transports[-1].signals), ([], ["KILL"]))


class ExitReportTests(SynchronousTestCase):
    def test_error_from_log_file(self) -> None:
        """Every waiter on ended sees QEMU's error, which QEMU wrote to the node's log file."""
        reactor = ProcessReactor()
        log = self.mktemp()
        machine = self.successResultOf(QemuDriver(reactor, QemuSettings()).start(SPEC, log))
        first, second = machine.ended, machine.ended
        with open(log, "w") as f:
            f.write("qemu-system-x86_64: -drive id=root: Could not open 'disk.qcow2'\n")
        reactor.spawned[0][0].processEnded(Failure(ProcessTerminated(1, None, None)))
        for d in (first, second, machine.ended):
            self.assertIn("Could not open", describe_exit(self.successResultOf(d)))


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


#: QEMU's events at the end of a load: the VM runs; the migration completed or failed.
RESUME = {"event": "RESUME", "timestamp": {"seconds": 1, "microseconds": 0}}
COMPLETED = {"event": "MIGRATION", "data": {"status": "completed"}}
FAILED = {"event": "MIGRATION", "data": {"status": "failed"}}


class _ScriptedMachine:
    """A QemuMachine whose QMP answers come from a script (command -> list of answers)."""

    @staticmethod
    def make(
        reactor: ProcessReactor, testcase: SynchronousTestCase, answers: dict[str, list[Any]],
        events: dict[str, list[dict[str, Any]]] | None = None,
    ) -> Any:
        """
        :param events: command -> the QMP events QEMU sends once it has
            answered it (e.g. ``RESUME`` after ``migrate-incoming``).
        """
        from vmservice.hypervisors.qemu import QemuMachine

        class Scripted(QemuMachine):
            commands: list[tuple[str, dict[str, Any]]] = []
            #: The file each descriptor passed along a command named, as (command, path).
            passed: list[tuple[str, str]] = []

            async def qmp(self, command: str, **arguments: Any) -> Any:
                self.commands.append((command, arguments))
                queue = answers.get(command, [{}])
                answer = queue.pop(0) if len(queue) > 1 else queue[0]
                if isinstance(answer, Exception):
                    raise answer
                for event in (events or {}).get(command, []):
                    reactor.callLater(0, self._event, event)
                return answer

            async def qmp_passing(self, fd: int, command: str, **arguments: Any) -> Any:
                self.passed.append((command, os.readlink(f"/proc/self/fd/{fd}")))
                return await self.qmp(command, **arguments)

        testcase.successResultOf(QemuDriver(reactor, QemuSettings()).start(SPEC, testcase.mktemp()))
        machine = Scripted(reactor, reactor.spawned[-1][0], SPEC.qmp_socket)
        machine.commands = []
        machine.passed = []
        return machine


class SaveStateTests(SynchronousTestCase):
    def new_path(self, name: str = "state.bin") -> str:
        """Where a state file is to be saved: nothing there yet, in a directory of the test's own."""
        directory = os.path.abspath(self.mktemp())
        os.makedirs(directory)
        return os.path.join(directory, name)

    def test_save_polls_until_completed(self) -> None:
        """
        Saving stops the VM, lifts the bandwidth limit, migrates to the file's
        descriptor (made by the daemon, handed over with getfd) and polls
        until completed.
        """
        reactor = ProcessReactor()
        machine = _ScriptedMachine.make(
            reactor, self, {"query-migrate": [{"status": "active"}, {"status": "active"}, {"status": "completed"}]}
        )
        path = self.new_path()
        d = machine.save_state(path)
        self.assertNoResult(d)
        reactor.advance(machine.POLL)
        reactor.advance(machine.POLL)
        self.successResultOf(d)
        names = [name for name, _ in machine.commands]
        self.assertEqual(names, ["stop", "migrate-set-capabilities", "migrate-set-parameters", "getfd", "migrate",
                                 "query-migrate", "query-migrate", "query-migrate"])
        self.assertEqual(machine.commands[1][1], {"capabilities": [{"capability": "x-ignore-shared", "state": False}]})
        self.assertEqual(machine.passed, [("getfd", path)])
        self.assertEqual(machine.commands[3][1], {"fdname": machine.SAVE_FD})
        self.assertEqual(machine.commands[4][1], {"uri": f"fd:{machine.SAVE_FD}"})

    def test_state_file_is_private_from_its_creation(self) -> None:
        """
        The state file (guest memory, /run/secrets too) is made 0600 by the
        daemon before QEMU writes a byte, whatever the umask (no shell of
        QEMU's creates it).
        """
        reactor = ProcessReactor()
        for save in ("save_state", "save_device_state"):
            machine = _ScriptedMachine.make(reactor, self, {"query-migrate": [{"status": "completed"}]})
            path = self.new_path()
            old = os.umask(0)
            try:
                self.successResultOf(getattr(machine, save)(path))
            finally:
                os.umask(old)
            info = os.lstat(path)
            self.assertEqual((stat.S_ISREG(info.st_mode), stat.S_IMODE(info.st_mode)), (True, 0o600), save)

    def test_never_over_a_file_or_through_a_link(self) -> None:
        """A file already at the state's path, or a link planted there, fails the save; neither is written."""
        reactor = ProcessReactor()
        machine = _ScriptedMachine.make(reactor, self, {"query-migrate": [{"status": "completed"}]})
        target = self.new_path("target")
        with open(target, "wb") as f:
            f.write(b"keep")
        link = os.path.join(os.path.dirname(target), "state.bin")
        os.symlink(target, link)
        for path in (target, link):
            failure = self.failureResultOf(machine.save_state(path), HypervisorError)
            self.assertIn("cannot create the state file", str(failure.value))
        self.assertNotIn("migrate", [name for name, _ in machine.commands])
        with open(target, "rb") as f:
            self.assertEqual(f.read(), b"keep")

    def test_save_failure(self) -> None:
        """A failed migration fails the save with QEMU's reason."""
        reactor = ProcessReactor()
        machine = _ScriptedMachine.make(reactor, self, {"query-migrate": [{"status": "failed", "error-desc": "disk full"}]})
        failure = self.failureResultOf(machine.save_state(self.new_path()), HypervisorError)
        self.assertIn("disk full", str(failure.value))

    def test_save_device_state_without_stop(self) -> None:
        """A template's device state is saved running (no stop), its shared memory left out."""
        reactor = ProcessReactor()
        machine = _ScriptedMachine.make(reactor, self, {"query-migrate": [{"status": "active"}, {"status": "completed"}]})
        path = self.new_path("dev.bin")
        d = machine.save_device_state(path)
        self.assertNoResult(d)
        reactor.advance(machine.POLL)
        self.successResultOf(d)
        names = [name for name, _ in machine.commands]
        self.assertEqual(names, ["migrate-set-capabilities", "migrate-set-parameters", "getfd", "migrate",
                                 "query-migrate", "query-migrate"])
        self.assertEqual(machine.commands[0][1], {"capabilities": [{"capability": "x-ignore-shared", "state": True}]})
        self.assertEqual(machine.passed, [("getfd", path)])
        self.assertEqual(machine.commands[3][1], {"uri": f"fd:{machine.SAVE_FD}"})

    def test_save_device_state_failure(self) -> None:
        """A failed save says why."""
        reactor = ProcessReactor()
        machine = _ScriptedMachine.make(reactor, self, {"query-migrate": [{"status": "failed", "error-desc": "no"}]})
        failure = self.failureResultOf(machine.save_device_state(self.new_path("dev.bin")), HypervisorError)
        self.assertIn("saving the device state failed: no", str(failure.value))

    def state_file(self, name: str = "dev bin") -> str:
        """A state file on disk (its descriptor is what QEMU gets)."""
        directory = os.path.abspath(self.mktemp())
        os.makedirs(directory)
        path = os.path.join(directory, name)
        with open(path, "wb") as f:
            f.write(b"QEVM")
        return path

    def test_load_device_state(self) -> None:
        """
        A clone sets x-ignore-shared and migration events in one command, hands QEMU the open
        file (getfd), loads from that descriptor, and is done at QEMU's RESUME, without polling.
        """
        reactor = ProcessReactor()
        machine = _ScriptedMachine.make(reactor, self, {}, events={"migrate-incoming": [RESUME]})
        path = self.state_file()
        d = machine.load_device_state(path)
        self.assertNoResult(d)
        reactor.advance(0)
        self.successResultOf(d)
        self.assertEqual(machine.commands, [
            ("migrate-set-capabilities", {"capabilities": [{"capability": "events", "state": True},
                                                           {"capability": "x-ignore-shared", "state": True}]}),
            ("getfd", {"fdname": "state"}),
            ("migrate-incoming", {"uri": "fd:state"}),
        ])
        self.assertEqual(machine.passed, [("getfd", path)])
        self.assertEqual(machine._event_watchers, [])

    def test_load_device_state_waits_for_event(self) -> None:
        """Nothing but QEMU's event ends the load: the events of other migrations are not taken for it."""
        reactor = ProcessReactor()
        machine = _ScriptedMachine.make(reactor, self, {})
        d = machine.load_device_state(self.state_file())
        machine._event({"event": "MIGRATION", "data": {"status": "active"}})
        machine._event({"event": "STOP"})
        reactor.advance(machine.LOAD_TIMEOUT / 2)
        self.assertNoResult(d)
        machine._event(RESUME)
        self.successResultOf(d)
        self.assertNotIn("query-status", [name for name, _ in machine.commands])

    def test_load_device_state_paused(self) -> None:
        """A clone left paused after the load is a failed load (the template was saved running)."""
        from vmservice.hypervisors.base import HypervisorError

        reactor = ProcessReactor()
        machine = _ScriptedMachine.make(reactor, self, {"query-status": [{"status": "paused"}]},
                                        events={"migrate-incoming": [COMPLETED]})
        d = machine.load_device_state(self.state_file())
        reactor.advance(0)
        self.failureResultOf(d, HypervisorError)

    def test_load_device_state_resume(self) -> None:
        """
        A fork's child of a parent with a memory file (saved paused: MIGRATION completed and no
        RESUME) is let run once loaded with ``resume``.
        """
        reactor = ProcessReactor()
        machine = _ScriptedMachine.make(reactor, self, {"query-status": [{"status": "paused"}]},
                                        events={"migrate-incoming": [COMPLETED]})
        d = machine.load_device_state(self.state_file(), resume=True)
        reactor.advance(0)
        self.successResultOf(d)
        self.assertEqual([name for name, _ in machine.commands],
                         ["migrate-set-capabilities", "getfd", "migrate-incoming", "query-status", "cont"])

    def test_load_state(self) -> None:
        """A full state loads the same way, without x-ignore-shared, and leaves the VM paused."""
        reactor = ProcessReactor()
        machine = _ScriptedMachine.make(reactor, self, {"query-status": [{"status": "paused"}]},
                                        events={"migrate-incoming": [COMPLETED]})
        d = machine.load_state(self.state_file("state.bin"))
        reactor.advance(0)
        self.successResultOf(d)
        self.assertEqual(machine.commands[0], ("migrate-set-capabilities",
                                               {"capabilities": [{"capability": "events", "state": True}]}))
        self.assertEqual([name for name, _ in machine.commands],
                         ["migrate-set-capabilities", "getfd", "migrate-incoming", "query-status"])

    def test_load_fails_with_the_exit(self) -> None:
        """
        QEMU reports a failed load and exits (as QEMU 7.2 does on a state it cannot load):
        the load fails with how QEMU ended, at once.
        """
        from vmservice.hypervisors.base import HypervisorError

        reactor = ProcessReactor()
        machine = _ScriptedMachine.make(reactor, self, {}, events={"migrate-incoming": [FAILED]})
        d = machine.load_device_state(self.state_file())
        reactor.advance(0)
        self.assertNoResult(d)
        reactor.spawned[-1][0].processEnded(Failure(ProcessTerminated(1, None, None)))
        failure = self.failureResultOf(d, HypervisorError)
        self.assertIn("loading the VM state: ", str(failure.value))
        self.assertIn("status 1", str(failure.value))
        self.assertEqual(machine._event_watchers, [])

    def test_load_fails_without_exit(self) -> None:
        """A failed load after which QEMU does not exit fails once FAILED_LOAD_EXIT has passed."""
        from vmservice.hypervisors.base import HypervisorError

        reactor = ProcessReactor()
        machine = _ScriptedMachine.make(reactor, self, {}, events={"migrate-incoming": [FAILED]})
        d = machine.load_device_state(self.state_file())
        reactor.advance(0)
        reactor.advance(machine.FAILED_LOAD_EXIT)
        failure = self.failureResultOf(d, HypervisorError)
        self.assertEqual(str(failure.value), "loading the VM state failed")

    def test_qemu_exits_during_load(self) -> None:
        """QEMU exiting before any event fails the load with how it ended."""
        from vmservice.hypervisors.base import HypervisorError

        reactor = ProcessReactor()
        machine = _ScriptedMachine.make(reactor, self, {})
        d = machine.load_device_state(self.state_file())
        reactor.spawned[-1][0].processEnded(Failure(ProcessTerminated(1, None, None)))
        failure = self.failureResultOf(d, HypervisorError)
        self.assertIn("loading the VM state: ", str(failure.value))
        self.assertIn("status 1", str(failure.value))

    def test_load_timeout(self) -> None:
        """A load QEMU never ends fails after LOAD_TIMEOUT."""
        from vmservice.hypervisors.base import HypervisorError

        reactor = ProcessReactor()
        machine = _ScriptedMachine.make(reactor, self, {})
        d = machine.load_device_state(self.state_file())
        reactor.advance(machine.LOAD_TIMEOUT)
        failure = self.failureResultOf(d, HypervisorError)
        self.assertIn("not done within", str(failure.value))
        self.assertEqual(machine._event_watchers, [])

    def test_missing_state_file(self) -> None:
        """A state file that cannot be opened fails the load before anything reaches QEMU's loader."""
        from vmservice.hypervisors.base import HypervisorError

        reactor = ProcessReactor()
        machine = _ScriptedMachine.make(reactor, self, {})
        failure = self.failureResultOf(machine.load_device_state("/nonexistent/dev.bin"), HypervisorError)
        self.assertIn("cannot open the state file", str(failure.value))
        self.assertNotIn("migrate-incoming", [name for name, _ in machine.commands])

    def test_incoming_waits_for_paused(self) -> None:
        """Loading a state is finished once QEMU leaves inmigrate for paused."""
        reactor = ProcessReactor()
        machine = _ScriptedMachine.make(
            reactor, self, {"query-status": [{"status": "inmigrate"}, {"status": "paused"}]}
        )
        d = machine.finish_incoming()
        self.assertNoResult(d)
        reactor.advance(machine.POLL)
        self.successResultOf(d)

    def test_incoming_bad_state(self) -> None:
        """A state other than inmigrate, paused or running fails the load."""
        from vmservice.hypervisors.base import HypervisorError

        reactor = ProcessReactor()
        machine = _ScriptedMachine.make(reactor, self, {"query-status": [{"status": "internal-error"}]})
        self.failureResultOf(machine.finish_incoming(), HypervisorError)


class ResumeTests(SynchronousTestCase):
    def test_resume(self) -> None:
        """With no migration under way, resume is ``cont``."""
        reactor = ProcessReactor()
        for status in ("none", "completed", "failed", "cancelled"):
            machine = _ScriptedMachine.make(reactor, self, {"query-migrate": [{"status": status}]})
            self.successResultOf(machine.resume())
            self.assertEqual([name for name, _ in machine.commands], ["query-migrate", "cont"], status)

    def test_resume_cancels_a_migration_under_way(self) -> None:
        """
        A state save still under way (begun by a daemon that died) is
        cancelled, and its end waited for, before ``cont``: completed, it
        would stop the VM again.
        """
        reactor = ProcessReactor()
        machine = _ScriptedMachine.make(reactor, self, {"query-migrate": [
            {"status": "active"}, {"status": "cancelling"}, {"status": "cancelled"}]})
        d = machine.resume()
        self.assertNoResult(d)
        reactor.advance(machine.POLL)
        self.successResultOf(d)
        self.assertEqual([name for name, _ in machine.commands],
                         ["query-migrate", "migrate_cancel", "query-migrate", "query-migrate", "cont"])


class FakeProcAdoptionTests(SynchronousTestCase):
    """
    Adoption and orphan handling against a fake /proc, without starting a
    process: the pids are this test's own (whose pidfd can be opened and is
    never signalled) or numbers no process has.  The same with real
    processes: :mod:`tests.integration.hypervisors.test_qemu`.
    """

    def fake_proc(self, entries: dict[int, list[str]]) -> str:
        """A directory laid out as /proc with the command line of each pid of ``entries``."""
        proc = self.mktemp()
        os.makedirs(proc)
        os.makedirs(os.path.join(proc, "self"))
        for pid, argv in entries.items():
            os.makedirs(os.path.join(proc, str(pid)))
            with open(os.path.join(proc, str(pid), "cmdline"), "wb") as f:
                f.write("\0".join(argv).encode() + b"\0")
        return proc

    def test_adopt_watches_pidfd(self) -> None:
        """
        A process whose command line is the VM of the QMP socket is adopted: its pidfd is
        watched by the reactor, and ``ended`` fires (without an exit status) once it is readable.
        """
        from attrs import evolve

        from vmservice.hypervisors.base import HypervisorError

        pid = os.getpid()
        reactor = ProcessReactor()
        self.addCleanup(lambda: [reader.doRead() for reader in list(reactor.getReaders())])
        vms = QemuProcesses(reactor, proc=self.fake_proc({pid: qemu_command(SPEC, QemuSettings())}))
        self.assertRaises(HypervisorError, vms.adopt, evolve(SPEC, qmp_socket="/other/demo-1/qmp.sock"), pid)
        self.assertEqual(reactor.getReaders(), [])
        machine = vms.adopt(SPEC, pid)
        self.assertEqual(machine.pid, pid)
        first, second = machine.ended, machine.ended
        self.assertNoResult(first)
        [reader] = reactor.getReaders()
        reader.doRead()
        self.assertEqual(reactor.getReaders(), [])
        for d in (first, second, machine.ended):
            self.assertEqual(self.successResultOf(d), MachineExit(None, None, ""))
        self.assertFalse(machine.running)

    def test_adopt_not_a_vm(self) -> None:
        """A process whose command line is not one of our VMs is not adopted, and its pidfd is closed."""
        from vmservice.hypervisors.base import HypervisorError

        pid = os.getpid()
        reactor = ProcessReactor()
        vms = QemuProcesses(reactor, proc=self.fake_proc({pid: ["sleep", "60", "/s/x"]}))
        before = len(os.listdir("/proc/self/fd"))
        self.assertRaises(HypervisorError, vms.adopt, SPEC, pid)
        self.assertEqual(len(os.listdir("/proc/self/fd")), before)
        vms.kill_orphan(pid)  # not a VM: left alone (else this test would not go on)
        self.assertEqual(reactor.getReaders(), [])

    def test_orphans(self) -> None:
        """
        Orphans are the pids of our QEMUs whose QMP socket lies exactly one node directory
        under the directory; other programs and other state directories are not.
        """
        from attrs import evolve

        other_dir = evolve(SPEC, qmp_socket="/data/vm/nodes/demo-1/qmp.sock")
        proc = self.fake_proc({
            101: qemu_command(SPEC, QemuSettings()),
            102: qemu_command(other_dir, QemuSettings()),
            103: ["sleep", "60", "/s/x"],
            104: ["qemu-system-x86_64", "-qmp", "unix:/s/x/qmp.sock,server=on,wait=off"],
        })
        vms = QemuProcesses(ProcessReactor(), proc=proc)
        self.assertEqual(vms.orphans("/s"), [101])
        self.assertEqual(vms.orphans("/s/demo"), [])
        self.assertEqual(vms.orphans("/data/vm/nodes"), [102])
        self.assertEqual(vms.orphans("/vm/nodes"), [])

    def test_spare_orphans(self) -> None:
        """A spare VM's QMP socket lies two directories deep (template, spare): found at depth 2 only."""
        from attrs import evolve

        spare = evolve(SPEC, qmp_socket="/t/templates/abc.123/spare-0a1b2c/qmp.sock")
        vms = QemuProcesses(ProcessReactor(), proc=self.fake_proc({105: qemu_command(spare, QemuSettings())}))
        self.assertEqual(vms.orphans("/t/templates", 2), [105])
        self.assertEqual(vms.orphans("/t/templates", 1), [])
        self.assertEqual(vms.orphans("/t/templates/abc.123", 1), [105])

    def test_sweep_probes(self) -> None:
        """
        The probe sweep kills the probe QEMUs whose monitor is in the probe's directory (through a
        pidfd), and only those: not a node's VM, not another state directory's probe, not another program.
        """
        import signal

        pid = os.getpid()  # its pidfd opens; the signal is recorded, never sent
        sent: list[int] = []
        self.patch(signal, "pidfd_send_signal", lambda fd, sig: sent.append(sig))
        proc = self.fake_proc({
            pid: probe_command("qemu-system-x86_64", "/k", "/i", "kvm", None, "/s/probe/qmp.sock"),
            101: qemu_command(SPEC, QemuSettings()),
            102: probe_command("qemu-system-x86_64", "/k", "/i", "kvm", None, "/other/s/probe/qmp.sock"),
            103: ["sleep", "60", "/s/probe/qmp.sock"],
        })
        self.assertEqual(sweep_probes("/s/probe", proc), [pid])
        self.assertEqual(sent, [signal.SIGKILL])
        self.assertEqual(sweep_probes("/s/nothing", proc), [])

    def test_adopt_started_as_a_spare(self) -> None:
        """
        A VM started under a spare's names is adopted by the QMP socket recorded for it; its monitor is
        then reached at the node's socket, where its socket was renamed.
        """
        from attrs import evolve

        from vmservice.hypervisors.base import HypervisorError

        pid = os.getpid()
        reactor = ProcessReactor()
        self.addCleanup(lambda: [reader.doRead() for reader in list(reactor.getReaders())])
        started = "/s/templates/abc.123/spare-0a1b2c/qmp.sock"
        vms = QemuProcesses(reactor, proc=self.fake_proc({pid: qemu_command(evolve(SPEC, qmp_socket=started), QemuSettings())}))
        self.assertRaises(HypervisorError, vms.adopt, SPEC, pid)
        machine = vms.adopt(SPEC, pid, None, started)
        self.assertEqual((machine.pid, machine._qmp_socket), (pid, SPEC.qmp_socket))


class QmpTimeoutTests(SynchronousTestCase):
    def test_stuck_qemu(self) -> None:
        """A QMP command QEMU does not answer fails after QMP_TIMEOUT and drops the session."""
        from twisted.internet.testing import StringTransport

        from vmservice.hypervisors.qemu import QemuMachine
        from vmservice.hypervisors.qmp import QMPError, QMPProtocol

        reactor = ProcessReactor()
        self.successResultOf(QemuDriver(reactor, QemuSettings()).start(SPEC, self.mktemp()))
        machine = QemuMachine(reactor, reactor.spawned[-1][0], SPEC.qmp_socket)
        protocol = QMPProtocol()
        transport = StringTransport()
        protocol.makeConnection(transport)
        protocol.dataReceived(b'{"QMP": {}}\n{"return": {}}\n')
        machine._qmp = protocol
        d = Deferred.fromCoroutine(machine.qmp("query-status"))
        self.assertNoResult(d)
        reactor.advance(machine.QMP_TIMEOUT)
        failure = self.failureResultOf(d, QMPError)
        self.assertIn("no answer", str(failure.value))
        self.assertTrue(transport.disconnecting)


class QmpSessionTests(SynchronousTestCase):
    """
    One connection to the monitor for every caller, made on first use, over
    the connections a memory reactor records.
    """

    def machine(self) -> tuple[ProcessReactor, Any]:
        """A reactor and a QemuMachine of a QEMU started on it, not yet connected to QMP."""
        from vmservice.hypervisors.qemu import QemuMachine

        reactor = ProcessReactor()
        self.successResultOf(QemuDriver(reactor, QemuSettings()).start(SPEC, self.mktemp()))
        return reactor, QemuMachine(reactor, reactor.spawned[-1][0], SPEC.qmp_socket)

    def accept(self, reactor: ProcessReactor, index: int = 0) -> tuple[Any, StringTransport]:
        """Complete the ``index``-th connection attempt; the protocol and its transport."""
        address, factory, timeout, check_pid = reactor.unixClients[index]
        self.assertEqual(address, SPEC.qmp_socket)
        protocol = factory.buildProtocol(None)
        transport = StringTransport()
        protocol.makeConnection(transport)
        return protocol, transport

    def sent(self, transport: StringTransport) -> list[str]:
        """The commands written on ``transport`` so far."""
        return [json.loads(line)["execute"] for line in transport.value().splitlines() if line]

    def test_callers_share_one_connection(self) -> None:
        """
        Callers that arrive while the connection is being made wait for it; once QEMU greets,
        their commands go out in order on it, each caller gets its own answer, and a later
        caller uses the same connection.
        """
        reactor, machine = self.machine()
        first = Deferred.fromCoroutine(machine.qmp("query-status"))
        second = Deferred.fromCoroutine(machine.qmp("stop"))
        self.assertEqual(len(reactor.unixClients), 1)
        protocol, transport = self.accept(reactor)
        self.assertEqual(self.sent(transport), [])
        self.assertNoResult(first)
        protocol.dataReceived(b'{"QMP": {}}\n{"return": {}}\n')
        self.assertEqual(self.sent(transport), ["qmp_capabilities", "query-status", "stop"])
        protocol.dataReceived(b'{"return": {"status": "running"}}\n{"return": {}}\n')
        self.assertEqual(self.successResultOf(first), {"status": "running"})
        self.assertEqual(self.successResultOf(second), {})
        third = Deferred.fromCoroutine(machine.qmp("cont"))
        self.assertEqual(len(reactor.unixClients), 1)
        self.assertEqual(self.sent(transport)[-1], "cont")
        protocol.dataReceived(b'{"return": {}}\n')
        self.assertEqual(self.successResultOf(third), {})

    def test_cancelled_caller_leaves_the_others(self) -> None:
        """A caller that gives up while the connection is made fails alone; the others go on."""
        reactor, machine = self.machine()
        gone = Deferred.fromCoroutine(machine.qmp("query-status"))
        staying = Deferred.fromCoroutine(machine.qmp("stop"))
        gone.cancel()
        self.failureResultOf(gone, CancelledError)
        protocol, transport = self.accept(reactor)
        protocol.dataReceived(b'{"QMP": {}}\n{"return": {}}\n')
        self.assertEqual(self.sent(transport), ["qmp_capabilities", "stop"])
        protocol.dataReceived(b'{"return": {}}\n')
        self.assertEqual(self.successResultOf(staying), {})

    def test_no_greeting_fails_every_caller(self) -> None:
        """
        When QEMU does not greet within QMP_TIMEOUT, every waiting caller fails, the connection
        is dropped, and the next caller connects anew.
        """
        from vmservice.hypervisors.qmp import QMPError

        reactor, machine = self.machine()
        first = Deferred.fromCoroutine(machine.qmp("query-status"))
        second = Deferred.fromCoroutine(machine.qmp("stop"))
        protocol, transport = self.accept(reactor)
        reactor.advance(machine.QMP_TIMEOUT)
        for d in (first, second):
            self.assertIn("did not greet", str(self.failureResultOf(d, QMPError).value))
        self.assertTrue(transport.disconnecting)
        third = Deferred.fromCoroutine(machine.qmp("cont"))
        self.assertEqual(len(reactor.unixClients), 2)
        protocol, transport = self.accept(reactor, 1)
        protocol.dataReceived(b'{"QMP": {}}\n{"return": {}}\n{"return": {}}\n')
        self.assertEqual(self.successResultOf(third), {})

    def test_refused_after_exit(self) -> None:
        """A connection refused once QEMU has ended fails the caller at once (no retry)."""
        from twisted.internet.error import ConnectionRefusedError

        from vmservice.hypervisors.qmp import QMPError

        reactor, machine = self.machine()
        d = Deferred.fromCoroutine(machine.qmp("query-status"))
        reactor.spawned[-1][0].processEnded(Failure(ProcessTerminated(None, 9, None)))
        factory = reactor.unixClients[0][1]
        factory.clientConnectionFailed(None, Failure(ConnectionRefusedError()))
        self.assertIn("cannot reach QMP", str(self.failureResultOf(d, QMPError).value))
        self.assertEqual(len(reactor.unixClients), 1)
        self.assertIn("not running", str(self.failureResultOf(Deferred.fromCoroutine(machine.qmp("stop")), QMPError).value))

    def test_load_over_the_wire(self) -> None:
        """
        The whole load on one QMP connection: the capabilities, getfd with the open state file
        passed along its bytes, migrate-incoming from that descriptor; QEMU's RESUME, on the same
        connection, ends it.
        """

        reactor, machine = self.machine()
        state = os.path.abspath(self.mktemp())
        with open(state, "wb") as f:
            f.write(b"QEVM")
        d = machine.load_device_state(state)
        address, factory, timeout, check_pid = reactor.unixClients[0]
        protocol = factory.buildProtocol(None)
        transport = DescriptorTransport()
        protocol.makeConnection(transport)
        protocol.dataReceived(b'{"QMP": {}}\n{"return": {}}\n{"return": {}}\n')
        protocol.dataReceived(b'{"return": {}}\n')
        getfd = transport.value().index(b'{"execute": "getfd"')
        self.assertEqual(transport.descriptors, [(getfd, state)])
        protocol.dataReceived(b'{"return": {}}\n')
        self.assertEqual(self.sent(transport), ["qmp_capabilities", "migrate-set-capabilities", "getfd", "migrate-incoming"])
        self.assertNoResult(d)
        protocol.dataReceived(b'{"event": "MIGRATION", "data": {"status": "active"}}\n')
        self.assertNoResult(d)
        protocol.dataReceived(b'{"event": "RESUME", "timestamp": {"seconds": 1, "microseconds": 2}}\n')
        self.successResultOf(d)
        self.assertEqual(len(reactor.unixClients), 1)

    def test_load_refused(self) -> None:
        """A command of the load that QEMU refuses fails the load, naming the command and QEMU's reason."""
        from vmservice.hypervisors.base import HypervisorError

        reactor, machine = self.machine()
        state = os.path.abspath(self.mktemp())
        with open(state, "wb") as f:
            f.write(b"QEVM")
        d = machine.load_device_state(state)
        protocol = reactor.unixClients[0][1].buildProtocol(None)
        transport = DescriptorTransport()
        protocol.makeConnection(transport)
        protocol.dataReceived(b'{"QMP": {}}\n{"return": {}}\n{"return": {}}\n{"return": {}}\n')
        self.assertEqual(self.sent(transport)[-1], "migrate-incoming")
        protocol.dataReceived(b'{"error": {"class": "GenericError", "desc": "No file descriptor named state"}}\n')
        failure = self.failureResultOf(d, HypervisorError)
        self.assertEqual(str(failure.value),
                         "loading the VM state: migrate-incoming: GenericError: No file descriptor named state")
        self.assertEqual(machine._event_watchers, [])

    def test_missing_socket_retried(self) -> None:
        """A socket QEMU has not made yet is tried again every POLL seconds while QEMU runs."""
        from twisted.internet.error import ConnectError

        reactor, machine = self.machine()
        d = Deferred.fromCoroutine(machine.qmp("query-status"))
        reactor.unixClients[0][1].clientConnectionFailed(None, Failure(ConnectError("no such file")))
        self.assertEqual(len(reactor.unixClients), 1)
        reactor.advance(machine.POLL)
        self.assertEqual(len(reactor.unixClients), 2)
        protocol, transport = self.accept(reactor, 1)
        protocol.dataReceived(b'{"QMP": {}}\n{"return": {}}\n{"return": {"status": "paused"}}\n')
        self.assertEqual(self.successResultOf(d), {"status": "paused"})


class LooseNicTests(SynchronousTestCase):
    def test_template_nic(self) -> None:
        """A template of networked nodes has their network device, on a hub port that reaches nothing."""
        from attrs import evolve

        argv = qemu_command(evolve(SPEC, loose_nic="02:00:00:00:00:01"), QemuSettings())
        self.assertEqual(flags(argv)["-netdev"], ["hubport,id=net0,hubid=0"])
        self.assertIn("virtio-net-device,netdev=net0,mac=02:00:00:00:00:01", flags(argv)["-device"])
        self.assertNotIn("-netdev", qemu_command(SPEC, QemuSettings()))


NO_ROOM = {"event": "BLOCK_IO_ERROR", "data": {"device": "root", "node-name": "#block123", "operation": "write",
                                               "action": "stop", "nospace": True, "reason": "No space left on device"},
           "timestamp": {"seconds": 1, "microseconds": 0}}


class NoRoomTests(SynchronousTestCase):
    def test_event(self) -> None:
        """
        Watching asks QEMU's run state once (which opens the session the
        events come on); each BLOCK_IO_ERROR that stopped the VM for lack of
        room tells every watcher; other I/O errors and events do not.
        """
        reactor = ProcessReactor()
        machine = _ScriptedMachine.make(reactor, self, {"query-status": [{"status": "running"}]})
        seen: list[str] = []
        machine.on_no_room(lambda: seen.append("a"))
        machine.on_no_room(lambda: seen.append("b"))
        self.assertEqual([name for name, _ in machine.commands], ["query-status"])
        self.assertEqual(seen, [])
        machine._event({**NO_ROOM, "data": {**NO_ROOM["data"], "nospace": False}})
        machine._event({**NO_ROOM, "data": {**NO_ROOM["data"], "action": "report"}})
        machine._event(RESUME)
        self.assertEqual(seen, [])
        machine._event(NO_ROOM)
        self.assertEqual(seen, ["a", "b"])

    def test_stopped_already(self) -> None:
        """A VM that is stopped on an I/O error when the watch begins (an adopted one) is told at once."""
        reactor = ProcessReactor()
        machine = _ScriptedMachine.make(reactor, self, {"query-status": [{"status": "io-error"}]})
        seen: list[str] = []
        machine.on_no_room(lambda: seen.append("stopped"))
        self.assertEqual(seen, ["stopped"])

    def test_unreachable(self) -> None:
        """A QMP that cannot be reached when the watch begins is no error (the VM's end says what happened)."""
        from vmservice.hypervisors.qmp import QMPError

        reactor = ProcessReactor()
        machine = _ScriptedMachine.make(reactor, self, {"query-status": [QMPError("cannot reach QMP")]})
        seen: list[str] = []
        machine.on_no_room(lambda: seen.append("stopped"))
        self.assertEqual(seen, [])
        self.flushLoggedErrors()
