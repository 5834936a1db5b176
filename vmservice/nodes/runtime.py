# -*- test-case-name: tests.nodes.test_fleet,tests.nodes.test_lifecycle -*-
"""
A node at run time: its record, its VM, its agent connection and its phase,
and the one way all of them are started and ended.

:class:`NodeRuntime` owns the node's VM (:attr:`~NodeRuntime.machine`) and
agent connection; the end of a VM it no longer owns (an operation took it,
or it was replaced) is not the node's news.  :meth:`~NodeRuntime.release`
is the one teardown path: agent connection, VM, network, in that order;
what becomes of the record afterwards (kept ``Stopped``, ``Suspended``, or
removed with :meth:`~NodeRuntime.forget`) is the caller's decision.
"""

from __future__ import annotations

from typing import Any, Callable

from attrs import evolve
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..errors import BadRequest, Conflict, Internal
from ..guestport.guest import IGuestConnection, UserdataOutcome
from ..hypervisors.base import HypervisorError, IHypervisor, IMachine, MachineExit, NetSpec, describe_exit
from ..observer import OneShotObserver
from .events import DELETED, EventType, status_event
from .agent_transport import group_transport, machine_vsock
from .launch import Clone, ForkChild, Launch, incoming, shaped, timed
from .model import ASLEEP_STATUSES, NodeRecord, Status
from .paths import NodePaths
from .phase import NodePhase, node_phase
from .provisioning import GuestSetup, Provisioning
from .room import NodeRoom
from .runtime_parts import RuntimeParts, VmFiles

log = Logger()


def _kill(machine: IMachine) -> Deferred[MachineExit]:
    return machine.kill()


