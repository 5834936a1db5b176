"""
Tests for :mod:`vmservice.nodes.idle` (a node's idle machine: timer, holds,
suspend and wake) and :mod:`vmservice.nodes.idling` (the fleet's idle
machines: automatic suspend after ``idle_suspend``, wake on a request for
the guest, explicit operations never undone), on a clock and fakes.
"""

from __future__ import annotations

import os
from typing import Any, Coroutine

from attrs import evolve
from twisted.internet.defer import Deferred, fail
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from tests.nodes.fleets import RecordingMetrics, fleet_of
from tests.diagrams import drawn_transitions, machine_transitions
from tests.fakes import FleetHarness
from tests.short_dirs import short_dir
from vmservice.config import HostGroupConfig
from vmservice.errors import Conflict, Internal, NotFound
from vmservice.hypervisors.base import HypervisorError, IMachine, MachineSpec
from vmservice.nodes.fleet import Fleet
from vmservice.nodes.idle import IDLE_NODE, IdleCore, IdleNode, idle_node
from vmservice.nodes.model import CreateRequest, NodeRecord, Status, Wait

MiB = 1024 * 1024


class _Actions:
    """The suspend and wake a machine starts, each a Deferred the test fires."""

    def __init__(self) -> None:
        self.suspends: list[Deferred[bool]] = []
        self.wakes: list[Deferred[None]] = []

    def suspend(self) -> Deferred[bool]:
        d: Deferred[bool] = Deferred()
        self.suspends.append(d)
        return d

    def wake(self) -> Deferred[None]:
        d: Deferred[None] = Deferred()
        self.wakes.append(d)
        return d


