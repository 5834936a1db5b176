# -*- test-case-name: tests.nodes.test_fleet,tests.nodes.test_lifecycle,tests.nodes.test_network -*-
"""
The fleet: every node this daemon owns, and the operations on them.

:class:`Fleet` is a Twisted service.  It creates nodes (record first, then
disk, then the VM, then the agent connection), lists and deletes them, reads
their console logs, asks their agents for health, and drives their lifecycle:
pause, resume, suspend, restore, relaunch, shutdown and reboot (which
operation is allowed in which status is :mod:`.transitions`' table).

Every step writes the node's record *before* it acts, so a crash at any point
leaves a record that says what to finish or undo: at start the fleet
re-adopts the VMs that still run, cleans up what was half done
(:mod:`.recovery` decides), kills any VM of its state directory that no record
claims, and brings host groups with ``count: N`` up to N nodes.  On stop it
stops every VM it runs: ephemeral nodes are removed, persistent ones kept
``Stopped``, suspended ones kept as they are.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from ipaddress import IPv4Address
from typing import Any, Callable, Iterable, Iterator, Protocol

from attrs import define, evolve, frozen
from twisted.application.service import Service
from twisted.internet.defer import CancelledError, Deferred, DeferredList, DeferredLock, succeed
from twisted.logger import Logger

from ..config import Config, HostGroupConfig, NetworkConfig
from ..errors import (
    AgentNotConnected,
    BadRequest,
    Conflict,
    Internal,
    NotFound,
    NotSupported,
    Protected,
    WaitTimeout,
)
from ..hypervisors.base import (
    HypervisorError,
    IHypervisor,
    IMachine,
    MachineExit,
    MachineSpec,
    NetSpec,
    describe_exit,
)
from ..images.store import Image, ImageNotFound
from ..network.ipam import Lease, allocate, lease_of
from .model import NodeRecord, Status, valid_hostname
from .recovery import decide
from .store import NodeStore
from .transitions import Op, Outcome, check

log = Logger()

#: UNIX socket paths must fit in sun_path (108 bytes with the NUL).
_MAX_SOCKET_PATH = 107


@frozen
class CreateRequest:
    """
    A validated request for a new node (the API's CreateNodeRequest without
    what this daemon does not support).

    :ivar hostname: a hostname to use instead of the next ``<group>-<n>``.
    :ivar ram_bytes: memory, at most the group's; ``None`` for the group's.
    :ivar cpus: vCPUs, at most the group's; ``None`` for the group's.
    """

    hostname: str | None = None
    ram_bytes: int | None = None
    cpus: int | None = None
    persistent: bool | None = None
    protected: bool = False
    tags: tuple[str, ...] = ()
    ip: str | None = None


@frozen
class DeleteResult:
    """What a delete did: ``disk_removed`` tells whether the disk is gone."""

    hostname: str
    disk_removed: bool


class AgentLike(Protocol):
    """What the fleet needs of an agent connection (see ``vmservice.agent.client``)."""

    def start(self) -> None: ...

    def stop(self) -> Deferred[Any]: ...

    def when_ready(self) -> Deferred[Any]: ...

    async def health(self) -> Any: ...

    async def set_clock(self, unix_ns: int) -> int: ...


class NetworkLike(Protocol):
    """Attaches VMs to their group's network (see ``vmservice.network.host``)."""

    async def attach(self, group: HostGroupConfig, lease: Lease) -> NetSpec: ...

    async def detach(self, network: NetworkConfig | None, ip: IPv4Address) -> None: ...

    async def clean_orphans(self, keep: Callable[[], Iterable[IPv4Address]]) -> list[str]: ...

    async def close(self) -> None: ...


class DiskLike(Protocol):
    """Creates and removes node disks (see ``vmservice.storage.overlay``)."""

    async def create(self, base: str, path: str, size_bytes: int) -> None: ...

    def remove(self, path: str) -> bool: ...


@define
class _Live:
    """
    The run-time side of a node: its VM and agent connection.

    :ivar removing: the node is being deleted (or the daemon is stopping):
        its VM's end is expected, not news.
    :ivar busy: the lifecycle operation in progress, if any: another one
        meanwhile is answered 409 ``busy``.
    """

    record: NodeRecord
    machine: IMachine | None = None
    agent: AgentLike | None = None
    started: float | None = None
    removing: bool = False
    busy: str | None = None


