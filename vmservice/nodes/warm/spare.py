# -*- test-case-name: tests.nodes.warm.test_spare -*-
"""
A template's spare VM: a clone's QEMU started ahead of the create that
needs it (diagram: ``docs/state-machines/spare.dot``).

Theory of operation
-------------------

A clone spends its first ~0.1 s on what needs nothing of its node: making
its disk's overlay and starting a QEMU that waits in ``-incoming defer``.
A *spare* does both ahead of time.  A warm template keeps a *pool* of up to
``warm_spare`` of them (the most any group of it asks for), so as many
creates at once each take one.  They are started one at a time, after the
template is ready and again whenever no clone of the template is being made
(the creates that took spares have their identities adopted): a spare's
start never competes with the creates it serves.  Each lives in a directory
of its own inside the template's, ``<template>/spare-<random>/``, named once
and never reused (QEMU leaves its socket files behind when it exits).

- **Starting**: its overlay is made and its QEMU started; where the daemon
  gives clones identities (:class:`SpareWarmUp`), its agent is connected, the
  template's device state loaded and a throwaway identity adopted (the
  *rehearsal*): the guest runs then, and the code its node's adoption runs,
  in the guest and in QEMU, is translated already (under TCG each VM
  translates what it runs anew, and that was most of a clone's adoption).
  It is *ready* once that is done (without a warm-up: once QEMU answers its
  monitor); its monitor and agent connections stay open for the create.
- **Ready**: waiting; one create :meth:`takes <SparePhase.take>` it (only
  one: the next create takes another ready spare of the pool, or, finding
  none, clones the usual way).
- **Taken**: a create hands it over to its node (the node's record names
  the spare's QMP socket first, then the disk gets the node's name as a
  second link, the sockets and the console file are renamed into the
  node's directory, the agent connection goes to the node) and, unless the
  spare loaded it already, loads the template's state into it.  Its directory
  stays (QEMU opened the disk by the spare's name: a fork switches the disk
  by that name) and is removed with the node.
- **Killed**: its template went (dropped, replaced, the daemon stops), its
  start or its hand-over failed, or its QEMU ended on its own: its QEMU is
  killed and its directory removed.  Nothing leaves this state.

Starting and Ready spares hold memory (admission counts them, see
:meth:`SparePhase.holds`); a Taken one is its node's.  A warmed-up spare's
guest runs while it waits (idle: its agent waits on its port); its node
adopts an identity of its own at the hand-over as any clone, so nothing of
the rehearsal's identity (random generator state, host name, machine-id,
clock) outlives it.
"""

from __future__ import annotations

import os
import shutil
from typing import Protocol

from typing import Callable

from attrs import define, frozen
from automat import TypeMachine, TypeMachineBuilder
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from ...guestport.guest import IGuestConnection
from ...hypervisors.cid_file import cid_path
from ...hypervisors.base import IHypervisor, IMachine, MachineExit, MachineSpec, NetSpec, RamBacking
from ...storage.interfaces import IDisks
from .adoption import ICloneAdoption
from .clone_disk import make_clone_disk
from ..paths import NodePaths
from ..readiness import wait_for_guest
from .template_files import Template

log = Logger()

#: How a spare's directory's name begins.
SPARE_PREFIX = "spare-"
#: How a networked spare's tap's name begins (QEMU makes it, and it goes with QEMU).
SPARE_TAP_PREFIX = "vmp"
#: The MAC on a networked spare's command line (the loaded state and then the adoption decide the guest's).
SPARE_MAC = "02:00:00:00:00:02"
#: Seconds a spare's guest has to answer and adopt its throwaway identity.
REHEARSAL_TIMEOUT = 30.0


class SparePhase(Protocol):
    """The inputs of a spare's phase."""

    def ready(self) -> bool:
        """Its QEMU answers its monitor: whether it is now ready (not killed meanwhile)."""

    def take(self) -> bool:
        """A create asks for it: whether it is this create's (it was ready)."""

    def kill(self) -> bool:
        """It is to go: whether it was not killed already (its QEMU must then be killed)."""

    def holds(self) -> bool:
        """Whether it holds memory of its own (starting or ready, not yet a node's)."""

    def starting(self) -> bool:
        """Whether its QEMU is still being started (a template's spares are started one at a time)."""


