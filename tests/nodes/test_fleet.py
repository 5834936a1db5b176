"""
Tests for :mod:`vmservice.nodes.fleet` on fakes: hostnames, limits, waits,
timeouts, deletes, filters and cleanup.
"""

from __future__ import annotations

import os

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from tests.nodes.fleets import fleet_of
from tests.fakes import FleetHarness
from vmservice.errors import BadRequest, Conflict, Internal, NotFound, Protected, WaitTimeout
from vmservice.nodes.model import CreateRequest, Wait
from vmservice.nodes.model import Status


class FleetTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.h = FleetHarness(self.mktemp())
        self.h.fleet.startService()
        self.fleet = self.h.fleet

    def create(self, group: str = "demo", request: CreateRequest = CreateRequest(), wait: Wait = Wait.NONE, timeout: float = 300.0) -> Deferred:
        return Deferred.fromCoroutine(self.fleet.create(group, request, wait, timeout))

    def test_hostnames_count_up_per_group(self) -> None:
        """Hostnames are <group>-<n>, counted per group from 1."""
        names = [self.successResultOf(self.create(g)).hostname for g in ("demo", "demo", "other")]
        self.assertEqual(names, ["demo-1", "demo-2", "other-1"])

    def test_counter_survives_restart_and_is_never_reused(self) -> None:
        """After a delete and a restart, the next hostname is still a new number."""
        self.successResultOf(self.create())
        self.successResultOf(Deferred.fromCoroutine(self.fleet.delete("demo", "demo-1")))
        again = FleetHarness(self.h.config.state_dir)
        again.fleet.startService()
        record = self.successResultOf(Deferred.fromCoroutine(again.fleet.create("demo", CreateRequest(), Wait.NONE, 1)))
        self.assertEqual(record.hostname, "demo-2")

    def test_requested_hostname(self) -> None:
        """A valid free hostname is used; a taken one is a conflict; a bad one is refused."""
        self.assertEqual(self.successResultOf(self.create(request=CreateRequest(hostname="web"))).hostname, "web")
        self.failureResultOf(self.create(request=CreateRequest(hostname="web")), Conflict)
        self.failureResultOf(self.create(request=CreateRequest(hostname="Bad_Name")), BadRequest)

    def test_limits(self) -> None:
        """cpus and ram_bytes above the group's are refused with BadRequest."""
        self.failureResultOf(self.create(request=CreateRequest(cpus=3)), BadRequest)
        self.failureResultOf(self.create(request=CreateRequest(ram_bytes=513 * 1024 * 1024)), BadRequest)
        record = self.successResultOf(self.create(request=CreateRequest(cpus=1, ram_bytes=128 * 1024 * 1024)))
        self.assertEqual((record.cpus, record.ram_bytes), (1, 128 * 1024 * 1024))
        self.assertEqual(self.h.driver.machines[-1].spec.vcpus, 1)

    def test_unknown_group(self) -> None:
        """Creating in, listing or deleting from an unknown group is NotFound."""
        self.failureResultOf(self.create("nope"), NotFound)
        self.assertRaises(NotFound, self.fleet.list, "nope")
        self.failureResultOf(Deferred.fromCoroutine(self.fleet.delete("nope", "demo-1")), NotFound)

    def test_record_written_and_listed(self) -> None:
        """A created node is persisted as Running with its pid, and listed."""
        record = self.successResultOf(self.create(request=CreateRequest(tags=("a", "b"))))
        records, strays = self.h.store.load_all()
        self.assertEqual(strays, [])
        self.assertEqual(records, [record])
        self.assertEqual(record.status, Status.RUNNING)
        self.assertEqual(record.pid, 1000)
        self.assertEqual(self.fleet.list(), [record])

    def test_wait_agent(self) -> None:
        """wait=agent answers only after the agent's health reply; boot time is reported."""
        d = self.create(wait=Wait.AGENT)
        self.assertNoResult(d)
        self.h.reactor.advance(2.5)
        self.h.agents[0].ready()
        self.assertEqual(self.successResultOf(d).hostname, "demo-1")
        self.assertEqual(self.h.boots, [("demo", 2.5)])

    def test_wait_timeout_removes_everything(self) -> None:
        """A wait that times out kills the VM and removes disk, record and directory."""
        d = self.create(wait=Wait.AGENT, timeout=30)
        self.h.reactor.advance(30)
        self.failureResultOf(d, WaitTimeout)
        machine = self.h.driver.machines[0]
        self.assertIsNotNone(machine._exit)
        self.assertTrue(self.h.agents[0].stopped)
        self.assertEqual(self.h.store.load_all(), ([], []))
        self.assertFalse(os.path.exists(self.h.store.node_dir("demo-1")))
        self.assertEqual(self.fleet.list(), [])

    def test_vm_dies_while_waiting(self) -> None:
        """A VM that exits while create waits fails the create with its error, leaving nothing."""
        d = self.create(wait=Wait.AGENT)
        self.h.driver.machines[0].end(1, None, "qemu: boom\n")
        failure = self.failureResultOf(d, Internal)
        self.assertIn("boom", str(failure.value))
        self.assertEqual(self.h.store.load_all(), ([], []))

    def test_cancelled_create_cleans_up(self) -> None:
        """Cancelling a create while it waits removes the node entirely."""
        d = self.create(wait=Wait.AGENT)
        d.cancel()
        self.failureResultOf(d)
        self.assertEqual(self.h.store.load_all(), ([], []))
        self.assertEqual(self.fleet.list(), [])

    def test_delete(self) -> None:
        """Delete kills the VM and removes the disk and the record."""
        self.successResultOf(self.create())
        result = self.successResultOf(Deferred.fromCoroutine(self.fleet.delete("demo", "demo-1")))
        self.assertTrue(result.disk_removed)
        self.assertEqual(self.h.driver.machines[0]._exit.signal, 9)
        self.assertEqual(self.h.store.load_all(), ([], []))
        self.failureResultOf(Deferred.fromCoroutine(self.fleet.delete("demo", "demo-1")), NotFound)

    def test_delete_wrong_group(self) -> None:
        """A node is only found in its own group."""
        self.successResultOf(self.create())
        self.failureResultOf(Deferred.fromCoroutine(self.fleet.delete("other", "demo-1")), NotFound)

    def test_delete_protected(self) -> None:
        """A protected node cannot be deleted."""
        self.successResultOf(self.create(request=CreateRequest(protected=True)))
        self.failureResultOf(Deferred.fromCoroutine(self.fleet.delete("demo", "demo-1")), Protected)

    def test_filters(self) -> None:
        """tag matches exactly, tag_prefix by prefix, both at once is refused."""
        self.successResultOf(self.create(request=CreateRequest(tags=("team=a", "x"))))
        self.successResultOf(self.create(request=CreateRequest(tags=("team=b",))))
        self.successResultOf(self.create("other"))
        names = lambda records: [r.hostname for r in records]
        self.assertEqual(names(self.fleet.list(tag="team=a")), ["demo-1"])
        self.assertEqual(names(self.fleet.list(tag="team")), [])
        self.assertEqual(names(self.fleet.list(tag_prefix="team=")), ["demo-1", "demo-2"])
        self.assertEqual(names(self.fleet.list("other")), ["other-1"])
        self.assertRaises(BadRequest, self.fleet.list, None, "a", "b")

    def test_ephemeral_vm_exit_removes_node(self) -> None:
        """An ephemeral node whose VM exits on its own is removed."""
        self.successResultOf(self.create())
        self.h.driver.machines[0].end(0)
        self.assertEqual(self.fleet.list(), [])
        self.assertEqual(self.h.store.load_all(), ([], []))

    def test_persistent_vm_exit_stops_node(self) -> None:
        """A persistent node whose VM exits becomes Stopped and keeps its disk."""
        self.successResultOf(self.create(request=CreateRequest(persistent=True)))
        self.h.driver.machines[0].end(0)
        [record] = self.fleet.list()
        self.assertEqual(record.status, Status.STOPPED)
        self.assertTrue(os.path.exists(os.path.join(self.h.store.node_dir("demo-1"), "disk.qcow2")))

    def test_logs(self) -> None:
        """logs returns the last N lines with CRLF folded, all of them for 0."""
        self.successResultOf(self.create())
        logs = lambda hostname, lines: Deferred.fromCoroutine(self.fleet.consoles.tail(hostname, lines))
        text, count = self.successResultOf(logs("demo-1", 2))
        self.assertEqual((text, count), ("line 29\nline 30\n", 2))
        self.assertEqual(self.successResultOf(logs("demo-1", 0))[1], 30)
        self.failureResultOf(logs("demo-9", 2), NotFound)

    def test_stop_service_stops_everything(self) -> None:
        """Stopping the service stops every VM (gracefully as configured) and removes ephemeral nodes."""
        self.successResultOf(self.create())
        self.successResultOf(self.create(request=CreateRequest(persistent=True)))
        self.successResultOf(self.fleet.stopService())
        self.assertEqual([m.stops for m in self.h.driver.machines], [[(True, 10.0)], [(True, 10.0)]])
        records, _ = self.h.store.load_all()
        self.assertEqual([(r.hostname, r.status) for r in records], [("demo-2", Status.STOPPED)])

    def test_start_removes_leftovers(self) -> None:
        """At start, stray directories and ephemeral records of an earlier run are removed."""
        self.successResultOf(self.create())
        os.makedirs(self.h.store.node_dir("stray-1"))
        again = FleetHarness(self.h.config.state_dir)
        again.fleet.startService()
        self.assertEqual(again.store.load_all(), ([], []))
        self.assertFalse(os.path.exists(again.store.node_dir("stray-1")))

    def test_guest_of_node(self) -> None:
        """guest() gives a running node's guest; paused is a 409 conflict; unknown is NotFound."""
        from attrs import evolve

        from vmservice.errors import AgentNotConnected
        from vmservice.nodes.readiness import AGENT_WAIT

        self.successResultOf(self.create())
        waiting = Deferred.fromCoroutine(self.fleet.guest("demo-1"))
        self.h.reactor.advance(AGENT_WAIT)
        self.failureResultOf(waiting, AgentNotConnected)
        self.failureResultOf(Deferred.fromCoroutine(self.fleet.guest("demo-1", wait=0)), AgentNotConnected)
        self.h.agents[0].ready()
        self.assertIs(self.successResultOf(Deferred.fromCoroutine(self.fleet.guest("demo-1"))), self.h.agents[0])
        node = self.h.node("demo-1")
        node.record = evolve(node.record, status=Status.PAUSED)
        failure = self.failureResultOf(Deferred.fromCoroutine(self.fleet.guest("demo-1")), Conflict)
        self.assertEqual(failure.value.code, "paused")
        self.failureResultOf(Deferred.fromCoroutine(self.fleet.guest("demo-9")), NotFound)


    def test_guest_waits_for_its_agent(self) -> None:
        """
        A request for the guest of a node whose agent is not connected yet waits for it (bounded):
        served once it connects; NotFound when the node is deleted meanwhile, Conflict when it is paused.
        """
        from attrs import evolve

        self.successResultOf(self.create())
        self.successResultOf(self.create())
        served = Deferred.fromCoroutine(self.fleet.guest("demo-1"))
        self.h.reactor.advance(1)
        self.assertNoResult(served)
        self.h.agents[0].ready()
        self.assertIs(self.successResultOf(served), self.h.agents[0])
        paused = Deferred.fromCoroutine(self.fleet.guest("demo-2"))
        node = self.h.node("demo-2")
        node.record = evolve(node.record, status=Status.PAUSED)
        self.h.agents[1].ready()
        self.assertEqual(self.failureResultOf(paused, Conflict).value.code, "paused")
        node.record = evolve(node.record, status=Status.RUNNING)
        self.h.agents[1].is_ready = False
        deleted = Deferred.fromCoroutine(self.fleet.guest("demo-2"))
        self.successResultOf(Deferred.fromCoroutine(self.fleet.delete("demo", "demo-2")))
        self.failureResultOf(deleted, NotFound)


