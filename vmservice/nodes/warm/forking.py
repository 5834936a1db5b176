# -*- test-case-name: tests.nodes.warm.test_forking -*-
"""
A hot fork: N new nodes that continue from a running node's memory and disk
at one instant, each with an identity of its own, while the parent goes on
after a short pause.

The parent is paused; its disk is moved to a *fork directory*
(``<state_dir>/forks/<parent>.<random>/disk.qcow2``, then read-only: the
*frozen disk* of the fork) and its VM switched to a new overlay over it at
its usual place (:meth:`IMachine.snapshot_disk`); its full state is saved to
a new file (0600) in the daemon's own directory of the templates' tmpfs
(:func:`.fork_memory.fork_state`); then it runs on.  Each child gets its own
overlay over the frozen disk (a copy of one empty overlay made for all of
them), starts in ``-incoming defer`` with the parent's
machine shape, connects its agent, loads the state, adopts its identity and
runs; the children start together.  The state file is deleted once every child loaded it (or the fork
failed); a failure removes the children made so far, and the parent always
runs on.  The frozen disk is kept while a record names it
(:attr:`NodeRecord.forked_disks`).
"""

from __future__ import annotations

import os
import secrets
import shutil
from datetime import datetime, timezone

from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger
from twisted.python.failure import Failure

from ...errors import BadRequest, Conflict, Internal
from ...hypervisors.base import HypervisorError, IMachine
from ...private_files import private_directory
from ..blocking import Blocking
from ..events import EventType
from ..launch import ForkChild
from ..model import MAX_FORK_COUNT, NodeRecord, Status, unique, visible
from ..new_nodes import NewNodes
from ..operation import drive, failure_of, settled
from ..paths import discard
from ..readiness import wait_for_guest
from ..room import room_for
from ..runtime import NodeRuntime
from ..warm_port import Forked, ForkRequest
from .adoption import ICloneAdoption, prepare_children
from .clone_disk import make_empty_overlay
from .cloning import ADOPT_TIMEOUT, StepTimes
from .fork_files import file_size, forks_directory, switch_disk
from .fork_memory import fork_state
from .memory_fork import MemoryFork

log = Logger()

