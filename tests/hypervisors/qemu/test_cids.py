# -*- test-case-name: tests.hypervisors.qemu.test_cids -*-
"""
Tests for :mod:`vmservice.hypervisors.qemu.cids` (the CID allocator and the
CID file) and the QEMU driver's use of them on a fake process reactor: a CID
per QEMU start, held while it runs, released when it exits.
"""

from __future__ import annotations

import os
import stat

from attrs import evolve
from twisted.internet.error import ProcessTerminated
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.hypervisors.qemu_argv import SPEC
from tests.processes import ProcessReactor
from vmservice.hypervisors.qemu import QemuDriver, QemuSettings
from vmservice.hypervisors.cid_file import FIRST_CID, LAST_CID, cid_path, read_cid, write_cid
from vmservice.hypervisors.qemu.cids import CidAllocator


def cid_in_argv(argv: list[str]) -> int | None:
    """The ``guest-cid=`` of a QEMU command line's vhost-vsock device, or ``None``."""
    for word in argv:
        if word.startswith("vhost-vsock-device,"):
            return int(dict(option.split("=", 1) for option in word.split(",")[1:])["guest-cid"])
    return None


class AllocatorTests(SynchronousTestCase):
    def test_unique_among_held(self) -> None:
        """A CID already held is drawn again; a released one may be handed out again."""
        draws = iter([7, 7, 7, 9, 7])
        cids = CidAllocator(lambda low, high: next(draws))
        self.assertEqual(cids.allocate(), 7)
        self.assertEqual(cids.allocate(), 9)
        self.assertEqual(cids.held, {7, 9})
        cids.release(7)
        self.assertEqual(cids.allocate(), 7)

    def test_range(self) -> None:
        """CIDs are drawn from 3 (0 to 2 are the hypervisor, loopback and host) to below VMADDR_CID_ANY."""
        asked: list[tuple[int, int]] = []
        cids = CidAllocator(lambda low, high: asked.append((low, high)) or low)
        self.assertEqual(cids.allocate(), FIRST_CID)
        self.assertEqual(asked, [(3, 0xFFFFFFFE)])
        self.assertEqual(LAST_CID, 0xFFFFFFFE)


class FileTests(SynchronousTestCase):
    def test_write_read_remove(self) -> None:
        """The CID file sits beside the agent socket, 0600; None removes it; garbage reads as none."""
        directory = self.mktemp()
        os.makedirs(directory)
        socket_path = os.path.join(directory, "agent.sock")
        self.assertIsNone(read_cid(socket_path))
        write_cid(socket_path, 1234)
        self.assertEqual(read_cid(socket_path), 1234)
        self.assertEqual(stat.S_IMODE(os.stat(cid_path(socket_path)).st_mode), 0o600)
        write_cid(socket_path, None)
        self.assertFalse(os.path.exists(cid_path(socket_path)))
        write_cid(socket_path, None)
        for text in ("x\n", "2\n", "99999999999\n", ""):
            with open(cid_path(socket_path), "w") as f:
                f.write(text)
            self.assertIsNone(read_cid(socket_path), text)


class DriverCidTests(SynchronousTestCase):
    def setUp(self) -> None:
        directory = self.mktemp()
        os.makedirs(directory)
        self.spec = evolve(SPEC, agent_socket=os.path.join(directory, "agent.sock"), vsock=True)
        self.reactor = ProcessReactor()
        draws = iter(range(100, 200))
        self.cids = CidAllocator(lambda low, high: next(draws))

    def test_cid_per_start(self) -> None:
        """Each start of a VM with vsock takes a CID of its own, written beside its socket, freed at exit."""
        driver = QemuDriver(self.reactor, QemuSettings(), self.cids, vsock_unusable=None)
        first = self.successResultOf(driver.start(self.spec, self.mktemp()))
        self.assertEqual(read_cid(self.spec.agent_socket), 100)
        self.assertEqual(cid_in_argv(self.reactor.spawned[0][1]), 100)
        self.assertIn("vmservice.vsock=1", " ".join(self.reactor.spawned[0][1]))
        self.successResultOf(driver.start(self.spec, self.mktemp()))  # a restore or clone: a new QEMU
        self.assertEqual(cid_in_argv(self.reactor.spawned[1][1]), 101)
        self.assertEqual(read_cid(self.spec.agent_socket), 101)
        self.assertEqual(self.cids.held, {100, 101})
        self.reactor.spawned[0][0].processEnded(Failure(ProcessTerminated(None, 9, None)))
        self.successResultOf(first.ended)
        self.assertEqual(self.cids.held, {101})
        self.assertEqual(read_cid(self.spec.agent_socket), 101)  # the later start's file stays
        self.reactor.spawned[1][0].processEnded(Failure(ProcessTerminated(None, 9, None)))
        self.assertIsNone(read_cid(self.spec.agent_socket))  # no client connects to a CID nobody holds

    def test_no_device_where_unusable(self) -> None:
        """Where the host has no vhost-vsock the guest still gets vmservice.vsock=1 but no device, no CID."""
        driver = QemuDriver(self.reactor, QemuSettings(), self.cids, vsock_unusable="no /dev/vhost-vsock")
        self.successResultOf(driver.start(self.spec, self.mktemp()))
        argv = self.reactor.spawned[0][1]
        self.assertIsNone(cid_in_argv(argv))
        self.assertIn("vmservice.vsock=1", " ".join(argv))
        self.assertIsNone(read_cid(self.spec.agent_socket))
        self.assertEqual(self.cids.held, frozenset())

    def test_no_vsock(self) -> None:
        """A VM without vsock: no device, no CID, and a CID file an earlier start left is removed."""
        write_cid(self.spec.agent_socket, 55)
        driver = QemuDriver(self.reactor, QemuSettings(), self.cids, vsock_unusable=None)
        self.successResultOf(driver.start(evolve(self.spec, vsock=False), self.mktemp()))
        self.assertIsNone(cid_in_argv(self.reactor.spawned[0][1]))
        self.assertNotIn("vmservice.vsock=1", " ".join(self.reactor.spawned[0][1]))
        self.assertIsNone(read_cid(self.spec.agent_socket))

    def test_spawn_failure_releases(self) -> None:
        """A QEMU that cannot be spawned gives its CID back."""

        class Failing(ProcessReactor):
            def spawnProcess(self, *args: object, **kwargs: object) -> object:
                raise OSError(2, "No such file")

        from vmservice.hypervisors.base import HypervisorError

        driver = QemuDriver(Failing(), QemuSettings(), self.cids, vsock_unusable=None)
        self.assertRaises(HypervisorError, driver.start, self.spec, self.mktemp())
        self.assertEqual(self.cids.held, frozenset())
