"""
Tests for :mod:`vmservice.nodes.warm.spare` (the machine) and the hand-over of a
template's spare VM to a create through the fleet on fakes: the create
takes the spare (its record names the spare's QMP socket before anything
else), the next spare starts only afterwards, a failed hand-over leaves
nothing of the spare and clones the usual way, spares go with their
template and the daemon, and a spare-born node survives a crash.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from attrs import evolve
from twisted.internet.defer import Deferred, fail, succeed
from twisted.trial.unittest import SynchronousTestCase

from tests.nodes.fleets import fleet_of
from tests.diagrams import drawn_transitions, machine_transitions
from tests.fakes import FakeMachine, FleetHarness, empty_overlay_base
from ipaddress import IPv4Interface, IPv4Network

from tests.nodes.warm.adoptions import FakeAdoption
from vmservice.config import HostGroupConfig, NetworkConfig
from vmservice.hypervisors.base import HypervisorError, MachineSpec
from vmservice.nodes.admission import Admission, Limits
from vmservice.nodes.warm.template_supply import template_key
from vmservice.nodes.model import CreateRequest, NodeRecord, Wait
from vmservice.nodes.warm.spare import SPARE_PHASE, SpareCore
from vmservice.nodes.warm.template_files import Template
from vmservice.nodes.warm.templates import TemplateStore

MiB = 1024 * 1024
BRIDGED = HostGroupConfig(name="warm", vcpu=1, ram_bytes=256 * MiB, warm=True, storage_size=1 << 30,
                          network=NetworkConfig(mode="bridge", bridge="vmbr9", gateway=IPv4Interface("10.78.9.1/24"),
                                                range=IPv4Network("10.78.9.0/28")))
SPARE = HostGroupConfig(name="warm", vcpu=1, ram_bytes=256 * MiB, warm=True, warm_spare=True, storage_size=1 << 30)
NO_SPARE = evolve(SPARE, warm_spare=False)


class PhaseTests(SynchronousTestCase):
    def test_diagram(self) -> None:
        """The diagram has an edge for exactly the machine's transitions, loops included."""
        self.assertEqual(drawn_transitions("spare.dot"), machine_transitions(SPARE_PHASE))

    def test_taken_once(self) -> None:
        phase = SPARE_PHASE(SpareCore("spare-1"))
        self.assertFalse(phase.take())
        self.assertTrue(phase.holds())
        self.assertTrue(phase.ready())
        self.assertTrue(phase.take())
        self.assertFalse(phase.take())
        self.assertFalse(phase.holds())
        self.assertTrue(phase.kill())
        self.assertFalse(phase.kill())

    def test_killed_while_starting(self) -> None:
        phase = SPARE_PHASE(SpareCore("spare-1"))
        self.assertTrue(phase.kill())
        self.assertFalse(phase.ready())
        self.assertFalse(phase.take())
        self.assertFalse(phase.holds())


class SpareTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.make(SPARE)

    def make(self, group: HostGroupConfig, budget: int | None = None, driver: Any = None) -> None:
        if driver is None:
            # Short: a spare's socket paths lie two directories deep under the templates'.
            self.state_dir = tempfile.mkdtemp(prefix="spare")
            self.addCleanup(shutil.rmtree, self.state_dir, True)
        state_dir = self.state_dir
        self.harness = FleetHarness(state_dir, groups=(group,), driver=driver)
        start = self.harness.driver.start
        #: When a list: each spare's QEMU answers its monitor only once its Deferred here is fired.
        self.held: list[Deferred[None]] | None = None

        def start_with_sockets(spec: MachineSpec, log_path: str | None = None) -> Any:
            # As QEMU does: its sockets exist once it answers.
            for path in (spec.agent_socket, spec.qmp_socket, spec.metrics_socket, spec.bulk_socket):
                if path is not None:
                    open(path, "w").close()
            started = start(spec, log_path)
            if self.held is None or "/spare-" not in spec.qmp_socket:
                return started
            machine = self.successResultOf(started)
            answered: Deferred[None] = Deferred()
            self.held.append(answered)
            run_state = machine.run_state
            machine.run_state = lambda: answered.addCallback(lambda _: run_state())  # type: ignore
            return succeed(machine)

        self.harness.driver.start = start_with_sockets  # type: ignore[method-assign]
        self.store = TemplateStore(self.harness.reactor, state_dir, os.path.join(state_dir, "shm"), 1 << 30)
        self.adoption = FakeAdoption(self.harness)
        admission = Admission(self.harness.reactor, Limits(budget=budget)) if budget else Admission.unlimited()
        self.parts = evolve(self.harness.parts, admission=admission)
        self.fleet = fleet_of(self.parts, self.store, self.adoption)
        self.key = template_key(group, 256 * MiB, 1, self.harness.image, self.harness.driver)
        self.group = group

    def template(self) -> Template:
        async def build(template: Template) -> None:
            for path in (template.disk, template.device_state, template.ram_file):
                with open(path, "wb") as f:
                    f.write(b"x")

        return self.successResultOf(Deferred.fromCoroutine(
            self.store.get(self.key, self.harness.image.kernel.path, self.harness.image.initrd.path, build)))

    def start(self) -> Template:
        """The template built, then the fleet started (its start starts the spare)."""
        template = self.template()
        self.fleet.startService()
        fleet = self.fleet
        self.addCleanup(lambda: fleet.stopService() if fleet.running else None)
        self.successResultOf(self.fleet.recovered())
        return template

    def create(self, request: CreateRequest | None = None) -> NodeRecord:
        record: NodeRecord = self.successResultOf(Deferred.fromCoroutine(
            self.fleet.create(self.group.name, request or CreateRequest(), Wait.NONE, 60)))
        return record

    def spares(self) -> list[FakeMachine]:
        return [m for m in self.harness.driver.machines if "/spare-" in m.spec.qmp_socket]

    def test_started_with_the_template(self) -> None:
        """
        The spare is a clone's VM of the template, in a directory of its own
        inside the template's, warmed up: its agent connected, the template's
        state loaded, then a throwaway identity adopted under its own name.
        """
        template = self.start()
        [spare] = self.spares()
        self.assertEqual(os.path.dirname(os.path.dirname(spare.spec.qmp_socket)), template.directory)
        self.assertTrue(spare.spec.defer_incoming)
        memory = spare.spec.memory
        self.assertEqual((memory.path, memory.shared) if memory else None, (template.ram_file, False))
        self.assertEqual(empty_overlay_base(self.harness.disks, template), template.disk)
        with open(spare.spec.disk, "rb") as disk, open(template.empty_overlay, "rb") as empty:
            self.assertEqual(disk.read(), empty.read())
        self.assertEqual(spare.commands, ["load_device_state"])
        name = os.path.basename(os.path.dirname(spare.spec.qmp_socket))
        self.assertEqual(self.adoption.rehearsed, [(name, ["load_device_state"])])
        [agent] = self.harness.agents
        self.assertEqual((agent.path, agent.started, agent.stopped), (spare.spec.agent_socket, True, False))

    def test_rehearsal_fails(self) -> None:
        """A spare whose guest does not adopt its throwaway identity is killed, its connection stopped, its files gone."""
        self.adoption.fail_rehearsal = RuntimeError("no reseed")
        template = self.start()
        [spare] = self.spares()
        self.assertIsNotNone(spare._exit)
        self.assertTrue(self.harness.agents[0].stopped)
        self.assertFalse(os.path.exists(os.path.dirname(spare.spec.qmp_socket)))
        self.assertIsNone(self.store.take_spare(template))
        self.assertEqual(self.store.spare_ram(), [])

    def test_killed_while_rehearsing(self) -> None:
        """A template dropped while its spare rehearses: the spare's connection is stopped, its VM killed, its files gone."""
        rehearsals: list[Deferred[None]] = []
        self.adoption.rehearse = lambda name, agent: rehearsals.append(Deferred()) or rehearsals[-1]  # type: ignore
        template = self.start()
        [spare] = self.spares()
        self.store.discard(template.key)
        self.assertIsNotNone(spare._exit)
        self.assertTrue(self.harness.agents[0].stopped)
        self.assertFalse(os.path.exists(os.path.dirname(spare.spec.qmp_socket)))
        self.assertEqual(self.store.spare_ram(), [])

    def test_without_adoption(self) -> None:
        """A daemon that gives clones no identities starts its spares waiting; the create loads the state."""
        self.fleet = fleet_of(self.parts, self.store, None)
        self.start()
        [spare] = self.spares()
        self.assertEqual((spare.commands, self.harness.agents), ([], []))
        record = self.create()
        self.assertIs(self.fleet._registry.find(record.hostname).machine, spare)
        self.assertEqual(spare.commands, ["load_device_state"])
        [agent] = self.harness.agents
        self.assertEqual(agent.path, self.fleet._registry.find(record.hostname).paths.agent)

    def test_create_takes_the_spare(self) -> None:
        """
        The create's node is the spare's VM: its record names the spare's QMP
        socket, its disk is the spare's (a second link), the spare's sockets
        are in the node's directory; the next spare starts only then.
        """
        self.start()
        [spare] = self.spares()
        record = self.create()
        node = self.fleet._registry.find(record.hostname)
        self.assertIs(node.machine, spare)
        self.assertEqual(spare.commands, ["load_device_state"])  # by the spare, not again
        stored = self.harness.store.load_all()[0][0]
        self.assertEqual((stored.started_qmp, stored.pid), (spare.spec.qmp_socket, spare.pid))
        self.assertTrue(os.path.samefile(node.paths.disk, spare.spec.disk))
        self.assertTrue(os.path.exists(node.paths.qmp) and not os.path.exists(spare.spec.qmp_socket))
        self.assertEqual(self.adoption.adopted, [(record.hostname, ["load_device_state"], [])])
        # The node's agent connection is the spare's, reconnecting to the node's socket from now on.
        spare_agent = self.harness.agents[0]
        self.assertIs(node.agent, spare_agent)
        self.assertEqual((spare_agent.path, spare_agent.stopped), (node.paths.agent, False))
        spares = self.spares()
        self.assertEqual(len(spares), 2)
        self.assertEqual(spares[1].commands, ["load_device_state"])

    def test_one_spare_one_create(self) -> None:
        """A spare is taken once; the next ask finds none until another one is ready."""
        template = self.start()
        taken = self.store.take_spare(template)
        self.assertIsNotNone(taken)
        self.assertIsNone(self.store.take_spare(template))

    def test_replaced_once_no_clone_adopts(self) -> None:
        """Creates at once: one takes the spare; the next spare starts only when the last of them adopted."""
        self.start()
        pending: list[Deferred[None]] = []
        self.adoption.adopt = lambda record, net, agent: pending.append(Deferred()) or pending[-1]  # type: ignore
        creates = [Deferred.fromCoroutine(self.fleet.create(self.group.name, CreateRequest(), Wait.NONE, 60))
                   for _ in range(2)]
        self.assertEqual(len(self.spares()), 1)
        pending[0].callback(None)
        self.successResultOf(creates[0])
        self.assertEqual(len(self.spares()), 1)
        pending[1].callback(None)
        self.successResultOf(creates[1])
        self.assertEqual(len(self.spares()), 2)

    def test_replaced_after_another_groups_clone(self) -> None:
        """
        A spare wanted by one group of a template is started when the last
        clone of that template ends, even one of a group without spares.
        """
        self.make(evolve(SPARE, warm_spare=False))
        template = self.template()
        self.store.wants_spare(template.key, True)  # as a group with spares of this template did
        self.create()
        self.assertEqual(len(self.spares()), 1)

    def test_no_spare_without_the_setting(self) -> None:
        self.make(NO_SPARE)
        self.start()
        self.create()
        self.assertEqual(self.spares(), [])

    def test_load_fails(self) -> None:
        """A spare that does not load is killed, its files gone, and the node cloned the usual way."""
        start = self.harness.driver.start

        def failing_spares(spec: MachineSpec, log_path: str | None = None) -> Any:
            machine = self.successResultOf(start(spec, log_path))
            if "/spare-" in spec.qmp_socket:
                machine.load_device_state = lambda path: fail(HypervisorError("bad state"))
            return succeed(machine)

        self.harness.driver.start = failing_spares  # type: ignore[method-assign]
        self.start()
        [spare] = self.spares()
        self.assertIsNotNone(spare._exit)
        self.assertTrue(self.harness.agents[0].stopped)
        record = self.create()
        node = self.fleet._registry.find(record.hostname)
        self.assertFalse(os.path.exists(os.path.dirname(spare.spec.qmp_socket)))
        self.assertIsNot(node.machine, spare)
        assert node.machine is not None
        self.assertEqual(node.machine.spec.qmp_socket, node.paths.qmp)  # type: ignore[attr-defined]
        stored = self.harness.store.load_all()[0][0]
        self.assertEqual((stored.started_qmp, bool(stored.frozen_disk)), ("", True))

    def test_adoption_fails(self) -> None:
        """A spare whose guest does not adopt is killed; the usual clone is made instead."""
        self.start()
        [spare] = self.spares()
        adopt = self.adoption.adopt

        def fail_first(record: NodeRecord, net: Any, agent: Any) -> Deferred[None]:
            self.adoption.adopt = adopt  # type: ignore[method-assign]
            return fail(RuntimeError("no reseed"))

        self.adoption.adopt = fail_first  # type: ignore[method-assign]
        record = self.create()
        node = self.fleet._registry.find(record.hostname)
        self.assertIsNotNone(spare._exit)
        self.assertFalse(os.path.exists(os.path.dirname(spare.spec.qmp_socket)))
        self.assertEqual(node.record.started_qmp, "")
        self.assertTrue(self.harness.agents[0].stopped)

    def test_hand_over_fails(self) -> None:
        """A spare whose files cannot be handed over (its socket gone) leaves nothing behind."""
        self.start()
        [spare] = self.spares()
        os.unlink(spare.spec.agent_socket)
        record = self.create()
        node = self.fleet._registry.find(record.hostname)
        self.assertIsNotNone(spare._exit)
        self.assertFalse(os.path.exists(os.path.dirname(spare.spec.qmp_socket)))
        self.assertIsNot(node.machine, spare)

    def test_discard_kills(self) -> None:
        """A template dropped takes its spare with it."""
        template = self.start()
        [spare] = self.spares()
        self.store.discard(template.key)
        self.assertIsNotNone(spare._exit)
        self.assertFalse(os.path.exists(os.path.dirname(spare.spec.qmp_socket)))
        self.assertEqual(self.store.spare_ram(), [])

    def test_stop_kills(self) -> None:
        self.start()
        [spare] = self.spares()
        self.successResultOf(self.fleet.stopService())
        self.assertIsNotNone(spare._exit)

    def test_dies_on_its_own(self) -> None:
        """A spare whose QEMU ends is killed (its directory removed) and never taken."""
        template = self.start()
        [spare] = self.spares()
        spare.end(1)
        self.assertFalse(os.path.exists(os.path.dirname(spare.spec.qmp_socket)))
        self.assertIsNone(self.store.take_spare(template))

    def test_admission_counts_spares(self) -> None:
        """
        A spare holds one VM of its template's RAM; one is started only while
        the budget has room for it and one create more.
        """
        self.make(SPARE, budget=3 * 256 * MiB)
        self.start()
        self.assertEqual(self.parts.admission.used(), (256 * MiB, 0))
        self.create()
        self.assertEqual((self.parts.admission.used(), len(self.spares())), ((2 * 256 * MiB, 0), 2))
        self.create()
        # Two nodes: a spare and a create would not fit.
        self.assertEqual((self.parts.admission.used(), len(self.spares())), ((2 * 256 * MiB, 0), 2))
        self.assertEqual(self.store.spare_ram(), [])

    def test_spare_started_once_memory_is_given_back(self) -> None:
        """
        A spare refused for lack of memory is started when a delete gives
        enough back, without waiting for the next clone; not while there is
        still no room, nor a second time.
        """
        self.make(SPARE, budget=3 * 256 * MiB)
        self.start()
        first, second = self.create(), self.create()
        self.assertEqual((len(self.spares()), self.store.spare_ram()), (2, []))
        self.successResultOf(Deferred.fromCoroutine(self.fleet.delete("warm", second.hostname)))
        self.assertEqual((len(self.spares()), self.store.spare_ram()), (3, [256 * MiB]))
        self.assertEqual(self.parts.admission.used(), (2 * 256 * MiB, 0))
        self.successResultOf(Deferred.fromCoroutine(self.fleet.delete("warm", first.hostname)))
        self.assertEqual((len(self.spares()), self.store.spare_ram()), (3, [256 * MiB]))

    def test_delete_removes_the_spare_directory(self) -> None:
        self.start()
        [spare] = self.spares()
        record = self.create()
        self.successResultOf(Deferred.fromCoroutine(self.fleet.delete("warm", record.hostname)))
        self.assertFalse(os.path.exists(os.path.dirname(spare.spec.qmp_socket)))

    def test_crash(self) -> None:
        """
        After a kill -9, the next daemon adopts the spare-born node by the
        QMP socket its VM was started with, kills the spare no node was
        handed and removes its directory, and keeps the node's.
        """
        self.start()
        [spare] = self.spares()
        record = self.create()
        replacement = self.spares()[1]
        self.harness.crash()
        driver = self.harness.driver
        self.make(SPARE, driver=driver)
        self.fleet.startService()
        fleet = self.fleet
        self.addCleanup(lambda: fleet.stopService() if fleet.running else None)
        self.successResultOf(self.fleet.recovered())
        node = self.fleet._registry.find(record.hostname)
        self.assertIs(node.machine, spare)
        self.assertIsNone(spare._exit)
        self.assertIn(replacement.pid, driver.killed_orphans)
        self.assertFalse(os.path.exists(os.path.dirname(replacement.spec.qmp_socket)))
        self.assertTrue(os.path.isdir(os.path.dirname(spare.spec.qmp_socket)))

    def test_relaunch_drops_the_spare_name(self) -> None:
        """A relaunch boots the node's own names: the record no longer names the spare, its directory goes."""
        self.start()
        [spare] = self.spares()
        record = self.create(CreateRequest(persistent=True))
        spare.end(0)
        self.successResultOf(Deferred.fromCoroutine(self.fleet.lifecycle.relaunch(record.hostname, Wait.NONE, 60)))
        self.assertEqual(self.fleet._registry.find(record.hostname).record.started_qmp, "")
        self.assertFalse(os.path.exists(os.path.dirname(spare.spec.qmp_socket)))


    def hold_adoptions(self) -> list[Deferred[None]]:
        """The creates' adoptions from now on, each answered when the test fires its Deferred."""
        pending: list[Deferred[None]] = []
        self.adoption.adopt = lambda record, net, agent: pending.append(Deferred()) or pending[-1]  # type: ignore
        return pending

    def test_pool_started_one_at_a_time(self) -> None:
        """``warm_spare: 3``: three spares, each started once the one before is ready; all count in admission."""
        self.make(evolve(self.group, warm_spare=3))
        self.held = []
        self.start()
        for ready in range(3):
            self.assertEqual(len(self.spares()), ready + 1)
            self.held[ready].callback(None)
        self.assertEqual(len(self.spares()), 3)
        self.assertEqual(len(self.store.spare_ram()), 3)
        self.assertEqual(self.parts.admission.used(), (3 * 256 * MiB, 0))
        self.assertEqual(len({os.path.dirname(m.spec.qmp_socket) for m in self.spares()}), 3)

    def test_creates_at_once_take_a_spare_each(self) -> None:
        """
        Three creates at once take the three spares of the pool, a fourth
        clones the usual way; the pool is filled again, one at a time, only
        once every one of them adopted its identity.
        """
        self.make(evolve(self.group, warm_spare=3))
        self.start()
        pool = self.spares()
        self.assertEqual(len(pool), 3)
        pending = self.hold_adoptions()
        creates = [Deferred.fromCoroutine(self.fleet.create(self.group.name, CreateRequest(), Wait.NONE, 60))
                   for _ in range(4)]
        self.assertEqual([m.commands for m in pool], [["load_device_state"]] * 3)
        self.assertEqual(self.store.spare_ram(), [])
        self.assertEqual(len(self.spares()), 3)  # no new spare while creates are under way
        self.held = []
        for adopted in pending[:3]:
            adopted.callback(None)
        self.assertEqual(len(self.spares()), 3)  # the fourth create still adopts
        pending[3].callback(None)
        records = [self.successResultOf(create) for create in creates]
        machines = [self.fleet._registry.find(record.hostname).machine for record in records]
        self.assertEqual(machines[:3], pool)
        self.assertNotIn(machines[3], pool)
        for ready in range(3):
            self.assertEqual(len(self.spares()), 3 + ready + 1)
            self.held[ready].callback(None)
        self.assertEqual(len(self.store.spare_ram()), 3)

    def test_refill_waits_for_a_create(self) -> None:
        """A create under way while a spare of the pool starts: the next one starts only when it adopted."""
        self.make(evolve(self.group, warm_spare=2))
        self.start()
        self.held = []
        self.create()
        self.create()
        self.assertEqual(len(self.spares()), 3)  # the pool's first new spare is starting
        pending = self.hold_adoptions()
        create = Deferred.fromCoroutine(self.fleet.create(self.group.name, CreateRequest(), Wait.NONE, 60))
        self.held[0].callback(None)
        self.assertEqual(len(self.spares()), 3)
        pending[0].callback(None)
        self.successResultOf(create)
        self.assertEqual(len(self.spares()), 4)

    def test_pool_within_the_budget(self) -> None:
        """Spares of a pool start only while the budget holds them and one create more."""
        self.make(evolve(self.group, warm_spare=3), budget=3 * 256 * MiB)
        self.start()
        self.assertEqual(len(self.spares()), 2)
        self.assertEqual(self.parts.admission.used(), (2 * 256 * MiB, 0))

    def test_pool_goes_with_its_template(self) -> None:
        """Every spare of a pool is killed, its directory removed, with its template or the daemon."""
        self.make(evolve(self.group, warm_spare=3))
        template = self.start()
        pool = self.spares()
        self.store.discard(template.key)
        self.assertEqual([m._exit is not None for m in pool], [True] * 3)
        self.assertEqual([os.path.exists(os.path.dirname(m.spec.qmp_socket)) for m in pool], [False] * 3)
        self.assertEqual(self.store.spare_ram(), [])
        self.make(evolve(self.group, warm_spare=3))
        self.start()
        pool = self.spares()
        self.successResultOf(self.fleet.stopService())
        self.assertEqual([m._exit is not None for m in pool], [True] * 3)

    def test_pool_after_a_crash(self) -> None:
        """After a kill -9 the next start kills every spare no node was handed and starts a new pool."""
        self.make(evolve(self.group, warm_spare=3))
        self.start()
        record = self.create()
        left = self.spares()[1:]
        self.assertEqual(len(left), 3)
        self.harness.crash()
        driver = self.harness.driver
        self.make(evolve(self.group, warm_spare=3), driver=driver)
        self.start()
        self.assertIsNotNone(self.fleet._registry.find(record.hostname).machine)
        self.assertEqual(sorted(driver.killed_orphans), sorted(m.pid for m in left))
        self.assertEqual([os.path.exists(os.path.dirname(m.spec.qmp_socket)) for m in left], [False] * 3)
        self.assertEqual(len(self.store.spare_ram()), 3)

    def test_the_most_any_group_asks_for(self) -> None:
        """A template used by groups asking for 1 and for 3 spares keeps 3."""
        self.assertEqual(self.store.wants_spare(self.key, 1), 1)
        self.assertEqual(self.store.wants_spare(self.key, 3), 3)
        self.assertEqual(self.store.wants_spare(self.key, 0), 3)
        self.assertEqual(self.store.wants_spare(self.key, 1), 3)


