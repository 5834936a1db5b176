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

- **Starting**: its overlay is made and its QEMU started; it is *ready*
  once QEMU answers its monitor (the connection stays open for the create).
- **Ready**: waiting; one create :meth:`takes <SparePhase.take>` it (only
  one: the next create takes another ready spare of the pool, or, finding
  none, clones the usual way).
- **Taken**: a create hands it over to its node (the node's record names
  the spare's QMP socket first, then the disk gets the node's name as a
  second link, the sockets and the console file are renamed into the
  node's directory) and loads the template's state into it.  Its directory
  stays (QEMU opened the disk by the spare's name: a fork switches the disk
  by that name) and is removed with the node.
- **Killed**: its template went (dropped, replaced, the daemon stops), its
  start or its hand-over failed, or its QEMU ended on its own: its QEMU is
  killed and its directory removed.  Nothing leaves this state.

Starting and Ready spares hold memory (admission counts them, see
:meth:`SparePhase.holds`); a Taken one is its node's.
"""

from __future__ import annotations

import os
import shutil
from typing import Protocol

from attrs import define
from automat import TypeMachine, TypeMachineBuilder
from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger

from ...hypervisors.base import IHypervisor, IMachine, MachineExit, MachineSpec, NetSpec, RamBacking
from ...storage.interfaces import IDisks
from .clone_disk import make_clone_disk
from ..paths import NodePaths
from .template_files import Template

log = Logger()

#: How a spare's directory's name begins.
SPARE_PREFIX = "spare-"
#: How a networked spare's tap's name begins (QEMU makes it, and it goes with QEMU).
SPARE_TAP_PREFIX = "vmp"
#: The MAC on a networked spare's command line (the loaded state and then the adoption decide the guest's).
SPARE_MAC = "02:00:00:00:00:02"


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


class Spare:
    """
    One spare VM of a template.

    :param template: the template it is a clone of.
    :param directory: its own directory (made by :meth:`start`).
    :param tap: the tap its QEMU makes and holds (a networked template's,
        for a bridged group: renamed to the node's at the hand-over); ``None``
        for none.
    :ivar machine: its QEMU once started.
    :ivar phase: what it is (see the module's docstring).
    :ivar files: its files, named as a node's are in its directory.
    """

    def __init__(self, template: Template, directory: str, tap: str | None = None) -> None:
        self.template = template
        self.directory = directory
        self.tap = tap
        self.files = NodePaths.of(directory)
        self.machine: IMachine | None = None
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
            memory=RamBacking(self.template.ram_file, shared=False),
            defer_incoming=True,
            net=NetSpec(self.tap, SPARE_MAC, "", "") if self.tap else None,
        )

    async def start(self, driver: IHypervisor, disks: IDisks) -> bool:
        """Make its disk and start its QEMU: whether it is ready (it is killed on any failure)."""
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
        try:
            os.replace(self.files.qemu_log, node.qemu_log)
        except FileNotFoundError:
            pass  # QEMU wrote nothing (and a driver may keep no log)

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


__all__ = ["SPARE_MAC", "SPARE_PHASE", "SPARE_PREFIX", "SPARE_TAP_PREFIX", "Spare", "SparePhase", "is_spare_directory", "remove_spare_directory"]
