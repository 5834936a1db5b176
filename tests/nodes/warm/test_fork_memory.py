"""
Tests for :mod:`vmservice.nodes.warm.fork_memory` and :mod:`vmservice.nodes.warm.sparse_copy`: the sparse copy, the tmpfs's
room, the memory backend a spec gets, the sweep and collection of files; and
through the fleet on fakes, a node of a ``fork_memory: file`` group: its VM
maps its file shared, the file goes when the VM ends, a fork saves only the
device state and copies the file once, the children map the copy privately
and load with ``resume``, off the reactor, and the copy goes with the last
running child (or at once when the fork fails).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from typing import Any, Callable

from attrs import evolve
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.trial.unittest import SynchronousTestCase

from tests.nodes.fleets import fleet_of
from tests.fakes import FakeMachine, FleetHarness
from tests.nodes.warm.adoptions import RecordingAdoption
from vmservice.config import HostGroupConfig
from vmservice.errors import Internal, InsufficientMemory
from vmservice.hypervisors.base import RamBacking
from vmservice.nodes.warm import fork_memory, sparse_copy
from vmservice.nodes.warm_port import Forked, ForkRequest
from vmservice.nodes.model import CreateRequest, NodeRecord, Wait
from vmservice.nodes.paths import backing
from vmservice.private_files import NotPrivate

MiB = 1024 * 1024


def _record(**changes: Any) -> NodeRecord:
    from datetime import datetime, timezone

    return evolve(NodeRecord(hostname="m-1", hostgroup="m", ram_bytes=64 * MiB, cpus=1,
                             created_at=datetime(2026, 1, 1, tzinfo=timezone.utc)), **changes)


class _Stats:
    """What os.statvfs answers, with ``free`` bytes available."""

    def __init__(self, free: int) -> None:
        self.f_bavail = free // 4096
        self.f_frsize = 4096


class FilesTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="fm-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        self.addCleanup(shutil.rmtree, self.directory, True)

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def test_copy_sparse_keeps_holes(self) -> None:
        """The data is copied where it was and the holes stay holes (the copy holds only the data's pages)."""
        with open(self.path("a"), "wb") as f:
            f.truncate(16 * MiB)
            f.seek(4 * MiB)
            f.write(b"x" * 8192)
            f.seek(12 * MiB)
            f.write(b"y" * 4096)
        copied = sparse_copy.copy_sparse(self.path("a"), self.path("b"))
        self.assertEqual(copied, 12288)
        with open(self.path("a"), "rb") as a, open(self.path("b"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        self.assertEqual(os.path.getsize(self.path("b")), 16 * MiB)
        self.assertLess(fork_memory.used_bytes(self.path("b")), MiB)
        self.assertEqual(os.stat(self.path("b")).st_mode & 0o777, 0o600)

    def test_reserve_then_copy(self) -> None:
        """Reserved (before a pause) where the source has data; the copy (in it) takes what came since too."""
        with open(self.path("a"), "wb") as f:
            f.truncate(16 * MiB)
            f.seek(MiB)
            f.write(b"a" * 4096)
        sparse_copy.create_copy(self.path("a"), self.path("b"))
        self.assertEqual((os.path.getsize(self.path("b")), fork_memory.used_bytes(self.path("b"))), (16 * MiB, 0))
        self.assertEqual(os.stat(self.path("b")).st_mode & 0o777, 0o600)
        sparse_copy.reserve(self.path("a"), self.path("b"))
        self.assertEqual(os.path.getsize(self.path("b")), 16 * MiB)
        self.assertEqual(fork_memory.used_bytes(self.path("b")), 4096)
        with open(self.path("a"), "r+b") as f:
            f.seek(MiB)
            f.write(b"b" * 4096)
            f.seek(8 * MiB)
            f.write(b"c" * 4096)
        self.assertEqual(sparse_copy.copy_sparse(self.path("a"), self.path("b")), 8192)
        with open(self.path("a"), "rb") as a, open(self.path("b"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        self.assertRaises(FileExistsError, sparse_copy.create_copy, self.path("a"), self.path("b"))

    def test_a_full_tmpfs(self) -> None:
        """A tmpfs that fills up under the copy or its reservation: 503 tmpfs_full; other errors as they are."""
        with open(self.path("a"), "wb") as f:
            f.truncate(MiB)
            f.write(b"data")

        def full(*args: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        self.patch(os, "copy_file_range", full)
        error = self.assertRaises(InsufficientMemory, sparse_copy.copy_sparse, self.path("a"), self.path("b"))
        self.assertEqual(error.code, "tmpfs_full")
        self.assertIn("b in the tmpfs of", str(error))
        self.patch(os, "posix_fallocate", full)
        self.assertEqual(self.assertRaises(InsufficientMemory, sparse_copy.reserve, self.path("a"),
                                           self.path("b")).code, "tmpfs_full")

        def broken(*args: object) -> None:
            raise OSError(errno.EIO, "I/O error")

        self.patch(os, "copy_file_range", broken)
        self.assertEqual(self.assertRaises(OSError, sparse_copy.copy_sparse, self.path("a"), self.path("b")).errno,
                         errno.EIO)

    def test_copy_sparse_of_an_empty_file(self) -> None:
        with open(self.path("a"), "wb") as f:
            f.truncate(MiB)
        self.assertEqual(sparse_copy.copy_sparse(self.path("a"), self.path("b")), 0)
        self.assertEqual(os.path.getsize(self.path("b")), MiB)

    def test_room(self) -> None:
        """The need plus what the files may still grow by must fit what is free, else 503 tmpfs_full."""
        with open(self.path("m-2.ram"), "wb") as f:
            f.truncate(100 * MiB)  # may still grow by 100 MiB
        fork_memory.ensure_room(self.directory, 50 * MiB, "x", statvfs=lambda _: _Stats(150 * MiB))
        error = self.assertRaises(InsufficientMemory, fork_memory.ensure_room, self.directory, 51 * MiB,
                                  "the memory of node 'm-1'", statvfs=lambda _: _Stats(150 * MiB))
        self.assertEqual(error.code, "tmpfs_full")
        self.assertIn("the memory of node 'm-1' (51 MiB)", str(error))
        self.assertIn("may still take 100 MiB", str(error))

    def test_backing(self) -> None:
        """A memory file mapped shared; a clone's snapshot anonymous under the block's name; else none."""
        path = self.path("m-1.ram")
        self.assertEqual(backing(_record(memory_file=path), None), RamBacking(path, shared=True))
        self.assertEqual(backing(_record(memory_file=path), "state.bin"), RamBacking(path, shared=True))
        self.assertEqual(backing(_record(clone_memory=True), "state.bin"), RamBacking(None))
        self.assertIsNone(backing(_record(clone_memory=True), None))
        self.assertIsNone(backing(_record(), "state.bin"))

    def test_memory_file(self) -> None:
        directory = fork_memory.memory_directory("/s", "/dev/shm")
        self.assertTrue(directory.startswith("/dev/shm/vmservice-memory-"))
        self.assertEqual(fork_memory.memory_file("/s", "/dev/shm", "m-1", "file"), os.path.join(directory, "m-1.ram"))
        self.assertEqual(fork_memory.memory_file("/s", "/dev/shm", "m-1", "copy"), "")
        self.assertNotEqual(fork_memory.memory_directory("/t", "/dev/shm"), directory)

    def test_prepare_and_release(self) -> None:
        """
        Before a start, a file left by an earlier VM is deleted and a new one
        made, empty and 0600 (its directory made 0700); release deletes it.
        """
        path = os.path.join(self.directory, "sub", "m-1.ram")
        record = _record(memory_file=path)
        fork_memory.prepare(record)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode), 0o700)
        with open(path, "wb") as f:
            f.write(b"old")
        fork_memory.prepare(record)
        info = os.lstat(path)
        self.assertEqual((stat.S_ISREG(info.st_mode), stat.S_IMODE(info.st_mode), info.st_size), (True, 0o600, 0))
        with open(path, "wb") as f:
            f.write(b"new")
        self.assertFalse(fork_memory.release(record))
        self.assertFalse(os.path.exists(path))
        self.assertFalse(fork_memory.release(evolve(record, memory_copies=("/c",))))  # a parent's fork: not its to drop
        self.assertTrue(fork_memory.release(_record(memory_copies=("/c",))))  # a child: it never maps it again
        fork_memory.prepare(_record())  # no memory file: nothing to do

    def test_prepare_refuses_a_squatted_directory(self) -> None:
        """A memory directory of another user's, or a link in its place, is refused: nothing is made in it."""
        squatted = os.path.join(self.directory, "squatted")
        os.mkdir(squatted, 0o700)
        os.chown(squatted, 65534, 65534)
        error = self.assertRaises(NotPrivate, fork_memory.prepare, _record(memory_file=os.path.join(squatted, "m.ram")))
        self.assertIn("owned by uid 65534", str(error))
        linked = os.path.join(self.directory, "linked")
        os.symlink(squatted, linked)
        error = self.assertRaises(NotPrivate, fork_memory.prepare, _record(memory_file=os.path.join(linked, "m.ram")))
        self.assertIn("is a symbolic link", str(error))
        self.assertEqual(os.listdir(squatted), [])

    def test_prepare_replaces_a_planted_link(self) -> None:
        """A link planted where a memory file goes is removed, never followed: its target is untouched."""
        target = self.path("target")
        with open(target, "wb") as f:
            f.write(b"keep")
        directory = os.path.join(self.directory, "memory")
        os.mkdir(directory, 0o700)
        path = os.path.join(directory, "m-1.ram")
        os.symlink(target, path)
        fork_memory.prepare(_record(memory_file=path))
        self.assertFalse(os.path.islink(path))
        with open(target, "rb") as f:
            self.assertEqual(f.read(), b"keep")

    def test_copies_never_follow_links(self) -> None:
        """A link planted as a memory file or as a fork's copy is never followed by the sparse copy (ELOOP / EEXIST)."""
        target = self.path("target")
        with open(target, "wb") as f:
            f.write(b"secret")
        os.symlink(target, self.path("source"))
        error = self.assertRaises(OSError, sparse_copy.copy_sparse, self.path("source"), self.path("copy"))
        self.assertEqual(error.errno, errno.ELOOP)
        self.assertFalse(os.path.lexists(self.path("copy")))
        with open(self.path("real"), "wb") as f:
            f.write(b"x" * 4096)
        os.symlink(target, self.path("planted"))
        error = self.assertRaises(OSError, sparse_copy.copy_sparse, self.path("real"), self.path("planted"))
        self.assertEqual(error.errno, errno.ELOOP)
        self.assertRaises(FileExistsError, sparse_copy.create_copy, self.path("real"), self.path("planted"))
        with open(target, "rb") as f:
            self.assertEqual(f.read(), b"secret")

    def test_collect_and_sweep(self) -> None:
        """Copies no record names go (node files stay); the start's sweep keeps only what it is told."""
        for name in ("m-1.ram", "fork-m-1.aa.ram", "fork-m-1.bb.ram", "m-9.ram"):
            with open(self.path(name), "wb"):
                pass
        fork_memory.collect_copies(self.directory, {self.path("fork-m-1.aa.ram")})
        self.assertEqual(sorted(os.listdir(self.directory)), ["fork-m-1.aa.ram", "m-1.ram", "m-9.ram"])
        fork_memory.sweep(self.directory, {self.path("m-1.ram"), self.path("fork-m-1.aa.ram")})
        self.assertEqual(sorted(os.listdir(self.directory)), ["fork-m-1.aa.ram", "m-1.ram"])
        fork_memory.sweep(self.path("missing"), set())

    def test_kept_files(self) -> None:
        """Running nodes' memory files and every named copy."""
        running, copies = fork_memory.kept_files([
            (_record(memory_file="/a.ram", memory_copies=("/c1",)), True),
            (_record(memory_file="/b.ram"), False),
            (_record(memory_copies=("/c2",)), False),
        ])
        self.assertEqual((running, copies), ({"/a.ram"}, {"/c1", "/c2"}))
        # At start no fork runs: a copy only a parent names (it has a memory file) is of an unfinished one,
        # and only a running child maps its copy.
        self.assertEqual(fork_memory.kept_files([
            (_record(memory_file="/a.ram", memory_copies=("/c1",)), True),
            (_record(memory_copies=("/c2",)), True),
            (_record(memory_copies=("/c3",)), False),
        ], forking=False), ({"/a.ram"}, {"/c2"}))


class ForkMemoryFleetTests(SynchronousTestCase):
    def setUp(self) -> None:
        state_dir = tempfile.mkdtemp(prefix="fm-")
        self.addCleanup(shutil.rmtree, state_dir, True)
        groups = (HostGroupConfig(name="m", vcpu=1, ram_bytes=64 * MiB, storage_size=1 << 30, fork_memory="file"),)
        self.harness = FleetHarness(state_dir, groups=groups)
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else state_dir
        self.shm = tempfile.mkdtemp(prefix="fm-t-", dir=shm)
        self.addCleanup(shutil.rmtree, self.shm, True)
        self.adoption = RecordingAdoption(self.harness)
        config = evolve(self.harness.config, templates_tmpfs_dir=self.shm)
        self.held: list[tuple[Callable[[], Any], Deferred[Any]]] | None = None
        self.fleet = fleet_of(evolve(self.harness.parts, config=config, blocking=self.blocking), adoption=self.adoption)
        self.fleet.startService()
        self.addCleanup(lambda: self.fleet.stopService() if self.fleet.running else None)
        self.parent = self.successResultOf(
            Deferred.fromCoroutine(self.fleet.create("m", CreateRequest(), Wait.NONE, 60))).hostname
        self.parent_machine = self.harness.driver.machines[-1]
        self.directory = fork_memory.memory_directory(state_dir, self.shm)
        self.file = os.path.join(self.directory, f"{self.parent}.ram")
        with open(self.file, "wb") as f:  # as QEMU makes it
            f.truncate(64 * MiB)
            f.write(b"memory")

    def blocking(self, call: Callable[[], Any]) -> Deferred[Any]:
        """Runs ``call`` at once, or, while :attr:`held` is a list, holds it there until the test runs it."""
        if self.held is None:
            return maybeDeferred(call)
        held: Deferred[Any] = Deferred()
        self.held.append((call, held))
        return held

    def run_held(self) -> None:
        """Run the one call held (as the thread pool would) and fire its Deferred with its result."""
        assert self.held is not None
        ((call, held),) = self.held
        self.held.clear()
        held.callback(call())

    def fork(self, **request: Any) -> Deferred[Forked]:
        return Deferred.fromCoroutine(self.fleet.fork(self.parent, ForkRequest(**request)))

    def record(self, hostname: str) -> NodeRecord:
        """The record of ``hostname`` as written."""
        (record,) = [record for record in self.harness.store.load_all()[0] if record.hostname == hostname]
        return record

    def copies(self) -> list[str]:
        return sorted(name for name in os.listdir(self.directory) if name.startswith(fork_memory.COPY_PREFIX))

    def test_the_vm_maps_its_file_shared(self) -> None:
        """The parent's spec: its memory file, shared; its record names it."""
        self.assertEqual(self.parent_machine.spec.memory, RamBacking(self.file, shared=True))
        self.assertEqual(self.record(self.parent).memory_file, self.file)

    def test_ready_for_forks(self) -> None:
        """Once its agent answers, the new node's guest prepares its children's adoption (in the background)."""
        self.assertEqual(self.adoption.prepared, [])
        self.harness.agents[0].ready()
        self.assertEqual(self.adoption.prepared, [[]])

    def test_fork(self) -> None:
        """Device state only, the file copied once, children on the copy privately, loaded with resume."""
        forked = self.successResultOf(self.fork(count=2))
        self.assertEqual(self.parent_machine.commands[:2], ["pause", "snapshot_disk"])
        self.assertIn("save_device_state", self.parent_machine.commands)
        self.assertNotIn("save_state", self.parent_machine.commands)
        self.assertEqual(self.parent_machine.commands[-1], "resume")
        (copy,) = self.copies()
        path = os.path.join(self.directory, copy)
        with open(path, "rb") as f:
            self.assertEqual(f.read(6), b"memory")
        children: list[FakeMachine] = self.harness.driver.machines[1:]
        self.assertEqual(len(children), 2)
        for machine in children:
            self.assertEqual(machine.spec.memory, RamBacking(path, shared=False))
            self.assertTrue(machine.spec.defer_incoming)
            self.assertIn("load_device_state", machine.commands)
            self.assertTrue(machine.resumed_load)
        for child in forked.children:
            record = self.record(child.hostname)
            self.assertEqual((record.memory_copies, record.clone_memory, record.memory_file), ((path,), True, ""))
        self.assertEqual(self.record(self.parent).memory_copies, ())
        # The copy goes with the last child; the parent's file with the parent.
        self.successResultOf(Deferred.fromCoroutine(self.fleet.delete("m", self.parent)))
        self.assertFalse(os.path.exists(self.file))
        self.successResultOf(Deferred.fromCoroutine(self.fleet.delete("m", forked.children[0].hostname)))
        self.assertEqual(self.copies(), [copy])
        self.successResultOf(Deferred.fromCoroutine(self.fleet.delete("m", forked.children[1].hostname)))
        self.assertEqual(self.copies(), [])

    def test_the_copy_runs_off_the_reactor(self) -> None:
        """
        The copy's allocation (before the pause) and the copy itself (in it) are blocking calls handed off
        the reactor: the fork waits for each while the fleet serves other requests (here a whole create),
        and the parent runs on only once the copy is done.
        """
        self.held = []
        forking = self.fork(count=1)
        self.assertEqual(len(self.held), 1)  # the allocation, before the pause
        self.assertEqual(self.parent_machine.commands, [])
        (copy,) = self.copies()
        other = self.successResultOf(Deferred.fromCoroutine(self.fleet.create("m", CreateRequest(), Wait.NONE, 60)))
        self.run_held()
        self.assertEqual(len(self.held), 1)  # the copy, in the pause
        self.assertEqual(self.parent_machine.commands[-1], "save_device_state")
        self.assertEqual(self.parent_machine.state, "paused")
        with open(os.path.join(self.directory, copy), "rb") as f:
            self.assertEqual(f.read(6), bytes(6))  # allocated, not copied yet
        self.assertEqual(self.fleet.node(other.hostname).hostname, other.hostname)
        self.assertNoResult(forking)
        self.run_held()
        forked = self.successResultOf(forking)
        self.assertEqual(self.parent_machine.commands[-1], "resume")
        with open(os.path.join(self.directory, copy), "rb") as f:
            self.assertEqual(f.read(6), b"memory")
        self.assertEqual(self.record(forked.children[0].hostname).memory_copies, (os.path.join(self.directory, copy),))

    def test_a_failed_allocation_leaves_nothing(self) -> None:
        """The tmpfs filling up while the copy is allocated: 503 tmpfs_full, the parent untouched, no copy."""
        self.held = []
        forking = self.fork(count=1)
        assert self.held is not None
        ((_, held),) = self.held
        held.errback(InsufficientMemory("full", code="tmpfs_full"))
        self.assertEqual(self.failureResultOf(forking, InsufficientMemory).value.code, "tmpfs_full")
        self.assertEqual(self.parent_machine.commands, [])
        self.assertEqual(self.copies(), [])
        self.assertEqual(self.record(self.parent).memory_copies, ())

    def test_a_failed_copy_leaves_nothing(self) -> None:
        """The tmpfs filling up during the copy: 503 tmpfs_full, the parent runs on, no child or copy is left."""
        self.held = []
        forking = self.fork(count=2)
        self.run_held()
        assert self.held is not None
        ((_, held),) = self.held
        held.errback(InsufficientMemory("full", code="tmpfs_full"))
        self.assertEqual(self.failureResultOf(forking, InsufficientMemory).value.code, "tmpfs_full")
        self.assertEqual((self.parent_machine.commands[-1], self.parent_machine.state), ("resume", "running"))
        self.assertEqual(self.copies(), [])
        self.assertEqual([record.hostname for record in self.harness.store.load_all()[0]], [self.parent])

    def test_a_child_whose_vm_ended_frees_the_copy(self) -> None:
        """
        A child suspended, or whose VM ended (a persistent child: kept Stopped), no longer names the copy,
        which goes with the last running child, though those children and the parent live on; the
        suspended child restores with memory of its own.
        """
        forked = self.successResultOf(self.fork(count=3, persistent=True))
        (copy,) = self.copies()
        first, second, third = (child.hostname for child in forked.children)
        self.successResultOf(Deferred.fromCoroutine(self.fleet.snapshots.suspend(first)))
        self.assertEqual(self.record(first).memory_copies, ())
        self.assertEqual(self.copies(), [copy])
        self.harness.driver.machines[2].end(0)  # the second child's VM ends on its own
        self.assertEqual((self.record(second).status.value, self.record(second).memory_copies), ("Stopped", ()))
        self.assertEqual(self.copies(), [copy])  # the third child runs on it
        self.successResultOf(Deferred.fromCoroutine(self.fleet.delete("m", third)))
        self.assertEqual(self.copies(), [])
        self.successResultOf(Deferred.fromCoroutine(self.fleet.snapshots.restore(first, Wait.NONE, 60)))
        self.assertEqual(self.harness.driver.machines[-1].spec.memory, RamBacking(None))
        self.assertEqual(self.record(first).memory_copies, ())

    def test_failed_fork_removes_the_copy(self) -> None:
        """A child that cannot adopt: the children go, the parent runs on, the copy is deleted."""
        self.adoption.fail_for = "m-3"
        self.failureResultOf(self.fork(count=2), Internal)
        self.assertEqual(self.copies(), [])
        self.assertEqual(self.parent_machine.state, "running")
        self.assertEqual(self.record(self.parent).memory_copies, ())

    def test_no_room_for_the_copy(self) -> None:
        """A copy the tmpfs cannot take: refused before the parent is touched."""
        with open(os.path.join(self.directory, "huge.ram"), "wb") as f:
            f.truncate(os.statvfs(self.directory).f_bavail * os.statvfs(self.directory).f_frsize)
        failure = self.failureResultOf(self.fork(), InsufficientMemory)
        self.assertEqual(failure.value.code, "tmpfs_full")
        self.assertEqual(self.parent_machine.commands, [])
        self.assertEqual(self.copies(), [])

    def test_stop_removes_the_file(self) -> None:
        """The VM's end (here the daemon's stop of an ephemeral node) deletes its memory file; the stop its directory."""
        self.successResultOf(self.fleet.stopService())
        self.assertFalse(os.path.exists(self.file))
        self.assertFalse(os.path.exists(self.directory))
