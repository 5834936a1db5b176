# -*- test-case-name: tests.integration.hypervisors.test_qemu -*-
"""
Tests for :mod:`vmservice.hypervisors.qemu` with real processes: adoption and
orphan handling against a fake /proc that names real (``sleep``) processes,
and a real QEMU started, driven over QMP and stopped by :class:`QemuDriver`
on the global reactor.  The driver's logic without processes is tested in
:mod:`tests.hypervisors.qemu`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile

from twisted.internet import reactor as global_reactor
from twisted.internet.defer import Deferred, gatherResults
from twisted.trial.unittest import SynchronousTestCase, TestCase

from tests.hypervisors.qemu_argv import SPEC
from tests.integration.hypervisors.tcg import BOOT_TIMEOUT
from tests.processes import ProcessReactor
from attrs import evolve

from vmservice.hypervisors.base import HypervisorError, IMachine, MachineSpec, RamBacking
from vmservice.hypervisors.qemu import QemuDriver, QemuProcesses, QemuSettings, host_tsc_khz, qemu_command
from vmservice.images.build import build_image
from vmservice.images.store import default_image_dir
from vmservice.storage.overlay import create_overlay


class AdoptionTests(SynchronousTestCase):
    """Adoption and orphan handling against a fake /proc that names real processes."""

    def fake_proc(self, pid: int, argv: list[str]) -> str:
        proc = self.mktemp()
        os.makedirs(os.path.join(proc, str(pid)))
        with open(os.path.join(proc, str(pid), "cmdline"), "wb") as f:
            f.write("\0".join(argv).encode() + b"\0")
        return proc

    def sleeper(self) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(["sleep", "60"])
        self.addCleanup(child.wait)
        self.addCleanup(lambda: child.poll() is None and child.kill())
        return child

    def test_adopt_checks_qmp_socket(self) -> None:
        """A process is adopted only when its command line is the VM of that QMP socket."""
        from vmservice.hypervisors.base import HypervisorError

        child = self.sleeper()
        argv = qemu_command(SPEC, QemuSettings())
        reactor = ProcessReactor()
        vms = QemuProcesses(reactor, proc=self.fake_proc(child.pid, argv))
        machine = vms.adopt(SPEC, child.pid)
        self.assertEqual(machine.pid, child.pid)
        self.assertNoResult(machine.ended)
        from attrs import evolve

        other = evolve(SPEC, qmp_socket="/other/demo-1/qmp.sock")
        self.assertRaises(HypervisorError, vms.adopt, other, child.pid)
        machine.kill()
        child.wait()
        reader = next(iter(reactor.getReaders()))
        reader.doRead()
        self.assertIsNone(self.successResultOf(machine.ended).exit_code)

    def test_adopt_gone(self) -> None:
        """A pid that no longer exists cannot be adopted."""
        from vmservice.hypervisors.base import HypervisorError

        child = subprocess.Popen(["true"])
        child.wait()
        vms = QemuProcesses(ProcessReactor(), proc=self.fake_proc(child.pid, ["qemu-system-x86_64"]))
        self.assertRaises(HypervisorError, vms.adopt, SPEC, child.pid)

    def test_orphans_and_kill(self) -> None:
        """Orphans are our QEMUs with files under the directory; kill_orphan kills them by pidfd."""
        child = self.sleeper()
        argv = qemu_command(SPEC, QemuSettings())
        vms = QemuProcesses(ProcessReactor(), proc=self.fake_proc(child.pid, argv))
        self.assertEqual(vms.orphans("/s"), [child.pid])
        self.assertEqual(vms.orphans("/s/demo"), [])
        self.assertEqual(vms.orphans("/elsewhere"), [])
        vms.kill_orphan(child.pid)
        self.assertEqual(child.wait(), -signal.SIGKILL)

    def test_orphans_of_another_state_dir(self) -> None:
        """A VM under /data/vm/nodes is not an orphan of a daemon whose nodes are in /vm/nodes."""
        from attrs import evolve

        child = self.sleeper()
        spec = evolve(SPEC, qmp_socket="/data/vm/nodes/demo-1/qmp.sock")
        vms = QemuProcesses(ProcessReactor(), proc=self.fake_proc(child.pid, qemu_command(spec, QemuSettings())))
        self.assertEqual(vms.orphans("/vm/nodes"), [])
        self.assertEqual(vms.orphans("/data/vm/nodes"), [child.pid])

    def test_not_a_vm_is_not_killed(self) -> None:
        """A process whose command line is not one of our VMs is left alone."""
        child = self.sleeper()
        vms = QemuProcesses(ProcessReactor(), proc=self.fake_proc(child.pid, ["sleep", "60", "/s/x"]))
        self.assertEqual(vms.orphans("/s"), [])
        vms.kill_orphan(child.pid)
        self.assertIsNone(child.poll())


class RealQemuTests(TestCase):
    """
    A real QEMU (TCG) booted from the built image by :class:`QemuDriver`, on the
    global reactor.
    """

    timeout = 4 * BOOT_TIMEOUT

    def setUp(self) -> None:
        self.image = build_image(default_image_dir(), out=lambda line: None)
        self.workdir = tempfile.mkdtemp(prefix="vms-qemu-", dir="/tmp")  # short: UNIX socket paths
        self.addCleanup(shutil.rmtree, self.workdir, True)

    def spec(self) -> MachineSpec:
        """A VM of 256 MiB and one vCPU whose files all lie in the test's directory."""

        def path(name: str) -> str:
            return os.path.join(self.workdir, name)

        return MachineSpec(
            name="itest-1", vcpus=1, ram_bytes=256 << 20, kernel=self.image.kernel.path,
            initrd=self.image.initrd.path, disk=path("disk.qcow2"), agent_socket=path("agent.sock"),
            qmp_socket=path("qmp.sock"), console_log=path("console.log"),
        )

    def console(self) -> str:
        """What the guest wrote on its serial console so far."""
        try:
            with open(os.path.join(self.workdir, "console.log"), "rb") as stream:
                return stream.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    async def test_start_pause_resume_stop(self) -> None:
        """
        The driver starts QEMU on a qcow2 overlay of the image; callers that ask at once share
        the one QMP connection and see it running; pause and resume change its run state; a
        graceful stop presses the power button until the guest powers off, and QEMU exits 0.
        """
        spec = self.spec()
        await Deferred.fromCoroutine(create_overlay(global_reactor, self.image.rootfs.path, spec.disk, 2 << 30))
        with open("/proc/cpuinfo") as f:
            settings = QemuSettings(accel="tcg", tsc_khz=host_tsc_khz(f.read()))
        driver = QemuDriver(global_reactor, settings)
        machine: IMachine = await driver.start(spec, os.path.join(self.workdir, "qemu.log"))
        self.addCleanup(machine.kill)
        states = await gatherResults([machine.run_state(), machine.run_state()])
        self.assertEqual(states, ["running", "running"])
        await machine.pause()
        self.assertEqual(await machine.run_state(), "paused")
        await machine.resume()
        self.assertEqual(await machine.run_state(), "running")
        ended = await machine.stop(True, BOOT_TIMEOUT)
        self.assertEqual((ended.exit_code, ended.signal), (0, None), self.console()[-3000:])
        self.assertIn("vmservice-init: power button pressed", self.console())