class IdleNodeTests(SynchronousTestCase):
    """One node's idle machine on a MemoryReactorClock."""

    def machine(self, timeout: float | None = 10.0, asleep: bool = False) -> IdleNode:
        self.clock = MemoryReactorClock()
        self.actions = _Actions()
        self.core = IdleCore("demo-1", self.clock, timeout, self.actions.suspend, self.actions.wake)
        return idle_node(self.core, asleep)

    def asleep(self) -> IdleNode:
        node = self.machine()
        self.clock.advance(10)
        self.actions.suspends[0].callback(True)
        return node

    def test_timer(self) -> None:
        """The automatic suspend starts once the timeout passed without activity, not before, and once."""
        self.machine()
        self.clock.advance(9.9)
        self.assertEqual(self.actions.suspends, [])
        self.clock.advance(0.1)
        self.assertEqual(len(self.actions.suspends), 1)
        self.clock.advance(100)
        self.assertEqual(len(self.actions.suspends), 1)

    def test_no_timeout(self) -> None:
        """Without idle_suspend nothing is ever suspended."""
        self.machine(timeout=None)
        self.clock.advance(10_000)
        self.assertEqual(self.actions.suspends, [])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_hold_stops_timer(self) -> None:
        """While a request or stream is held the timer stands still; the last release starts it from the full timeout."""
        node = self.machine()
        self.clock.advance(5)
        node.hold()
        node.hold()
        self.clock.advance(100)
        node.release()
        self.clock.advance(100)
        self.assertEqual(self.actions.suspends, [])
        node.release()
        self.clock.advance(9)
        self.assertEqual(self.actions.suspends, [])
        self.clock.advance(1)
        self.assertEqual(len(self.actions.suspends), 1)

    def test_active_restarts_timer(self) -> None:
        """A request that reaches the guest starts the timer over, and goes on at once."""
        node = self.machine()
        self.clock.advance(8)
        self.successResultOf(node.active())
        self.clock.advance(8)
        self.assertEqual(self.actions.suspends, [])
        self.clock.advance(2)
        self.assertEqual(len(self.actions.suspends), 1)

    def test_stayed(self) -> None:
        """A suspend that did nothing (paused, busy) goes back to Awake and starts the timer again."""
        self.machine()
        self.clock.advance(10)
        self.actions.suspends[0].callback(False)
        self.clock.advance(10)
        self.assertEqual(len(self.actions.suspends), 2)

    def test_suspend_failed(self) -> None:
        """A suspend that failed is logged and the node is Awake again."""
        self.machine()
        self.clock.advance(10)
        self.actions.suspends[0].errback(Internal("no", code="suspend_failed"))
        self.assertEqual(len(self.flushLoggedErrors(Internal)), 1)
        self.clock.advance(10)
        self.assertEqual(len(self.actions.suspends), 2)

    def test_asleep_no_timer(self) -> None:
        """An asleep node has no timer."""
        self.asleep()
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_many_wakes_one(self) -> None:
        """Requests for a sleeping node wake it once; all go on when it is awake, and the timer runs again."""
        node = self.asleep()
        waiting = [node.wake() for _ in range(5)]
        self.assertEqual(len(self.actions.wakes), 1)
        for d in waiting:
            self.assertNoResult(d)
        self.actions.wakes[0].callback(None)
        self.clock.advance(0)
        for d in waiting:
            self.successResultOf(d)
        self.clock.advance(10)
        self.assertEqual(len(self.actions.suspends), 2)

    def test_wake_failed(self) -> None:
        """A failed wake fails every waiting request with its error; the node sleeps and the next request tries again."""
        node = self.asleep()
        waiting = [node.wake(), node.wake()]
        self.actions.wakes[0].errback(Conflict("no room", code="insufficient_memory"))
        self.clock.advance(0)
        for d in waiting:
            self.assertEqual(self.failureResultOf(d, Conflict).value.code, "insufficient_memory")
        node.wake()
        self.assertEqual(len(self.actions.wakes), 2)

    def test_request_during_suspend(self) -> None:
        """A request during the automatic suspend waits until it is over (then looks again)."""
        node = self.machine()
        self.clock.advance(10)
        during = [node.active(), node.wake()]
        for d in during:
            self.assertNoResult(d)
        self.actions.suspends[0].callback(True)
        self.clock.advance(0)
        for d in during:
            self.successResultOf(d)
        self.assertEqual(self.actions.wakes, [])  # the requests ask again: see IdleNodes.ready

    def test_cancelled_waiter(self) -> None:
        """A request that went away (its Deferred cancelled) does not break the others."""
        node = self.asleep()
        gone, staying = node.wake(), node.wake()
        gone.cancel()
        self.failureResultOf(gone)
        self.actions.wakes[0].callback(None)
        self.clock.advance(0)
        self.successResultOf(staying)

    def test_found_asleep(self) -> None:
        """A node found suspended by the timer starts Asleep: no timer; a request wakes it."""
        node = self.machine(asleep=True)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        node.wake()
        self.assertEqual(len(self.actions.wakes), 1)

    def test_active_while_asleep(self) -> None:
        """A request for a node whose record says awake (someone restored it) makes the machine Awake again."""
        node = self.asleep()
        self.successResultOf(node.active())
        self.clock.advance(10)
        self.assertEqual(len(self.actions.suspends), 2)

    def test_forget(self) -> None:
        """A forgotten node has no timer; its waiting requests go on (to find it gone)."""
        node = self.asleep()
        waiting = node.wake()
        node.forget()
        self.actions.wakes[0].callback(None)
        self.clock.advance(0)
        self.successResultOf(waiting)
        self.successResultOf(node.wake())
        self.assertEqual(self.clock.getDelayedCalls(), [])