class Fleet(Service):
    """
    The nodes of one daemon.

    :param reactor: an ``IReactorTime`` (plus whatever the driver needs).
    :param config: the loaded configuration.
    :param store: where records live.
    :param driver: a callable returning a Deferred that fires with the
        hypervisor driver once the accelerator is decided.
    :param images: resolves an image name to an :class:`Image`.
    :param disks: creates and removes node disks.
    :param agent_factory: makes an agent connection for a socket path.
    :param on_boot: called with ``(group, seconds)`` when a node's agent first
        answers, for the boot-duration metric.
    :param stop_grace: seconds a graceful stop waits before it kills.
    :param wall_clock: the time in nanoseconds since the epoch, given to
        guests whose clock stood still (resume, restore).
    :param network: attaches VMs of groups with a ``network`` section.
    """

    name = "fleet"

    def __init__(
        self,
        reactor: Any,
        config: Config,
        store: NodeStore,
        driver: Callable[[], Deferred[IHypervisor]],
        images: Callable[[str], Image],
        disks: DiskLike,
        agent_factory: Callable[[str], AgentLike],
        on_boot: Callable[[str, float], None] = lambda group, seconds: None,
        stop_grace: float = 10.0,
        wall_clock: Callable[[], int] = time.time_ns,
        network: NetworkLike | None = None,
    ) -> None:
        self._reactor = reactor
        self._config = config
        self._store = store
        self._driver_factory = driver
        self._driver: Deferred[IHypervisor] | None = None
        self._images = images
        self._disks = disks
        self._agent_factory = agent_factory
        self._on_boot = on_boot
        self._stop_grace = stop_grace
        self._wall_clock = wall_clock
        self._network = network
        self._address_locks: dict[str, DeferredLock] = {}
        self._nodes: dict[str, _Live] = {}
        self._recovered: Deferred[None] | None = None

    # -- service ---------------------------------------------------------

    def startService(self) -> None:
        super().startService()
        self._recovered = Deferred.fromCoroutine(self._recover())
        self._recovered.addErrback(lambda failure: log.failure("recovery at start failed", failure))

    def recovered(self) -> Deferred[None]:
        """Fires once the start-up recovery (adoption, clean-up, ``count``) is done."""
        result: Deferred[None] = Deferred()
        assert self._recovered is not None, "the fleet was not started"
        self._recovered.addBoth(lambda value: (result.callback(None), value)[1])
        return result

    def driver(self) -> Deferred[IHypervisor]:
        """The hypervisor driver, once (each caller gets its own Deferred)."""
        if self._driver is None:
            self._driver = self._driver_factory()
        result: Deferred[IHypervisor] = Deferred()
        self._driver.addBoth(lambda value: (result.callback(value), value)[1])
        return result

    def stopService(self) -> Deferred[None]:
        super().stopService()
        return Deferred.fromCoroutine(self._stop_all())

    async def _stop_all(self) -> None:
        running = [live for live in self._nodes.values() if live.machine is not None]
        if running:
            log.info("stopping {count} node(s)", count=len(running))
            stops = [Deferred.fromCoroutine(self._stop_node(live)) for live in running]
            await DeferredList(stops, consumeErrors=True)
        if self._network is not None:
            await self._network.close()

    async def _stop_node(self, live: _Live) -> None:
        group = self._config.group(live.record.hostgroup)
        graceful = group.graceful_shutdown if group is not None else False
        live.removing = True
        machine = live.machine
        assert machine is not None
        if graceful and live.record.status == Status.PAUSED:
            try:
                await machine.resume()  # a frozen guest cannot hear the power button
            except HypervisorError:
                pass
        await machine.stop(graceful, self._stop_grace)
        if live.agent is not None:
            await live.agent.stop()
        await self._detach(live)
        if live.record.persistent:
            self._store.save(live.record.with_status(Status.STOPPED))
        else:
            self._store.remove(live.record.hostname)
        self._nodes.pop(live.record.hostname, None)

    # -- start-up recovery -----------------------------------------------

    async def _recover(self) -> None:
        records, strays = self._store.load_all()
        for name in strays:
            log.info("removing stray node directory {name}", name=name)
            self._store.remove(name)
        for record in records:
            self._nodes[record.hostname] = _Live(record, busy="recovering")
        driver = await self.driver()
        adopted: set[int] = set()
        for record in records:
            live = self._nodes[record.hostname]
            try:
                await self._recover_node(driver, live, adopted)
            except Exception:
                log.failure("recovering node {hostname} failed", hostname=record.hostname)
            finally:
                live.busy = None
        # Spare every VM this run knows, not only the adopted ones: a create,
        # relaunch or restore may have started one meanwhile.
        known = {live.machine.pid for live in self._nodes.values() if live.machine is not None}
        for pid in driver.orphans(self._store.nodes_dir):
            if pid not in known:
                log.info("killing VM process {pid}, which no node record claims", pid=pid)
                driver.kill_orphan(pid)
        if self._network is not None:
            # Every node's own objects stay: adopted ones are in use, others
            # were detached above, and a create may be under way meanwhile
            # (so the list is taken when the host's objects have been listed).
            def keep() -> list[IPv4Address]:
                return [IPv4Address(live.record.ip) for live in self._nodes.values() if live.record.ip]

            for name in await self._network.clean_orphans(keep):
                log.info("removed network leftover {name}", name=name)
        await self._keep_counts()

    async def _recover_node(self, driver: IHypervisor, live: _Live, adopted: set[int]) -> None:
        record = live.record
        hostname = record.hostname
        paths = self._paths(hostname)
        machine: IMachine | None = None
        vm_state: str | None = None
        if record.pid is not None:
            spec = self._spec(record, paths, record.kernel, record.initrd)
            try:
                machine = driver.adopt(spec, record.pid, paths["qemu_log"])
                vm_state = await machine.run_state()
            except HypervisorError as error:
                log.info("node {hostname}: its VM (pid {pid}) is not running: {error}",
                         hostname=hostname, pid=record.pid, error=error)
        plan = decide(record, vm_state, os.path.exists(paths["state"]))
        _unlink(paths["state"] + ".partial")
        if machine is not None and not plan.adopt:
            await machine.kill()
        if not plan.adopt:
            await self._detach(live)
        if plan.status is None:
            log.info("removing node {hostname} (was {status})", hostname=hostname, status=record.status.value)
            self._remove(live)
            return
        if plan.status is not Status.SUSPENDED:
            _unlink(paths["state"])
        if not plan.adopt or machine is None:
            self._set(live, plan.status, pid=None)
            return
        live.machine = machine
        machine.ended.addCallback(self._machine_ended, live, machine)
        adopted.add(machine.pid)
        if plan.resume:
            await machine.resume()
        self._set(live, plan.status)
        self._connect_agent(live, paths)
        log.info("adopted node {hostname} ({status}, pid {pid})",
                 hostname=hostname, status=plan.status.value, pid=machine.pid)

    async def _keep_counts(self) -> None:
        """Bring every host group with ``count: N`` to N running protected nodes."""
        work = []
        for group in self._config.host_groups:
            if group.count <= 0:
                continue
            members = [
                live for live in self._nodes.values()
                if live.record.hostgroup == group.name and live.record.protected and live.record.persistent
                and live.record.status not in (Status.CREATING, Status.DELETING)
            ]
            for live in members:
                hostname = live.record.hostname
                if live.record.status == Status.STOPPED:
                    work.append(Deferred.fromCoroutine(self.relaunch(hostname, None, 0)))
                elif live.record.status == Status.SUSPENDED:
                    work.append(Deferred.fromCoroutine(self._restore_or_relaunch(hostname)))
            for _ in range(group.count - len(members)):
                request = CreateRequest(persistent=True, protected=True)
                work.append(Deferred.fromCoroutine(self.create(group.name, request, None, 0)))
        for result in await DeferredList(work, consumeErrors=True):
            if not result[0]:
                log.failure("keeping a host group's count failed", result[1])

    async def _restore_or_relaunch(self, hostname: str) -> None:
        """Bring a suspended count node back: from its snapshot, or from its disk when that fails."""
        try:
            await self.restore(hostname, None, 0)
        except Exception as error:
            log.info("restoring {hostname} failed ({error}); relaunching it from its disk", hostname=hostname, error=error)
            await self.relaunch(hostname, None, 0)

    # -- queries ---------------------------------------------------------

    def groups(self) -> tuple[HostGroupConfig, ...]:
        """The configured host groups."""
        return self._config.host_groups

    def group(self, name: str) -> HostGroupConfig:
        """The host group ``name``; :class:`NotFound` when there is none."""
        group = self._config.group(name)
        if group is None:
            raise NotFound(f"host group {name!r} not found", code="hostgroup_not_found")
        return group

    def list(
        self, group: str | None = None, tag: str | None = None, tag_prefix: str | None = None
    ) -> list[NodeRecord]:
        """
        The nodes, oldest first, optionally of one group and filtered by an
        exact tag or a tag prefix (not both).
        """
        if group is not None:
            self.group(group)
        if tag is not None and tag_prefix is not None:
            raise BadRequest("only one of tag and tag_prefix may be set", code="conflicting_filters")
        result = []
        for live in self._nodes.values():
            record = live.record
            if record.status in (Status.CREATING, Status.DELETING):
                continue
            if group is not None and record.hostgroup != group:
                continue
            if tag is not None and tag not in record.tags:
                continue
            if tag_prefix is not None and not any(t.startswith(tag_prefix) for t in record.tags):
                continue
            result.append(_visible(record))
        return sorted(result, key=lambda r: (r.created_at, r.hostname))

    def node(self, hostname: str) -> NodeRecord:
        """The node ``hostname``; :class:`NotFound` when there is none."""
        return _visible(self._live(hostname).record)

    def _live(self, hostname: str) -> _Live:
        live = self._nodes.get(hostname)
        if live is None or live.record.status in (Status.CREATING, Status.DELETING):
            raise NotFound(f"node {hostname!r} not found", code="node_not_found")
        return live

    def console_path(self, hostname: str) -> str:
        """The serial console log file of node ``hostname``."""
        self._live(hostname)
        return os.path.join(self._store.node_dir(hostname), "console.log")

    def logs(self, hostname: str, lines: int) -> tuple[str, int]:
        """
        The last ``lines`` lines of the node's console (all of it for 0).

        :return: the text and the number of lines in it.
        """
        path = self.console_path(hostname)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            data = b""
        except OSError as error:
            raise Internal(f"cannot read the console log: {error}", code="log_read_failed")
        text = data.decode("utf-8", "replace").replace("\r\n", "\n")
        all_lines = text.splitlines(keepends=True)
        chosen = all_lines if lines == 0 else all_lines[-lines:]
        return "".join(chosen), len(chosen)

    def agent(self, hostname: str) -> AgentLike:
        """
        The agent connection of a running node, for operations that open
        streams of their own (exec, file copy, file-system operations).

        :raise NotFound: no such node.
        :raise Conflict: the node is paused (the contract's 409 for exec, cp,
            fs and shell while paused), stopped or suspended.
        :raise AgentNotConnected: the node runs but its agent is not
            connected (yet).
        """
        live = self._live(hostname)
        check(Op.AGENT, hostname, live.record.status)
        if live.agent is None or not getattr(live.agent, "connected", True):
            raise AgentNotConnected(
                f"the agent of node {hostname!r} is not connected (yet)", code="agent_unavailable"
            )
        return live.agent

    async def health(self, hostname: str) -> Any:
        """Ask the node's agent for its health; :class:`AgentNotConnected` if it cannot answer."""
        live = self._live(hostname)
        if live.agent is None or live.record.status != Status.RUNNING:
            raise AgentNotConnected(
                f"node {hostname!r} is {_visible(live.record).status.value}: its agent cannot answer",
                code="agent_unavailable",
            )
        try:
            return await live.agent.health()
        except Exception as error:
            raise AgentNotConnected(f"the agent of {hostname!r} does not answer: {error}") from error

    # -- create ----------------------------------------------------------

    async def create(
        self, group_name: str, request: CreateRequest, wait: str | None, timeout: float
    ) -> NodeRecord:
        """
        Create a node in ``group_name`` and start its VM.

        :param wait: ``"agent"`` to answer only once the agent's health reply
            arrived; ``None`` to answer once the VM process runs.
        :param timeout: seconds to wait; past them the node is removed
            completely and :class:`WaitTimeout` raised.
        """
        group = self.group(group_name)
        ram_bytes = request.ram_bytes if request.ram_bytes is not None else group.ram_bytes
        cpus = request.cpus if request.cpus is not None else group.vcpu
        if ram_bytes <= 0 or ram_bytes > group.ram_bytes:
            raise BadRequest(
                f"ram_bytes must be between 1 and {group.ram_bytes} for host group {group.name!r}",
                code="limit_exceeded",
            )
        if cpus <= 0 or cpus > group.vcpu:
            raise BadRequest(
                f"cpus must be between 1 and {group.vcpu} for host group {group.name!r}",
                code="limit_exceeded",
            )
        image = self._image(group)
        lease = self._lease(group, request.ip)
        hostname = self._choose_hostname(group, request.hostname)
        paths = self._paths(hostname)
        record = NodeRecord(
            hostname=hostname,
            hostgroup=group.name,
            ram_bytes=ram_bytes,
            cpus=cpus,
            created_at=datetime.now(timezone.utc).replace(microsecond=0),
            tags=request.tags,
            persistent=group.persistent if request.persistent is None else request.persistent,
            protected=request.protected,
            ip=str(lease.ip) if lease is not None else "",
        )
        live = _Live(record)
        self._nodes[hostname] = live
        self._store.save(record)
        log.info("creating node {hostname} in {group}", hostname=hostname, group=group.name)
        try:
            net = await self._attach(live)
            await self._disks.create(image.rootfs.path, paths["disk"], group.storage_size)
            await self._spawn(live, paths, image.kernel.path, image.initrd.path, net=net)
            self._set(live, Status.RUNNING)
            self._connect_agent(live, paths)
            if wait == "agent":
                await self._wait_for_agent(live, timeout)
        except BaseException as error:
            await self._teardown(live)
            if isinstance(error, CancelledError):
                raise
            if isinstance(error, _Timeout):
                raise WaitTimeout(
                    f"node {hostname!r} did not become ready within {timeout:g} s; it was removed"
                ) from None
            if isinstance(error, _MachineEnded):
                raise Internal(f"node {hostname!r} failed to boot: {error}", code="boot_failed") from None
            raise
        return _visible(live.record)

    def _lease(self, group: HostGroupConfig, wanted: str | None) -> Lease | None:
        """The address of a new node of ``group`` (``None`` without a network)."""
        if group.network is None:
            if wanted:
                raise BadRequest(f"field 'ip': host group {group.name!r} has no network", code="not_supported")
            return None
        used = {IPv4Address(live.record.ip) for live in self._nodes.values() if live.record.ip}
        return allocate(group.network, used, wanted)

    async def _attach(self, live: _Live) -> NetSpec | None:
        """Build the node's network on the host, if its group has one."""
        group = self._config.group(live.record.hostgroup)
        if group is None or group.network is None or not live.record.ip:
            return None
        if self._network is None:
            raise Internal("this daemon has no network support", code="network_failed")
        lease = lease_of(group.network, IPv4Address(live.record.ip))
        try:
            return await self._address_lock(live.record.ip).run(
                lambda: Deferred.fromCoroutine(self._network.attach(group, lease))  # type: ignore[union-attr]
            )
        except Exception as error:
            raise Internal(f"cannot attach node {live.record.hostname!r} to its network: {error}",
                           code="network_failed") from error

    async def _detach(self, live: _Live) -> None:
        """Remove the node's network from the host (its address stays with the record)."""
        group = self._config.group(live.record.hostgroup)
        if self._network is None or group is None or group.network is None or not live.record.ip:
            return
        network, ip = self._network, IPv4Address(live.record.ip)
        try:
            await self._address_lock(live.record.ip).run(
                lambda: Deferred.fromCoroutine(network.detach(group.network, ip))
            )
        except Exception:
            log.failure("detaching node {hostname} from its network", hostname=live.record.hostname)

    def _address_lock(self, ip: str) -> DeferredLock:
        """
        One lock per address: the network objects of an address are named
        after it, so a detach still running (a VM that ended on its own)
        must finish before the next attach of that address (a relaunch, or a
        new node given the freed address) begins.
        """
        return self._address_locks.setdefault(ip, DeferredLock())

    def _image(self, group: HostGroupConfig) -> Image:
        try:
            return self._images(group.image)
        except ImageNotFound as error:
            raise Internal(str(error), code="image_not_found") from error

    def _choose_hostname(self, group: HostGroupConfig, wanted: str | None) -> str:
        if wanted:
            if not valid_hostname(wanted):
                raise BadRequest(f"invalid hostname {wanted!r}", code="invalid_hostname")
            if wanted in self._nodes:
                raise Conflict(f"hostname {wanted!r} is taken", code="hostname_taken")
            return wanted
        while True:
            candidate = f"{group.name}-{self._store.next_index(group.name)}"
            if candidate not in self._nodes and not os.path.exists(self._store.node_dir(candidate)):
                return candidate

    def _paths(self, hostname: str) -> dict[str, str]:
        directory = self._store.node_dir(hostname)
        paths = {
            name: os.path.join(directory, file)
            for name, file in (
                ("disk", "disk.qcow2"),
                ("console", "console.log"),
                ("qemu_log", "qemu.log"),
                ("agent", "agent.sock"),
                ("qmp", "qmp.sock"),
                ("state", "state.bin"),
            )
        }
        if max(len(paths["agent"]), len(paths["qmp"])) > _MAX_SOCKET_PATH:
            raise Internal(
                f"state_dir {self._store.state_dir!r} is too long for UNIX socket paths",
                code="state_dir_too_long",
            )
        return paths

    def _spec(
        self,
        record: NodeRecord,
        paths: dict[str, str],
        kernel: str,
        initrd: str,
        incoming: str | None = None,
        net: NetSpec | None = None,
    ) -> MachineSpec:
        return MachineSpec(
            name=record.hostname,
            vcpus=record.cpus,
            ram_bytes=record.ram_bytes,
            kernel=kernel,
            initrd=initrd,
            disk=paths["disk"],
            agent_socket=paths["agent"],
            qmp_socket=paths["qmp"],
            console_log=paths["console"],
            incoming=incoming,
            net=net,
        )

    async def _spawn(
        self,
        live: _Live,
        paths: dict[str, str],
        kernel: str,
        initrd: str,
        incoming: str | None = None,
        net: NetSpec | None = None,
    ) -> IMachine:
        """
        Start the node's VM (its disk exists); the caller records the new
        status.  A boot (not a restore) is timed for the boot metric.
        """
        driver = await self.driver()
        spec = self._spec(live.record, paths, kernel, initrd, incoming, net)
        live.started = None if incoming else self._reactor.seconds()
        try:
            machine = await driver.start(spec, paths["qemu_log"])
        except HypervisorError as error:
            raise Internal(f"cannot start the VM of node {live.record.hostname!r}: {error}", code="boot_failed") from error
        live.machine = machine
        live.record = evolve(live.record, pid=machine.pid, kernel=kernel, initrd=initrd)
        machine.ended.addCallback(self._machine_ended, live, machine)
        return machine

    def _connect_agent(self, live: _Live, paths: dict[str, str]) -> None:
        agent = self._agent_factory(paths["agent"])
        live.agent = agent
        agent.start()
        agent.when_ready().addCallback(self._first_ready, live)

    def _set(self, live: _Live, status: Status, **changes: Any) -> None:
        """Give the node a new status (and other changes) and persist it, unless it is gone."""
        live.record = evolve(live.record, status=status, **changes)
        if not live.removing and self._nodes.get(live.record.hostname) is live:
            self._store.save(live.record)

    def _first_ready(self, _: object, live: _Live) -> None:
        if live.started is not None and not live.removing:
            self._on_boot(live.record.hostgroup, self._reactor.seconds() - live.started)
            live.started = None

    async def _wait_for_agent(self, live: _Live, timeout: float) -> None:
        assert live.machine is not None and live.agent is not None
        outcome: Deferred[tuple[str, Any]] = Deferred()

        def settle(result: tuple[str, Any]) -> None:
            if not outcome.called:
                outcome.callback(result)

        ready = Deferred.fromCoroutine(self._agent_health(live.agent))
        ready.addCallbacks(lambda value: settle(("ready", value)), lambda f: settle(("error", f)))
        live.machine.ended.addCallback(lambda ended: settle(("ended", ended)))
        timer = self._reactor.callLater(timeout, settle, ("timeout", None))
        try:
            kind, value = await outcome
        finally:
            if timer.active():
                timer.cancel()
            if not ready.called:
                ready.cancel()
        if kind == "timeout":
            raise _Timeout()
        if kind == "ended":
            raise _MachineEnded(describe_exit(value))
        if kind == "error":
            value.raiseException()

    async def _agent_health(self, agent: AgentLike) -> Any:
        while True:
            await agent.when_ready()
            try:
                return await agent.health()
            except CancelledError:
                raise
            except Exception:
                # The connection dropped between hello and reply (the guest
                # restarted its agent): wait for the next hello.
                continue

    def _machine_ended(self, ended: MachineExit, live: _Live, machine: IMachine) -> None:
        if live.removing or live.machine is not machine or live.record.status == Status.RESTORING:
            # Expected, or a restore's own failure path deals with it (the
            # node stays Suspended with its snapshot).
            return
        hostname = live.record.hostname
        log.info("node {hostname} stopped on its own: {how}", hostname=hostname, how=describe_exit(ended))
        live.machine = None
        if live.agent is not None:
            live.agent.stop()
            live.agent = None
        Deferred.fromCoroutine(self._detach(live))
        if live.record.persistent:
            self._set(live, Status.STOPPED, pid=None)
        else:
            self._remove(live)

    def _remove(self, live: _Live) -> bool:
        """Forget the node and delete its files (the VM is gone); whether the disk was removed."""
        hostname = live.record.hostname
        if self._nodes.get(hostname) is live:
            self._nodes.pop(hostname)
        disk_removed = self._disks.remove(os.path.join(self._store.node_dir(hostname), "disk.qcow2"))
        self._store.remove(hostname)
        return disk_removed

    # -- lifecycle -------------------------------------------------------

    async def _settled(self, hostname: str) -> _Live:
        """
        The node ``hostname`` once the start-up recovery is done with it: a
        lifecycle operation asked right after the daemon started waits for
        the recovery instead of answering 409 ``busy``.
        """
        live = self._live(hostname)
        if live.busy == "recovering" and self._recovered is not None and not self._recovered.called:
            await self.recovered()
            live = self._live(hostname)
        return live

    @contextmanager
    def _operation(self, live: _Live, op: Op) -> Iterator[Outcome]:
        """
        Run lifecycle operation ``op`` on ``live``, one at a time per node;
        yields :func:`.transitions.check`'s outcome.
        """
        if live.busy is not None:
            raise Conflict(f"node {live.record.hostname!r} is busy ({live.busy})", code="busy")
        outcome = check(op, live.record.hostname, live.record.status)
        live.busy = op.value
        try:
            yield outcome
        finally:
            live.busy = None

    async def _suspendable(self) -> None:
        driver = await self.driver()
        if not driver.capabilities.can_suspend:
            raise NotSupported(f"{driver.description} cannot suspend VMs to disk", code="not_supported")

    @staticmethod
    async def _drive(what: str, hostname: str, action: Deferred[Any], machine: IMachine | None = None) -> Any:
        """
        Wait for a driver action; its failure becomes a 500 that says what
        failed, or a 409 ``not_running`` when the VM ended meanwhile.
        """
        try:
            return await action
        except HypervisorError as error:
            if machine is not None and machine.ended.called:
                raise Conflict(f"node {hostname!r} is not running (its VM ended)", code="not_running") from error
            raise Internal(f"{what} of node {hostname!r} failed: {error}", code=f"{what}_failed") from error

    async def pause(self, hostname: str) -> str:
        """Freeze a running node's VM; a paused node stays paused."""
        live = await self._settled(hostname)
        with self._operation(live, Op.PAUSE) as outcome:
            if outcome is Outcome.DONE:
                return f"{hostname} is already paused"
            assert live.machine is not None
            await self._drive("pause", hostname, live.machine.pause(), live.machine)
            self._set(live, Status.PAUSED)
        log.info("paused node {hostname}", hostname=hostname)
        return f"{hostname} paused"

    async def resume(self, hostname: str) -> str:
        """Let a paused node run again and set its clock; a running node is left as it is."""
        live = await self._settled(hostname)
        with self._operation(live, Op.RESUME) as outcome:
            if outcome is Outcome.DONE:
                return f"{hostname} is already running"
            assert live.machine is not None
            await self._drive("resume", hostname, live.machine.resume(), live.machine)
            self._set(live, Status.RUNNING)
            self._sync_clock(live)
        log.info("resumed node {hostname}", hostname=hostname)
        return f"{hostname} resumed"

    async def shutdown(self, hostname: str, action: str) -> str:
        """
        ``action`` ``reboot``: reset the VM (the guest boots again, its agent
        reconnects).  ``shutdown``: press the ACPI power button (again every
        few seconds) and kill the VM if it has not powered off within the
        grace; the node then ends as any VM that stops on its own does
        (persistent: ``Stopped``; ephemeral: removed).  Answers at once.
        """
        live = await self._settled(hostname)
        op = Op.REBOOT if action == "reboot" else Op.SHUTDOWN
        with self._operation(live, op):
            assert live.machine is not None
            if op is Op.REBOOT:
                await self._drive("reboot", hostname, live.machine.reset(), live.machine)
                log.info("rebooting node {hostname}", hostname=hostname)
                return f"{hostname} is rebooting"
            # Until the VM is gone, other lifecycle operations answer 409
            # busy (a pause would freeze a guest half-way through power-off).
            self._set(live, Status.STOPPING)
            stopping = live.machine.stop(True, self._stop_grace)
            stopping.addErrback(lambda failure: log.failure("shutdown of {hostname}", failure, hostname=hostname))
        log.info("shutting down node {hostname}", hostname=hostname)
        return f"{hostname} is shutting down"

    async def suspend(self, hostname: str) -> str:
        """
        Save a running (or paused) node's memory and device state to its
        snapshot file, then end its VM, which releases its memory.
        """
        live = await self._settled(hostname)
        await self._suspendable()
        with self._operation(live, Op.SUSPEND) as outcome:
            if outcome is Outcome.DONE:
                return f"{hostname} is already suspended"
            machine = live.machine
            assert machine is not None
            state = self._paths(hostname)["state"]
            partial = state + ".partial"
            before = live.record.status
            self._set(live, Status.SUSPENDING)
            try:
                await self._drive("suspend", hostname, machine.save_state(partial), machine)
                _fsync(partial)
                os.replace(partial, state)
                _fsync(os.path.dirname(state))
            except BaseException:
                _unlink(partial)
                if live.machine is machine:
                    if before == Status.RUNNING:
                        await Deferred.fromCoroutine(_quietly(machine.resume()))
                    self._set(live, before)
                raise
            live.machine = None
            agent, live.agent = live.agent, None
            if agent is not None:
                await agent.stop()
            await machine.kill()
            await self._detach(live)
            self._set(live, Status.SUSPENDED, pid=None)
        log.info("suspended node {hostname}", hostname=hostname)
        return f"{hostname} suspended"

    async def restore(self, hostname: str, wait: str | None, timeout: float) -> str:
        """
        Start a suspended node's VM from its snapshot: the guest continues
        where it was (its clock is then set).  The snapshot is deleted once
        the VM runs, since the disk moves on from that point.

        :param wait: ``"agent"`` to answer once the agent answers again.
        """
        live = await self._settled(hostname)
        await self._suspendable()
        with self._operation(live, Op.RESTORE):
            paths = self._paths(hostname)
            if not os.path.exists(paths["state"]):
                raise Conflict(f"node {hostname!r} has no snapshot to restore", code="no_snapshot")
            record = live.record
            kernel, initrd = record.kernel, record.initrd
            if not kernel:
                image = self._image(self.group(record.hostgroup))
                kernel, initrd = image.kernel.path, image.initrd.path
            self._set(live, Status.RESTORING)
            try:
                net = await self._attach(live)
                machine = await self._spawn(live, paths, kernel, initrd, incoming=paths["state"], net=net)
                await self._drive("restore", hostname, machine.finish_incoming())
                await self._drive("restore", hostname, machine.resume())
            except BaseException:
                failed, live.machine = live.machine, None
                if failed is not None:
                    await failed.kill()
                await self._detach(live)
                self._set(live, Status.SUSPENDED, pid=None)
                raise
            self._set(live, Status.RUNNING)
            _unlink(paths["state"])
            self._connect_agent(live, paths)
            self._sync_clock(live)
        log.info("restored node {hostname}", hostname=hostname)
        await self._wait_after(live, wait, timeout)
        return f"{hostname} restored"

    async def relaunch(self, hostname: str, wait: str | None, timeout: float) -> NodeRecord:
        """
        Boot a stopped (or suspended: its snapshot is discarded) node again
        from its own disk, with the same hostname, address and tags.
        """
        live = await self._settled(hostname)
        with self._operation(live, Op.RELAUNCH):
            record = live.record
            group = self._config.group(record.hostgroup)
            if group is None:
                raise Conflict(
                    f"the host group {record.hostgroup!r} of node {hostname!r} is no longer configured",
                    code="hostgroup_gone",
                )
            image = self._image(group)
            paths = self._paths(hostname)
            if not os.path.exists(paths["disk"]):
                raise Internal(f"the disk of node {hostname!r} is missing", code="disk_missing")
            before = record.status
            try:
                net = await self._attach(live)
                await self._spawn(live, paths, image.kernel.path, image.initrd.path, net=net)
            except BaseException:
                failed, live.machine = live.machine, None
                if failed is not None:
                    await failed.kill()
                await self._detach(live)
                self._set(live, before, pid=None)  # a suspended node keeps its snapshot
                raise
            self._set(live, Status.RUNNING)
            _unlink(paths["state"])
            self._connect_agent(live, paths)
        log.info("relaunched node {hostname}", hostname=hostname)
        await self._wait_after(live, wait, timeout)
        return _visible(live.record)

    async def _wait_after(self, live: _Live, wait: str | None, timeout: float) -> None:
        """``wait=agent`` of restore and relaunch: the node stays up when the wait fails."""
        if wait != "agent" or live.machine is None:
            return
        hostname = live.record.hostname
        try:
            await self._wait_for_agent(live, timeout)
        except _Timeout:
            raise WaitTimeout(f"the agent of node {hostname!r} did not answer within {timeout:g} s") from None
        except _MachineEnded as error:
            raise Internal(f"node {hostname!r} failed to start: {error}", code="boot_failed") from None

    def _sync_clock(self, live: _Live) -> None:
        """Set the guest's clock once its agent answers (it stood still while paused or suspended)."""
        agent = live.agent
        if agent is None:
            return
        hostname = live.record.hostname

        async def sync() -> None:
            await agent.when_ready()
            await agent.set_clock(self._wall_clock())

        Deferred.fromCoroutine(sync()).addErrback(
            lambda failure: log.info("could not set the clock of {hostname}: {error}",
                                     hostname=hostname, error=failure.value)
        )

    # -- delete ----------------------------------------------------------

    async def delete(self, group_name: str, hostname: str) -> DeleteResult:
        """
        Delete a node: kill its VM, remove its disk, snapshot, sockets and record.

        :raise NotFound: no such group, or no such node in it.
        :raise Protected: the node is protected.
        :raise Conflict: another operation on the node is in progress.
        """
        self.group(group_name)
        live = await self._settled(hostname)
        if live.record.hostgroup != group_name:
            raise NotFound(f"node {hostname!r} not found in host group {group_name!r}", code="node_not_found")
        if live.record.protected:
            raise Protected(f"node {hostname!r} is protected and cannot be deleted")
        if live.busy is not None:
            raise Conflict(f"node {hostname!r} is busy ({live.busy})", code="busy")
        self._set(live, Status.DELETING)
        disk_removed = await self._teardown(live)
        log.info("deleted node {hostname}", hostname=hostname)
        return DeleteResult(hostname, disk_removed)

    async def _teardown(self, live: _Live) -> bool:
        """Undo everything of a node, in reverse order of creation."""
        live.removing = True
        if live.agent is not None:
            await live.agent.stop()
        if live.machine is not None:
            await live.machine.kill()
        await self._detach(live)
        return self._remove(live)


def _visible(record: NodeRecord) -> NodeRecord:
    """The record as clients see it: an internal status shows as the one it comes from."""
    shown = {
        Status.SUSPENDING: Status.RUNNING,
        Status.RESTORING: Status.SUSPENDED,
        Status.STOPPING: Status.RUNNING,
    }.get(record.status)
    return record if shown is None else record.with_status(shown, record.pid)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _fsync(path: str) -> None:
    """Flush a file (or a directory's entries) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


async def _quietly(action: Deferred[Any]) -> None:
    try:
        await action
    except Exception:
        pass


class _Timeout(Exception):
    """The wait for readiness ran out of time."""


class _MachineEnded(Exception):
    """The VM process ended while we waited for its agent."""
