"""
Tests for :mod:`vmservice.nodes.warm.cloning` through the fleet on fakes: a warm
group's node is cloned from its template (the agent connected before the
device state is loaded, the identity adopted before the guest is
provisioned), and boots cold when the template cannot be had or loaded.
"""

from __future__ import annotations

import os
from typing import Any

from attrs import evolve
from twisted.internet.defer import Deferred, fail
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer
from zope.interface.verify import verifyObject

from datetime import datetime, timezone

from tests.nodes.fleets import fleet_of
from tests.fakes import FakeAgent, FakeMachine, FleetHarness, empty_overlay_base
from tests.nodes.warm.adoptions import FakeAdoption
from tests.short_dirs import temp_dir
from vmservice.agent.errors import AgentUnavailable
from vmservice.nodes.warm.adoption import IdentityAdoption
from vmservice.guestport.identity import GuestIdentity, GuestNet, IAdoption
from ipaddress import IPv4Network

from vmservice.config import HostGroupConfig, NetworkConfig
from vmservice.hypervisors.base import HypervisorError, NetSpec
from vmservice.nodes.warm.adoption import ICloneAdoption
from vmservice.nodes.warm.template_supply import template_key
from vmservice.guestport.guest import IGuestConnection
from vmservice.nodes.model import CreateRequest, NodeRecord, Status, Wait
from vmservice.nodes.warm.template_files import Template
from vmservice.nodes.warm.templates import TemplateStore

MiB = 1024 * 1024
# No spare VMs here (their pool is tests.nodes.warm.test_spare's): each clone is made from the template.
GROUPS = (HostGroupConfig(name="warm", vcpu=1, ram_bytes=256 * MiB, warm=True, storage_size=1 << 30, warm_spare=0),
          HostGroupConfig(name="cold", vcpu=1, ram_bytes=256 * MiB))
NET = HostGroupConfig(name="net", vcpu=1, ram_bytes=256 * MiB, warm=True, warm_spare=0,
                      network=NetworkConfig(mode="isolated", range=IPv4Network("10.77.0.0/29")))


@implementer(IAdoption)
class AdoptingAgent(FakeAgent):
    """An agent connection that adopts identities (recorded) and prepares for it."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.identities: list[GuestIdentity] = []
        self.preparations = 0

    async def adopt(self, identity: GuestIdentity) -> None:
        if not self.connected:
            raise AgentUnavailable("not connected")
        self.identities.append(identity)

    async def prepare_adoption(self) -> None:
        self.preparations += 1


class IdentityAdoptionTests(SynchronousTestCase):
    def test_is_an_adoption(self) -> None:
        verifyObject(ICloneAdoption, IdentityAdoption(lambda: 0))
        verifyObject(IAdoption, AdoptingAgent("/a"))

    def test_adopts_a_new_identity_once_the_agent_answers(self) -> None:
        """The clone's hostname, the clock, fresh entropy and machine-id, and its NIC, once its agent answers."""
        agent = AdoptingAgent("/a")
        record = NodeRecord(hostname="warm-3", hostgroup="warm", ram_bytes=256 * MiB, cpus=1,
                            created_at=datetime.now(timezone.utc))
        net = NetSpec(tap="vmt1", mac="52:54:00:0A:00:05", address="10.77.0.6/30", gateway="10.77.0.5")
        adoption = IdentityAdoption(lambda: 1_700_000_000_000_000_000, urandom=lambda n: bytes(range(n)))
        d = adoption.adopt(record, net, agent)
        self.assertNoResult(d)
        agent.ready()
        self.successResultOf(d)
        [identity] = agent.identities
        self.assertEqual((identity.hostname, identity.wall_clock_ns), ("warm-3", 1_700_000_000_000_000_000))
        self.assertEqual(identity.net, GuestNet(mac="52:54:00:0a:00:05", address="10.77.0.6/30", gateway="10.77.0.5"))
        self.assertEqual(len(identity.entropy), 64)
        self.assertEqual(len(identity.machine_id), 32)
        self.successResultOf(adoption.adopt(evolve(record, hostname="warm-4"), None, agent))
        self.assertIsNone(agent.identities[1].net)

    def test_prepare(self) -> None:
        agent = AdoptingAgent("/a")
        self.successResultOf(IdentityAdoption(lambda: 0).prepare(agent))
        self.assertEqual(agent.preparations, 1)


class CloningTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.make(GROUPS)

    def make(self, groups: tuple[HostGroupConfig, ...]) -> None:
        state_dir = temp_dir(self)
        self.harness = FleetHarness(state_dir, groups=groups)
        self.store = TemplateStore(self.harness.reactor, state_dir, os.path.join(state_dir, "shm"), 1 << 30)
        self.adoption = FakeAdoption(self.harness)
        self.fallbacks = self.harness.metrics.warm_fallbacks
        self.clones = self.harness.metrics.clones
        self.parts = self.harness.parts
        self.fleet = fleet_of(self.parts, self.store, self.adoption)

    def start(self) -> None:
        """Start the fleet (once): its start builds the warm group's template unless there is one."""
        if not self.fleet.running:
            self.fleet.startService()
            fleet = self.fleet
            self.addCleanup(lambda: fleet.stopService() if fleet.running else None)

    def template(self) -> Template:
        """The warm group's template, built (its files written) before any create."""
        key = template_key(GROUPS[0], 256 * MiB, 1, self.harness.image, self.harness.driver)

        async def build(template: Template) -> None:
            for path in (template.disk, template.device_state, template.ram_file):
                with open(path, "wb") as f:
                    f.write(b"x")

        return self.successResultOf(Deferred.fromCoroutine(
            self.store.get(key, self.harness.image.kernel.path, self.harness.image.initrd.path, build)))

    def create(self, group: str = "warm", request: CreateRequest | None = None) -> Deferred[Any]:
        self.start()
        return Deferred.fromCoroutine(self.fleet.create(group, request or CreateRequest(), Wait.NONE, 60))

    def machine(self) -> FakeMachine:
        return self.harness.driver.machines[-1]

    def test_clone_disk_is_a_copy(self) -> None:
        """
        Clones' disks are copies of the template's one empty overlay: no
        disk is made for the second clone; one removed is made again.
        """
        template = self.template()
        self.successResultOf(self.create())
        made = list(self.harness.disks.created)
        record = self.successResultOf(self.create())
        self.assertEqual(self.harness.disks.created, made)
        self.assertTrue(os.path.isfile(self.fleet._registry.find(record.hostname).paths.disk))
        os.unlink(template.empty_overlay)
        self.successResultOf(self.create())
        self.assertEqual(len(self.harness.disks.created), len(made) + 1)
        self.assertTrue(os.path.isfile(template.empty_overlay))
        self.assertEqual([name for name in os.listdir(template.directory) if name.startswith("empty.qcow2.")], [])

    def test_adoption_fake_is_an_adoption(self) -> None:
        verifyObject(ICloneAdoption, self.adoption)

    def test_clone(self) -> None:
        """
        The node's disk lies over the frozen disk, its VM maps the RAM file
        private and waits; the agent is connected before the state is loaded;
        the identity is adopted after the load and before anything is asked
        of the guest; the record says where it came from.
        """
        template = self.template()
        record = self.successResultOf(self.create())
        spec = self.machine().spec
        self.assertEqual((spec.memory.path if spec.memory else None, spec.memory.shared if spec.memory else None),
                         (template.ram_file, False))
        self.assertTrue(spec.defer_incoming)
        # A copy of the template's empty overlay over the frozen disk (made by the first clone: this build made none).
        self.assertEqual(empty_overlay_base(self.harness.disks, template), template.disk)
        with open(spec.disk, "rb") as disk, open(template.empty_overlay, "rb") as empty:
            self.assertEqual(disk.read(), empty.read())
        self.assertTrue(self.harness.agents[-1].started)
        self.assertEqual(self.adoption.adopted, [(record.hostname, ["load_device_state"], [])])
        stored = self.harness.store.load_all()[0][0]
        self.assertEqual((stored.frozen_disk, stored.clone_memory, stored.status), (template.disk, True, Status.RUNNING))
        self.assertEqual((self.fallbacks, self.clones), ([], [("warm", 0.0)]))

    def test_wait_agent_is_the_adoption(self) -> None:
        """
        ``wait=agent`` of a clone is over once its adoption is: its agent answered that, in the session
        it uses from then on, so no health request is waited for (this agent never answers one).
        """
        self.template()
        self.start()
        record = self.successResultOf(Deferred.fromCoroutine(
            self.fleet.create("warm", CreateRequest(), Wait.AGENT, 60)))
        self.assertEqual(self.adoption.adopted[0][0], record.hostname)
        self.assertFalse(self.harness.agents[-1].is_ready)

    def test_provisioned_after_adoption(self) -> None:
        """A clone's guest gets its secrets only once its identity is adopted, even if its agent answered before."""
        self.template()
        self.harness.secrets.put("token", b"s3cret")
        adopt = self.adoption.adopt

        def adopt_after_ready(record: NodeRecord, net: NetSpec | None, agent: IGuestConnection) -> Deferred[None]:
            self.harness.agents[-1].ready()
            return adopt(record, net, agent)

        self.adoption.adopt = adopt_after_ready  # type: ignore[method-assign]
        self.successResultOf(self.create(request=CreateRequest(secrets=("token",))))
        self.assertEqual(self.adoption.adopted[0][2], [])
        self.assertEqual([header["op"] for header, _ in self.harness.agents[-1].requests], ["secrets"])

    def test_load_fails_boots_cold(self) -> None:
        """
        A device state that does not load: the same node boots cold, counted,
        the template is dropped and the next one is built at once.
        """
        template = self.template()
        original = self.harness.driver.start

        def start(spec: Any, log_path: str | None = None) -> Any:
            d = original(spec, log_path)
            if spec.defer_incoming:
                clone = self.machine()

                def load(path: str) -> Deferred[None]:
                    # As QEMU does: it exits on a state it cannot load.
                    clone.end(1, stderr="Received unknown capability")
                    return fail(HypervisorError("loading the VM state: the VM process exited with status 1"))

                clone.load_device_state = load  # type: ignore[method-assign]
            return d

        self.harness.driver.start = start  # type: ignore[method-assign]
        record = self.successResultOf(self.create())
        self.assertEqual(len(self.harness.driver.machines), 3)
        first, rebuild, second = self.harness.driver.machines
        self.assertIsNotNone(first._exit)
        self.assertTrue(rebuild.spec.memory is not None and rebuild.spec.memory.shared)
        self.assertEqual(self.store.builds, 2)
        self.assertIsNone(second.spec.memory)
        self.assertEqual(self.harness.disks._made[second.spec.disk][0], self.harness.image.rootfs.path)
        self.assertEqual((self.fallbacks, self.clones), ([("warm", "load_failed")], []))
        self.assertEqual(record.status, "Running")
        self.assertFalse(os.path.exists(template.ram_file))
        stored = self.harness.store.load_all()[0][0]
        self.assertEqual((stored.frozen_disk, stored.clone_memory), ("", False))

    def test_killed_clone(self) -> None:
        """
        A clone whose QEMU is killed (SIGKILL, from outside) while it loads:
        the node boots cold, counted as ``clone_killed``; the template is not
        to blame, so it is kept and the next create is a clone of it.
        """
        template = self.template()
        original = self.harness.driver.start
        killed: list[FakeMachine] = []

        def start(spec: Any, log_path: str | None = None) -> Any:
            d = original(spec, log_path)
            if spec.defer_incoming and not killed:
                clone = self.machine()
                killed.append(clone)

                def load(path: str) -> Deferred[None]:
                    clone.end(None, 9)
                    return fail(HypervisorError("loading the VM state: QMP connection lost"))

                clone.load_device_state = load  # type: ignore[method-assign]
            return d

        self.harness.driver.start = start  # type: ignore[method-assign]
        record = self.successResultOf(self.create())
        self.assertEqual(record.status, "Running")
        self.assertEqual(self.store.builds, 1)
        self.assertTrue(os.path.exists(template.ram_file))
        self.assertEqual(self.fallbacks, [("warm", "clone_killed")])
        self.successResultOf(self.create())
        self.assertEqual(len(self.clones), 1)
        self.assertTrue(self.machine().spec.defer_incoming)

    def test_removed_is_rebuilt(self) -> None:
        """
        A template whose files were removed under the daemon: the create boots
        cold, counted, and the warm group's next template is built in the
        background; the create after that is a clone of it.
        """
        template = self.template()
        self.start()
        os.unlink(template.device_state)
        record = self.successResultOf(self.create())
        self.assertEqual(self.fallbacks, [("warm", "missing")])
        self.assertEqual(self.store.builds, 2)
        rebuild, cold = self.harness.driver.machines
        self.assertTrue(rebuild.spec.memory is not None and rebuild.spec.memory.shared)
        self.assertIsNone(cold.spec.memory)
        self.assertEqual(record.status, "Running")
        self.assertNotEqual(rebuild.spec.memory.path if rebuild.spec.memory else None, template.ram_file)

    def test_adoption_fails_boots_cold(self) -> None:
        """A clone that cannot adopt its identity is never used: the node boots cold."""
        self.template()
        self.adoption.fail = RuntimeError("no reseed")
        self.successResultOf(self.create())
        self.assertIsNone(self.machine().spec.memory)
        self.assertEqual(self.fallbacks, [("warm", "adopt_failed")])

    def test_cold_group(self) -> None:
        """A group that is not warm boots as always, without asking for a template."""
        self.template()
        self.successResultOf(self.create("cold"))
        self.assertIsNone(self.machine().spec.memory)
        self.assertEqual((len(self.harness.driver.machines), self.store.builds, self.fallbacks), (1, 1, []))

    def test_network_needs_adoption(self) -> None:
        """A networked clone must adopt its MAC and address: without an adoption, its node boots cold."""
        self.make((NET,))
        self.fleet = fleet_of(self.parts, self.store)
        self.successResultOf(self.create("net"))
        self.assertIsNone(self.machine().spec.memory)
        self.assertIsNotNone(self.machine().spec.net)
        self.assertIn(("net", "network"), self.fallbacks)

    def test_network_template(self) -> None:
        """With an adoption, a networked group's template has the nodes' network device, reaching nothing."""
        self.make((NET,))
        self.create("net")
        vm = self.machine()
        self.assertIsNone(vm.spec.net)
        self.assertEqual(vm.spec.loose_nic, "02:00:00:00:00:01")
        self.assertTrue(vm.spec.memory is not None and vm.spec.memory.shared)

    def test_adoption_times_out(self) -> None:
        """A clone whose agent never answers its adoption is not used: the node boots cold."""
        self.template()
        self.adoption.adopt = lambda record, net, agent: Deferred()  # type: ignore[method-assign, assignment]
        d = self.create()
        self.assertNoResult(d)
        self.harness.reactor.advance(30)
        self.successResultOf(d)
        self.assertIsNone(self.machine().spec.memory)
        self.assertEqual(self.fallbacks, [("warm", "adopt_failed")])

    def test_built_at_start(self) -> None:
        """The fleet's start builds the template of each warm group (its RAM and vCPUs), in the background."""
        self.start()
        self.assertEqual(self.store.builds, 1)
        vm = self.machine()
        self.assertEqual((vm.spec.ram_bytes, vm.spec.vcpus), (256 * MiB, 1))
        self.assertTrue(vm.spec.memory is not None and vm.spec.memory.shared)
        self.successResultOf(self.fleet.recovered())
        # Stopped while it builds: its VM is killed.
        self.successResultOf(self.fleet.stopService())
        self.assertIsNotNone(vm._exit)

    def test_build_fails_boots_cold(self) -> None:
        """
        Without a template, the first create builds one: its VM maps the RAM
        file shared; a guest that never answers fails the build (its VM
        killed) and the node boots cold, counted.
        """
        d = self.create()
        self.assertNoResult(d)
        template_vm = self.machine()
        self.assertEqual(template_vm.spec.memory.shared if template_vm.spec.memory else None, True)
        self.harness.reactor.advance(120)
        self.successResultOf(d)
        self.assertIsNotNone(template_vm._exit)
        self.assertIsNone(self.machine().spec.memory)
        self.assertEqual(self.fallbacks, [("warm", "build_failed")])
        self.assertEqual(os.listdir(os.path.join(self.store.directory)), [])

    def test_restore_of_a_clone(self) -> None:
        """A suspended clone is restored with the same memory block name; a relaunch boots it plain."""
        self.template()
        record = self.successResultOf(self.create(request=CreateRequest(persistent=True)))
        self.harness.agents[-1].ready()
        self.successResultOf(Deferred.fromCoroutine(self.fleet.snapshots.suspend(record.hostname)))
        self.successResultOf(Deferred.fromCoroutine(self.fleet.snapshots.restore(record.hostname, Wait.NONE, 60)))
        spec = self.machine().spec
        self.assertEqual((spec.memory.path if spec.memory else "none", spec.incoming is not None), (None, True))
        self.machine().end(0)
        self.successResultOf(Deferred.fromCoroutine(self.fleet.lifecycle.relaunch(record.hostname, Wait.NONE, 60)))
        self.assertIsNone(self.machine().spec.memory)
        stored = self.harness.store.load_all()[0][0]
        self.assertEqual((bool(stored.frozen_disk), stored.clone_memory), (True, False))