class FleetIdleTests(SynchronousTestCase):
    """The fleet with a group whose nodes suspend after 30 s idle."""

    def setUp(self) -> None:
        self.observed: list[tuple[str, str, float]] = []
        self.h = self.harness()
        self.create()

    def harness(self, h: FleetHarness | None = None) -> FleetHarness:
        state_dir = h.config.state_dir if h is not None else short_dir()
        groups = (HostGroupConfig(name="demo", ram_bytes=256 * MiB, idle_suspend=30.0),)
        new = FleetHarness(state_dir, groups, h.driver if h is not None else None)
        new.parts = evolve(new.parts, metrics=RecordingMetrics(idle=self.observed))
        new.fleet = fleet_of(new.parts)
        new.fleet.startService()
        return new

    @property
    def fleet(self) -> Fleet:
        return self.h.fleet

    def do(self, coroutine: Coroutine[Any, Any, Any]) -> Deferred[Any]:
        return Deferred.fromCoroutine(coroutine)

    def create(self) -> NodeRecord:
        record: NodeRecord = self.successResultOf(self.do(self.fleet.create("demo", CreateRequest(), Wait.NONE, 300)))
        self.h.agents[-1].ready()
        return record

    def record(self) -> NodeRecord:
        return self.h.node("demo-1").record

    def sleep(self) -> None:
        """Let the node sit idle until the timer suspended it."""
        self.h.reactor.advance(30)
        self.assertEqual((self.record().status, self.record().idle_suspended), (Status.SUSPENDED, True))

    def guest(self) -> Deferred[Any]:
        return self.do(self.fleet.guest("demo-1"))

    def woken(self, d: Deferred[Any]) -> Any:
        """Let the restored guest's agent answer; the request's result."""
        self.h.reactor.advance(0)
        self.h.agents[-1].ready()
        self.h.reactor.advance(0)
        return self.successResultOf(d)

    def test_suspends_itself(self) -> None:
        """After idle_suspend without activity the node is suspended, its record says by the timer; listed Suspended."""
        self.h.reactor.advance(29)
        self.assertEqual(self.record().status, Status.RUNNING)
        self.sleep()
        self.assertTrue(os.path.exists(self.h.node("demo-1").paths.state))
        self.assertEqual(self.h.store.load_all()[0][0].idle_suspended, True)
        self.assertEqual([r.status for r in self.fleet.list()], [Status.SUSPENDED])
        self.assertEqual([(g, what) for g, what, _ in self.observed], [("demo", "suspend")])

    def test_create_holds(self) -> None:
        """A node being created (a boot longer than idle_suspend) is not suspended before its create answered."""
        d = self.do(self.fleet.create("demo", CreateRequest(), Wait.AGENT, 300))
        self.h.reactor.advance(100)
        self.assertEqual(self.h.node("demo-2").record.status, Status.RUNNING)
        self.h.agents[-1].ready()
        self.h.reactor.advance(1)
        self.successResultOf(d)
        self.h.reactor.advance(29)
        self.assertEqual(self.h.node("demo-2").record.status, Status.SUSPENDED)

    def test_hold_keeps_awake(self) -> None:
        """A request held open (a stream) keeps the node awake however long it lasts."""
        release = self.fleet.hold("demo-1")
        self.h.reactor.advance(300)
        self.assertEqual(self.record().status, Status.RUNNING)
        release()
        self.sleep()

    def test_request_wakes(self) -> None:
        """A request for the guest restores the sleeping node and gets the new agent; the timer runs again."""
        self.sleep()
        d = self.guest()
        self.assertNoResult(d)
        self.assertEqual(self.h.driver.machines[1].spec.incoming, self.h.node("demo-1").paths.state)
        self.assertIs(self.woken(d), self.h.agents[1])
        self.assertEqual((self.record().status, self.record().idle_suspended), (Status.RUNNING, False))
        self.assertEqual([what for _, what, _ in self.observed], ["suspend", "wake"])
        self.sleep()

    def test_events(self) -> None:
        """The automatic suspend and the wake are suspended and restored events marked idle; the user's are not."""
        self.sleep()
        self.woken(self.guest())
        self.successResultOf(self.do(self.fleet.snapshots.suspend("demo-1")))
        self.successResultOf(self.do(self.fleet.snapshots.restore("demo-1", Wait.NONE, 30)))
        events = [(e.type.value, e.idle) for e in self.h.events.held() if e.type.value in ("suspended", "restored")]
        self.assertEqual(events, [("suspended", True), ("restored", True), ("suspended", False), ("restored", False)])

    def test_health_and_stats_wake(self) -> None:
        """Health and one node's statistics wake it too; every node's statistics do not."""
        self.sleep()
        self.successResultOf(self.do(self.fleet.stats.all()))
        self.assertEqual(len(self.h.driver.machines), 1)
        d = self.do(self.fleet.health("demo-1"))
        self.woken(d)
        self.assertEqual(self.record().status, Status.RUNNING)
        self.sleep()
        d = self.do(self.fleet.stats.one("demo-1"))
        self.h.reactor.advance(0)
        self.h.agents[-1].ready()
        self.h.reactor.advance(3)
        self.assertEqual(self.successResultOf(d).record.status, Status.RUNNING)

    def test_concurrent_requests_wake_once(self) -> None:
        """Many requests for a sleeping node: one restore, and all of them get the guest."""
        self.sleep()
        requests = [self.guest() for _ in range(6)]
        self.h.reactor.advance(0)
        self.assertEqual(len(self.h.driver.machines), 2)
        self.h.agents[-1].ready()
        self.h.reactor.advance(0)
        self.assertEqual({id(self.successResultOf(d)) for d in requests}, {id(self.h.agents[1])})
        self.assertEqual([what for _, what, _ in self.observed], ["suspend", "wake"])

    def test_request_during_suspend(self) -> None:
        """A request that arrives while the automatic suspend runs waits for it, then wakes the node."""
        machine = self.h.driver.machines[0]
        machine.hold_save = Deferred()
        self.h.reactor.advance(30)
        self.assertEqual(self.record().status, Status.SUSPENDING)
        d = self.guest()
        self.assertNoResult(d)
        machine.hold_save.callback(None)
        self.assertEqual(self.record().status, Status.SUSPENDED)
        self.assertIs(self.woken(d), self.h.agents[1])
        self.assertEqual(self.record().status, Status.RUNNING)

    def test_paused_not_suspended_nor_woken(self) -> None:
        """A paused node is never suspended by the timer, and a request gets 409 paused."""
        self.successResultOf(self.do(self.fleet.lifecycle.pause("demo-1")))
        self.h.reactor.advance(300)
        self.assertEqual(self.record().status, Status.PAUSED)
        self.assertEqual(self.failureResultOf(self.guest(), Conflict).value.code, "paused")
        self.assertEqual(len(self.h.driver.machines), 1)

    def test_explicit_suspend_not_woken(self) -> None:
        """A node the user suspended is not woken by a request (409 not_running)."""
        self.successResultOf(self.do(self.fleet.snapshots.suspend("demo-1")))
        self.assertFalse(self.record().idle_suspended)
        self.assertEqual(self.failureResultOf(self.guest(), Conflict).value.code, "not_running")
        self.assertEqual(len(self.h.driver.machines), 1)

    def test_explicit_suspend_of_sleeping_node(self) -> None:
        """Suspending a node the timer suspended makes it the user's: requests no longer wake it."""
        self.sleep()
        done = self.successResultOf(self.do(self.fleet.snapshots.suspend("demo-1")))
        self.assertFalse(done.changed)
        self.assertFalse(self.record().idle_suspended)
        self.assertFalse(self.h.store.load_all()[0][0].idle_suspended)
        self.assertEqual(self.failureResultOf(self.guest(), Conflict).value.code, "not_running")

    def test_explicit_restore_then_idle_again(self) -> None:
        """A sleeping node the user restores runs; it sleeps again after the timeout of its next request."""
        self.sleep()
        self.successResultOf(self.do(self.fleet.snapshots.restore("demo-1", Wait.NONE, 30)))
        self.h.agents[-1].ready()
        self.assertEqual((self.record().status, self.record().idle_suspended), (Status.RUNNING, False))
        self.successResultOf(self.guest())
        self.sleep()

    def test_wake_refused(self) -> None:
        """A wake the restore path refuses fails the request with that error; the node still sleeps."""
        self.sleep()
        start = self.h.driver.start
        self.h.driver.start = _refuse  # type: ignore[method-assign]
        d = self.guest()
        self.h.reactor.advance(0)
        failure = self.failureResultOf(d, Internal)
        self.h.driver.start = start  # type: ignore[method-assign]
        self.assertEqual(failure.value.code, "boot_failed")
        self.assertEqual((self.record().status, self.record().idle_suspended), (Status.SUSPENDED, True))
        self.assertEqual([what for _, what, _ in self.observed], ["suspend", "wake_failed"])
        self.woken(self.guest())

    def test_deleted_while_asleep(self) -> None:
        """A sleeping node can be deleted; a request then gets 404."""
        self.sleep()
        self.successResultOf(self.do(self.fleet.delete("demo", "demo-1")))
        self.failureResultOf(self.guest(), NotFound)
        self.assertEqual(self.h.reactor.getDelayedCalls(), [])

    def end_dead_suspend(self, machine: Any, held: Deferred[None] | None = None) -> None:
        """End the suspend the killed daemon left waiting (its VM is gone by now), so it leaves nothing behind."""
        held = held or machine.hold_save
        held.errback(HypervisorError("the daemon was killed"))
        self.flushLoggedErrors(HypervisorError)

    def test_crash_during_suspend(self) -> None:
        """A daemon killed during the automatic suspend: once the snapshot is whole the node comes back asleep and wakeable."""
        machine = self.h.driver.machines[0]
        machine.hold_save = Deferred()
        self.h.reactor.advance(30)
        self.assertEqual(self.h.store.load_all()[0][0].status, Status.SUSPENDING)
        paths = self.h.node("demo-1").paths
        os.rename(paths.partial_state, paths.state)  # committed just before the crash
        self.h.crash()
        self.h = self.harness(self.h)
        stored = self.h.store.load_all()[0][0]
        self.assertEqual((stored.status, stored.idle_suspended), (Status.SUSPENDED, True))
        self.assertIs(self.woken(self.guest()), self.h.agents[-1])
        self.assertEqual(self.record().status, Status.RUNNING)
        self.end_dead_suspend(machine)

    def test_crash_during_suspend_before_snapshot(self) -> None:
        """Killed before the snapshot was whole: the VM is adopted running, and idle again later."""
        machine = self.h.driver.machines[0]
        machine.hold_save = Deferred()
        self.h.reactor.advance(30)
        self.assertTrue(os.path.exists(self.h.node("demo-1").paths.partial_state))
        self.h.crash()
        held, machine.hold_save = machine.hold_save, None
        self.h = self.harness(self.h)
        stored = self.h.store.load_all()[0][0]
        self.assertEqual((stored.status, stored.idle_suspended), (Status.RUNNING, False))
        self.h.agents[-1].ready()
        self.successResultOf(self.guest())
        self.sleep()
        self.end_dead_suspend(machine, held)

    def test_crash_during_wake(self) -> None:
        """Killed during the wake (Restoring): the node comes back asleep and wakeable."""
        self.sleep()
        node = self.h.node("demo-1")
        self.h.store.save(evolve(node.record, status=Status.RESTORING))
        self.h.crash()
        self.h = self.harness(self.h)
        stored = self.h.store.load_all()[0][0]
        self.assertEqual((stored.status, stored.idle_suspended), (Status.SUSPENDED, True))
        self.woken(self.guest())
        self.assertEqual(self.record().status, Status.RUNNING)


def _refuse(spec: MachineSpec, log_path: str | None = None) -> Deferred[IMachine]:
    """A driver's start that cannot start the VM."""
    return fail(HypervisorError("cannot start"))


class DiagramTests(SynchronousTestCase):
    def test_diagram(self) -> None:
        """docs/state-machines/idle.dot draws exactly the machine's transitions."""
        self.assertEqual(drawn_transitions("idle.dot"), machine_transitions(IDLE_NODE))
