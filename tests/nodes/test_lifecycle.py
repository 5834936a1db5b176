"""
Tests for the node lifecycle of :class:`vmservice.nodes.fleet.Fleet` on
fakes: pause, resume, suspend, restore, relaunch, shutdown and reboot; the
start-up recovery after a crash (re-adoption, clean-up, orphans); host
groups with ``count``; and the daemon's stop.
"""

from __future__ import annotations

import os
from typing import Any

from twisted.internet.defer import Deferred, fail

from tests.nodes.fleets import fleet_of
from tests.fakes import FakeDriver, FakeMachine, FleetHarness
from tests.nodes.fleet_case import LifecycleTestCase
from tests.short_dirs import short_dir
from vmservice.config import HostGroupConfig
from vmservice.errors import Conflict, Internal, NotFound, NotSupported, Protected, WaitTimeout
from vmservice.hypervisors.base import HypervisorError
from vmservice.nodes.model import CreateRequest, Status, Wait
from vmservice.nodes.operation import Done
from vmservice.nodes.paths import NodePaths
from vmservice.nodes.transitions import Op

#: The harness's wall clock, as given to guests.
NOW_NS = 1_700_000_000_000_000_000

MiB = 1024 * 1024


class PauseResumeTests(LifecycleTestCase):
    def test_pause(self) -> None:
        """Pause freezes the VM and persists Paused (same pid)."""
        self.create()
        self.assertEqual(self.ok(self.fleet.lifecycle.pause("demo-1")), Done(Op.PAUSE, "demo-1"))
        machine = self.h.driver.machines[0]
        self.assertEqual((machine.commands, machine.state), (["pause"], "paused"))
        self.assertEqual(self.stored().status, Status.PAUSED)
        self.assertEqual(self.stored().pid, 1000)
        self.assertEqual(self.fleet.node("demo-1").status, Status.PAUSED)
        self.assertEqual(self.h.agents[0].clocks, [])

    def test_pause_again_is_done(self) -> None:
        """A second pause answers 'already paused' and does nothing."""
        self.create()
        self.ok(self.fleet.lifecycle.pause("demo-1"))
        self.assertEqual(self.ok(self.fleet.lifecycle.pause("demo-1")), Done(Op.PAUSE, "demo-1", changed=False))
        self.assertEqual(self.h.driver.machines[0].commands, ["pause"])

    def test_resume(self) -> None:
        """Resume lets the VM run and persists Running."""
        self.create()
        self.ok(self.fleet.lifecycle.pause("demo-1"))
        self.assertEqual(self.ok(self.fleet.lifecycle.resume("demo-1")), Done(Op.RESUME, "demo-1"))
        machine = self.h.driver.machines[0]
        self.assertEqual((machine.commands, machine.state), (["pause", "resume"], "running"))
        self.assertEqual(self.stored().status, Status.RUNNING)
        self.assertEqual(self.stored().pid, 1000)

    def test_resume_running_is_done(self) -> None:
        """Resume of a running node answers 'already running' and does nothing (no clock either)."""
        self.create()
        self.h.agents[0].ready()
        self.assertEqual(self.ok(self.fleet.lifecycle.resume("demo-1")), Done(Op.RESUME, "demo-1", changed=False))
        self.assertEqual(self.h.driver.machines[0].commands, [])
        self.assertEqual(self.h.agents[0].clocks, [])

    def test_resume_sets_clock_once_agent_ready(self) -> None:
        """The guest's clock is set to the wall clock once its agent is ready."""
        self.create()
        agent = self.h.agents[0]
        self.ok(self.fleet.lifecycle.pause("demo-1"))
        self.ok(self.fleet.lifecycle.resume("demo-1"))
        self.assertEqual(agent.clocks, [])
        agent.ready()
        self.assertEqual(agent.clocks, [NOW_NS])

    def test_resume_sets_clock_at_once_when_ready(self) -> None:
        """With the agent connected, resume sets the clock right away."""
        self.create()
        agent = self.h.agents[0]
        agent.ready()
        self.ok(self.fleet.lifecycle.pause("demo-1"))
        self.ok(self.fleet.lifecycle.resume("demo-1"))
        self.assertEqual(agent.clocks, [NOW_NS])

    def test_pause_failure(self) -> None:
        """A driver failure is a 500 pause_failed; the node stays Running and can be paused later."""
        self.create()
        machine = self.h.driver.machines[0]
        machine.failing["pause"] = "qmp went away"
        error = self.fails(self.fleet.lifecycle.pause("demo-1"), Internal, "pause_failed")
        self.assertEqual(error.status, 500)
        self.assertIn("qmp went away", str(error))
        self.assertEqual(self.stored().status, Status.RUNNING)
        del machine.failing["pause"]
        self.ok(self.fleet.lifecycle.pause("demo-1"))

    def test_resume_failure(self) -> None:
        """A failed resume is a 500 resume_failed; the node stays Paused."""
        self.create()
        self.ok(self.fleet.lifecycle.pause("demo-1"))
        self.h.driver.machines[0].failing["resume"] = "nope"
        self.fails(self.fleet.lifecycle.resume("demo-1"), Internal, "resume_failed")
        self.assertEqual(self.stored().status, Status.PAUSED)

    def test_conflicts(self) -> None:
        """Pause and resume of a stopped or suspended node are 409 not_running; unknown nodes 404."""
        self.create(persistent=True)
        self.create()
        self.h.driver.machines[0].end(0)
        self.ok(self.fleet.snapshots.suspend("demo-2"))
        for hostname in ("demo-1", "demo-2"):
            error = self.fails(self.fleet.lifecycle.pause(hostname), Conflict, "not_running")
            self.assertEqual(error.status, 409)
            self.fails(self.fleet.lifecycle.resume(hostname), Conflict, "not_running")
        self.fails(self.fleet.lifecycle.pause("demo-9"), NotFound, "node_not_found")
        self.fails(self.fleet.lifecycle.resume("demo-9"), NotFound, "node_not_found")