class OrphanTests(SynchronousTestCase):
    def test_killed(self) -> None:
        """A template's VM left running by a daemon that died during the build is killed at the next start."""
        state_dir = self.mktemp()
        harness = FleetHarness(state_dir, groups=GROUPS)
        store = TemplateStore(harness.reactor, state_dir, os.path.join(state_dir, "shm"), 1 << 30)
        fleet = fleet_of(harness.parts, store)
        fleet.startService()
        d = Deferred.fromCoroutine(fleet.create("warm", CreateRequest(), Wait.NONE, 60))
        self.assertNoResult(d)
        template_vm = harness.driver.machines[-1]
        self.assertTrue(template_vm.spec.qmp_socket.startswith(store.directory))
        harness.crash()
        later = fleet_of(harness.parts, TemplateStore(harness.reactor, state_dir, os.path.join(state_dir, "shm"), 1 << 30))
        later.startService()
        self.successResultOf(later.recovered())
        self.assertIsNotNone(template_vm._exit)
        self.assertIn(template_vm.pid, harness.driver.killed_orphans)
        # The first run's create carries on in this test only (its process is "dead"); its end does not matter.
        d.addErrback(lambda failure: None)
        harness.reactor.advance(120)
        self.successResultOf(later.stopService())
        self.successResultOf(fleet.stopService())
