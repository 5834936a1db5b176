# -*- test-case-name: tests.nodes.warm.test_cloning -*-
"""
Starting a warm group's node as a clone of its template, and falling back
to a cold boot of the same node whenever that cannot be done.

A clone's disk is a qcow2 overlay over the template's frozen disk; its VM
maps the template's RAM file privately (``share=off``: its writes stay its
own) and waits in ``-incoming defer``; its agent socket is connected first,
then the template's device state is loaded and the guest continues where
the template was.  Before anything else reaches it (readiness, secrets,
login, userdata, the API), it adopts an identity of its own through
:class:`ICloneAdoption`.
"""

from __future__ import annotations

import os
import signal

from attrs import evolve, frozen
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from ...config import HostGroupConfig
from ...guestport.guest import IGuestConnection
from ...hypervisors.base import HypervisorError, IMachine, NetSpec
from ...images.store import Image
from ..launch import Clone
from ..model import NodeRecord
from ..operation import ended
from ..paths import discard
from ..readiness import wait_for_guest
from ..runtime import NodeRuntime
from .clone_disk import make_clone_disk
from .spare import Spare
from .template_files import Template
from .template_supply import TemplateSupply, spare_count
from .templates import TemplateUnavailable

log = Logger()

#: Seconds a clone's agent has to answer and adopt its identity.
ADOPT_TIMEOUT = 30.0

#: Why a clone could not be had that dropped its template (removed under the daemon, or its state would not load).
_REBUILT = frozenset({"missing", "load_failed"})