class NetworkedSpareTests(SpareTests):
    """A bridged group's spare holds a tap QEMU made, renamed to the node's at the hand-over."""

    def setUp(self) -> None:
        self.make(BRIDGED)

    def test_bridged(self) -> None:
        self.start()
        [spare] = self.spares()
        assert spare.spec.net is not None
        tap = spare.spec.net.tap
        self.assertTrue(tap.startswith("vmp"))
        record = self.create()
        self.assertIs(self.fleet._registry.find(record.hostname).machine, spare)
        self.assertEqual(self.harness.network.taken_taps, [(record.ip, tap)])

    def test_without_adoption(self) -> None:
        """A daemon that gives clones no identities clones no networked node, and starts no spare for one."""
        self.fleet = fleet_of(self.parts, self.store, None)
        self.start()
        self.assertEqual((self.spares(), self.harness.agents), ([], []))

    def test_isolated_takes_none(self) -> None:
        assert BRIDGED.network is not None
        self.make(evolve(BRIDGED, network=evolve(BRIDGED.network, mode="isolated", bridge=None, gateway=None)))
        self.start()
        self.create()
        self.assertEqual(self.spares(), [])

    def test_tap_fails(self) -> None:
        """A tap that cannot be taken: the spare is killed, the node gets its own tap again and is cloned as usual."""
        self.start()
        [spare] = self.spares()

        async def take_tap(group: Any, lease: Any, tap: str) -> None:
            raise RuntimeError("no such device")

        self.harness.network.take_tap = take_tap  # type: ignore[method-assign]
        record = self.create()
        node = self.fleet._registry.find(record.hostname)
        self.assertIsNotNone(spare._exit)
        self.assertIsNot(node.machine, spare)
        self.assertEqual(self.harness.network.detached, [record.ip])
        self.assertIn(record.ip, self.harness.network.attached)
        assert node.machine is not None
        self.assertIsNotNone(node.machine.spec.net)  # type: ignore[attr-defined]
