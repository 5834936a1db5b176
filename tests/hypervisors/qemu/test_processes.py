# -*- test-case-name: tests.hypervisors.qemu.test_processes -*-
"""
Tests for the QEMUs an earlier run left (:mod:`vmservice.hypervisors.qemu.processes`), against a
fake /proc (real processes: :mod:`tests.integration.hypervisors.test_qemu`).
"""

from __future__ import annotations

import os

from attrs import evolve
from twisted.trial.unittest import SynchronousTestCase

from tests.hypervisors.qemu_argv import SPEC
from vmservice.hypervisors.base import HypervisorError, MachineExit
from tests.processes import ProcessReactor
from vmservice.hypervisors.qemu import QemuProcesses, QemuSettings, probe_command, qemu_command, sweep_probes


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
        self.assertEqual((machine.pid, machine.monitor.socket), (pid, SPEC.qmp_socket))
