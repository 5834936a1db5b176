"""
Tests for :func:`vmservice.nodes.recovery.decide`: one test per kind of row
of the start-up recovery table.
"""

from __future__ import annotations

from datetime import datetime, timezone

from attrs import evolve

from twisted.trial.unittest import SynchronousTestCase

from vmservice.nodes.model import NodeRecord, Status
from vmservice.nodes.recovery import Recovery, decide

REMOVE = Recovery(None)
STOPPED = Recovery(Status.STOPPED)
SUSPENDED = Recovery(Status.SUSPENDED)
ADOPT_RUNNING = Recovery(Status.RUNNING, adopt=True)
ADOPT_PAUSED = Recovery(Status.PAUSED, adopt=True)
ADOPT_AND_RESUME = Recovery(Status.RUNNING, adopt=True, resume=True)

#: What the hypervisor may say of a VM, and None for no VM.
VM_STATES = ("running", "paused", "postmigrate", "finish-migrate", "inmigrate", "shutdown", "io-error", None)


def record(status: Status, persistent: bool = False) -> NodeRecord:
    return NodeRecord(
        hostname="demo-1", hostgroup="demo", ram_bytes=1 << 29, cpus=1,
        created_at=datetime(2024, 1, 2, tzinfo=timezone.utc), status=status,
        persistent=persistent, pid=1234,
    )


class DecideTests(SynchronousTestCase):
    def assertDecides(self, status: Status, persistent: bool, vm_state: str | None, snapshot: bool, expected: Recovery) -> None:
        got = decide(record(status, persistent), vm_state, snapshot)
        self.assertEqual(got, expected, f"{status.value} persistent={persistent} vm={vm_state} snapshot={snapshot}")

    def test_creating_and_deleting_are_removed(self) -> None:
        """Creating and Deleting nodes are removed, whatever runs or is saved, persistent or not."""
        for status in (Status.CREATING, Status.DELETING):
            for persistent in (False, True):
                for vm_state in VM_STATES:
                    for snapshot in (False, True):
                        self.assertDecides(status, persistent, vm_state, snapshot, REMOVE)

    def test_suspending_with_snapshot(self) -> None:
        """A complete snapshot finishes the suspend: Suspended, any VM is not adopted (killed)."""
        for persistent in (False, True):
            for vm_state in VM_STATES:
                self.assertDecides(Status.SUSPENDING, persistent, vm_state, True, SUSPENDED)

    def test_suspending_without_snapshot_vm_alive(self) -> None:
        """No snapshot but the VM lives (running, paused, mid- or post-migration): adopt it and let it run."""
        for persistent in (False, True):
            for vm_state in ("running", "paused", "postmigrate", "finish-migrate", "io-error"):
                self.assertDecides(Status.SUSPENDING, persistent, vm_state, False, ADOPT_AND_RESUME)

    def test_suspending_without_snapshot_vm_gone(self) -> None:
        """No snapshot and no VM: a persistent node is Stopped, an ephemeral one removed."""
        self.assertDecides(Status.SUSPENDING, True, None, False, STOPPED)
        self.assertDecides(Status.SUSPENDING, False, None, False, REMOVE)

    def test_suspending_without_snapshot_vm_unusable(self) -> None:
        """A VM in a state that cannot continue counts as gone."""
        self.assertDecides(Status.SUSPENDING, True, "shutdown", False, STOPPED)
        self.assertDecides(Status.SUSPENDING, False, "inmigrate", False, REMOVE)

    def test_restoring(self) -> None:
        """An unfinished restore goes back to Suspended while the snapshot exists (its VM is killed)."""
        for persistent in (False, True):
            for vm_state in VM_STATES:
                self.assertDecides(Status.RESTORING, persistent, vm_state, True, SUSPENDED)

    def test_restoring_without_snapshot(self) -> None:
        """A restore whose snapshot is gone: persistent Stopped, ephemeral removed."""
        for vm_state in VM_STATES:
            self.assertDecides(Status.RESTORING, True, vm_state, False, STOPPED)
            self.assertDecides(Status.RESTORING, False, vm_state, False, REMOVE)

    def test_suspended(self) -> None:
        """A suspended node with its snapshot stays Suspended."""
        for persistent in (False, True):
            self.assertDecides(Status.SUSPENDED, persistent, None, True, SUSPENDED)

    def test_suspended_without_snapshot(self) -> None:
        """A suspended node whose snapshot is gone: persistent Stopped, ephemeral removed."""
        self.assertDecides(Status.SUSPENDED, True, None, False, STOPPED)
        self.assertDecides(Status.SUSPENDED, False, None, False, REMOVE)

    def test_stopped(self) -> None:
        """A stopped node stays Stopped, never adopting a VM."""
        for vm_state in VM_STATES:
            for snapshot in (False, True):
                self.assertDecides(Status.STOPPED, True, vm_state, snapshot, STOPPED)

    def test_running_or_paused_vm_running(self) -> None:
        """Running or Paused with a running VM: adopted as Running (the VM's state wins)."""
        for status in (Status.RUNNING, Status.PAUSED):
            for persistent in (False, True):
                self.assertDecides(status, persistent, "running", False, ADOPT_RUNNING)

    def test_running_or_paused_vm_paused(self) -> None:
        """Running or Paused with a paused VM: adopted as Paused."""
        for status in (Status.RUNNING, Status.PAUSED):
            for persistent in (False, True):
                self.assertDecides(status, persistent, "paused", False, ADOPT_PAUSED)

    def test_running_or_paused_vm_gone(self) -> None:
        """Running or Paused without a VM: persistent Stopped, ephemeral removed."""
        for status in (Status.RUNNING, Status.PAUSED):
            self.assertDecides(status, True, None, False, STOPPED)
            self.assertDecides(status, False, None, False, REMOVE)

    def test_running_vm_in_other_state(self) -> None:
        """A VM in any other run state (shut down, migrating) is not adopted: as if gone."""
        for vm_state in ("shutdown", "postmigrate", "inmigrate"):
            self.assertDecides(Status.RUNNING, True, vm_state, False, STOPPED)
            self.assertDecides(Status.RUNNING, False, vm_state, False, REMOVE)

    def test_vm_stopped_for_lack_of_room(self) -> None:
        """
        A VM stopped on a write its state directory had no room for
        (``io-error``) is kept as the record says, Running or Paused: it runs
        on once there is room.
        """
        for persistent in (False, True):
            self.assertDecides(Status.RUNNING, persistent, "io-error", False, ADOPT_RUNNING)
            self.assertDecides(Status.PAUSED, persistent, "io-error", False, ADOPT_PAUSED)

    def test_frozen_for_a_fork(self) -> None:
        """
        A Running node whose record says it is frozen for a fork, with its VM
        alive (paused, its state saved or being saved, or even running), is
        adopted and let run: never Paused, never taken for gone.
        """
        forking = evolve(record(Status.RUNNING), forking=True)
        for vm_state in ("running", "paused", "postmigrate", "finish-migrate", "io-error"):
            self.assertEqual(decide(forking, vm_state, False), ADOPT_AND_RESUME, vm_state)
        self.assertEqual(decide(forking, None, False), REMOVE)
        self.assertEqual(decide(evolve(forking, persistent=True), None, False), STOPPED)

    def test_defaults(self) -> None:
        """A Recovery neither adopts nor resumes unless told."""
        self.assertEqual((REMOVE.adopt, REMOVE.resume), (False, False))