class DiskImageTests(SynchronousTestCase):
    """``disk_image``: a node made from another image than its group's, and kept on it."""

    def setUp(self) -> None:
        self.h = FleetHarness(self.mktemp())
        self.h.fleet.startService()
        self.fleet = self.h.fleet

    def create(self, request: CreateRequest) -> Deferred:
        return Deferred.fromCoroutine(self.fleet.create("demo", request, Wait.NONE, 300.0))

    def test_named_image(self) -> None:
        """
        The node's disk is an overlay on the named image's root file system, its VM boots that image's
        kernel, and its record and description name the image; without disk_image it is the group's.
        """
        record = self.successResultOf(self.create(CreateRequest(disk_image="dev", persistent=True)))
        self.assertEqual(record.image, "dev")
        disk = os.path.join(self.h.store.node_dir(record.hostname), "disk.qcow2")
        self.assertEqual(self.h.disks._made[disk][0], self.h.dev_image.rootfs.path)
        self.assertEqual(self.h.driver.machines[-1].spec.kernel, self.h.dev_image.kernel.path)
        self.assertEqual(self.h.store.load_all()[0][0].image, "dev")
        description = self.successResultOf(Deferred.fromCoroutine(self.fleet.describe(record.hostname)))
        self.assertEqual(description.image, "dev")
        plain = self.successResultOf(self.create(CreateRequest()))
        self.assertEqual(plain.image, "default")
        self.assertEqual(self.h.driver.machines[-1].spec.kernel, self.h.image.kernel.path)

    def test_relaunch_keeps_image(self) -> None:
        """A stopped node made from dev boots dev's kernel again on relaunch."""
        record = self.successResultOf(self.create(CreateRequest(disk_image="dev", persistent=True)))
        self.h.driver.machines[0].end(0)
        self.successResultOf(Deferred.fromCoroutine(self.fleet.lifecycle.relaunch(record.hostname, Wait.NONE, 1)))
        self.assertEqual(len(self.h.driver.machines), 2)
        self.assertEqual(self.h.driver.machines[-1].spec.kernel, self.h.dev_image.kernel.path)

    def test_unknown_image(self) -> None:
        """
        An image that is not built is a BadRequest (unknown_image) naming the built ones; nothing is made.
        """
        failure = self.failureResultOf(self.create(CreateRequest(disk_image="nope")), BadRequest)
        self.assertEqual(failure.value.code, "unknown_image")
        self.assertIn("'nope'", str(failure.value))
        self.assertIn("the images are: dev", str(failure.value))
        self.assertEqual((self.fleet.list(), self.h.driver.machines, self.h.disks.created), ([], [], []))

    def test_image_larger_than_disk(self) -> None:
        """An image whose root file system exceeds the group's storage_size is a BadRequest; nothing is made."""
        with open(self.h.dev_image.rootfs.path, "wb") as stream:
            stream.truncate(self.h.config.host_groups[0].storage_size + 1)
        failure = self.failureResultOf(self.create(CreateRequest(disk_image="dev")), BadRequest)
        self.assertEqual(failure.value.code, "image_too_large")
        self.assertIn("storage_size", str(failure.value))
        self.assertEqual((self.fleet.list(), self.h.driver.machines), ([], []))

    def test_listing(self) -> None:
        """The fleet lists the images of the configured image directory."""
        images = self.successResultOf(Deferred.fromCoroutine(self.fleet.images()))
        self.assertEqual([(info.name, info.source) for info in images], [("dev", "recipe:dev")])