class RealLoadTests(TestCase):
    """
    State loads into real QEMUs waiting in ``-incoming defer`` (the state
    file's descriptor handed over QMP, the end taken from QEMU's events): a
    clone's device state over a template's RAM file, a full state, and a
    corrupt one.  The guests need not have booted: only QEMU's side is tested.
    """

    timeout = BOOT_TIMEOUT

    def setUp(self) -> None:
        self.image = build_image(default_image_dir(), out=lambda line: None)
        self.workdir = tempfile.mkdtemp(prefix="vms-load-", dir="/tmp")  # short: UNIX socket paths
        self.addCleanup(shutil.rmtree, self.workdir, True)
        self.ram_file = tempfile.mktemp(prefix="vms-load-", dir="/dev/shm")
        self.addCleanup(lambda: os.path.exists(self.ram_file) and os.unlink(self.ram_file))
        with open("/proc/cpuinfo") as f:
            self.driver = QemuDriver(global_reactor, QemuSettings(accel="tcg", tsc_khz=host_tsc_khz(f.read())))

    def path(self, name: str) -> str:
        return os.path.join(self.workdir, name)

    def spec(self, name: str, **changes: object) -> MachineSpec:
        """A VM of 128 MiB and one vCPU named ``name``, its sockets in the test's directory."""
        spec = MachineSpec(
            name=name, vcpus=1, ram_bytes=128 << 20, kernel=self.image.kernel.path, initrd=self.image.initrd.path,
            disk=self.path("disk.qcow2"), agent_socket=self.path(f"{name}.agent"),
            qmp_socket=self.path(f"{name}.qmp"), console_log=self.path(f"{name}.console"),
        )
        return evolve(spec, **changes)

    async def start(self, spec: MachineSpec) -> IMachine:
        machine = await self.driver.start(spec, self.path(f"{spec.name}.log"))
        self.addCleanup(machine.kill)
        return machine

    async def template_state(self) -> str:
        """The device state of a template VM (its memory in the RAM file), which is then gone."""
        await Deferred.fromCoroutine(create_overlay(global_reactor, self.image.rootfs.path, self.path("disk.qcow2"), 2 << 30))
        template = await self.start(self.spec("tmpl", memory=RamBacking(self.ram_file, shared=True)))
        self.assertEqual(await template.run_state(), "running")
        state = self.path("dev.bin")
        await template.save_device_state(state)
        await template.kill()
        return state

    async def test_clone_loads_and_saves(self) -> None:
        """
        A clone loads the template's device state and runs; it can then save its full state
        (x-ignore-shared turned off again), which a VM with anonymous memory loads, paused.
        """
        state = await self.template_state()
        clone = await self.start(self.spec("clone", memory=RamBacking(self.ram_file), defer_incoming=True))
        await clone.load_device_state(state)
        self.assertEqual(await clone.run_state(), "running")
        full = self.path("state.bin")
        await clone.save_state(full)
        await clone.kill()
        restored = await self.start(self.spec("restored", memory=RamBacking(None), defer_incoming=True))
        await restored.load_state(full)
        self.assertEqual(await restored.run_state(), "paused")
        await restored.resume()
        self.assertEqual(await restored.run_state(), "running")

    async def test_corrupt_state_fails_fast(self) -> None:
        """A device state QEMU cannot load fails the load with how QEMU ended, well before the timeout."""
        state = await self.template_state()
        with open(state, "r+b") as f:
            f.seek(64)
            f.write(os.urandom(4096))
        clone = await self.start(self.spec("clone", memory=RamBacking(self.ram_file), defer_incoming=True))
        began = global_reactor.seconds()
        with self.assertRaises(HypervisorError) as raised:
            await clone.load_device_state(state)
        self.assertIn("loading the VM state: ", str(raised.exception))
        self.assertLess(global_reactor.seconds() - began, clone.LOAD_TIMEOUT / 2)  # type: ignore[attr-defined]
        self.assertFalse(clone.running)  # type: ignore[attr-defined]