@define
class SpareCore:
    """:ivar name: the spare's directory's name, for the log."""

    name: str


def _build() -> TypeMachine[SparePhase, SpareCore]:
    builder = TypeMachineBuilder(SparePhase, SpareCore)
    starting = builder.state("Starting")
    ready = builder.state("Ready")
    taken = builder.state("Taken")
    killed = builder.state("Killed")

    starting.upon(SparePhase.ready).to(ready).returns(True)
    for state in (ready, taken, killed):
        state.upon(SparePhase.ready).loop().returns(False)
    ready.upon(SparePhase.take).to(taken).returns(True)
    for state in (starting, taken, killed):
        state.upon(SparePhase.take).loop().returns(False)
    for state in (starting, ready, taken):
        state.upon(SparePhase.kill).to(killed).returns(True)
    killed.upon(SparePhase.kill).loop().returns(False)
    for state in (starting, ready):
        state.upon(SparePhase.holds).loop().returns(True)
    for state in (taken, killed):
        state.upon(SparePhase.holds).loop().returns(False)
    starting.upon(SparePhase.starting).loop().returns(True)
    for state in (ready, taken, killed):
        state.upon(SparePhase.starting).loop().returns(False)
    return builder.build()


#: The machine; calling it with a core gives a spare's phase.
SPARE_PHASE = _build()


@frozen
class SpareWarmUp:
    """
    What a spare needs to warm its guest up before it is ready (see the module's docstring).

    :ivar agents: makes an agent connection from its socket path and ``agent_transport``.
    :ivar adoption: the rehearsal's adoption.
    :ivar clock: times the rehearsal out.
    """

    agents: Callable[[str, str], IGuestConnection]
    adoption: ICloneAdoption
    clock: IReactorTime


