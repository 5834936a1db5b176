# -*- test-case-name: tests.nodes.test_fleet -*-
"""
The fleet: every node this daemon owns, and the operations on them.

:class:`Fleet` is a Twisted service.  It creates nodes (record first, then
disk, then the VM, then the agent connection), lists and deletes them, reads
their console logs and asks their agents for health.  Whatever fails half-way
is undone completely: process, disk, sockets and record.  On stop it stops
every VM it started.
"""

from __future__ import annotations

import os

from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Protocol

from attrs import define, frozen
from twisted.application.service import Service
from twisted.internet.defer import CancelledError, Deferred, DeferredList, succeed
from twisted.logger import Logger

from ..config import Config, HostGroupConfig
from ..errors import (
    AgentNotConnected,
    BadRequest,
    Conflict,
    Internal,
    NotFound,
    Protected,
    WaitTimeout,
)
from ..hypervisors.base import IHypervisor, IMachine, MachineExit, MachineSpec, describe_exit
from ..images.store import Image, ImageNotFound
from .model import NodeRecord, Status, valid_hostname
from .store import NodeStore

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


class DiskLike(Protocol):
    """Creates and removes node disks (see ``vmservice.storage.overlay``)."""

    async def create(self, base: str, path: str, size_bytes: int) -> None: ...

    def remove(self, path: str) -> bool: ...


