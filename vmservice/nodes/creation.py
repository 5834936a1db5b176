# -*- test-case-name: tests.nodes.test_fleet -*-
"""
Making a node: the request checked against its group, a hostname and an
address chosen, then record, network, disk, VM and agent connection, in that
order.  The record is written first (status ``Creating``), so a crash at any
point leaves something the next start recognises and removes; a failure (or
a ``wait`` that runs out) removes everything made so far.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Callable

from attrs import evolve
from twisted.logger import Logger

from twisted.internet.defer import Deferred

from ..config import MAX_USERDATA, HostGroupConfig
from ..devices import assign
from ..durable import write_atomic
from ..hypervisors.base import IMachine
from ..images.store import Image
from ..errors import AgentError, BadRequest, Conflict, Internal, WaitTimeout
from ..guestport.guest import IGuestConnection
from .model import CreateRequest, NodeRecord, Status, Wait, unique, valid_hostname, visible
from .events import EventType
from .admission import Claim
from .launch import Cold
from .readiness import NotReady, answered, wait_for_guest
from .room import room_for
from .new_nodes import NewNodes
from .runtime import NodeRuntime
from .warm_port import WarmStart

log = Logger()

#: The login user of a node given SSH keys without ``import_user``.
DEFAULT_LOGIN_USER = "root"


def _limits(group: HostGroupConfig, request: CreateRequest) -> tuple[int, int]:
    """
    The memory and vCPUs of a new node: the request's, at most the group's.

    :raise BadRequest: (``limit_exceeded``) more than the group's, or none.
    """
    ram_bytes = request.ram_bytes if request.ram_bytes is not None else group.ram_bytes
    cpus = request.cpus if request.cpus is not None else group.vcpu
    if ram_bytes <= 0 or ram_bytes > group.ram_bytes:
        raise BadRequest(
            f"ram_bytes must be between 1 and {group.ram_bytes} for host group {group.name!r}", code="limit_exceeded"
        )
    if cpus <= 0 or cpus > group.vcpu:
        raise BadRequest(f"cpus must be between 1 and {group.vcpu} for host group {group.name!r}", code="limit_exceeded")
    return ram_bytes, cpus


def _userdata(group: HostGroupConfig, request: CreateRequest) -> bytes:
    """
    The userdata of a new node: the group's, then the request's, as one script.

    :raise BadRequest: (``userdata_too_large``) more than :data:`MAX_USERDATA` bytes.
    """
    script = "\n".join(part for part in (group.userdata, request.userdata) if part).encode("utf-8")
    if len(script) > MAX_USERDATA:
        raise BadRequest(f"userdata is {len(script)} bytes with the host group's; at most {MAX_USERDATA} are allowed",
                         code="userdata_too_large")
    return script


async def _ready(node: NodeRuntime, agent: IGuestConnection, wait: Wait, adopted: bool) -> None:
    """
    Wait until a new node is ready for its creator: its agent answered (a
    clone's did already, to its adoption, in the session it uses from then
    on: ``adopted``), its secrets and login are in place, and with
    :attr:`Wait.USERDATA` its userdata is over.
    """
    if not adopted:
        await answered(agent)
    if node.record.secrets or node.record.login_user:
        await node.provisioning.configured()
    if wait is Wait.USERDATA and node.record.userdata:
        await node.provisioning.userdata_over()


def _failed(error: BaseException, hostname: str, timeout: float) -> BaseException:
    """What a create that failed with ``error`` (its node removed) raises."""
    if isinstance(error, NotReady):
        if error.ended is None:
            return WaitTimeout(f"node {hostname!r} did not become ready within {timeout:g} s; it was removed")
        return Internal(f"node {hostname!r} failed to boot: {error}", code="boot_failed")
    if isinstance(error, AgentError):
        return Internal(f"node {hostname!r} could not be configured: {error}; it was removed",
                        code="guest_setup_failed")
    return error


class Creation:
    """
    :param new: what makes a new node (registry, parts, catalog, admission).
    :param warm: clones of warm groups' templates, and nodes' memory files.
    :param codehost_keys: fetches the SSH keys a user publishes on the code
        host (``codehost_user``); ``None`` when no code host is configured.
    """

    def __init__(self, new: NewNodes, warm: WarmStart,
                 codehost_keys: Callable[[str], Deferred[tuple[str, ...]]] | None = None) -> None:
        self._new = new
        self._parts = new.parts
        self._warm = warm
        self._codehost_keys = codehost_keys

    async def create(self, group_name: str, request: CreateRequest, wait: Wait, timeout: float) -> NodeRecord:
        """
        Create a node in ``group_name`` and start its VM: a clone of the
        group's template when the group is ``warm`` (a cold boot when that
        cannot be done), else a boot.

        :param wait: :attr:`Wait.AGENT` to answer only once the agent's health
            reply arrived; :attr:`Wait.NONE` to answer once the VM process runs.
        :param timeout: seconds to wait (for a cold boot slot and for the
            guest together); past them the node is removed completely and
            :class:`WaitTimeout` raised.
        :raise InsufficientMemory: the node does not fit in the memory budget
            (:mod:`.admission`); nothing was made.
        :raise Conflict: (``max_nodes_reached``) the group has its
            ``max_nodes``; nothing was made.
        """
        group = self._new.catalog.group(group_name)
        limits = _limits(group, request)
        image = self._new.catalog.requested_image(group, request.disk_image)
        userdata = _userdata(group, request)
        # Admitted (memory, max_nodes) before anything is made; the claim
        # stands in for the node until its VM runs or it was removed.
        claim = self._new.admission.admit(limits[0], group=group.name)
        try:
            with room_for(f"a new node of host group {group.name!r}"):
                return await self._create(group, request, limits, image, userdata, claim, wait, timeout)
        finally:
            claim.release()

    async def _create(
        self, group: HostGroupConfig, request: CreateRequest, limits: tuple[int, int], image: Image,
        userdata: bytes, claim: Claim, wait: Wait, timeout: float,
    ) -> NodeRecord:
        """The node made once admitted (see :meth:`create`)."""
        began = self._parts.clock.seconds()
        record = await self._record(group, request, limits, image, bool(userdata))
        record = evolve(record, memory_file=self._warm.memory_file(record.hostname, group.fork_memory))
        node = self._new.make(record)
        claim.name(record.hostname)
        try:
            self._parts.store.save(record)
        except BaseException:
            # Registered, but nothing of it is on the disk for a start to find: forgotten here.
            node.forget(announce=False)
            raise
        node.announce(EventType.CREATED)
        log.info("creating node {hostname} in {group}", hostname=record.hostname, group=group.name)
        try:
            if userdata:
                write_atomic(node.paths.userdata, userdata, mode=0o600)
            machine, agent, adopted = await self._launch(node, group, image, began + timeout)
            node.set(Status.RUNNING)
            node.started()
            if record.memory_file:
                self._warm.ready_for_forks(record.hostname, agent)
            if wait is not Wait.NONE:
                # A VM stopped for lack of room for its disk's writes fails the create at once (507).
                ready = node.room.unless_stopped(Deferred.fromCoroutine(_ready(node, agent, wait, adopted)))
                left = max(0.0, began + timeout - self._parts.clock.seconds())
                await wait_for_guest(self._parts.clock, machine, ready, left)
        except BaseException as error:
            await node.remove()
            raise _failed(error, record.hostname, timeout) from None
        return visible(node.record)

    async def _launch(
        self, node: NodeRuntime, group: HostGroupConfig, image: Image, deadline: float
    ) -> tuple[IMachine, IGuestConnection, bool]:
        """
        Network, disk, VM and agent connection of a new node: cloned when its
        group is warm and that works; and whether it is a clone whose agent
        answered its adoption.  A cold boot waits for a boot slot first
        (until ``deadline``, the create's timeout).
        """
        parts = self._parts
        net = await parts.addressing.attach(node.record)
        if group.warm:
            cloned = await self._warm.clone(node, group, image, net)
            if cloned is not None:
                return cloned
        await parts.disks.create(image.rootfs.path, node.paths.disk, group.storage_size)
        slot = await self._new.admission.boot_slot(max(0.0, deadline - parts.clock.seconds()), f"node {node.hostname!r}")
        try:
            machine = await node.spawn(Cold(image.kernel.path, image.initrd.path), net)
        except BaseException:
            slot.release()
            raise
        agent = node.connect_agent()
        slot.hold(agent.when_ready(), machine.ended)
        return machine, agent, False

    async def _record(
        self, group: HostGroupConfig, request: CreateRequest, limits: tuple[int, int], image: Image, userdata: bool
    ) -> NodeRecord:
        """
        The record of a new node, its request checked against its group and
        its image, its devices and address chosen (recorded by the caller
        with no wait in between: the records are the claims).
        """
        parts = self._parts
        ram_bytes, cpus = limits
        if request.secrets:
            if parts.secrets is None:
                raise BadRequest("this daemon has no secrets store", code="unknown_secret")
            parts.secrets.resolve(request.secrets)
        user, keys = await self._login(request)
        if keys and image.manifest.get("ssh_server") is False:
            raise BadRequest(f"image {image.name!r} has no SSH server: ssh_keys cannot be used with it",
                             code="no_ssh_server")
        devices = assign(parts.pci, request.pci_devices, request.gpu_count, group.name, group.gpus,
                         self._new.registry.pci_claims())
        lease = parts.addressing.lease(group, request.ip, self._new.registry.addresses())
        return NodeRecord(
            hostname=self._hostname(group, request.hostname),
            hostgroup=group.name,
            ram_bytes=ram_bytes,
            cpus=cpus,
            created_at=datetime.now(timezone.utc).replace(microsecond=0),
            tags=unique(request.tags),
            persistent=group.persistent if request.persistent is None else request.persistent,
            protected=request.protected,
            ip=str(lease.ip) if lease is not None else "",
            secrets=request.secrets,
            login_user=user,
            ssh_keys=keys,
            userdata=userdata,
            image=image.name,
            pci_devices=devices,
        )

    async def _login(self, request: CreateRequest) -> tuple[str, tuple[str, ...]]:
        """
        The login user and its keys: the code host user's keys instead of
        ``ssh_keys`` when ``codehost_user`` is given; the user is
        :data:`DEFAULT_LOGIN_USER` unless ``import_user`` names one, and none
        without keys or ``import_user``.

        :raise BadRequest: (``not_supported``) ``codehost_user`` without a code host configured.
        """
        keys = request.ssh_keys
        if request.codehost_user:
            fetch = self._codehost_keys
            if fetch is None:
                raise BadRequest("codehost_user: no code host is configured", code="not_supported")
            keys = await fetch(request.codehost_user)
        if request.import_user:
            return request.import_user, keys
        return (DEFAULT_LOGIN_USER if keys else ""), keys

    def _hostname(self, group: HostGroupConfig, wanted: str | None) -> str:
        """
        The requested hostname, or the group's next ``<group>-<n>``.

        :raise BadRequest: (``invalid_hostname``) not a host label.
        :raise Conflict: (``hostname_taken``) a node has it.
        """
        if wanted:
            if not valid_hostname(wanted):
                raise BadRequest(f"invalid hostname {wanted!r}", code="invalid_hostname")
            if wanted in self._new.registry:
                raise Conflict(f"hostname {wanted!r} is taken", code="hostname_taken")
            return wanted
        return self._new.next_hostname(group)


__all__ = ["Creation"]