class Spare:
    """
    One spare VM of a template.

    :param template: the template it is a clone of.
    :param directory: its own directory (made by :meth:`start`).
    :param tap: the tap its QEMU makes and holds (a networked template's,
        for a bridged group: renamed to the node's at the hand-over); ``None``
        for none.
    :ivar machine: its QEMU once started.
    :ivar agent: its agent connection once warmed up, until the hand-over.
    :ivar loaded: whether the template's state is loaded in it (it was warmed up).
    :ivar phase: what it is (see the module's docstring).
    :ivar files: its files, named as a node's are in its directory.
    """

    def __init__(self, template: Template, directory: str, tap: str | None = None) -> None:
        self.template = template
        self.directory = directory
        self.tap = tap
        self.files = NodePaths.of(directory)
        self.machine: IMachine | None = None
        self.agent: IGuestConnection | None = None
        self.loaded = False
        self.phase: SparePhase = SPARE_PHASE(SpareCore(os.path.basename(directory)))

    def spec(self) -> MachineSpec:
        """A clone's VM of the template, under the spare's own names."""
        key, files = self.template.key, self.files
        return MachineSpec(
            name=os.path.basename(self.directory),
            vcpus=key.vcpus,
            ram_bytes=key.ram_bytes,
            kernel=self.template.kernel,
            initrd=self.template.initrd,
            disk=files.disk,
            agent_socket=files.agent,
            qmp_socket=files.qmp,
            console_log=files.console,
            metrics_socket=files.metrics,
            bulk_socket=files.bulk,
            tunnel_sockets=files.tunnels[:key.tunnel_ports],
            memory=RamBacking(self.template.ram_file, shared=False),
            defer_incoming=True,
            net=NetSpec(self.tap, SPARE_MAC, "", "") if self.tap else None,
            vsock=key.vsock,
        )

    async def start(self, driver: IHypervisor, disks: IDisks, warm_up: SpareWarmUp | None = None) -> bool:
        """
        Make its disk, start its QEMU and (with ``warm_up``) warm its guest
        up: whether it is ready (it is killed on any failure).
        """
        try:
            os.makedirs(self.directory, mode=0o700)
            await make_clone_disk(self.template, disks, self.files.disk)
            if self.phase.holds():
                self.machine = machine = await driver.start(self.spec(), self.files.qemu_log)
                machine.ended.addCallback(self._ended)
            if not self.phase.holds() or self.machine is None:
                await self._end()
                return False
            await self.machine.run_state()
            if warm_up is not None and self.phase.holds():
                await self._rehearse(self.machine, warm_up)
        except Exception as error:
            log.warn("spare VM {name} of template {digest} could not be started: {error}",
                     name=os.path.basename(self.directory), digest=self.template.key.digest(), error=error)
            self.phase.kill()
            await self._end()
            return False
        if self.phase.ready():
            log.info("spare VM {name} of template {digest} is ready",
                     name=os.path.basename(self.directory), digest=self.template.key.digest())
            return True
        return False

    async def _rehearse(self, machine: IMachine, warm_up: SpareWarmUp) -> None:
        """Connect its agent, load the template's state and adopt a throwaway identity (see the module's docstring)."""
        self.agent = agent = warm_up.agents(self.files.agent, "auto" if self.template.key.vsock else "virtio-serial")
        agent.start()
        await machine.load_device_state(self.template.device_state)
        self.loaded = True
        name = os.path.basename(self.directory)
        await wait_for_guest(warm_up.clock, machine, warm_up.adoption.rehearse(name, agent), REHEARSAL_TIMEOUT)

    def take_agent(self) -> IGuestConnection | None:
        """Its agent connection, now the caller's (after :meth:`hand_over`: it reconnects to the node's socket)."""
        agent, self.agent = self.agent, None
        return agent

    def hand_over(self, node: NodePaths) -> None:
        """
        Give the spare's files the node's names (its record names
        :attr:`files`' QMP socket already): the disk a second name, the
        sockets, console and QEMU log renamed.
        """
        os.link(self.files.disk, node.disk)
        for own, theirs in ((self.files.agent, node.agent), (self.files.qmp, node.qmp),
                            (self.files.metrics, node.metrics), (self.files.bulk, node.bulk),
                            (self.files.console, node.console)):
            os.replace(own, theirs)
        tunnels = tuple(zip(self.files.tunnels[:self.template.key.tunnel_ports], node.tunnels))
        for own, theirs in ((self.files.qemu_log, node.qemu_log), (cid_path(self.files.agent), cid_path(node.agent)),
                            *tunnels):
            try:
                os.replace(own, theirs)
            except FileNotFoundError:
                pass  # QEMU wrote nothing (and a driver may keep no log); no vsock device, no CID; a fake's ports
        if self.agent is not None:
            self.agent.moved_to(node.agent)

    def kill(self) -> Deferred[None]:
        """Kill its QEMU (once started) and remove its directory; fires when done."""
        if not self.phase.kill():
            return succeed(None)
        if self.machine is None:
            return succeed(None)  # still starting: start() ends it
        return Deferred.fromCoroutine(self._end())

    def _ended(self, ended: MachineExit) -> MachineExit:
        if self.phase.holds():
            log.warn("spare VM {name} ended on its own", name=os.path.basename(self.directory))
            self.kill()
        return ended

    async def _end(self) -> None:
        agent = self.take_agent()
        if agent is not None:
            await agent.stop()
        machine = self.machine
        if machine is not None:
            try:
                await machine.kill()
            except Exception as error:
                log.info("killing spare VM {name}: {error}", name=os.path.basename(self.directory), error=error)
        shutil.rmtree(self.directory, ignore_errors=True)


def is_spare_directory(path: str) -> bool:
    """Whether ``path`` is a spare's directory (by its name)."""
    return os.path.basename(path).startswith(SPARE_PREFIX)


def remove_spare_directory(started_qmp: str) -> None:
    """Remove the directory of the spare whose QMP socket was ``started_qmp`` (its VM is gone)."""
    directory = os.path.dirname(started_qmp)
    if started_qmp and is_spare_directory(directory):
        shutil.rmtree(directory, ignore_errors=True)


__all__ = ["REHEARSAL_TIMEOUT", "SPARE_MAC", "SPARE_PHASE", "SPARE_PREFIX", "SPARE_TAP_PREFIX", "Spare", "SparePhase",
           "SpareWarmUp", "is_spare_directory", "remove_spare_directory"]