@define
class _Live:
    """The run-time side of a node: its VM and agent connection."""

    record: NodeRecord
    machine: IMachine | None = None
    agent: AgentLike | None = None
    started: float | None = None
    removing: bool = False


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
        self._nodes: dict[str, _Live] = {}

    # -- service ---------------------------------------------------------

    def startService(self) -> None:
        super().startService()
        self._clean_leftovers()
        self.driver()

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
        stops = [Deferred.fromCoroutine(self._stop_node(live)) for live in list(self._nodes.values())]
        if stops:
            log.info("stopping {count} node(s)", count=len(stops))
            await DeferredList(stops, consumeErrors=True)

    async def _stop_node(self, live: _Live) -> None:
        group = self._config.group(live.record.hostgroup)
        graceful = group.graceful_shutdown if group is not None else False
        live.removing = True
        if live.machine is not None:
            await live.machine.stop(graceful, self._stop_grace)
        if live.agent is not None:
            await live.agent.stop()
        if live.record.persistent:
            self._store.save(live.record.with_status(Status.STOPPED))
        else:
            self._store.remove(live.record.hostname)
        self._nodes.pop(live.record.hostname, None)

    def _clean_leftovers(self) -> None:
        """
        Remove what an earlier run left: kill VMs of ours that still run,
        remove ephemeral nodes and stray directories, mark persistent nodes
        stopped.
        """
        records, strays = self._store.load_all()
        for name in strays:
            log.info("removing stray node directory {name}", name=name)
            self._store.remove(name)
        for record in records:
            if record.pid is not None and _is_our_vm(record.pid, record.hostname):
                log.info("killing leftover VM {hostname} (pid {pid})", hostname=record.hostname, pid=record.pid)
                try:
                    os.kill(record.pid, 9)
                except OSError:
                    pass
            if record.persistent and record.status != Status.CREATING:
                self._store.save(record.with_status(Status.STOPPED))
                self._nodes[record.hostname] = _Live(record.with_status(Status.STOPPED))
            else:
                self._store.remove(record.hostname)

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
            if record.status == Status.CREATING:
                continue
            if group is not None and record.hostgroup != group:
                continue
            if tag is not None and tag not in record.tags:
                continue
            if tag_prefix is not None and not any(t.startswith(tag_prefix) for t in record.tags):
                continue
            result.append(record)
        return sorted(result, key=lambda r: (r.created_at, r.hostname))

    def node(self, hostname: str) -> NodeRecord:
        """The node ``hostname``; :class:`NotFound` when there is none."""
        return self._live(hostname).record

    def _live(self, hostname: str) -> _Live:
        live = self._nodes.get(hostname)
        if live is None or live.record.status == Status.CREATING:
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
            fs and shell while paused).
        :raise AgentNotConnected: the node is not running or its agent is not
            connected (yet).
        """
        live = self._live(hostname)
        if live.record.status == Status.PAUSED:
            raise Conflict(f"node {hostname!r} is paused", code="paused")
        if live.agent is None or live.record.status != Status.RUNNING or not getattr(live.agent, "connected", True):
            raise AgentNotConnected(
                f"the agent of node {hostname!r} is not connected (status {live.record.status.value})",
                code="agent_unavailable",
            )
        return live.agent

    async def health(self, hostname: str) -> Any:
        """Ask the node's agent for its health; :class:`AgentNotConnected` if it cannot answer."""
        live = self._live(hostname)
        if live.agent is None or live.record.status != Status.RUNNING:
            raise AgentNotConnected(
                f"node {hostname!r} is {live.record.status.value}: its agent cannot answer",
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
        try:
            image = self._images(group.image)
        except ImageNotFound as error:
            raise Internal(str(error), code="image_not_found") from error
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
        )
        live = _Live(record)
        self._nodes[hostname] = live
        self._store.save(record)
        log.info("creating node {hostname} in {group}", hostname=hostname, group=group.name)
        try:
            await self._launch(live, group, image, paths)
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
        return live.record

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
            )
        }
        if max(len(paths["agent"]), len(paths["qmp"])) > _MAX_SOCKET_PATH:
            raise Internal(
                f"state_dir {self._store.state_dir!r} is too long for UNIX socket paths",
                code="state_dir_too_long",
            )
        return paths

    async def _launch(
        self, live: _Live, group: HostGroupConfig, image: Image, paths: dict[str, str]
    ) -> None:
        record = live.record
        await self._disks.create(image.rootfs.path, paths["disk"], group.storage_size)
        driver = await self.driver()
        spec = MachineSpec(
            name=record.hostname,
            vcpus=record.cpus,
            ram_bytes=record.ram_bytes,
            kernel=image.kernel.path,
            initrd=image.initrd.path,
            disk=paths["disk"],
            agent_socket=paths["agent"],
            qmp_socket=paths["qmp"],
            console_log=paths["console"],
        )
        live.started = self._reactor.seconds()
        machine = await driver.start(spec, paths["qemu_log"])
        live.machine = machine
        live.record = record.with_status(Status.RUNNING, machine.pid)
        self._store.save(live.record)
        machine.ended.addCallback(self._machine_ended, live)
        agent = self._agent_factory(paths["agent"])
        live.agent = agent
        agent.start()
        agent.when_ready().addCallback(self._first_ready, live)

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

        ready = Deferred.fromCoroutine(self._agent_health(live))
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

    async def _agent_health(self, live: _Live) -> Any:
        assert live.agent is not None
        while True:
            await live.agent.when_ready()
            try:
                return await live.agent.health()
            except CancelledError:
                raise
            except Exception:
                # The connection dropped between hello and reply (the guest
                # restarted its agent): wait for the next hello.
                continue

    def _machine_ended(self, ended: MachineExit, live: _Live) -> None:
        if live.removing:
            return
        hostname = live.record.hostname
        log.info("node {hostname} stopped on its own: {how}", hostname=hostname, how=describe_exit(ended))
        if live.agent is not None:
            live.agent.stop()
        if live.record.persistent:
            live.record = live.record.with_status(Status.STOPPED)
            live.machine = None
            live.agent = None
            self._store.save(live.record)
        else:
            self._nodes.pop(hostname, None)
            self._disks.remove(os.path.join(self._store.node_dir(hostname), "disk.qcow2"))
            self._store.remove(hostname)

    # -- delete ----------------------------------------------------------

    async def delete(self, group_name: str, hostname: str) -> DeleteResult:
        """
        Delete a node: kill its VM, remove its disk, sockets and record.

        :raise NotFound: no such group, or no such node in it.
        :raise Protected: the node is protected.
        """
        self.group(group_name)
        live = self._live(hostname)
        if live.record.hostgroup != group_name:
            raise NotFound(f"node {hostname!r} not found in host group {group_name!r}", code="node_not_found")
        if live.record.protected:
            raise Protected(f"node {hostname!r} is protected and cannot be deleted")
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
        hostname = live.record.hostname
        disk_removed = self._disks.remove(os.path.join(self._store.node_dir(hostname), "disk.qcow2"))
        self._store.remove(hostname)
        self._nodes.pop(hostname, None)
        return disk_removed


class _Timeout(Exception):
    """The wait for readiness ran out of time."""


class _MachineEnded(Exception):
    """The VM process ended while we waited for its agent."""


def _is_our_vm(pid: int, hostname: str) -> bool:
    """Whether ``pid`` is a QEMU this daemon started for ``hostname``."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return f"vmservice-{hostname}".encode() in argv