class Forking:
    """
    :param new: what makes the children (registry, parts, catalog, admission).
    :param blocking: runs the memory file's copy off the reactor.
    :param adoption: gives each child an identity of its own; ``None``:
        this daemon cannot fork.
    """

    def __init__(self, new: NewNodes, blocking: Blocking, adoption: ICloneAdoption | None = None) -> None:
        self._new = new
        self._parts = new.parts
        self._blocking = blocking
        self._adoption = adoption

    async def fork(self, hostname: str, request: ForkRequest) -> Forked:
        """
        Fork the running node ``hostname`` into ``request.count`` children.

        :raise BadRequest: (``limit_exceeded``) a count out of range.
        :raise InsufficientMemory: the children do not fit in the memory
            budget (:mod:`.admission`); the parent was not touched.
        :raise NotFound: no such node.
        :raise Conflict: (``paused``) the node is paused; (``not_running``)
            stopped or suspended;
            (``busy``) another operation runs on it; (``not_forkable``) it
            has host PCI devices.
        """
        if not 1 <= request.count <= MAX_FORK_COUNT:
            raise BadRequest(f"count must be between 1 and {MAX_FORK_COUNT}", code="limit_exceeded")
        parent = await settled(self._new.registry, hostname)
        parent.phase.begin("fork")
        try:
            with room_for(f"the fork of node {hostname!r}"):
                return await self._new.admission.admitted(
                    self._fork(parent, request), parent.record.ram_bytes, request.count, parent.record.hostgroup)
        finally:
            parent.phase.finish()

    async def _fork(self, parent: NodeRuntime, request: ForkRequest) -> Forked:
        hostname = parent.hostname
        machine = parent.machine
        if parent.record.status == Status.PAUSED:
            raise Conflict(f"node {hostname!r} is paused", code="paused")
        if parent.record.status != Status.RUNNING or machine is None:
            raise Conflict(f"node {hostname!r} is {parent.record.status.value}, not Running", code="not_running")
        if parent.record.pci_devices:
            raise Conflict(f"node {hostname!r} has host PCI devices passed through: it cannot be forked",
                           code="not_forkable")
        group = self._new.catalog.group(parent.record.hostgroup)
        adoption = self._adoption
        if adoption is None:
            raise Conflict("this daemon cannot give forked nodes identities of their own", code="not_forkable")
        if await drive("fork", hostname, machine.run_state(), machine) != "running":
            raise Conflict(f"node {hostname!r} is paused", code="paused")
        config = self._parts.config
        directory = os.path.join(forks_directory(config.state_dir), f"{hostname}.{secrets.token_hex(4)}")
        state = fork_state(config.state_dir, config.templates_tmpfs_dir)
        private_directory(os.path.dirname(state))
        frozen_disk = os.path.join(directory, "disk.qcow2")
        empty = os.path.join(directory, "empty.qcow2")
        await prepare_children(hostname, parent.agent, adoption)
        children: list[NodeRuntime] = []
        memory = await MemoryFork.begin(parent, self._parts.clock, self._blocking)
        try:
            pause = await self._freeze(parent, machine, frozen_disk, state, memory)
            await self._empty_overlay(frozen_disk, empty, group.storage_size)
            children.extend(self._child(parent, group.name, request, memory) for _ in range(request.count))
            # The children start together; the first failure is the fork's (all of them are then removed).
            started = await DeferredList(
                [Deferred.fromCoroutine(self._start(child, empty, state, adoption, memory))
                 for child in children],
                consumeErrors=True,
            )
            for _, result in started:
                if isinstance(result, Failure):
                    result.raiseException()
        except BaseException as error:
            for child in reversed(children):
                await child.remove()
            if frozen_disk not in parent.record.forked_disks:
                shutil.rmtree(directory, ignore_errors=True)
            failure = failure_of("fork", hostname, machine, error)
            if failure is error:
                raise
            raise failure from error
        finally:
            size = file_size(state)
            discard(state)
            discard(empty)
            memory.end(parent, [node.record for node in self._new.registry.all()])
        log.info("forked node {hostname} into {children} after a pause of {pause:.3f} s (state {size:.0f} MB)",
                 hostname=hostname, children=", ".join(c.hostname for c in children), pause=pause, size=size / 1e6)
        return Forked(tuple(visible(child.record) for child in children), pause)

    async def _freeze(self, parent: NodeRuntime, machine: IMachine, frozen_disk: str, state: str,
                      memory: MemoryFork) -> float:
        """
        Pause the parent, freeze its disk at ``frozen_disk`` (it runs on over
        a new overlay), save its state to ``state``, let it run: the pause's
        seconds.  The parent runs on whatever fails.
        """
        hostname = parent.hostname
        clock = self._parts.clock
        # In the record before the pause: a daemon that dies from here on leaves a frozen parent that the
        # next start lets run again (see .recovery), not one it takes for paused or, saved, for gone.
        parent.set(parent.record.status, forking=True)
        began = clock.seconds()
        try:
            await drive("fork", hostname, machine.pause(), machine)
        except BaseException:
            parent.set(parent.record.status, forking=False)
            raise
        try:
            # The record first: a crash after the switch must not leave the frozen disk unnamed (collected).
            before = parent.record.forked_disks
            parent.set(parent.record.status, forked_disks=(*before, frozen_disk))
            try:
                await switch_disk(parent, machine, frozen_disk, self._parts.disks,
                                  self._new.catalog.group(parent.record.hostgroup).storage_size)
            except BaseException:
                parent.set(parent.record.status, forked_disks=before)
                raise
            os.chmod(frozen_disk, 0o400)
            await drive("fork", hostname, memory.save(machine, parent.record, state), machine)
        finally:
            try:
                await machine.resume()
            except Exception:
                log.failure("resuming node {hostname} after a fork", hostname=hostname)
            pause = clock.seconds() - began
            if parent.machine is machine:
                parent.set(parent.record.status, forking=False)
        return pause

    def _child(self, parent: NodeRuntime, group_name: str, request: ForkRequest, memory: MemoryFork) -> NodeRuntime:
        """Record and register one child (its status ``Creating``)."""
        parts = self._parts
        group = self._new.catalog.group(group_name)
        lease = parts.addressing.lease(group, None, self._new.registry.addresses())
        record = memory.child(NodeRecord(
            hostname=self._new.next_hostname(group),
            hostgroup=group.name,
            ram_bytes=parent.record.ram_bytes,
            cpus=parent.record.cpus,
            created_at=datetime.now(timezone.utc).replace(microsecond=0),
            tags=unique(request.tags),
            persistent=parent.record.persistent if request.persistent is None else request.persistent,
            ip=str(lease.ip) if lease is not None else "",
            image=parent.record.image,
            metrics_channel=parent.record.metrics_channel,
            bulk_channel=parent.record.bulk_channel,
            tunnel_ports=parent.record.tunnel_ports,
            vsock_channel=parent.record.vsock_channel,
            frozen_disk=parent.record.frozen_disk,
            clone_memory=parent.record.clone_memory,
            forked_disks=parent.record.forked_disks,
            kernel=parent.record.kernel,
            initrd=parent.record.initrd,
        ))
        node = self._new.make(record)
        parts.store.save(record)
        node.announce(EventType.CREATED)
        return node

    async def _empty_overlay(self, frozen_disk: str, path: str, group_size: int) -> None:
        """
        One empty overlay over the frozen disk, of its size: every child's disk
        is a copy of it (the same bytes, as a clone's is of its template's), so
        N children cost one ``qemu-img`` process, not N at once.
        """
        info = self._parts.disks.info(frozen_disk)
        size = info.size_bytes if info is not None else group_size
        await make_empty_overlay(self._parts.disks, frozen_disk, path, size)

    async def _start(self, node: NodeRuntime, empty_overlay: str, state: str, adoption: ICloneAdoption,
                     memory: MemoryFork) -> None:
        """Network, disk and VM of a child, its state loaded and its identity adopted; then it runs."""
        parts = self._parts
        steps = StepTimes(parts.clock)
        net = await parts.addressing.attach(node.record)
        shutil.copyfile(empty_overlay, node.paths.disk)
        kernel, initrd = node.record.kernel, node.record.initrd
        if not kernel:
            image = self._new.catalog.image(self._new.catalog.group(node.record.hostgroup), node.record.image)
            kernel, initrd = image.kernel.path, image.initrd.path
        machine = await node.spawn(ForkChild(kernel, initrd, state, memory.memory()), net)
        try:
            # As a clone's: QEMU answers once its sockets exist, and the agent's is connected before the load.
            await machine.run_state()
            agent = node.connect_agent(adopting=True)
            steps.done("disk and spawn")
            await memory.load(machine, state)
            steps.done("load")
            adopted = adoption.adopt(node.record, net, agent)
            await wait_for_guest(parts.clock, machine, adopted, ADOPT_TIMEOUT)
            steps.done("adopt")
        except HypervisorError as error:
            raise Internal(f"node {node.hostname!r} could not be started from its parent's state: {error}",
                           code="fork_failed") from None
        except Exception as error:
            raise Internal(f"node {node.hostname!r} could not adopt its identity: {error}",
                           code="fork_failed") from None
        log.info("node {hostname} forked: {steps}", hostname=node.hostname, steps=steps)
        node.adopted()
        node.set(Status.RUNNING)
        node.started()


__all__ = ["Forking"]