@frozen
class Cloning:
    """
    :ivar supply: the templates and spares clones are made of (with the
        node layer's collaborators).
    """

    supply: TemplateSupply

    async def start(self, node: NodeRuntime, group: HostGroupConfig, image: Image,
                    net: NetSpec | None) -> tuple[IMachine, IGuestConnection] | None:
        """
        Start ``node`` as a clone: its VM and its (adopted) agent connection,
        or ``None`` when it must boot cold (said in the log, counted).
        """
        try:
            template = await self._template(node.record, group, image, net)
            parts = self.supply.parts
            began = parts.clock.seconds()
            templates = self.supply.templates
            assert templates is not None
            templates.clone_began(template.key)
            try:
                cloned = await self._spare_or_clone(node, group, template, net)
            finally:
                # Only once no clone of it is adopting: a spare started earlier would compete with them for the CPU.
                if templates.clone_ended(template.key):
                    self.supply.replenish(group, template)
            parts.metrics.observe_clone(group.name, parts.clock.seconds() - began)
            return cloned
        except TemplateUnavailable as error:
            log.warn("node {hostname} boots cold instead of from a template: {reason}",
                     hostname=node.hostname, reason=error)
            self.supply.parts.metrics.observe_warm_fallback(group.name, error.kind)
            if error.kind in _REBUILT:
                # The warm group keeps a template ready: its next one is built now, not at its next create.
                log.info("host group {group} gets a new template in the background", group=group.name)
                Deferred.fromCoroutine(self.supply.prepare(group))
            return None

    async def _template(self, record: NodeRecord, group: HostGroupConfig, image: Image,
                        net: NetSpec | None) -> Template:
        if record.pci_devices:
            raise TemplateUnavailable("pci_devices", "a node with host PCI devices is never a clone")
        if net is not None and self.supply.adoption is None:
            raise TemplateUnavailable("network", "a clone with a network must adopt its own MAC and address, "
                                                 "and this daemon has no adoption")
        return await self.supply.get(group, record.ram_bytes, record.cpus, image)

    async def _spare_or_clone(self, node: NodeRuntime, group: HostGroupConfig, template: Template,
                              net: NetSpec | None) -> tuple[IMachine, IGuestConnection]:
        """Clone ``node`` from the template's ready spare VM when its group takes spares, else as usual."""
        templates = self.supply.templates
        spare = templates.take_spare(template) if templates is not None and spare_count(group) else None
        if spare is not None:
            try:
                return await self._from_spare(node, template, spare, net)
            except Exception as error:
                log.warn("node {hostname} could not take spare VM {spare}, cloned the usual way: {error}",
                         hostname=node.hostname, spare=os.path.basename(spare.directory), error=error)
        return await self._clone(node, template, net)

    async def _from_spare(self, node: NodeRuntime, template: Template, spare: Spare,
                          net: NetSpec | None) -> tuple[IMachine, IGuestConnection]:
        """
        Hand ``spare`` over to ``node``: its record first (naming the spare's
        QMP socket, so a crash from here on leaves a VM the next start
        recognizes), then the files and the spare's agent connection, then
        load (unless the spare did) and adopt as any clone.  A failure kills
        the spare and leaves nothing of it.
        """
        steps = StepTimes(self.supply.parts.clock)
        machine = spare.machine
        assert machine is not None
        driver = await self.supply.parts.driver.get()
        tapped = False
        try:
            node.set(node.record.status, frozen_disk=template.disk, clone_memory=True,
                     started_qmp=spare.files.qmp, pid=machine.pid, kernel=template.kernel,
                     initrd=template.initrd, hypervisor=driver.description, metrics_channel=True,
                     bulk_channel=True, vsock_channel=template.key.vsock, tunnel_ports=template.key.tunnel_ports)
            spare.hand_over(node.paths)
            if spare.tap is not None:
                tapped = True
                await self.supply.parts.addressing.take_tap(node.record, spare.tap)
            warmed = spare.take_agent()
            steps.done("hand over")
            if warmed is not None:
                agent = node.keep_agent(warmed)
            else:
                agent = node.connect_agent(adopting=True)
            if not spare.loaded:
                await machine.load_device_state(template.device_state)
                steps.done("load")
            await self._adopt(node, machine, net, agent)
            steps.done("adopt")
        except BaseException:
            await self._undo_spare(node, spare, tapped)
            raise
        node.own(machine)
        node.adopted()
        log.info("node {hostname} cloned from spare VM {spare}: {steps}", hostname=node.hostname,
                 spare=os.path.basename(spare.directory), steps=steps)
        return machine, agent

    async def _adopt(self, node: NodeRuntime, machine: IMachine, net: NetSpec | None,
                     agent: IGuestConnection) -> None:
        adoption = self.supply.adoption
        if adoption is not None:
            adopted = adoption.adopt(node.record, net, agent)
            await wait_for_guest(self.supply.parts.clock, machine, adopted, ADOPT_TIMEOUT)

    async def _undo_spare(self, node: NodeRuntime, spare: Spare, tapped: bool) -> None:
        """
        End the spare and its connection, remove the names it took in the
        node's directory, and give the node a tap of its own again when its
        own was replaced by the spare's (which went with the spare's QEMU).
        """
        agent, node.agent = node.agent, None
        if agent is not None:
            await agent.stop()
        await spare.kill()
        paths = node.paths
        for path in (paths.agent, paths.qmp, paths.metrics, paths.bulk, *paths.tunnels):
            discard(path)
        self.supply.parts.disks.remove(paths.disk)
        node.set(node.record.status, frozen_disk="", clone_memory=False, started_qmp="", pid=None)
        if tapped:
            await self.supply.parts.addressing.detach(node.record)
            await self.supply.parts.addressing.attach(node.record)

    async def _clone(self, node: NodeRuntime, template: Template,
                     net: NetSpec | None) -> tuple[IMachine, IGuestConnection]:
        parts = self.supply.parts
        steps = StepTimes(parts.clock)
        node.record = evolve(node.record, frozen_disk=template.disk, clone_memory=True)
        try:
            await make_clone_disk(template, parts.disks, node.paths.disk)
            steps.done("disk")
            machine = await node.spawn(Clone(template), net)
            steps.done("spawn")
        except Exception as error:
            await self._undo(node)
            raise TemplateUnavailable("load_failed", f"the clone could not be started: {error}") from None
        # Not the node's VM until it is loaded: a clone that exits on a bad state is no news (the node boots cold).
        node.take_machine()
        try:
            # QEMU answers QMP once its sockets exist: the agent's is then connected at the first attempt,
            # before the guest runs (a port opened after the load costs the guest agent a poll interval).
            await machine.run_state()
            steps.done("qmp")
            agent = node.connect_agent(adopting=True)
            await machine.load_device_state(template.device_state)
            steps.done("load")
        except HypervisorError as error:
            killed = _killed(machine)
            await self._undo(node, machine)
            if killed:
                # Killed from outside (kill -9, the OOM killer): the template is not to blame and is kept.
                raise TemplateUnavailable("clone_killed", f"the clone's VM was killed: {error}") from None
            if self.supply.templates is not None:
                # Broken: the next create builds it again.
                self.supply.templates.discard(template.key, only=template)
            raise TemplateUnavailable("load_failed", f"the template's state could not be loaded: {error}") from None
        try:
            await self._adopt(node, machine, net, agent)
            steps.done("adopt")
        except Exception as error:
            await self._undo(node, machine)
            raise TemplateUnavailable("adopt_failed", f"the clone could not adopt its identity: {error}") from None
        node.own(machine)
        node.adopted()
        log.info("node {hostname} cloned: {steps}", hostname=node.hostname, steps=steps)
        return machine, agent

    async def _undo(self, node: NodeRuntime, machine: IMachine | None = None) -> None:
        """End the clone's VM and connection and remove its disk; the node then boots cold."""
        agent, node.agent = node.agent, None
        if agent is not None:
            await agent.stop()
        machine = node.take_machine() or machine
        if machine is not None:
            await machine.kill()
        self.supply.parts.disks.remove(node.paths.disk)
        node.record = evolve(node.record, frozen_disk="", clone_memory=False, pid=None)


def _killed(machine: IMachine) -> bool:
    """Whether ``machine`` has ended, killed by SIGKILL (from outside: the daemon had not killed it yet)."""
    how = ended(machine)
    return how is not None and how.signal == signal.SIGKILL


class StepTimes:
    """The milliseconds each step of starting a node from saved state took, for the log."""

    def __init__(self, clock: IReactorTime) -> None:
        self._clock = clock
        self._last = clock.seconds()
        self._steps: list[str] = []

    def done(self, step: str) -> None:
        now = self._clock.seconds()
        self._steps.append(f"{step} {(now - self._last) * 1000:.0f} ms")
        self._last = now

    def __str__(self) -> str:
        return ", ".join(self._steps)


__all__ = ["ADOPT_TIMEOUT", "Cloning", "StepTimes"]