class NodeRuntime:
    """
    One node of this daemon.

    :param record: its record as loaded or made.
    :param parts: what it is made with.
    :param files: what warm start keeps beside its VM.
    :param forgotten: called with this node once it is forgotten (the
        registry drops it).
    :param unmapped: called once its record stopped naming the fork memory
        copies its VM mapped (see :meth:`VmFiles.after_end`).
    :ivar machine: its VM while it runs and is this node's.
    :ivar agent: its agent connection while its VM runs.
    :ivar phase: what the daemon is doing with it (see :mod:`.phase`).
    :ivar paths: its files.
    :ivar provisioning: its guest's secrets, login and userdata.
    :ivar room: whether its VM is stopped for lack of room in the state directory.
    """

    def __init__(
        self, record: NodeRecord, parts: RuntimeParts, files: VmFiles, forgotten: Callable[["NodeRuntime"], None],
        unmapped: Callable[[], None] = lambda: None,
    ) -> None:
        self.record = record
        self._parts = parts
        self._files = files
        self._forgotten = forgotten
        self._unmapped = unmapped
        self.paths = NodePaths.of(parts.store.node_dir(record.hostname))
        self.machine: IMachine | None = None
        self.agent: IGuestConnection | None = None
        self.phase: NodePhase = node_phase(record.hostname)
        self._up: OneShotObserver[None] = OneShotObserver()
        self._boot_started: float | None = None
        self.room = NodeRoom(self, parts.room)
        self.provisioning = Provisioning(record.hostname, self._guest_setup, parts.secrets, self._userdata_finished)

    def _guest_setup(self) -> GuestSetup:
        """What the node's guest is made into, from its record and its userdata file."""
        record = self.record
        userdata = b""
        if record.userdata:
            with open(self.paths.userdata, "rb") as stream:
                userdata = stream.read()
        return GuestSetup(secrets=record.secrets, user=record.login_user, ssh_keys=record.ssh_keys, userdata=userdata)

    @property
    def hostname(self) -> str:
        """The node's hostname."""
        return self.record.hostname

    def started(self) -> None:
        """Its creation or its start-up recovery is done: operations may act on it."""
        self.phase.started()
        self._up.fire(None)

    def settled(self) -> Deferred[None]:
        """Fires once the node has :meth:`started` (at once when it has)."""
        return self._up.when_fired()

    @property
    def has_started(self) -> bool:
        """Whether it has :meth:`started` (a request for its guest need not wait for that)."""
        return self._up.fired

    def set(self, status: Status, **changes: Any) -> None:
        """
        Give the node a new status (and other changes), written to its file
        unless it is being removed; the one place a status changes, so the
        one place its lifecycle events (:func:`.events.status_event`) come from.
        """
        before, slept = self.record.status, self.record.idle_suspended
        if status not in ASLEEP_STATUSES:
            changes["idle_suspended"] = False
        self.record = evolve(self.record, status=status, **changes)
        if self.phase.persists():
            self._parts.store.save(self.record)
        happened = status_event(before, status)
        if happened is not None:
            idle = happened in (EventType.SUSPENDED, EventType.RESTORED) and (slept or self.record.idle_suspended)
            self.announce(happened, idle=idle)

    def announce(self, happened: EventType, exit_code: int | None = None, status: str | None = None,
                 idle: bool = False) -> None:
        """Publish that ``happened`` to the node, as it is now (``idle``: of the idle timer's sleep)."""
        self._parts.events.publish(happened, self.record, exit_code, status, idle)

    def _userdata_finished(self, outcome: UserdataOutcome) -> None:
        if outcome.ran_script:
            self.announce(EventType.USERDATA_FINISHED, outcome.exit_code)

    def retag(self, tags: tuple[str, ...]) -> None:
        """
        Give the node other tags, whatever it is doing (they touch neither its
        VM nor its status): the record is written first and taken in memory
        only once it is on the disk, so a failed write changes nothing and
        an answered change survives any crash.  The record written is the
        one in memory, so an operation under way keeps its status in it.

        :raise Conflict: (``busy``) the node is being removed: its record is
            no longer written.
        :raise Internal: (``record_write_failed``) the record could not be written.
        """
        if not self.phase.persists():
            raise Conflict(f"node {self.hostname!r} is busy (being removed)", code="busy")
        record = evolve(self.record, tags=tags)
        try:
            self._parts.store.save(record)
        except OSError as error:
            raise Internal(
                f"cannot write the record of node {self.hostname!r}: {error.strerror or error}",
                code="record_write_failed",
            ) from error
        self.record = record

    async def spawn(self, launch: Launch, net: NetSpec | None) -> IMachine:
        """
        Start the node's VM (its disk exists) as ``launch`` says; the caller
        records the new status.  A boot (:class:`.launch.Cold`) is timed for
        the boot metric.

        :param net: its network interface, if its group has a network.

        :raise Internal: (``boot_failed``) the VM could not be started.
        :raise Conflict: one of its PCI devices fails a host check now (the
            check's code, e.g. ``pci_device_not_vfio``): it was rebound or
            removed since the node got it.
        :raise InsufficientMemory: (``tmpfs_full``) no room for its memory file.
        """
        for address in self.record.pci_devices:
            try:
                self._parts.pci.check(address)
            except BadRequest as error:
                raise Conflict(f"cannot start the VM of node {self.hostname!r}: {error}", code=error.code) from None
        driver = await self._parts.driver.get()
        kernel, initrd = launch.kernel, launch.initrd
        spec = self.paths.spec(self.record, kernel, initrd, incoming(launch), net)
        group = self._parts.config.group(self.record.hostgroup)
        spec = shaped(launch, evolve(spec, aslr=group is None or group.guest_aslr, vsock=self._vsock(launch, driver),
                                     tunnel_sockets=self.paths.tunnels[:self._tunnel_ports(launch)]))
        self._files.before_start(self.record)
        self._boot_started = self._parts.clock.seconds() if timed(launch) else None
        try:
            machine = await driver.start(spec, self.paths.qemu_log)
        except HypervisorError as error:
            raise Internal(f"cannot start the VM of node {self.hostname!r}: {error}", code="boot_failed") from error
        self.own(machine)
        # A VM of the node's own names replaces a spare's: its directory goes.
        self._files.spare_replaced(self.record.started_qmp)
        self.record = evolve(
            self.record, pid=machine.pid, kernel=kernel, initrd=initrd, hypervisor=driver.description,
            metrics_channel=spec.metrics_socket is not None, bulk_channel=spec.bulk_socket is not None,
            vsock_channel=spec.vsock, tunnel_ports=len(spec.tunnel_sockets),
            started_qmp="",
        )
        return machine

    def _vsock(self, launch: Launch, driver: IHypervisor) -> bool:
        """
        Whether the VM ``launch`` starts has a vsock device: as the saved state it loads had (a restore,
        a fork's child), as its template's (a clone), else as its group and the host say.
        """
        if incoming(launch) is not None or isinstance(launch, ForkChild):
            return self.record.vsock_channel
        if isinstance(launch, Clone):
            return launch.template.vsock
        return machine_vsock(group_transport(self._parts.config.group(self.record.hostgroup)), driver)

    def _tunnel_ports(self, launch: Launch) -> int:
        """
        How many tunnel ports the VM ``launch`` starts has: as many as the saved state it loads had (a
        restore, a fork's child), as its template's (a clone), else as its group says.
        """
        if incoming(launch) is not None or isinstance(launch, ForkChild):
            return self.record.tunnel_ports
        if isinstance(launch, Clone):
            return launch.template.tunnel_ports
        group = self._parts.config.group(self.record.hostgroup)
        return group.tunnel_ports if group is not None else 0

    def own(self, machine: IMachine) -> None:
        """
        Make ``machine`` this node's VM: its end is the node's news from now
        on, and so is its stop for lack of room in the state directory
        (:class:`.room.NodeRoom`).
        """
        self.machine = machine
        machine.ended.addCallback(self._vm_ended, machine)
        machine.on_no_room(lambda: self.room.stopped(machine))

    def connect_agent(self, adopting: bool = False) -> IGuestConnection:
        """
        Start connecting to the agent of the node's VM.

        :param adopting: the VM is a clone that has yet to adopt its
            identity: its guest is provisioned and its agent's news told only
            once :meth:`adopted` says it did.
        """
        transport = group_transport(self._parts.config.group(self.record.hostgroup))
        agent = self._parts.agents(self.paths.agent, transport)
        self.agent = agent
        agent.start()
        if not adopting:
            self._watch_agent(agent)
        return agent

    def keep_agent(self, agent: IGuestConnection) -> IGuestConnection:
        """
        Make ``agent``, connected already (a spare VM's), the connection to the
        node's agent, as :meth:`connect_agent` with ``adopting`` does.
        """
        self.agent = agent
        return agent

    def adopted(self) -> None:
        """The clone adopted its identity: its agent connection is watched (and its guest provisioned) from now on."""
        agent = self.agent
        if agent is None:
            return
        self._watch_agent(agent)
        if agent.connected:
            self.provisioning.agent_ready(agent)
            self._agent_news(agent, EventType.AGENT_UP)

    def _watch_agent(self, agent: IGuestConnection) -> None:
        agent.when_ready().addCallbacks(self._first_ready, lambda failure: None)
        agent.on_ready(lambda: self.provisioning.agent_ready(agent))
        agent.on_ready(lambda: self._agent_news(agent, EventType.AGENT_UP))
        agent.on_lost(lambda: self._agent_news(agent, EventType.AGENT_DOWN))

    def _agent_news(self, agent: IGuestConnection, happened: EventType) -> None:
        """The agent came or went: news while it is the node's (not once :meth:`release` let it go)."""
        if agent is self.agent:
            self.announce(happened)

    def _first_ready(self, _: object) -> None:
        started, self._boot_started = self._boot_started, None
        if started is not None and self.phase.persists():
            self._parts.metrics.observe_boot(self.record.hostgroup, self._parts.clock.seconds() - started)

    def take_machine(self) -> IMachine | None:
        """Take the VM from the node: whatever it does from now on is the taker's business."""
        machine, self.machine = self.machine, None
        return machine

    async def release(
        self, end: Callable[[IMachine], Deferred[MachineExit]] = _kill, machine: IMachine | None = None
    ) -> None:
        """
        End everything that runs for the node: its agent connection, its VM
        (the node's own, or ``machine``, one an operation took) and its
        network on the host.

        :param end: how the VM ends; killed by default.
        """
        agent, self.agent = self.agent, None
        machine = machine if machine is not None else self.take_machine()
        if agent is not None:
            await agent.stop()
        if machine is not None:
            await end(machine)
        if self._files.after_end(self.record):
            # Not through set(): the status (and the idle timer's mark of a suspend under way) stays.
            self.record = evolve(self.record, memory_copies=())
            if self.phase.persists():
                self._parts.store.save(self.record)
            self._unmapped()
        await self._parts.addressing.detach(self.record)

    def deleting(self) -> None:
        """
        Say in the record that the node is being deleted (its ``delete``
        phase begun).  A state directory without room for the record must
        not keep a node, whose removal makes room, from being deleted: the
        record is removed at once instead; a crash from there on leaves a
        directory without a record and a VM no record claims, which the next
        start removes as it removes a ``Deleting`` node.  If even that fails,
        the phase is finished and the error raised.
        """
        try:
            try:
                self.set(Status.DELETING)
            except OSError as error:
                log.warn("node {hostname}: its record cannot say Deleting ({error}); removed first instead",
                         hostname=self.hostname, error=error)
                self._parts.store.remove_record(self.hostname)
        except BaseException:
            self.phase.finish()
            raise

    async def remove(self) -> bool:
        """
        Undo everything of the node, whatever it was doing: let it go, end what
        runs for it, forget it.

        :return: whether the disk was removed.
        """
        self.phase.abandon()
        await self.release()
        return self.forget()

    def forget(self, announce: bool = True) -> bool:
        """
        Forget the node and delete its files (its VM is gone): disk, snapshot,
        sockets, record.

        :param announce: publish its deletion (not for a node whose creation
            was never announced).
        :return: whether the disk was removed.
        """
        self.phase.abandon()
        self._forgotten(self)
        if announce:
            self.announce(EventType.DELETED, status=DELETED)
        disk_removed = self._parts.disks.remove(self.paths.disk)
        self._files.spare_replaced(self.record.started_qmp)
        self._parts.store.remove(self.hostname)
        return disk_removed

    def _vm_ended(self, ended: MachineExit, machine: IMachine) -> None:
        if machine is not self.machine or not self.phase.vm_end_is_news():
            return
        log.info("node {hostname} stopped on its own: {how}", hostname=self.hostname, how=describe_exit(ended))
        self.machine = None
        if self.record.persistent:
            self.set(Status.STOPPED, pid=None)
        else:
            self.forget()
        Deferred.fromCoroutine(self.release()).addErrback(self._release_failed)

    def _release_failed(self, failure: Failure) -> None:
        log.failure("cleaning up after node {hostname}", failure, hostname=self.hostname)


__all__ = ["NodeRuntime"]
