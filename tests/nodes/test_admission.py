"""
Tests for :mod:`vmservice.nodes.admission`: the budget's arithmetic and
defaults, claims and their release, ``max_nodes``, the cold boots queue (FIFO,
timeouts, cancellation), and the hooks in create, restore, relaunch, stop,
suspend and delete on a fleet of fakes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Coroutine

from attrs import evolve
from twisted.internet.defer import CancelledError, Deferred, TimeoutError as DeferredTimeout, fail
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from tests.nodes.fleets import fleet_of
from tests.fakes import FleetHarness
from vmservice.config import AdmissionConfig, Config, HostGroupConfig, parse_config, ConfigError
from vmservice.errors import Conflict, InsufficientMemory, WaitTimeout, http_error
from vmservice.hypervisors.base import HypervisorError
from vmservice.nodes.admission import Admission, BootQueue, Holder, Limits, host_reserve, limits, mem_total
from vmservice.nodes.warm_port import ForkRequest
from vmservice.nodes.model import CreateRequest, NodeRecord, Status, Wait

MiB = 1024**2
GiB = 1024**3

MEMINFO = "MemTotal:       24634536 kB\nMemFree:         1000000 kB\n"


class LimitsTests(SynchronousTestCase):
    def test_mem_total(self) -> None:
        """MemTotal is read from /proc/meminfo's text in bytes; None when absent."""
        self.assertEqual(mem_total(MEMINFO), 24634536 * 1024)
        self.assertIsNone(mem_total("MemFree: 1 kB\n"))

    def test_host_reserve(self) -> None:
        """The host keeps a tenth of its RAM, at least 1 GiB."""
        self.assertEqual(host_reserve(4 * GiB), GiB)
        self.assertEqual(host_reserve(40 * GiB), 4 * GiB)

    def test_default_budget(self) -> None:
        """Without memory_budget: MemTotal less the host's reserve and the templates' tmpfs budget."""
        total = 24634536 * 1024
        found = limits(Config(templates_tmpfs_budget=2 * GiB), MEMINFO, 2)
        self.assertEqual(found.budget, total - total // 10 - 2 * GiB)
        self.assertIn("MemTotal", found.explained)
        self.assertEqual((found.overhead, found.boot_concurrency), (160 * MiB, 4))

    def test_small_host(self) -> None:
        """A host too small for the reserve and the templates still gets a quarter of its RAM."""
        found = limits(Config(templates_tmpfs_budget=2 * GiB), "MemTotal: 2097152 kB\n", 1)
        self.assertEqual(found.budget, 512 * MiB)

    def test_configured(self) -> None:
        """memory_budget, vm_overhead and boot_concurrency win over the host's; max_nodes per group."""
        config = Config(
            admission=AdmissionConfig(memory_budget=3 * GiB, vm_overhead=64 * MiB, boot_concurrency=0),
            host_groups=(HostGroupConfig(name="a", max_nodes=3), HostGroupConfig(name="b")),
        )
        found = limits(config, MEMINFO, 8)
        self.assertEqual((found.budget, found.overhead, found.boot_concurrency), (3 * GiB, 64 * MiB, 0))
        self.assertEqual(dict(found.max_nodes), {"a": 3})

    def test_unknown_host(self) -> None:
        """No /proc/meminfo and no CPU count: no budget, two boots at a time (as for one CPU)."""
        found = limits(Config(), None, None)
        self.assertEqual((found.budget, found.boot_concurrency), (None, 2))

    def test_config_keys(self) -> None:
        """The admission section and max_nodes are parsed and checked, each bad value naming its key."""
        config = parse_config(
            "config:\n  admission:\n    memory_budget: 20G\n    vm_overhead: 100M\n    boot_concurrency: 3\n"
            "  host_groups:\n    - name: demo\n      max_nodes: 4\n"
        )
        self.assertEqual(config.admission, AdmissionConfig(memory_budget=20 * GiB, vm_overhead=100 * MiB,
                                                           boot_concurrency=3))
        self.assertEqual(config.host_groups[0].max_nodes, 4)
        self.assertEqual(parse_config("config: {}\n").admission, AdmissionConfig())
        for text, path in (
            ("config:\n  admission:\n    boot_concurrency: -1\n", "config.admission.boot_concurrency"),
            ("config:\n  admission:\n    memory_budget: 1K\n", "config.admission.memory_budget"),
            ("config:\n  admission:\n    budget: 1G\n", "config.admission.budget"),
            ("config:\n  host_groups:\n    - name: d\n      count: 3\n      max_nodes: 2\n",
             "config.host_groups[0].max_nodes"),
            ("config:\n  host_groups:\n    - name: d\n      max_nodes: 0\n", "config.host_groups[0].max_nodes"),
        ):
            with self.assertRaises(ConfigError) as caught:
                parse_config(text)
            self.assertEqual(caught.exception.path, path)


class AdmitTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.nodes: list[Holder] = []
        self.admission = Admission(MemoryReactorClock(), Limits(budget=1000 * MiB, overhead=100 * MiB,
                                                                 max_nodes={"small": 2}))
        self.admission.watch(lambda: self.nodes)

    def test_running_nodes_count_ram_and_overhead(self) -> None:
        """Running (and paused) nodes count their RAM plus the overhead; stopped and suspended ones nothing."""
        self.nodes = [Holder("a", "g", 300 * MiB, True), Holder("b", "g", 300 * MiB, False)]
        self.assertEqual(self.admission.used(), (400 * MiB, 0))

    def test_fits_exactly_then_refused(self) -> None:
        """A start that fits exactly is admitted; the next is refused with 503 insufficient_memory."""
        self.nodes = [Holder("a", "g", 400 * MiB, True)]
        claim = self.admission.admit(400 * MiB, group="g")
        self.assertEqual(self.admission.used(), (1000 * MiB, 500 * MiB))
        error = self.assertRaises(InsufficientMemory, self.admission.admit, 1 * MiB, group="g")
        self.assertEqual(http_error(error)[0], 503)
        self.assertEqual(http_error(error)[1]["code"], "insufficient_memory")
        self.assertIn("1000 MiB budget", str(error))
        claim.release()
        claim.release()
        self.assertEqual(self.admission.used(), (500 * MiB, 0))
        self.admission.admit(400 * MiB, group="g")
        self.assertEqual(self.admission.state().refusals["memory"], 1)

    def test_named_claim_stands_in_for_its_node(self) -> None:
        """A claim named after its node is counted instead of the node, never both."""
        claim = self.admission.admit(200 * MiB, group="g")
        self.nodes = [Holder("new", "g", 200 * MiB, True)]
        self.assertEqual(self.admission.used()[0], 600 * MiB)
        claim.name("new")
        self.assertEqual(self.admission.used(), (300 * MiB, 300 * MiB))
        claim.release()
        self.assertEqual(self.admission.used(), (300 * MiB, 0))

    def test_count(self) -> None:
        """A fork of N reserves N VMs at once, or nothing."""
        self.assertRaises(InsufficientMemory, self.admission.admit, 200 * MiB, count=4, group="g")
        self.assertEqual(self.admission.used(), (0, 0))
        self.admission.admit(200 * MiB, count=3, group="g")
        self.assertEqual(self.admission.used(), (900 * MiB, 900 * MiB))

    def test_no_budget(self) -> None:
        """Without a budget everything fits."""
        admission = Admission.unlimited()
        admission.admit(10**15)
        self.assertIsNone(admission.state().budget)

    def test_max_nodes(self) -> None:
        """max_nodes counts the group's nodes whatever their status and the new nodes under way; 409."""
        self.nodes = [Holder("small-1", "small", MiB, False)]
        claim = self.admission.admit(MiB, group="small")
        error = self.assertRaises(Conflict, self.admission.admit, MiB, group="small")
        self.assertEqual((error.code, error.status), ("max_nodes_reached", 409))
        self.admission.admit(MiB, group="other")
        # Restarting an existing node is not a new node.
        self.admission.admit(MiB, hostname="small-1")
        self.nodes.append(Holder("small-2", "small", MiB, True))
        claim.name("small-2")
        self.assertRaises(Conflict, self.admission.admit, MiB, group="small")
        claim.release()
        self.nodes.pop()
        self.admission.admit(MiB, group="small")
        self.assertEqual(self.admission.state().refusals["max_nodes"], 2)

    def test_admitted_releases_and_closes(self) -> None:
        """admitted() holds the claim while the work runs; a refused work is closed, never run."""
        ran: list[int] = []
        gate: Deferred[None] = Deferred()

        async def work() -> str:
            ran.append(self.admission.used()[1])
            await gate
            return "done"

        d = Deferred.fromCoroutine(self.admission.admitted(work(), 100 * MiB, 2, "g"))
        self.assertEqual(ran, [400 * MiB])
        gate.callback(None)
        self.assertEqual(self.successResultOf(d), "done")
        self.assertEqual(self.admission.used(), (0, 0))
        refused = work()
        self.failureResultOf(Deferred.fromCoroutine(self.admission.admitted(refused, 100 * MiB, 6, "g")),
                             InsufficientMemory)
        self.assertEqual(len(ran), 1)

    def test_admitted_releases_on_failure(self) -> None:
        """A work that fails gives its claim back."""
        async def work() -> None:
            raise RuntimeError("no")

        self.failureResultOf(Deferred.fromCoroutine(self.admission.admitted(work(), 100 * MiB, 1, "g")), RuntimeError)
        self.assertEqual(self.admission.used(), (0, 0))


class BootQueueTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = MemoryReactorClock()
        self.queue = BootQueue(self.clock, 2)

    def test_fifo(self) -> None:
        """Two boots go at once; the others wait and get slots in the order they asked."""
        first, second = (self.successResultOf(self.queue.take(60)) for _ in range(2))
        waiting = [self.queue.take(60) for _ in range(3)]
        for d in waiting:
            self.assertNoResult(d)
        self.assertEqual((self.queue.booting, self.queue.waiting), (2, 3))
        second.release()
        third = self.successResultOf(waiting[0])
        self.assertNoResult(waiting[1])
        first.release()
        first.release()  # once only
        self.successResultOf(waiting[1])
        self.assertNoResult(waiting[2])
        third.release()
        self.successResultOf(waiting[2])
        self.assertEqual((self.queue.booting, self.queue.waiting), (2, 0))

    def test_new_boot_does_not_overtake(self) -> None:
        """While boots wait, a new one queues behind them even if a slot is free for a moment."""
        slots = [self.successResultOf(self.queue.take(60)) for _ in range(2)]
        early = self.queue.take(60)
        slots[0].release()
        self.successResultOf(early)
        late = self.queue.take(60)
        self.assertNoResult(late)

    def test_timeout_leaves_queue(self) -> None:
        """A waiter whose timeout passes fails and leaves the queue; those behind it move up."""
        slots = [self.successResultOf(self.queue.take(60)) for _ in range(2)]
        short = self.queue.take(5)
        long = self.queue.take(60)
        self.clock.advance(5)
        self.failureResultOf(short, DeferredTimeout)
        self.assertEqual(self.queue.waiting, 1)
        slots[0].release()
        self.successResultOf(long)
        self.assertEqual(self.queue.booting, 2)

    def test_cancel_leaves_queue(self) -> None:
        """A cancelled waiter leaves the queue and never gets a slot."""
        slots = [self.successResultOf(self.queue.take(60)) for _ in range(2)]
        gone = self.queue.take(60)
        gone.cancel()
        self.failureResultOf(gone, CancelledError)
        self.assertEqual(self.queue.waiting, 0)
        slots[0].release()
        self.assertEqual(self.queue.booting, 1)

    def test_unbounded(self) -> None:
        """Bound 0: every boot goes at once, and is counted."""
        queue = BootQueue(self.clock, 0)
        for _ in range(10):
            self.successResultOf(queue.take(1))
        self.assertEqual((queue.booting, queue.waiting), (10, 0))

    def test_hold(self) -> None:
        """A held slot goes back when the first event fires, whatever its outcome, or after the limit."""
        slot = self.successResultOf(self.queue.take(60))
        ready: Deferred[None] = Deferred()
        ended: Deferred[None] = Deferred()
        slot.hold(ready, ended, limit=100)
        ended.errback(RuntimeError("VM gone"))
        self.assertEqual(self.queue.booting, 0)
        ready.callback(None)
        self.assertEqual(self.queue.booting, 0)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        late = self.successResultOf(self.queue.take(60))
        late.hold(Deferred(), limit=100)
        self.clock.advance(100)
        self.assertEqual(self.queue.booting, 0)

    def test_hold_fired_already(self) -> None:
        """An event that already fired releases at once, with no timer left."""
        slot = self.successResultOf(self.queue.take(60))
        done: Deferred[None] = Deferred()
        done.callback(None)
        slot.hold(done)
        self.assertEqual((self.queue.booting, self.clock.getDelayedCalls()), (0, []))

    def test_boot_slot_timeout_is_wait_timeout(self) -> None:
        """Admission.boot_slot turns a wait past its timeout into a 408 and counts it."""
        admission = Admission(self.clock, Limits(boot_concurrency=1))
        self.successResultOf(Deferred.fromCoroutine(admission.boot_slot(5, "node 'a'")))
        d = Deferred.fromCoroutine(admission.boot_slot(5, "node 'b'"))
        self.assertEqual(admission.state().waiting, 1)
        self.clock.advance(5)
        error = self.failureResultOf(d, WaitTimeout).value
        self.assertIn("node 'b' waited 5 s", str(error))
        self.assertEqual((admission.state().waiting, admission.state().refusals["boot_timeout"]), (0, 1))


def short_dir() -> str:
    """A short state directory (node sockets have a length limit)."""
    return tempfile.mkdtemp(prefix="adm", dir="/tmp")


class FleetAdmissionTests(SynchronousTestCase):
    """The hooks in the fleet: create, restore, relaunch, fork; what gives memory back."""

    def setUp(self) -> None:
        self.state_dir = short_dir()
        self.addCleanup(shutil.rmtree, self.state_dir, True)
        groups = (HostGroupConfig(name="demo", ram_bytes=256 * MiB, persistent=True),
                  HostGroupConfig(name="small", ram_bytes=256 * MiB, max_nodes=1))
        self.h = FleetHarness(self.state_dir, groups)
        # Two VMs of 256 MiB fit (2 x 384 MiB), a third does not; one cold boot at a time.
        self.admission = Admission(self.h.reactor, Limits(budget=800 * MiB, overhead=128 * MiB, boot_concurrency=1,
                                                          max_nodes={"small": 1}))
        self.h.parts = evolve(self.h.parts, admission=self.admission)
        self.h.fleet = fleet_of(self.h.parts)
        self.fleet = self.h.fleet
        self.fleet.startService()

    def do(self, coroutine: Coroutine[Any, Any, Any]) -> Deferred[Any]:
        return Deferred.fromCoroutine(coroutine)

    def create(self, group: str = "demo", wait: Wait = Wait.NONE, timeout: float = 300.0) -> Deferred[NodeRecord]:
        return self.do(self.fleet.create(group, CreateRequest(), wait, timeout))

    def booted(self, index: int) -> None:
        """The agent of the index-th VM answers: its boot is over."""
        self.h.agents[index].ready()

    def nothing_made(self, machines: int) -> None:
        self.assertEqual(len(self.h.driver.machines), machines)
        self.assertEqual(len(self.h.store.load_all()[0]), machines)

    def test_create_beyond_budget_makes_nothing(self) -> None:
        """A create beyond the budget is refused before anything is made: no record, disk, network or VM."""
        self.successResultOf(self.create())
        self.booted(0)
        self.successResultOf(self.create())
        error = self.failureResultOf(self.create(), InsufficientMemory).value
        self.assertEqual(error.status, 503)
        self.nothing_made(2)
        self.assertEqual(len(self.h.disks.created), 2)
        self.assertFalse(os.path.exists(self.h.store.node_dir("demo-3")))
        self.assertEqual([n.hostname for n in self.fleet.list()], ["demo-1", "demo-2"])
        self.assertEqual(self.admission.used(), (768 * MiB, 0))

    def test_delete_stop_and_suspend_give_memory_back(self) -> None:
        """Deleting a node, its VM ending, or a suspend frees its share of the budget."""
        for index in range(2):
            self.successResultOf(self.create())
            self.booted(index)
        self.successResultOf(self.do(self.fleet.delete("demo", "demo-1")))
        self.assertEqual(self.admission.used()[0], 384 * MiB)
        self.successResultOf(self.create())
        self.booted(2)
        self.h.driver.machines[1].end(0)  # persistent: Stopped
        self.assertEqual(self.fleet.node("demo-2").status, Status.STOPPED)
        self.assertEqual(self.admission.used()[0], 384 * MiB)
        self.successResultOf(self.do(self.fleet.snapshots.suspend("demo-3")))
        self.assertEqual(self.admission.used()[0], 0)

    def test_restore_and_relaunch_refused(self) -> None:
        """A restore or relaunch that does not fit is 503; the node is left as it was."""
        self.successResultOf(self.create())
        self.booted(0)
        self.successResultOf(self.do(self.fleet.snapshots.suspend("demo-1")))
        self.successResultOf(self.create())
        self.booted(1)
        self.successResultOf(self.create())
        self.booted(2)
        self.failureResultOf(self.do(self.fleet.snapshots.restore("demo-1", Wait.NONE, 300.0)), InsufficientMemory)
        self.assertEqual(self.fleet.node("demo-1").status, Status.SUSPENDED)
        self.assertTrue(os.path.exists(os.path.join(self.h.store.node_dir("demo-1"), "state.bin")))
        self.failureResultOf(self.do(self.fleet.lifecycle.relaunch("demo-1", Wait.NONE, 300.0)), InsufficientMemory)
        self.assertEqual(self.fleet.node("demo-1").status, Status.SUSPENDED)
        self.assertEqual(len(self.h.driver.machines), 3)
        self.successResultOf(self.do(self.fleet.delete("demo", "demo-2")))
        self.successResultOf(self.do(self.fleet.snapshots.restore("demo-1", Wait.NONE, 300.0)))
        self.assertEqual(self.admission.used(), (768 * MiB, 0))

    def test_cold_boots_wait_their_turn(self) -> None:
        """With one boot slot, the second create boots only once the first one's agent answered."""
        first = self.create()
        self.successResultOf(first)
        second = self.create()
        self.assertNoResult(second)
        self.assertEqual(len(self.h.driver.machines), 1)
        self.assertEqual(self.admission.state().waiting, 1)
        self.booted(0)
        self.successResultOf(second)
        self.assertEqual(len(self.h.driver.machines), 2)
        self.assertEqual(self.admission.state().booting, 1)

    def test_vm_end_frees_slot(self) -> None:
        """A boot whose VM ends before its agent answers gives its slot back."""
        self.successResultOf(self.create())
        second = self.create()
        self.h.driver.machines[0].end(1)
        self.successResultOf(second)

    def test_slot_wait_timeout_leaves_nothing(self) -> None:
        """A create that waits for a slot past its timeout is 408 and leaves nothing behind."""
        self.successResultOf(self.create())
        waiting = self.create(wait=Wait.AGENT, timeout=30.0)
        self.h.reactor.advance(30)
        error = self.failureResultOf(waiting, WaitTimeout).value
        self.assertIn("cold boot slots", str(error))
        self.nothing_made(1)
        self.assertFalse(os.path.exists(self.h.store.node_dir("demo-2")))
        self.assertFalse(os.path.exists(self.h.disks.created[-1]))
        self.assertEqual(self.admission.state().waiting, 0)
        self.assertEqual(self.admission.used(), (384 * MiB, 0))

    def test_failed_boot_releases_everything(self) -> None:
        """A VM that cannot start: the claim and the slot go back, the node is removed."""
        self.patch(self.h.driver, "start", lambda spec, log_path=None: fail(HypervisorError("no qemu")))
        self.failureResultOf(self.create())
        self.assertEqual(self.admission.used(), (0, 0))
        self.assertEqual(self.admission.state().booting, 0)
        self.assertEqual(self.fleet.list(), [])

    def test_wait_timeout_after_boot_releases(self) -> None:
        """A create whose guest never answers within the timeout frees the memory and the slot."""
        d = self.create(wait=Wait.AGENT, timeout=10.0)
        self.h.reactor.advance(10)
        self.failureResultOf(d, WaitTimeout)
        self.assertEqual(self.admission.used(), (0, 0))
        self.assertEqual(self.admission.state().booting, 0)

    def test_relaunch_takes_a_slot(self) -> None:
        """A relaunch is a cold boot: it waits for a slot like a create."""
        self.successResultOf(self.create())
        self.booted(0)
        self.h.driver.machines[0].end(0)
        self.successResultOf(self.create())  # booting, holds the only slot
        relaunch = self.do(self.fleet.lifecycle.relaunch("demo-1", Wait.NONE, 300.0))
        self.assertNoResult(relaunch)
        self.booted(1)
        self.assertEqual(self.successResultOf(relaunch).status, Status.RUNNING)

    def test_max_nodes(self) -> None:
        """A create beyond the group's max_nodes is 409 max_nodes_reached, nothing made."""
        self.successResultOf(self.create("small"))
        error = self.failureResultOf(self.create("small"), Conflict).value
        self.assertEqual(error.code, "max_nodes_reached")
        self.nothing_made(1)

    def test_fork_refused(self) -> None:
        """A fork whose children do not fit is refused before the parent is touched."""
        self.successResultOf(self.create())
        self.booted(0)
        error = self.failureResultOf(self.do(self.fleet.fork("demo-1", ForkRequest(count=2))), InsufficientMemory)
        self.assertIn("2 more VM(s)", str(error.value))
        self.assertEqual(self.h.driver.machines[0].commands, [])
        self.assertEqual(self.admission.used(), (384 * MiB, 0))