class DriverChoiceStopTests(SynchronousTestCase):
    """:meth:`DriverChoice.stop` and the fleet's stop while the KVM probe runs."""

    def test_stop_cancels_the_decision(self) -> None:
        """
        Stopping while the decision is under way cancels it, and fires only once the decision is over
        (its QEMU gone); whoever waited for the driver gets CancelledError.
        """
        from twisted.internet.defer import CancelledError

        from vmservice.nodes.driver_choice import DriverChoice

        over: Deferred = Deferred()
        cancelled: list[Deferred] = []
        inner: Deferred = Deferred(cancelled.append)

        async def decide() -> object:
            try:
                return await inner  # the probe
            finally:
                await over  # its QEMU reaped

        deciding = Deferred.fromCoroutine(decide())
        choice = DriverChoice(lambda: deciding)
        waiting = choice.get()
        stopped = choice.stop()
        self.assertEqual(cancelled, [inner])
        self.assertNoResult(stopped)
        self.assertNoResult(waiting)
        over.callback(None)
        self.assertIsNone(self.successResultOf(stopped))
        self.failureResultOf(waiting, CancelledError)

    def test_stop_before_the_decision(self) -> None:
        """Stopping before anyone asked: no decision ever starts, and the driver is never given."""
        from twisted.internet.defer import CancelledError

        from vmservice.nodes.driver_choice import DriverChoice

        started: list[int] = []
        choice = DriverChoice(lambda: Deferred(lambda d: started.append(1)))
        self.assertIsNone(self.successResultOf(choice.stop()))
        self.failureResultOf(choice.get(), CancelledError)
        self.assertEqual(started, [])

    def test_stop_after_the_decision(self) -> None:
        """Stopping once decided changes nothing: the driver is still given."""
        from twisted.internet.defer import succeed

        from vmservice.nodes.driver_choice import DriverChoice

        choice = DriverChoice(lambda: succeed("driver"))
        self.assertEqual(self.successResultOf(choice.get()), "driver")
        self.assertIsNone(self.successResultOf(choice.stop()))
        self.assertEqual(self.successResultOf(choice.get()), "driver")

    def test_fleet_stop_during_the_probe(self) -> None:
        """
        The daemon stopped (SIGTERM: the fleet's stopService) while its KVM probe runs: the probe QEMU
        is killed, and the fleet's stop fires only once it has ended; the start-up recovery ends
        quietly, adopting nothing.
        """
        from attrs import evolve
        from twisted.internet.error import ProcessTerminated
        from twisted.python.failure import Failure

        from tests.processes import ProcessReactor
        from vmservice.hypervisors.qemu import probe_accel
        from vmservice.nodes.driver_choice import DriverChoice

        h = FleetHarness(self.mktemp())
        reactor = ProcessReactor()
        kvm = self.mktemp()
        open(kvm, "w").close()

        async def decide() -> object:
            await probe_accel(reactor, "qemu", "/k", "/i", "auto", None, directory=self.mktemp(), kvm_path=kvm)
            return h.driver

        fleet = fleet_of(evolve(h.parts, driver=DriverChoice(lambda: Deferred.fromCoroutine(decide()))))
        fleet.startService()
        [transport] = reactor.transports
        self.assertEqual(transport.signals, [])
        stopped = fleet.stopService()
        self.assertEqual(transport.signals, ["KILL"])
        self.assertNoResult(stopped)
        transport.protocol.processEnded(Failure(ProcessTerminated(None, 9, None)))
        self.successResultOf(stopped)
        self.successResultOf(fleet.recovered())
        self.assertEqual(h.driver.machines, [])


class DriverChoiceStartTests(SynchronousTestCase):
    def test_stopped_before_decided_is_logged(self) -> None:
        """A decision started in the background and stopped before it is over says so in the log."""
        from twisted.logger import globalLogPublisher

        from vmservice.nodes.driver_choice import DriverChoice

        seen: list[str] = []

        def observe(event: dict[str, object]) -> None:
            seen.append(str(event.get("log_format", "")))

        globalLogPublisher.addObserver(observe)
        self.addCleanup(globalLogPublisher.removeObserver, observe)
        choice = DriverChoice(lambda: Deferred(lambda d: None))
        choice.start()
        self.successResultOf(choice.stop())
        self.assertIn("the daemon stopped before the hypervisor was decided", seen)
