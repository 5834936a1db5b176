"""
Tests for :mod:`vmservice.nodes.warm.forking` through the fleet on fakes: the
parent is paused, its disk frozen and its state saved before it runs on;
each child loads that state with its agent connected first and adopts its
identity; the limits and statuses refused; a failure halfway removes the
children made so far, and the parent always runs on.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from ipaddress import IPv4Network
from typing import Any

from attrs import evolve
from twisted.internet.defer import Deferred, succeed
from twisted.trial.unittest import SynchronousTestCase

from tests.nodes.fleets import fleet_of
from tests.fakes import FakeMachine, FleetHarness
from tests.nodes.warm.adoptions import RecordingAdoption
from vmservice.config import HostGroupConfig, NetworkConfig
from vmservice.errors import BadRequest, Conflict, Internal, NotFound
from vmservice.hypervisors.base import HypervisorError, IMachine, MachineSpec
from vmservice.nodes.warm.fork_memory import STATE_PREFIX, memory_directory
from vmservice.nodes.warm.fork_files import forks_directory, state_prefix
from vmservice.nodes.warm_port import Forked, ForkRequest
from vmservice.private_files import NotPrivate
from vmservice.nodes.model import CreateRequest, Status, Wait

MiB = 1024 * 1024
GROUPS = (HostGroupConfig(name="demo", vcpu=1, ram_bytes=256 * MiB, storage_size=1 << 30,
                          network=NetworkConfig(mode="isolated", range=IPv4Network("10.77.0.0/27"))),)


class ForkingTests(SynchronousTestCase):
    def setUp(self) -> None:
        # Short: the nodes' socket paths must fit a UNIX socket address.
        state_dir = tempfile.mkdtemp(prefix="fork-")
        self.addCleanup(shutil.rmtree, state_dir, True)
        self.harness = FleetHarness(state_dir, groups=GROUPS)
        self.shm = os.path.join(state_dir, "shm")
        os.makedirs(self.shm)
        self.adoption = RecordingAdoption(self.harness)
        config = evolve(self.harness.config, templates_tmpfs_dir=self.shm)
        self.fleet = fleet_of(evolve(self.harness.parts, config=config), adoption=self.adoption)
        self.fleet.startService()
        self.addCleanup(lambda: self.fleet.stopService() if self.fleet.running else None)
        self.parent = self.successResultOf(
            Deferred.fromCoroutine(self.fleet.create("demo", CreateRequest(), Wait.NONE, 60))).hostname
        self.parent_machine = self.harness.driver.machines[-1]

    def fork(self, **request: Any) -> Deferred[Forked]:
        return Deferred.fromCoroutine(self.fleet.fork(self.parent, ForkRequest(**request)))

    def forks(self) -> list[str]:
        directory = forks_directory(self.harness.config.state_dir)
        return sorted(os.listdir(directory)) if os.path.isdir(directory) else []

    def parent_disk(self) -> str:
        return os.path.join(self.harness.config.state_dir, "nodes", self.parent, "disk.qcow2")

    def fail_child(self, number: int, command: str) -> None:
        """Make the ``number``-th child's VM fail ``command``."""
        start = self.harness.driver.start

        def failing_start(spec: MachineSpec, log_path: str | None = None) -> Deferred[IMachine]:
            d = start(spec, log_path)
            machine = self.harness.driver.machines[-1]
            if len(self.harness.driver.machines) == 1 + number:
                machine.failing[command] = "no"
            return d

        self.harness.driver.start = failing_start  # type: ignore[method-assign]

    def test_fork(self) -> None:
        """
        The parent: paused, its disk switched to an overlay, its state saved,
        resumed.  Each child: over the frozen disk, waiting for the state with
        its agent connected, the state loaded, run, its identity adopted.
        """
        self.harness.agents[0].ready()
        forked = self.successResultOf(self.fork(count=2, tags=("a",)))
        # The parent's guest prepared its children's adoption before it was paused.
        self.assertEqual(self.adoption.prepared, [[]])
        self.assertEqual(self.parent_machine.commands, ["pause", "snapshot_disk", "save_state", "resume"])
        self.assertEqual(self.parent_machine.state, "running")
        [frozen_name] = self.forks()
        frozen = os.path.join(forks_directory(self.harness.config.state_dir), frozen_name, "disk.qcow2")
        self.assertEqual(stat.S_IMODE(os.stat(frozen).st_mode), 0o400)
        self.assertTrue(os.path.exists(self.parent_disk()))
        # The overlay the VM switched to is the parent's disk under a second name.
        [overlay] = self.parent_machine.snapshots
        self.assertTrue(os.path.samefile(overlay, self.parent_disk()))
        self.assertEqual(self.harness.disks._made[overlay][0], frozen)
        self.assertEqual(self.fleet.node(self.parent).forked_disks, (frozen,))
        # One empty overlay over the frozen disk for both children (each disk a copy of it), gone after.
        [empty] = [path for path, (base, _) in self.harness.disks._made.items() if base == frozen and path != overlay]
        self.assertFalse(os.path.exists(empty))
        children = [record.hostname for record in forked.children]
        self.assertEqual(len(set(children) | {self.parent}), 3)
        machines: list[FakeMachine] = self.harness.driver.machines[1:]
        for child, machine in zip(children, machines):
            record = self.fleet.node(child)
            self.assertEqual((record.status, record.tags, record.forked_disks), (Status.RUNNING, ("a",), (frozen,)))
            self.assertEqual((record.ram_bytes, record.cpus), (256 * MiB, 1))
            self.assertTrue(machine.spec.defer_incoming)
            self.assertIsNone(machine.spec.incoming)
            with open(machine.spec.disk, "rb") as disk:
                self.assertEqual(disk.read(), b"disk")  # the empty overlay's bytes
            self.assertEqual(machine.commands, ["load_state", "resume"])
            self.assertNotEqual(machine.spec.net, None)
        self.assertEqual([(name, commands) for name, commands, _ in self.adoption.adopted],
                         [(child, ["load_state", "resume"]) for child in children])
        # The agent of each child was connected before its state was loaded.
        self.assertTrue(all(agent.started for agent in self.harness.agents[1:]))
        # The state file is gone once every child loaded it.
        self.assertEqual(os.listdir(memory_directory(self.harness.config.state_dir, self.shm)), [])

    def test_frozen_disk_goes_with_the_last_record(self) -> None:
        forked = self.successResultOf(self.fork(count=1))
        self.assertEqual(len(self.forks()), 1)
        self.successResultOf(Deferred.fromCoroutine(self.fleet.delete("demo", self.parent)))
        self.assertEqual(len(self.forks()), 1)
        self.successResultOf(Deferred.fromCoroutine(self.fleet.delete("demo", forked.children[0].hostname)))
        self.assertEqual(self.forks(), [])

    def test_count_limits(self) -> None:
        for count in (0, 9):
            self.assertIsInstance(self.failureResultOf(self.fork(count=count)).value, BadRequest)
        self.assertEqual(self.parent_machine.commands, [])

    def test_unknown_node(self) -> None:
        d = Deferred.fromCoroutine(self.fleet.fork("nope", ForkRequest()))
        self.assertIsInstance(self.failureResultOf(d).value, NotFound)

    def test_paused_node(self) -> None:
        """A paused (or otherwise not Running) node is 409 and nothing is made."""
        self.successResultOf(Deferred.fromCoroutine(self.fleet.lifecycle.pause(self.parent)))
        error = self.failureResultOf(self.fork()).value
        self.assertIsInstance(error, Conflict)
        self.assertEqual(error.code, "paused")
        self.assertEqual(len(self.harness.driver.machines), 1)
        self.assertEqual(self.forks(), [])

    def test_child_failure_removes_children_and_resumes_the_parent(self) -> None:
        """The second child's state does not load: all three children (started together) are gone, the parent runs on."""
        self.fail_child(2, "load_state")
        error = self.failureResultOf(self.fork(count=3)).value
        self.assertIsInstance(error, Internal)
        self.assertEqual(error.code, "fork_failed")
        self.assertEqual([r.hostname for r in self.fleet.list()], [self.parent])
        self.assertTrue(all(m.ended.called for m in self.harness.driver.machines[1:]))
        self.assertEqual(len(self.harness.driver.machines), 4)
        self.assertEqual(self.parent_machine.state, "running")
        self.assertEqual(self.fleet.node(self.parent).status, Status.RUNNING)
        memory = memory_directory(self.harness.config.state_dir, self.shm)
        self.assertEqual((os.listdir(self.shm), os.listdir(memory)), ([os.path.basename(memory)], []))
        self.assertEqual(sorted(os.listdir(os.path.join(self.harness.config.state_dir, "nodes"))), [self.parent])
        # Only the parent's address is still attached.
        self.assertEqual(list(self.harness.network.attached), [self.fleet.node(self.parent).ip])
        # The parent's disk lies over the frozen disk now: it stays.
        self.assertEqual(len(self.forks()), 1)

    def test_adopt_failure_removes_the_child(self) -> None:
        self.adoption.fail_for = "demo-2"
        error = self.failureResultOf(self.fork(count=1)).value
        self.assertIsInstance(error, Internal)
        self.assertEqual([r.hostname for r in self.fleet.list()], [self.parent])
        self.assertEqual(self.parent_machine.state, "running")

    def test_freeze_failure_resumes_the_parent_on_its_own_disk(self) -> None:
        """The disk switch fails: the parent runs on over its disk as it was; no fork files are left."""
        self.parent_machine.failing["snapshot_disk"] = "no"
        error = self.failureResultOf(self.fork(count=2)).value
        self.assertIsInstance(error, Internal)
        self.assertEqual(self.parent_machine.commands, ["pause", "snapshot_disk", "resume"])
        self.assertEqual(self.parent_machine.state, "running")
        self.assertEqual(self.fleet.node(self.parent).forked_disks, ())
        self.assertEqual(self.forks(), [])
        self.assertEqual(sorted(os.listdir(os.path.dirname(self.parent_disk()))).count("disk.qcow2"), 1)
        self.assertEqual([n for n in os.listdir(os.path.dirname(self.parent_disk())) if n.startswith("disk.")],
                         ["disk.qcow2"])
        self.assertEqual(len(self.harness.driver.machines), 1)

    def test_save_failure_resumes_the_parent(self) -> None:
        """Saving the state fails: the parent runs on (over the frozen disk, which it keeps)."""
        self.parent_machine.failing["save_state"] = "no"
        self.assertIsInstance(self.failureResultOf(self.fork()).value, Internal)
        self.assertEqual(self.parent_machine.commands[-1], "resume")
        self.assertEqual(self.parent_machine.state, "running")
        self.assertEqual(len(self.forks()), 1)
        self.assertEqual(len(self.harness.driver.machines), 1)

    def test_daemon_dies_while_the_parent_is_frozen(self) -> None:
        """
        The record says the parent is frozen for a fork before its VM is
        paused; a daemon that dies while its state is saved leaves a VM the
        next start lets run again (Running, not Paused nor gone), the record
        no longer saying so, and no child.
        """
        self.parent_machine.hold_save = Deferred()
        forked = self.fork(count=2)
        self.assertTrue(self.harness.store.load_all()[0][0].forking)
        self.assertEqual(self.parent_machine.state, "postmigrate")
        self.harness.crash()
        again = FleetHarness(self.harness.config.state_dir, groups=GROUPS, driver=self.harness.driver)
        config = evolve(again.config, templates_tmpfs_dir=self.shm)
        # The dead daemon's fleet is never stopped; the new one is, by setUp's cleanup.
        dead, self.fleet = self.fleet, fleet_of(evolve(again.parts, config=config), adoption=self.adoption)
        self.fleet.startService()
        [record] = again.store.load_all()[0]
        self.assertEqual((record.hostname, record.status, record.forking), (self.parent, Status.RUNNING, False))
        self.assertEqual(self.parent_machine.commands[-1], "resume")
        self.assertEqual(self.parent_machine.state, "running")
        self.assertEqual([node.hostname for node in self.fleet.list()], [self.parent])
        # The dead daemon's fork ends here, not in a later test (when its coroutine is collected).
        self.parent_machine.hold_save.errback(HypervisorError("the daemon is gone"))
        self.failureResultOf(forked, Internal)
        self.flushLoggedErrors()
        del dead

    def test_parent_dies_during_the_disk_switch(self) -> None:
        """
        The parent's VM dies just as its disk is switched (its files go with
        the ephemeral node): the fork answers 409 not_running, never an
        anonymous 500; nothing of it is left.
        """
        machine = self.parent_machine

        def snapshot_disk(overlay: str) -> Deferred[None]:
            machine.end(None, 9)  # heard at once: the ephemeral parent is forgotten, its directory removed
            return succeed(None)

        machine.snapshot_disk = snapshot_disk  # type: ignore[method-assign]
        error = self.failureResultOf(self.fork(count=2), Conflict).value
        self.assertEqual(error.code, "not_running")
        self.flushLoggedErrors()
        self.assertEqual(self.fleet.list(), [])
        self.assertEqual(self.forks(), [])
        self.assertEqual(os.listdir(os.path.join(self.harness.config.state_dir, "nodes")), [])

    def test_forking_cleared(self) -> None:
        """After a fork, and after one that failed, the parent's record no longer says it is frozen."""
        self.successResultOf(self.fork())
        self.assertFalse(self.fleet.node(self.parent).forking)
        self.parent_machine.failing["save_state"] = "no"
        self.failureResultOf(self.fork())
        self.assertFalse(self.fleet.node(self.parent).forking)
        self.assertFalse({r.hostname: r for r in self.harness.store.load_all()[0]}[self.parent].forking)

    def test_state_file_in_the_daemons_own_directory(self) -> None:
        """
        The state file is a new one in the daemon's own memory directory of
        the tmpfs (0700, made or verified: nothing in the tmpfs others see).
        """
        saved: list[str] = []
        save = self.parent_machine.save_state

        def recording(path: str) -> Deferred[None]:
            directory = os.stat(os.path.dirname(path))
            saved.append(path)
            self.assertEqual((stat.S_IMODE(directory.st_mode), directory.st_uid), (0o700, os.geteuid()))
            return save(path)

        self.parent_machine.save_state = recording  # type: ignore[method-assign]
        self.successResultOf(self.fork())
        [path] = saved
        self.assertEqual(os.path.dirname(path), memory_directory(self.harness.config.state_dir, self.shm))
        self.assertTrue(os.path.basename(path).startswith(STATE_PREFIX))
        self.assertFalse(os.path.lexists(path))

    def test_squatted_directory_refuses_the_fork(self) -> None:
        """A memory directory that is not the daemon's alone (another user's) fails the fork; the parent untouched."""
        memory = memory_directory(self.harness.config.state_dir, self.shm)
        os.mkdir(memory, 0o700)
        os.chown(memory, 65534, 65534)
        error = self.failureResultOf(self.fork()).value
        self.assertIsInstance(error, NotPrivate)
        self.assertIn("owned by uid 65534", str(error))
        self.assertEqual(self.parent_machine.commands, [])
        self.assertEqual((os.listdir(memory), self.forks()), ([], []))

    def test_state_files_of_earlier_runs(self) -> None:
        """
        State files an earlier run left go at start: in the memory directory,
        and under the names of earlier versions (in the tmpfs itself); other
        daemons' stay.
        """
        config = self.harness.config
        prefix = state_prefix(config.state_dir, self.shm)
        self.assertTrue(os.path.basename(prefix).startswith("vmservice-fork-"))
        self.assertNotEqual(prefix, state_prefix(config.state_dir + "2", self.shm))
        self.fleet.stopService()
        memory = memory_directory(config.state_dir, self.shm)
        os.mkdir(memory, 0o700)
        left, foreign = prefix + "0123", os.path.join(self.shm, "vmservice-fork-other-0123")
        for path in (left, foreign, os.path.join(memory, STATE_PREFIX + "0123")):
            with open(path, "wb") as f:
                f.write(b"state")
        fleet = fleet_of(evolve(self.harness.parts, config=evolve(config, templates_tmpfs_dir=self.shm)),
                         adoption=self.adoption)
        fleet.startService()
        self.addCleanup(fleet.stopService)
        self.assertEqual(sorted(os.listdir(self.shm)), sorted([os.path.basename(foreign), os.path.basename(memory)]))
        self.assertEqual(os.listdir(memory), [])

    def test_second_fork(self) -> None:
        """
        A second fork freezes the parent's disk as it is then (the first
        fork's overlay): the parent keeps one second name of its disk, the
        overlay its VM opened last; each frozen disk is named by the records
        whose disk chain goes through it.
        """
        first = self.successResultOf(self.fork()).children[0].hostname
        second = self.successResultOf(self.fork()).children[0].hostname
        directory = os.path.dirname(self.parent_disk())
        names = sorted(name for name in os.listdir(directory) if name.startswith("disk."))
        self.assertEqual(len(names), 2)
        self.assertEqual(os.path.join(directory, names[0] if names[0] != "disk.qcow2" else names[1]),
                         self.parent_machine.snapshots[-1])
        frozen = self.fleet.node(self.parent).forked_disks
        self.assertEqual(len(frozen), 2)
        self.assertEqual(self.fleet.node(first).forked_disks, frozen[:1])
        self.assertEqual(self.fleet.node(second).forked_disks, frozen)
        self.assertEqual(self.harness.disks._made[self.parent_machine.snapshots[-1]][0], frozen[1])
