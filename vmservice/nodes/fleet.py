# -*- test-case-name: tests.nodes.test_fleet,tests.nodes.test_lifecycle,tests.nodes.test_network -*-
"""
The fleet: every node this daemon owns, as a Twisted service.

:class:`Fleet` is the registry and the facade of the node layer: it starts
(the start-up recovery, then ``count: N``) and stops (every VM), lists and
looks up nodes, creates and deletes them, and hands out
a running node's guest (:class:`~.guest.IGuest`).  The work is done by the
modules named after it:

- :mod:`.creation`: a new node, record first, then network, disk, VM, agent;
- :mod:`.lifecycle` and :mod:`.snapshots`: pause, resume, reboot, shutdown,
  relaunch; suspend and restore (reached as :attr:`Fleet.lifecycle` and
  :attr:`Fleet.snapshots`);
- :mod:`.tagging`: reading and changing a node's tags (:attr:`Fleet.tagging`);
- :mod:`.description`: everything a user needs to see of one node;
- :mod:`.startup` and :mod:`.counts`: what becomes of the nodes on disk at
  start, and groups kept at N nodes;
- :mod:`.runtime` and :mod:`.phase`: one node at run time, its VM, agent
  connection and phase, and the one teardown path;
- :mod:`.guest_access` and :mod:`.readiness`: handing out a guest, waiting
  for it; :mod:`.addressing`: addresses and networks; :mod:`.consoles`:
  reading the consoles (:attr:`Fleet.consoles`); :mod:`.leftovers`: what no
  node names any more; :mod:`.stopping`: the daemon's stop; :mod:`.paths`:
  a node's files.

On stop every VM is stopped: ephemeral nodes are removed, persistent ones
kept ``Stopped``, suspended ones kept as they are.
"""

from __future__ import annotations

import builtins
import time
from typing import Any, Callable, Mapping

from twisted.application.service import Service
from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger

from ..config import HostGroupConfig
from ..errors import NotFound, Protected
from ..guestport.guest import AgentHealth, IGuest
from ..hypervisors.base import IVmProcesses
from ..images.store import ImageInfo
from ..observer import OneShotObserver
from .admission import Admission, Holder
from .blocking import Blocking
from .catalog import Catalog
from .consoles import Consoles
from .counts import keep_counts
from .creation import Creation
from .description import NodeDescription, describe
from .guest_access import GuestAccess
from .idling import IdleNodes
from .leftovers import Leftovers
from .lifecycle import Lifecycle
from .model import CreateRequest, DeleteResult, NodeRecord, Wait, visible
from .new_nodes import NewNodes
from .operation import OperationParts, settled
from .readiness import AGENT_WAIT
from .registry import Registry
from .runtime import NodeRuntime
from .runtime_parts import RuntimeParts
from .secret_sync import secret_changed
from .snapshots import Snapshots
from .stats import NodeStats, no_snapshots
from .startup import Startup
from .stopping import stop_all
from .tagging import Tagging
from .warm_port import Forked, ForkRequest, WarmStart

log = Logger()


def _noted(node: NodeRuntime, found: list[NodeRuntime]) -> NodeRuntime:
    """``node``, appended to ``found``."""
    found.append(node)
    return node


