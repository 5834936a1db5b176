# -*- test-case-name: tests.nodes.test_launch -*-
"""Tests for :mod:`vmservice.nodes.launch`: how each kind of start shapes a VM's spec."""

from __future__ import annotations

from attrs import evolve
from twisted.trial.unittest import SynchronousTestCase

from vmservice.hypervisors.base import MachineSpec, RamBacking
from vmservice.nodes.launch import Clone, Cold, ForkChild, Launch, Restore, incoming, shaped, timed
from vmservice.nodes.warm.template_files import Template
from vmservice.nodes.warm.template_key import TemplateKey

KEY = TemplateKey(image="default", build="/img/default-1", qemu="qemu 7.2", ram_bytes=256 << 20, vcpus=1,
                  network=False, storage_size=1 << 30)
TEMPLATE = Template(key=KEY, directory="/t/a", disk="/t/a/disk.qcow2", device_state="/t/a/dev.bin",
                    ram_file="/shm/a.ram", kernel="/img/t-vmlinux", initrd="/img/t-initrd.img")
SPEC = MachineSpec(name="n-1", vcpus=1, ram_bytes=256 << 20, kernel="/k", initrd="/i", disk="/n/disk.qcow2",
                   agent_socket="/n/agent.sock", qmp_socket="/n/qmp.sock", console_log="/n/console.log",
                   incoming="/n/state.bin", memory=RamBacking(None, shared=False))
COPY = RamBacking("/shm/fork-p.ram", shared=False)

LAUNCHES: list[Launch] = [Cold("/k", "/i"), Restore("/k", "/i", "/n/state.bin"), Clone(TEMPLATE),
                          ForkChild("/k", "/i", "/f/state", COPY)]


class LaunchTests(SynchronousTestCase):
    def test_incoming(self) -> None:
        """A restore and a fork's child start from their state; a boot and a clone from none."""
        self.assertEqual([incoming(launch) for launch in LAUNCHES], [None, "/n/state.bin", None, "/f/state"])

    def test_timed(self) -> None:
        """Only a boot is timed for the boot metric."""
        self.assertEqual([timed(launch) for launch in LAUNCHES], [True, False, False, False])

    def test_boot_files(self) -> None:
        """A clone boots its template's kernel and initramfs; the others the ones they were given."""
        self.assertEqual([(launch.kernel, launch.initrd) for launch in LAUNCHES],
                         [("/k", "/i")] * 2 + [("/img/t-vmlinux", "/img/t-initrd.img")] + [("/k", "/i")])

    def test_cold_and_restore_unchanged(self) -> None:
        """A boot and a restore start the spec as made."""
        self.assertEqual(shaped(Cold("/k", "/i"), SPEC), SPEC)
        self.assertEqual(shaped(Restore("/k", "/i", "/n/state.bin"), SPEC), SPEC)

    def test_clone(self) -> None:
        """A clone maps its template's RAM file privately and waits for the device state."""
        self.assertEqual(shaped(Clone(TEMPLATE), evolve(SPEC, incoming=None)),
                         evolve(SPEC, incoming=None, memory=RamBacking("/shm/a.ram", shared=False),
                                defer_incoming=True))

    def test_fork_child(self) -> None:
        """A fork's child waits for its state instead of reading it, mapping its parent's copy when there is one."""
        self.assertEqual(shaped(ForkChild("/k", "/i", "/n/state.bin", COPY), SPEC),
                         evolve(SPEC, incoming=None, defer_incoming=True, memory=COPY))
        self.assertEqual(shaped(ForkChild("/k", "/i", "/n/state.bin"), SPEC),
                         evolve(SPEC, incoming=None, defer_incoming=True))

    def test_frozen(self) -> None:
        """Launches are values: equal when their fields are."""
        self.assertEqual(Clone(TEMPLATE), Clone(TEMPLATE))
        self.assertNotEqual(Restore("/k", "/i", "/a"), Restore("/k", "/i", "/b"))