class BusyTests(LifecycleTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.create()
        self.machine = self.h.driver.machines[0]
        self.machine.hold_save = Deferred()
        self.suspending = self.do(self.fleet.snapshots.suspend("demo-1"))
        # Never leave the suspend hanging: a coroutine closed at exit would
        # write its record relative to whatever directory is current then.
        self.addCleanup(lambda: self.machine.hold_save.called or self.machine.hold_save.callback(None))
        self.assertNoResult(self.suspending)

    def test_other_operations_are_busy(self) -> None:
        """While a suspend is in flight every other operation is 409 busy."""
        for call in (
            self.fleet.lifecycle.pause("demo-1"),
            self.fleet.lifecycle.resume("demo-1"),
            self.fleet.snapshots.suspend("demo-1"),
            self.fleet.snapshots.restore("demo-1", Wait.NONE, 1),
            self.fleet.lifecycle.relaunch("demo-1", Wait.NONE, 1),
            self.fleet.lifecycle.shutdown("demo-1", Op.REBOOT),
            self.fleet.lifecycle.shutdown("demo-1", Op.SHUTDOWN),
            self.fleet.delete("demo", "demo-1"),
        ):
            error = self.fails(call, Conflict, "busy")
            self.assertEqual(error.status, 409)
        self.assertEqual(self.machine.commands, ["save_state"])
        self.assertEqual(self.machine.stops, [])
        self.machine.hold_save.callback(None)
        self.assertEqual(self.successResultOf(self.suspending), Done(Op.SUSPEND, "demo-1"))

    def test_record_says_suspending_clients_see_running(self) -> None:
        """The record on disk says Suspending; clients still see Running."""
        self.assertEqual(self.stored().status, Status.SUSPENDING)
        self.assertEqual(self.stored().pid, 1000)
        self.assertEqual(self.fleet.node("demo-1").status, Status.RUNNING)
        self.assertEqual([r.status for r in self.fleet.list()], [Status.RUNNING])

    def test_free_again_after(self) -> None:
        """Once the suspend is done, the node takes operations again."""
        self.machine.hold_save.callback(None)
        self.successResultOf(self.suspending)
        self.ok(self.fleet.snapshots.restore("demo-1", Wait.NONE, 1))
        self.ok(self.fleet.lifecycle.pause("demo-1"))

    def test_failure_while_held(self) -> None:
        """A save that fails late removes the partial file and leaves the node Running and free."""
        partial = self.path("state.bin.partial")
        self.assertTrue(os.path.exists(partial))
        self.machine.hold_save.errback(HypervisorError("disk full"))
        failure = self.failureResultOf(self.suspending, Internal)
        self.assertEqual(failure.value.code, "suspend_failed")
        self.assertFalse(os.path.exists(partial))
        self.assertFalse(os.path.exists(self.path("state.bin")))
        self.assertEqual(self.stored().status, Status.RUNNING)
        self.ok(self.fleet.lifecycle.pause("demo-1"))


class SuspendTests(LifecycleTestCase):
    def test_suspend(self) -> None:
        """The state is saved to state.bin, the VM killed, the agent stopped; the record Suspended without pid."""
        self.create()
        self.h.agents[0].ready()
        self.assertEqual(self.ok(self.fleet.snapshots.suspend("demo-1")), Done(Op.SUSPEND, "demo-1"))
        machine = self.h.driver.machines[0]
        self.assertEqual(machine.commands, ["save_state"])
        self.assertEqual(machine._exit.signal, 9)
        with open(self.path("state.bin"), "rb") as f:
            self.assertEqual(f.read(), b"state")
        self.assertFalse(os.path.exists(self.path("state.bin.partial")))
        self.assertTrue(os.path.exists(self.path("disk.qcow2")))
        self.assertTrue(self.h.agents[0].stopped)
        record = self.stored()
        self.assertEqual((record.status, record.pid), (Status.SUSPENDED, None))
        self.assertEqual(self.fleet.node("demo-1").status, Status.SUSPENDED)

    def test_ephemeral_survives_its_vm_end(self) -> None:
        """Killing the VM of an ephemeral node while suspending does not remove the node."""
        self.create(persistent=False)
        self.ok(self.fleet.snapshots.suspend("demo-1"))
        self.assertEqual([r.hostname for r in self.fleet.list()], ["demo-1"])
        self.assertIsNotNone(self.stored())

    def test_suspend_paused(self) -> None:
        """A paused node can be suspended too."""
        self.create()
        self.ok(self.fleet.lifecycle.pause("demo-1"))
        self.ok(self.fleet.snapshots.suspend("demo-1"))
        self.assertEqual(self.stored().status, Status.SUSPENDED)

    def test_suspend_again_is_done(self) -> None:
        """A second suspend answers 'already suspended' and changes nothing."""
        self.create()
        self.ok(self.fleet.snapshots.suspend("demo-1"))
        self.assertEqual(self.ok(self.fleet.snapshots.suspend("demo-1")), Done(Op.SUSPEND, "demo-1", changed=False))
        self.assertTrue(os.path.exists(self.path("state.bin")))

    def test_suspend_failure(self) -> None:
        """A failed save: 500 suspend_failed, no state file, the VM resumed, the node Running with its pid."""
        self.create()
        machine = self.h.driver.machines[0]
        machine.failing["save_state"] = "migration failed"
        error = self.fails(self.fleet.snapshots.suspend("demo-1"), Internal, "suspend_failed")
        self.assertEqual(error.status, 500)
        self.assertIn("migration failed", str(error))
        self.assertFalse(os.path.exists(self.path("state.bin")))
        self.assertFalse(os.path.exists(self.path("state.bin.partial")))
        self.assertEqual(machine.commands, ["save_state", "resume"])
        self.assertIsNone(machine._exit)
        self.assertFalse(self.h.agents[0].stopped)
        record = self.stored()
        self.assertEqual((record.status, record.pid), (Status.RUNNING, 1000))
        self.assertEqual(self.fleet.node("demo-1").status, Status.RUNNING)

    def test_suspend_failure_of_paused_node(self) -> None:
        """A failed suspend of a paused node leaves it Paused (not resumed)."""
        self.create()
        self.ok(self.fleet.lifecycle.pause("demo-1"))
        machine = self.h.driver.machines[0]
        machine.failing["save_state"] = "no"
        self.fails(self.fleet.snapshots.suspend("demo-1"), Internal, "suspend_failed")
        self.assertEqual(machine.commands, ["pause", "save_state"])
        self.assertEqual(self.stored().status, Status.PAUSED)

    def test_not_supported(self) -> None:
        """A driver that cannot suspend: suspend and restore are 501 not_supported."""
        self.h = self.harness(FakeDriver(can_suspend=False))
        self.create()
        error = self.fails(self.fleet.snapshots.suspend("demo-1"), NotSupported, "not_supported")
        self.assertEqual(error.status, 501)
        self.fails(self.fleet.snapshots.restore("demo-1", Wait.NONE, 1), NotSupported, "not_supported")
        self.assertEqual(self.h.driver.machines[0].commands, [])
        self.assertEqual(self.stored().status, Status.RUNNING)

    def test_stopped_is_not_running(self) -> None:
        """Suspending a stopped node is 409 not_running."""
        self.create(persistent=True)
        self.h.driver.machines[0].end(0)
        self.fails(self.fleet.snapshots.suspend("demo-1"), Conflict, "not_running")

    def test_unknown_node(self) -> None:
        self.fails(self.fleet.snapshots.suspend("demo-9"), NotFound, "node_not_found")

    def test_unknown_node_without_suspend_support(self) -> None:
        """docs/lifecycle.md: "Every operation answers 404 for an unknown node", whatever the driver."""
        self.h = self.harness(FakeDriver(can_suspend=False))
        self.fails(self.fleet.snapshots.suspend("demo-9"), NotFound, "node_not_found")
        self.fails(self.fleet.snapshots.restore("demo-9", Wait.NONE, 1), NotFound, "node_not_found")


    def test_vm_dies_while_saving(self) -> None:
        """A VM that dies during the save: 409 not_running; a persistent node ends Stopped, no snapshot."""
        self.create(persistent=True)
        machine = self.h.driver.machines[0]
        machine.hold_save = Deferred()
        d = self.do(self.fleet.snapshots.suspend("demo-1"))
        machine.end(None, 11)
        machine.hold_save.errback(HypervisorError("QMP connection lost"))
        self.assertEqual(self.failureResultOf(d, Conflict).value.code, "not_running")
        record = self.stored()
        self.assertEqual((record.status, record.pid), (Status.STOPPED, None))
        self.assertFalse(os.path.exists(self.path("state.bin.partial")))
        self.assertFalse(os.path.exists(self.path("state.bin")))
        self.ok(self.fleet.lifecycle.relaunch("demo-1", Wait.NONE, 1))

    def test_vm_ends_while_resumed_after_a_failed_save(self) -> None:
        """
        A save that fails because the VM is dying, whose end is heard only
        while the failed suspend resumes it: the node ends as its VM's end
        says (a persistent one Stopped), not Running again without a VM.
        """
        self.create(persistent=True)
        machine = self.h.driver.machines[0]
        machine.failing["save_state"] = "query-migrate: QMP connection lost"

        def resume() -> Deferred[None]:
            machine.end(None, 9)
            return fail(HypervisorError("cont: the VM is not running"))

        machine.resume = resume  # type: ignore[method-assign]
        self.fails(self.fleet.snapshots.suspend("demo-1"), Internal, "suspend_failed")
        self.flushLoggedErrors(HypervisorError)
        record = self.stored()
        self.assertEqual((record.status, record.pid), (Status.STOPPED, None))
        self.assertEqual(self.fleet.node("demo-1").status, Status.STOPPED)


class RestoreTests(LifecycleTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.create(tags=("a",))
        self.kernel = self.h.driver.machines[0].spec.kernel
        self.ok(self.fleet.snapshots.suspend("demo-1"))

    def test_restore(self) -> None:
        """The VM starts from state.bin, is finished and resumed; state.bin goes; Running with the new pid."""
        self.assertEqual(self.ok(self.fleet.snapshots.restore("demo-1", Wait.NONE, 300.0)), Done(Op.RESTORE, "demo-1"))
        machine = self.h.driver.machines[1]
        self.assertEqual(machine.spec.incoming, self.path("state.bin"))
        self.assertEqual(machine.spec.kernel, self.kernel)
        self.assertEqual(machine.commands, ["finish_incoming", "resume"])
        self.assertEqual(machine.state, "running")
        self.assertFalse(os.path.exists(self.path("state.bin")))
        record = self.stored()
        self.assertEqual((record.status, record.pid, record.tags), (Status.RUNNING, 1001, ("a",)))
        self.assertEqual(self.fleet.node("demo-1").status, Status.RUNNING)

    def test_restore_connects_agent_and_sets_clock(self) -> None:
        """A new agent connection is made; the clock is set once it is ready."""
        self.ok(self.fleet.snapshots.restore("demo-1", Wait.NONE, 300.0))
        agent = self.h.agents[1]
        self.assertTrue(agent.started)
        self.assertEqual(agent.clocks, [])
        agent.ready()
        self.assertEqual(agent.clocks, [NOW_NS])
        self.assertIs(self.successResultOf(Deferred.fromCoroutine(self.fleet.guest("demo-1"))), agent)

    def test_restored_node_ends_as_any(self) -> None:
        """The restored VM is watched: when it ends, the (ephemeral) node is removed."""
        self.ok(self.fleet.snapshots.restore("demo-1", Wait.NONE, 300.0))
        self.h.driver.machines[1].end(0)
        self.assertEqual(self.fleet.list(), [])

    def test_restore_again_is_conflict(self) -> None:
        """Restoring a running node is 409 no_snapshot."""
        self.ok(self.fleet.snapshots.restore("demo-1", Wait.NONE, 300.0))
        error = self.fails(self.fleet.snapshots.restore("demo-1", Wait.NONE, 300.0), Conflict, "no_snapshot")
        self.assertEqual(error.status, 409)

    def test_restore_failure(self) -> None:
        """A restore that fails: 500 restore_failed, the new VM killed, Suspended again, state.bin kept."""
        start = self.h.driver.start

        def failing_start(spec: Any, log_path: str | None = None) -> Deferred[Any]:
            d = start(spec, log_path)
            self.h.driver.machines[-1].failing["finish_incoming"] = "bad state"
            return d

        self.patch(self.h.driver, "start", failing_start)
        error = self.fails(self.fleet.snapshots.restore("demo-1", Wait.NONE, 300.0), Internal, "restore_failed")
        self.assertIn("bad state", str(error))
        failed = self.h.driver.machines[1]
        self.assertEqual(failed._exit.signal, 9)
        self.assertTrue(os.path.exists(self.path("state.bin")))
        record = self.stored()
        self.assertEqual((record.status, record.pid), (Status.SUSPENDED, None))
        self.assertEqual(self.fleet.node("demo-1").status, Status.SUSPENDED)
        self.assertEqual(self.h.node("demo-1").machine, None)
        # The node was not removed by its failed VM's end, and can be restored later.
        self.patch(self.h.driver, "start", start)
        self.ok(self.fleet.snapshots.restore("demo-1", Wait.NONE, 300.0))
        self.assertEqual(self.stored().status, Status.RUNNING)

    def test_restore_resume_failure(self) -> None:
        """A resume that fails after the state was loaded also goes back to Suspended."""
        start = self.h.driver.start

        def failing_start(spec: Any, log_path: str | None = None) -> Deferred[Any]:
            d = start(spec, log_path)
            self.h.driver.machines[-1].failing["resume"] = "cannot cont"
            return d

        self.patch(self.h.driver, "start", failing_start)
        self.fails(self.fleet.snapshots.restore("demo-1", Wait.NONE, 300.0), Internal, "restore_failed")
        self.assertEqual(self.h.driver.machines[1].commands, ["finish_incoming", "resume"])
        self.assertEqual(self.h.driver.machines[1]._exit.signal, 9)
        self.assertEqual(self.stored().status, Status.SUSPENDED)

    def exit_while_loading(self) -> None:
        """Make the next VM exit while it loads the state, as QEMU does when the state cannot be loaded."""
        start = self.h.driver.start

        def exiting_start(spec: Any, log_path: str | None = None) -> Deferred[Any]:
            d = start(spec, log_path)
            machine = self.h.driver.machines[-1]
            finish_incoming = machine.finish_incoming

            def exit_instead() -> Deferred[None]:
                machine.end(1, None, "qemu-system-x86_64: load of migration failed: Invalid argument\n")
                return finish_incoming()

            machine.finish_incoming = exit_instead  # type: ignore[method-assign]
            return d

        self.patch(self.h.driver, "start", exiting_start)

    def test_vm_exits_while_loading_persistent(self) -> None:
        """A persistent node whose restoring VM exits stays Suspended with its snapshot."""
        self.create(persistent=True)
        self.ok(self.fleet.snapshots.suspend("demo-2"))
        self.exit_while_loading()
        self.fails(self.fleet.snapshots.restore("demo-2", Wait.NONE, 300.0), Internal, "restore_failed")
        record = self.stored("demo-2")
        self.assertEqual((record.status, record.pid), (Status.SUSPENDED, None))
        self.assertTrue(os.path.exists(self.path("state.bin", "demo-2")))

    def test_vm_exits_while_loading_ephemeral(self) -> None:
        """
        An ephemeral node whose restoring VM exits (QEMU ends when it cannot
        load the state) stays Suspended with its snapshot, as any failed
        restore does.
        """
        self.exit_while_loading()
        self.fails(self.fleet.snapshots.restore("demo-1", Wait.NONE, 300.0), Internal, "restore_failed")
        self.assertTrue(os.path.exists(self.path("state.bin")), "the snapshot was deleted")
        self.assertIsNotNone(self.stored(), "the node's record was deleted")
        self.assertEqual(self.stored().status, Status.SUSPENDED)
        self.assertEqual(self.fleet.node("demo-1").status, Status.SUSPENDED)


    def test_spawn_failure(self) -> None:
        """A VM that cannot be started: 500 boot_failed, the node Suspended with its snapshot."""
        self.patch(self.h.driver, "start", lambda spec, log_path=None: fail(HypervisorError("no kvm")))
        error = self.fails(self.fleet.snapshots.restore("demo-1", Wait.NONE, 300.0), Internal, "boot_failed")
        self.assertIn("no kvm", str(error))
        self.assertEqual(self.stored().status, Status.SUSPENDED)
        self.assertTrue(os.path.exists(self.path("state.bin")))

    def test_no_snapshot_file(self) -> None:
        """A suspended node whose state.bin is missing: 409 no_snapshot, still Suspended, no VM started."""
        os.unlink(self.path("state.bin"))
        self.fails(self.fleet.snapshots.restore("demo-1", Wait.NONE, 300.0), Conflict, "no_snapshot")
        self.assertEqual(len(self.h.driver.machines), 1)
        self.assertEqual(self.stored().status, Status.SUSPENDED)

    def test_stopped_has_no_snapshot(self) -> None:
        """Restore of a stopped node is 409 no_snapshot."""
        self.create(persistent=True)
        self.h.driver.machines[-1].end(0)
        self.fails(self.fleet.snapshots.restore("demo-2", Wait.NONE, 300.0), Conflict, "no_snapshot")

    def test_paused_has_no_snapshot(self) -> None:
        self.create()
        self.ok(self.fleet.lifecycle.pause("demo-2"))
        self.fails(self.fleet.snapshots.restore("demo-2", Wait.NONE, 300.0), Conflict, "no_snapshot")

    def test_wait_agent(self) -> None:
        """wait=agent answers once the agent answers."""
        d = self.do(self.fleet.snapshots.restore("demo-1", Wait.AGENT, 30.0))
        self.assertNoResult(d)
        self.h.agents[1].ready()
        self.assertEqual(self.successResultOf(d), Done(Op.RESTORE, "demo-1"))

    def test_wait_agent_timeout_keeps_node(self) -> None:
        """A wait that times out is 408; the restored node stays Running."""
        d = self.do(self.fleet.snapshots.restore("demo-1", Wait.AGENT, 30.0))
        self.h.reactor.advance(30)
        self.failureResultOf(d, WaitTimeout)
        self.assertEqual(self.stored().status, Status.RUNNING)
        self.assertIsNone(self.h.driver.machines[1]._exit)


class RelaunchTests(LifecycleTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.before = self.create(persistent=True, tags=("x", "y"))

    def stop(self) -> None:
        self.h.driver.machines[0].end(0)
        self.assertEqual(self.stored().status, Status.STOPPED)

    def test_relaunch_stopped(self) -> None:
        """A stopped node boots again from its own disk with the same hostname, created_at and tags."""
        self.stop()
        record = self.ok(self.fleet.lifecycle.relaunch("demo-1", Wait.NONE, 300.0))
        self.assertEqual(
            (record.hostname, record.created_at, record.tags, record.status),
            (self.before.hostname, self.before.created_at, ("x", "y"), Status.RUNNING),
        )
        self.assertEqual(len(self.h.driver.machines), 2)
        machine = self.h.driver.machines[1]
        self.assertIsNone(machine.spec.incoming)
        self.assertEqual(machine.spec.disk, self.path("disk.qcow2"))
        self.assertEqual(len(self.h.disks.created), 1)
        stored = self.stored()
        self.assertEqual((stored.status, stored.pid, stored.created_at), (Status.RUNNING, 1001, self.before.created_at))
        self.assertTrue(self.h.agents[1].started)

    def test_relaunch_suspended_discards_snapshot(self) -> None:
        """Relaunching a suspended node boots it afresh and deletes its snapshot."""
        self.ok(self.fleet.snapshots.suspend("demo-1"))
        self.ok(self.fleet.lifecycle.relaunch("demo-1", Wait.NONE, 300.0))
        self.assertFalse(os.path.exists(self.path("state.bin")))
        self.assertIsNone(self.h.driver.machines[1].spec.incoming)
        self.assertEqual(self.stored().status, Status.RUNNING)

    def test_running_is_conflict(self) -> None:
        """Relaunch of a running or paused node is 409 already_running."""
        error = self.fails(self.fleet.lifecycle.relaunch("demo-1", Wait.NONE, 300.0), Conflict, "already_running")
        self.assertEqual(error.status, 409)
        self.ok(self.fleet.lifecycle.pause("demo-1"))
        self.fails(self.fleet.lifecycle.relaunch("demo-1", Wait.NONE, 300.0), Conflict, "already_running")
        self.assertEqual(len(self.h.driver.machines), 1)

    def test_missing_disk(self) -> None:
        """A stopped node without its disk cannot be relaunched (500 disk_missing)."""
        self.stop()
        os.unlink(self.path("disk.qcow2"))
        self.fails(self.fleet.lifecycle.relaunch("demo-1", Wait.NONE, 300.0), Internal, "disk_missing")
        self.assertEqual(self.stored().status, Status.STOPPED)

    def test_spawn_failure(self) -> None:
        """A VM that cannot be started: 500 boot_failed, the node Stopped without pid."""
        self.stop()
        self.patch(self.h.driver, "start", lambda spec, log_path=None: fail(HypervisorError("no kvm")))
        self.fails(self.fleet.lifecycle.relaunch("demo-1", Wait.NONE, 300.0), Internal, "boot_failed")
        record = self.stored()
        self.assertEqual((record.status, record.pid), (Status.STOPPED, None))
        self.assertEqual(self.fleet.node("demo-1").status, Status.STOPPED)

    def test_boot_failure_while_waiting(self) -> None:
        """A relaunched VM that ends while wait=agent waits: 500 boot_failed, the node Stopped."""
        self.stop()
        d = self.do(self.fleet.lifecycle.relaunch("demo-1", Wait.AGENT, 60.0))
        self.h.driver.machines[1].end(1, None, "kernel panic")
        self.assertEqual(self.failureResultOf(d, Internal).value.code, "boot_failed")
        self.assertEqual(self.stored().status, Status.STOPPED)

    def test_wait_agent(self) -> None:
        """wait=agent answers once the relaunched node's agent answers."""
        self.stop()
        d = self.do(self.fleet.lifecycle.relaunch("demo-1", Wait.AGENT, 60.0))
        self.assertNoResult(d)
        self.h.reactor.advance(3)
        self.h.agents[1].ready()
        self.assertEqual(self.successResultOf(d).hostname, "demo-1")
        self.assertEqual(self.h.boots[-1], ("demo", 3))

    def test_unknown(self) -> None:
        self.fails(self.fleet.lifecycle.relaunch("demo-9", Wait.NONE, 1), NotFound, "node_not_found")


class ShutdownTests(LifecycleTestCase):
    def test_reboot_resets(self) -> None:
        """reboot resets the VM; the node stays Running with the same VM."""
        self.create()
        self.assertEqual(self.ok(self.fleet.lifecycle.shutdown("demo-1", Op.REBOOT)), Done(Op.REBOOT, "demo-1"))
        machine = self.h.driver.machines[0]
        self.assertEqual(machine.commands, ["reset"])
        self.assertIsNone(machine._exit)
        self.assertEqual(self.stored().status, Status.RUNNING)

    def test_reboot_failure(self) -> None:
        self.create()
        self.h.driver.machines[0].failing["reset"] = "nope"
        self.fails(self.fleet.lifecycle.shutdown("demo-1", Op.REBOOT), Internal, "reboot_failed")

    def graceful(self, persistent: bool) -> FakeMachine:
        self.create(persistent=persistent)
        machine = self.h.driver.machines[0]
        machine.hold_stop = True
        self.assertEqual(self.ok(self.fleet.lifecycle.shutdown("demo-1", Op.SHUTDOWN)), Done(Op.SHUTDOWN, "demo-1"))
        self.assertEqual(machine.stops, [(True, 10.0)])
        # Listed as Running while it powers off; other operations are 409 busy meanwhile.
        self.assertEqual(self.stored().status, Status.STOPPING)
        self.assertEqual(self.fleet.node("demo-1").status, Status.RUNNING)
        self.fails(self.fleet.lifecycle.pause("demo-1"), Conflict, "busy")
        machine.end(0)
        return machine

    def test_shutdown_persistent_ends_stopped(self) -> None:
        """shutdown stops the VM gracefully; once it ends a persistent node is Stopped (disk kept)."""
        self.graceful(persistent=True)
        record = self.stored()
        self.assertEqual((record.status, record.pid), (Status.STOPPED, None))
        self.assertTrue(os.path.exists(self.path("disk.qcow2")))
        self.assertTrue(self.h.agents[0].stopped)
        self.ok(self.fleet.lifecycle.relaunch("demo-1", Wait.NONE, 1))

    def test_shutdown_ephemeral_is_removed(self) -> None:
        """Once the VM of an ephemeral node ends after shutdown, the node is gone."""
        self.graceful(persistent=False)
        self.assertEqual(self.fleet.list(), [])
        self.assertFalse(os.path.exists(self.h.store.node_dir("demo-1")))

    def test_conflicts(self) -> None:
        """Shutdown or reboot of a paused node is 409 paused; of a stopped one 409 not_running."""
        self.create(persistent=True)
        self.ok(self.fleet.lifecycle.pause("demo-1"))
        for action in (Op.SHUTDOWN, Op.REBOOT):
            self.fails(self.fleet.lifecycle.shutdown("demo-1", action), Conflict, "paused")
        self.assertEqual(self.h.driver.machines[0].commands, ["pause"])
        self.create(persistent=True)
        self.h.driver.machines[1].end(0)
        for action in (Op.SHUTDOWN, Op.REBOOT):
            self.fails(self.fleet.lifecycle.shutdown("demo-2", action), Conflict, "not_running")
        self.fails(self.fleet.lifecycle.shutdown("demo-9", Op.REBOOT), NotFound, "node_not_found")


class DeleteTests(LifecycleTestCase):
    def test_delete_suspended(self) -> None:
        """Deleting a suspended node removes its snapshot, disk, record and directory."""
        self.create()
        self.ok(self.fleet.snapshots.suspend("demo-1"))
        result = self.ok(self.fleet.delete("demo", "demo-1"))
        self.assertTrue(result.disk_removed)
        self.assertFalse(os.path.exists(self.h.store.node_dir("demo-1")))
        self.assertEqual(self.h.store.load_all(), ([], []))
        self.assertEqual(self.fleet.list(), [])
        self.fails(self.fleet.snapshots.restore("demo-1", Wait.NONE, 1), NotFound)

    def test_delete_stopped(self) -> None:
        """Deleting a stopped persistent node removes everything."""
        self.create(persistent=True)
        self.h.driver.machines[0].end(0)
        self.ok(self.fleet.delete("demo", "demo-1"))
        self.assertFalse(os.path.exists(self.h.store.node_dir("demo-1")))


class RecoveryTests(LifecycleTestCase):
    def test_recovered_fires(self) -> None:
        self.successResultOf(self.fleet.recovered())

    def test_adopts_running(self) -> None:
        """Running VMs are adopted with their pids, no new VM started, nothing killed; agents reconnect."""
        self.create()
        self.create(persistent=True)
        h = self.restart()
        self.assertEqual([(r.hostname, r.status, r.pid) for r in h.fleet.list()],
                         [("demo-1", Status.RUNNING, 1000), ("demo-2", Status.RUNNING, 1001)])
        self.assertEqual(len(h.driver.machines), 2)
        self.assertEqual([m._exit for m in h.driver.machines], [None, None])
        self.assertEqual(h.driver.killed_orphans, [])
        self.assertEqual([a.started for a in h.agents], [True, True])
        self.assertEqual(self.stored("demo-1").pid, 1000)
        self.assertEqual(h.boots, [])

    def test_adopted_machine_is_watched(self) -> None:
        """The new fleet sees an adopted VM end: ephemeral removed, persistent Stopped."""
        self.create()
        self.create(persistent=True)
        h = self.restart()
        h.driver.machines[0].end(0)
        h.driver.machines[1].end(0)
        self.assertEqual([(r.hostname, r.status) for r in h.fleet.list()], [("demo-2", Status.STOPPED)])
        self.assertIsNone(self.stored("demo-1"))

    def test_adopts_paused(self) -> None:
        """A paused VM is adopted as Paused, and can be resumed by the new fleet."""
        self.create()
        self.ok(self.fleet.lifecycle.pause("demo-1"))
        h = self.restart()
        node = h.fleet.node("demo-1")
        self.assertEqual((node.status, node.pid), (Status.PAUSED, 1000))
        self.ok(h.fleet.lifecycle.resume("demo-1"))
        self.assertEqual(self.stored().status, Status.RUNNING)

    def test_status_from_machine_state(self) -> None:
        """The VM's run state wins over the record: a Running record with a paused VM is Paused, and back."""
        self.create()
        self.create()
        self.h.driver.machines[0].state = "paused"
        self.ok(self.fleet.lifecycle.pause("demo-2"))
        self.h.driver.machines[1].state = "running"
        h = self.restart()
        self.assertEqual([(r.hostname, r.status) for r in h.fleet.list()],
                         [("demo-1", Status.PAUSED), ("demo-2", Status.RUNNING)])
        self.assertEqual(self.stored("demo-1").status, Status.PAUSED)
        self.assertEqual(self.stored("demo-2").status, Status.RUNNING)

    def test_adopted_before_the_driver_is_decided(self) -> None:
        """
        A restarted daemon adopts its running nodes and reconnects their
        agents while its hypervisor is still being decided (the KVM probe
        takes seconds): only a VM started from now on waits for that.
        """
        from attrs import evolve

        from vmservice.hypervisors.base import IHypervisor
        from vmservice.nodes.driver_choice import DriverChoice

        self.create()
        self.h.crash()
        h = FleetHarness(self.state_dir, self.groups, self.h.driver)
        undecided: Deferred[IHypervisor] = Deferred()
        h.fleet = fleet_of(evolve(h.parts, driver=DriverChoice(lambda: undecided)))
        h.fleet.startService()
        self.h = h
        self.successResultOf(h.fleet.recovered())
        self.assertEqual([(r.hostname, r.status) for r in h.fleet.list()], [("demo-1", Status.RUNNING)])
        [agent] = h.agents
        self.assertTrue(agent.started)
        creating = self.do(h.fleet.create("demo", CreateRequest(), Wait.NONE, 300.0))
        self.assertNoResult(creating)
        undecided.callback(h.driver)
        self.assertEqual(self.successResultOf(creating).hostname, "demo-2")

    def test_guest_waits_for_the_recovery(self) -> None:
        """
        A request for the guest of a node the start-up recovery has registered
        but not adopted yet (its VM's run state still being asked) waits for the
        adoption and the agent, within the same bound, instead of a 503 at once.
        """
        from vmservice.errors import AgentNotConnected
        from vmservice.nodes.readiness import AGENT_WAIT

        self.create()
        self.create()
        self.h.crash()
        held: list[Deferred[str]] = []
        for machine in self.h.driver.machines:
            def run_state(machine: object = machine) -> Deferred[str]:
                held.append(Deferred())
                return held[-1]
            machine.run_state = run_state  # type: ignore[method-assign]
        self.h = h = self.harness(self.h.driver)
        served = self.do(h.fleet.guest("demo-1"))
        late = self.do(h.fleet.guest("demo-2"))
        h.reactor.advance(1)
        self.assertNoResult(served)
        held[0].callback("running")
        [agent] = h.agents
        self.assertNoResult(served)
        agent.ready()
        self.assertIs(self.successResultOf(served), agent)
        h.reactor.advance(AGENT_WAIT)  # demo-2's adoption takes longer than the bound: 503 then, not before
        self.failureResultOf(late, AgentNotConnected)
        held[1].callback("running")

    def test_dead_vms(self) -> None:
        """A VM that died with the daemon: persistent Stopped without pid, ephemeral removed."""
        self.create()
        self.create(persistent=True)
        self.h.crash()
        for machine in self.h.driver.machines:
            machine.end(None, 9)
        h = self.harness(self.h.driver)
        self.h = h
        self.assertEqual([(r.hostname, r.status, r.pid) for r in h.fleet.list()], [("demo-2", Status.STOPPED, None)])
        self.assertEqual(self.stored("demo-2").status, Status.STOPPED)
        self.assertIsNone(self.stored("demo-2").pid)
        self.assertFalse(os.path.exists(h.store.node_dir("demo-1")))
        self.assertEqual(h.agents, [])

    def test_creating_with_vm_is_removed(self) -> None:
        """A Creating record whose VM runs (crash before Running was written): VM killed, node removed."""
        self.create()
        record = self.stored()
        self.h.store.save(record.with_status(Status.CREATING, record.pid))
        h = self.restart()
        self.assertEqual(h.driver.machines[0]._exit.signal, 9)
        self.assertEqual(h.fleet.list(), [])
        self.assertEqual(h.store.load_all(), ([], []))
        self.assertFalse(os.path.exists(h.store.node_dir("demo-1")))

    def test_creating_without_pid_kills_orphan(self) -> None:
        """A Creating record written before the VM's pid was known: the VM is killed as an orphan."""
        self.create()
        record = self.stored()
        self.h.store.save(record.with_status(Status.CREATING))
        h = self.restart()
        self.assertEqual(h.driver.killed_orphans, [1000])
        self.assertEqual(h.store.load_all(), ([], []))

    def test_deleting_is_finished(self) -> None:
        """A Deleting record: its VM killed, the node removed."""
        self.create(persistent=True)
        record = self.stored()
        self.h.store.save(record.with_status(Status.DELETING, record.pid))
        h = self.restart()
        self.assertIsNotNone(h.driver.machines[0]._exit)
        self.assertEqual(h.store.load_all(), ([], []))

    def test_orphans_are_killed(self) -> None:
        """VMs of the state directory that no record claims are killed; adopted ones are not."""
        self.create()
        self.create()
        self.create()
        self.h.store.remove("demo-2")  # gone entirely
        os.unlink(self.path("node.json", "demo-3"))  # only the record gone: a stray directory
        h = self.restart()
        self.assertEqual(sorted(h.driver.killed_orphans), [1001, 1002])
        self.assertEqual([m._exit is None for m in h.driver.machines], [True, False, False])
        self.assertEqual([r.hostname for r in h.fleet.list()], ["demo-1"])
        self.assertFalse(os.path.exists(h.store.node_dir("demo-3")))

    def test_vm_of_other_directory_is_left_alone(self) -> None:
        """A VM whose sockets are outside this state directory is not ours to kill."""
        other = FleetHarness(short_dir(), driver=self.h.driver)
        other.fleet.startService()
        self.ok(other.fleet.create("demo", CreateRequest(), Wait.NONE, 1))
        h = self.restart()
        self.assertEqual(h.driver.killed_orphans, [])
        self.assertIsNone(h.driver.machines[0]._exit)

    def test_suspending_with_snapshot(self) -> None:
        """A suspend that saved its snapshot before the crash is finished: VM killed, Suspended, restorable."""
        self.create()
        record = self.stored()
        with open(self.path("state.bin"), "wb") as f:
            f.write(b"state")
        self.h.store.save(record.with_status(Status.SUSPENDING, record.pid))
        h = self.restart()
        self.assertEqual(h.driver.machines[0]._exit.signal, 9)
        self.assertEqual(h.driver.killed_orphans, [])
        stored = self.stored()
        self.assertEqual((stored.status, stored.pid), (Status.SUSPENDED, None))
        self.assertTrue(os.path.exists(self.path("state.bin")))
        self.ok(h.fleet.snapshots.restore("demo-1", Wait.NONE, 1))
        self.assertEqual(h.driver.machines[1].spec.incoming, self.path("state.bin"))

    def test_suspending_without_snapshot(self) -> None:
        """A suspend cut short before its snapshot was complete: the VM is adopted and resumed, the partial file removed."""
        self.create()
        record = self.stored()
        machine = self.h.driver.machines[0]
        machine.state = "postmigrate"
        with open(self.path("state.bin.partial"), "wb") as f:
            f.write(b"sta")
        self.h.store.save(record.with_status(Status.SUSPENDING, record.pid))
        h = self.restart()
        self.assertEqual(machine.commands, ["resume"])
        self.assertEqual(machine.state, "running")
        self.assertIsNone(machine._exit)
        self.assertEqual(self.stored().status, Status.RUNNING)
        self.assertEqual(self.stored().pid, 1000)
        self.assertFalse(os.path.exists(self.path("state.bin.partial")))
        self.assertFalse(os.path.exists(self.path("state.bin")))
        self.ok(h.fleet.lifecycle.pause("demo-1"))

    def test_restoring_vm_without_pid_is_orphan(self) -> None:
        """A restore cut short before its VM's pid was recorded: that VM is killed as an orphan."""
        self.create()
        self.ok(self.fleet.snapshots.suspend("demo-1"))
        record = self.stored()
        self.h.driver.start(NodePaths.of(self.h.store.node_dir("demo-1")).spec(record, "k", "i", self.path("state.bin")))
        self.h.store.save(record.with_status(Status.RESTORING))
        h = self.restart()
        self.assertEqual(h.driver.killed_orphans, [1001])
        self.assertEqual(self.stored().status, Status.SUSPENDED)

    def test_restoring_goes_back_to_suspended(self) -> None:
        """A restore cut short: its VM killed, the node Suspended with its snapshot."""
        self.create()
        self.ok(self.fleet.snapshots.suspend("demo-1"))
        record = self.stored()
        self.h.driver.start(NodePaths.of(self.h.store.node_dir("demo-1")).spec(record, "k", "i", self.path("state.bin")))
        self.h.store.save(record.with_status(Status.RESTORING, 1001))
        h = self.restart()
        self.assertEqual(h.driver.machines[1]._exit.signal, 9)
        stored = self.stored()
        self.assertEqual((stored.status, stored.pid), (Status.SUSPENDED, None))
        self.assertTrue(os.path.exists(self.path("state.bin")))

    def test_suspended_stays(self) -> None:
        """A suspended node stays Suspended across a restart."""
        self.create()
        self.ok(self.fleet.snapshots.suspend("demo-1"))
        h = self.restart()
        self.assertEqual(h.fleet.node("demo-1").status, Status.SUSPENDED)
        self.assertTrue(os.path.exists(self.path("state.bin")))

    def test_stale_snapshot_of_running_node_removed(self) -> None:
        """A Running node adopted with a leftover state.bin (restore done, unlink not): the file goes."""
        self.create()
        with open(self.path("state.bin"), "wb") as f:
            f.write(b"old")
        self.restart()
        self.assertFalse(os.path.exists(self.path("state.bin")))
        self.assertEqual(self.stored().status, Status.RUNNING)

    def test_stray_directories_removed(self) -> None:
        """Directories without a record are removed at start; one with an unreadable record is set aside."""
        os.makedirs(self.h.store.node_dir("stray-1"))
        os.makedirs(self.h.store.node_dir("stray-2"))
        with open(os.path.join(self.h.store.node_dir("stray-2"), "node.json"), "w") as f:
            f.write("{not json")
        h = self.restart()
        self.assertEqual([name[:len(".broken-stray-2")] for name in os.listdir(h.store.nodes_dir)], [".broken-stray-2"])

    def test_busy_until_recovered(self) -> None:
        """Operations asked while the recovery looks at a VM wait for it, then go ahead."""
        self.create()
        self.h.crash()
        driver = self.h.driver
        asked: Deferred[str] = Deferred()
        self.patch(driver.machines[0], "run_state", lambda: asked)
        h = FleetHarness(self.state_dir, None, driver)
        h.fleet.startService()
        self.h = h
        paused = self.do(h.fleet.lifecycle.pause("demo-1"))
        recovered = h.fleet.recovered()
        self.assertNoResult(recovered)
        self.assertNoResult(paused)
        asked.callback("running")
        self.successResultOf(recovered)
        self.assertEqual(self.successResultOf(paused), Done(Op.PAUSE, "demo-1"))


class CountTests(LifecycleTestCase):
    groups = (
        HostGroupConfig(name="pool", count=2, vcpu=1, ram_bytes=256 * MiB),
        HostGroupConfig(name="demo", vcpu=1, ram_bytes=256 * MiB),
    )

    def test_brought_to_count(self) -> None:
        """A group with count=2 gets two persistent protected Running nodes at start."""
        self.successResultOf(self.fleet.recovered())
        nodes = self.fleet.list("pool")
        self.assertEqual([(r.hostname, r.status, r.persistent, r.protected) for r in nodes],
                         [("pool-1", Status.RUNNING, True, True), ("pool-2", Status.RUNNING, True, True)])
        self.assertEqual(self.fleet.list("demo"), [])
        self.assertEqual(len(self.h.driver.machines), 2)
        self.assertTrue(self.stored("pool-1").protected)

    def test_restart_adopts_without_creating(self) -> None:
        """A restart with the nodes running adopts them and creates none."""
        h = self.restart()
        self.assertEqual([r.hostname for r in h.fleet.list()], ["pool-1", "pool-2"])
        self.assertEqual(len(h.driver.machines), 2)

    def test_restart_relaunches_stopped(self) -> None:
        """After a daemon stop the nodes are Stopped; the next start relaunches the same nodes."""
        self.successResultOf(self.fleet.stopService())
        self.assertEqual([self.stored(n).status for n in ("pool-1", "pool-2")], [Status.STOPPED] * 2)
        h = self.harness(self.h.driver)
        self.h = h
        self.assertEqual([(r.hostname, r.status) for r in h.fleet.list()],
                         [("pool-1", Status.RUNNING), ("pool-2", Status.RUNNING)])
        self.assertEqual(len(h.driver.machines), 4)
        self.assertEqual([m.spec.name for m in h.driver.machines[2:]], ["pool-1", "pool-2"])
        self.assertEqual(len(h.disks.created), 0)
        self.assertEqual(self.stored("pool-1").pid, h.driver.machines[2].pid)

    def test_restart_restores_suspended(self) -> None:
        """A suspended count node is restored at the next start."""
        self.ok(self.fleet.snapshots.suspend("pool-1"))
        h = self.restart()
        self.assertEqual([(r.hostname, r.status) for r in h.fleet.list()],
                         [("pool-1", Status.RUNNING), ("pool-2", Status.RUNNING)])
        self.assertEqual(h.driver.machines[2].spec.incoming, self.path("state.bin", "pool-1"))

    def test_lost_node_replaced(self) -> None:
        """A count node that is gone (e.g. its record lost) is replaced by a new one."""
        self.successResultOf(self.fleet.stopService())
        self.h.store.remove("pool-1")
        h = self.harness(self.h.driver)
        self.h = h
        self.assertEqual([r.hostname for r in h.fleet.list()], ["pool-2", "pool-3"])

    def test_delete_is_protected(self) -> None:
        """Count nodes cannot be deleted (403)."""
        error = self.fails(self.fleet.delete("pool", "pool-1"), Protected)
        self.assertEqual(error.status, 403)
        self.assertEqual(self.fleet.node("pool-1").status, Status.RUNNING)


class StopTests(LifecycleTestCase):
    groups = (
        HostGroupConfig(name="demo", vcpu=1, ram_bytes=256 * MiB),
        HostGroupConfig(name="hard", vcpu=1, ram_bytes=256 * MiB, graceful_shutdown=False),
    )

    def test_stop(self) -> None:
        """Daemon stop: persistent Stopped, ephemeral removed, suspended untouched; graceful stops."""
        self.create()
        self.create(persistent=True)
        self.create(persistent=True)
        self.ok(self.fleet.snapshots.suspend("demo-3"))
        suspended = self.stored("demo-3")
        self.successResultOf(self.fleet.stopService())
        machines = self.h.driver.machines
        self.assertEqual([m.stops for m in machines], [[(True, 10.0)], [(True, 10.0)], []])
        self.assertEqual([m._exit is not None for m in machines], [True, True, True])
        self.assertFalse(os.path.exists(self.h.store.node_dir("demo-1")))
        stopped = self.stored("demo-2")
        self.assertEqual((stopped.status, stopped.pid), (Status.STOPPED, None))
        self.assertEqual(self.stored("demo-3"), suspended)
        self.assertTrue(os.path.exists(self.path("state.bin", "demo-3")))
        self.assertTrue(all(a.stopped for a in self.h.agents))

    def test_paused_resumed_before_graceful_stop(self) -> None:
        """A paused VM is resumed first, so that its guest hears the power button."""
        self.create(persistent=True)
        self.ok(self.fleet.lifecycle.pause("demo-1"))
        self.successResultOf(self.fleet.stopService())
        machine = self.h.driver.machines[0]
        self.assertEqual(machine.commands, ["pause", "resume"])
        self.assertEqual(machine.stops, [(True, 10.0)])
        self.assertEqual(self.stored().status, Status.STOPPED)

    def test_paused_not_resumed_when_killed(self) -> None:
        """Without graceful_shutdown a paused VM is killed as it is."""
        self.create("hard", persistent=True)
        self.ok(self.fleet.lifecycle.pause("hard-1"))
        self.successResultOf(self.fleet.stopService())
        machine = self.h.driver.machines[0]
        self.assertEqual(machine.commands, ["pause"])
        self.assertEqual(machine.stops, [(False, 10.0)])
        self.assertEqual(self.stored("hard-1").status, Status.STOPPED)

    def test_stop_waits_for_graceful_end(self) -> None:
        """The stop waits for a guest that powers off slowly."""
        self.create(persistent=True)
        machine = self.h.driver.machines[0]
        machine.hold_stop = True
        d = self.fleet.stopService()
        self.assertNoResult(d)
        machine.end(0)
        self.successResultOf(d)
        self.assertEqual(self.stored().status, Status.STOPPED)

    def test_nothing_to_stop(self) -> None:
        self.successResultOf(self.fleet.stopService())