class Fleet(Service):
    """
    The nodes of one daemon.

    :param parts: what its nodes are made with (clock, configuration, store,
        driver, agents, addressing, disks, events, metrics, ...).
    :param catalog: the host groups and the images nodes are made of.
    :param warm: warm start: clones, spares, forks and memory files (see :mod:`.warm_port`).
    :param admission: the memory budget, ``max_nodes`` and the cold boots
        queue every start of a VM goes through.
    :param vms: the VMs an earlier run left: adopted, found and killed
        without waiting for the driver's decision.
    :param blocking: runs a blocking call off the reactor (console reads, image listings).
    :param snapshots: asks a node's metrics socket for one snapshot's fields
        within a deadline (seconds).
    :param codehost_keys: fetches the SSH keys a user publishes on the code
        host (``codehost_user``); ``None`` when no code host is configured.
    :param stop_grace: seconds a graceful stop waits before it kills.
    :param wall_clock: the time in nanoseconds since the epoch, given to
        guests whose clock stood still (resume, restore).
    :ivar lifecycle: pause, resume, reboot, shutdown, relaunch.
    :ivar snapshots: suspend and restore.
    :ivar tagging: a node's tags, read and changed.
    :ivar consoles: the nodes' consoles, read.
    :ivar stats: the statistics of the nodes' guests.
    :ivar events: the nodes' lifecycle events.
    """

    name = "fleet"

    def __init__(
        self, parts: RuntimeParts, catalog: Catalog, warm: WarmStart, *, admission: Admission, vms: IVmProcesses,
        blocking: Blocking, snapshots: Callable[[str, float], Deferred[Mapping[str, Any]]] = no_snapshots,
        codehost_keys: Callable[[str], Deferred[tuple[str, ...]]] | None = None, stop_grace: float = 10.0,
        wall_clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self._parts = parts
        self._catalog = catalog
        self._warm = warm
        self._vms = vms
        self._blocking = blocking
        self._stop_grace = stop_grace
        self._registry = Registry()
        self._leftovers = Leftovers(self._registry, warm)
        self._recovered: OneShotObserver[None] = OneShotObserver()
        new = NewNodes(self._registry, self._register, parts, catalog, admission)
        self._creation = Creation(new, warm, codehost_keys)
        self._forking = warm.forks(new)
        operations = OperationParts(parts.clock, parts.driver, catalog, admission, parts.addressing, parts.metrics,
                                    stop_grace, wall_clock)
        self.lifecycle = Lifecycle(self._registry, operations)
        self.snapshots = Snapshots(self._registry, operations)
        self.tagging = Tagging(self._registry)
        self.consoles = Consoles(self._registry, parts.config.console_log_size, blocking)
        self._idle = IdleNodes(parts.clock, self._idle_timeout, self._suspend_idle, self.snapshots.wake,
                               parts.metrics.observe_idle)
        self._guests = GuestAccess(self._registry, parts.clock, self._awake)
        self.stats = NodeStats(self._registry, parts.clock, snapshots, awake=self._awake)
        self.events = parts.events
        self._unsubscribe: Callable[[], None] = lambda: None
        admission.watch(self._holders, warm.spare_ram)

    def _holders(self) -> builtins.list[Holder]:
        """The nodes as admission counts them: a node whose VM this daemon runs holds memory."""
        return [Holder(node.hostname, node.record.hostgroup, node.record.ram_bytes, node.machine is not None)
                for node in self._registry.all()]

    def _register(self, record: NodeRecord) -> NodeRuntime:
        node = NodeRuntime(record, self._parts, self._warm, self._forgotten, self._leftovers.copies)
        self._registry.add(node)
        self._idle.track(record, new=True)  # held until its create or fork answered (or re-tracked at start)
        return node

    def _forgotten(self, node: NodeRuntime) -> None:
        self._registry.drop(node)
        self._idle.forget(node.hostname)
        self._warm.room_freed()
        self._leftovers.forgotten(node.record)

    # -- service ---------------------------------------------------------

    def startService(self) -> None:
        super().startService()  # type: ignore[no-untyped-call]  # Twisted's Service is not annotated
        if self._parts.secrets is not None:
            self._unsubscribe = self._parts.secrets.subscribe(lambda name: secret_changed(self._registry, name))
        self._parts.driver.start()  # in the background: the recovery does not wait for it
        Deferred.fromCoroutine(self._start()).addBoth(self._recovered.fire)

    async def _start(self) -> None:
        try:
            found: list[NodeRuntime] = []
            await Startup(self._registry, lambda record: _noted(self._register(record), found), self._parts,
                          self._vms, self._warm.vm_directory).recover()
            for node in found:
                if node in self._registry.all():
                    self._idle.track(node.record)  # as recovered (asleep or awake), not held: no create to wait for
            self._leftovers.at_start()
            for group in self._parts.config.host_groups:
                if group.warm:
                    # In the background: creates of the group meanwhile wait for this one build.
                    Deferred.fromCoroutine(self._warm.prepare(group))
            await keep_counts(
                self._parts.config, self._registry, self.create, self.lifecycle.relaunch, self.snapshots.restore
            )
        except CancelledError:
            log.info("recovery at start stopped: the daemon stopped before the hypervisor was decided")
        except Exception:
            log.failure("recovery at start failed")

    def recovered(self) -> Deferred[None]:
        """Fires once the start-up recovery (adoption, clean-up, ``count``) is done."""
        return self._recovered.when_fired()

    def stopService(self) -> Deferred[None]:
        super().stopService()  # type: ignore[no-untyped-call]  # Twisted's Service is not annotated
        self._unsubscribe()
        self._idle.stop()
        return Deferred.fromCoroutine(stop_all(self._registry, self._parts, self._warm, self._stop_grace))

    # -- queries ---------------------------------------------------------

    def groups(self) -> tuple[HostGroupConfig, ...]:
        """The configured host groups."""
        return self._parts.config.host_groups

    def group(self, name: str) -> HostGroupConfig:
        """The host group ``name``; :class:`NotFound` when there is none."""
        return self._catalog.group(name)

    def list(self, group: str | None = None, tag: str | None = None, tag_prefix: str | None = None) -> list[NodeRecord]:
        """
        The nodes, oldest first, optionally of one group and filtered by an
        exact tag or a tag prefix (not both).
        """
        if group is not None:
            self._catalog.group(group)
        return self._registry.listing(group, tag, tag_prefix)

    async def images(self) -> builtins.list[ImageInfo]:
        """The guest images built in the image directory (read off the reactor)."""
        return await self._blocking(self._catalog.image_list)

    def node(self, hostname: str) -> NodeRecord:
        """The node ``hostname``; :class:`NotFound` when there is none."""
        return visible(self._registry.find(hostname).record)

    async def describe(self, hostname: str) -> NodeDescription:
        """Everything a user needs to see of node ``hostname``; :class:`NotFound` when there is none."""
        return await describe(self._registry.find(hostname), self._parts.config, self._parts.disks, self._blocking)

    async def guest(self, hostname: str, wait: float = AGENT_WAIT) -> IGuest:
        """A running node's guest, for operations inside it (:meth:`.guest_access.GuestAccess.guest`)."""
        return await self._guests.guest(hostname, wait)

    async def health(self, hostname: str) -> AgentHealth:
        """The node's agent's health, asked within a bounded time (:meth:`.guest_access.GuestAccess.health`)."""
        return await self._guests.health(hostname)

    # -- idle suspend ----------------------------------------------------

    def hold(self, hostname: str) -> Callable[[], None]:
        """
        A request naming node ``hostname`` is being served (a stream of it
        is open): its idle timer stands still until the returned function
        is called (see :meth:`.idling.IdleNodes.hold`).
        """
        return self._idle.hold(hostname)

    async def _awake(self, hostname: str) -> None:
        """Wake node ``hostname`` if the idle timer suspended it; :class:`NotFound` when there is none."""
        await self._idle.ready(hostname, lambda: self._registry.find(hostname).record)

    def _idle_timeout(self, group: str) -> float | None:
        config = self._parts.config.group(group)
        return None if config is None else config.idle_suspend

    async def _suspend_idle(self, hostname: str) -> bool:
        """The automatic suspend: whether the node now sleeps."""
        return (await self.snapshots.suspend(hostname, automatic=True)).changed

    # -- create and delete ----------------------------------------------

    async def create(self, group_name: str, request: CreateRequest, wait: Wait, timeout: float) -> NodeRecord:
        """Create a node (see :meth:`.creation.Creation.create`); its idle timer starts once it answered."""
        record = await self._creation.create(group_name, request, wait, timeout)
        self._idle.made(record.hostname)
        return record

    async def fork(self, hostname: str, request: ForkRequest) -> Forked:
        """Fork a running node into new ones (see :mod:`.warm.forking`); their idle timers start then."""
        forked = await self._forking.fork(hostname, request)
        for child in forked.children:
            self._idle.made(child.hostname)
        return forked

    async def delete(self, group_name: str, hostname: str) -> DeleteResult:
        """
        Delete a node: kill its VM, remove its disk, snapshot, sockets and record.

        :raise NotFound: no such group, or no such node in it.
        :raise Protected: the node is protected.
        :raise Conflict: another operation on the node is in progress.
        """
        self._catalog.group(group_name)
        node = await settled(self._registry, hostname)
        if node.record.hostgroup != group_name:
            raise NotFound(f"node {hostname!r} not found in host group {group_name!r}", code="node_not_found")
        if node.record.protected:
            raise Protected(f"node {hostname!r} is protected and cannot be deleted")
        node.phase.begin("delete")
        node.deleting()
        disk_removed = await node.remove()
        log.info("deleted node {hostname}", hostname=hostname)
        return DeleteResult(hostname, disk_removed)


__all__ = ["Fleet"]
