# -*- test-case-name: tests.nodes.test_network -*-
"""
Nodes' addresses and the host side of their networks.

A node of a group with a ``network`` gets an address when it is created
(:meth:`Addressing.lease`, kept in its record for its whole life); its VM is
attached to the network whenever it starts and detached whenever it ends.
The network objects of an address are named after it, so attaches and
detaches of one address take turns (:meth:`Addressing._lock`).
"""

from __future__ import annotations

from ipaddress import IPv4Address
from typing import Callable, Iterable

from twisted.internet.defer import Deferred, DeferredLock
from twisted.logger import Logger

from ..config import Config, HostGroupConfig
from ..errors import BadRequest, Internal
from ..hypervisors.base import NetSpec
from ..network.interfaces import INodeNetwork
from ..network.ipam import Lease, allocate, lease_of
from .model import NodeRecord

log = Logger()


class Addressing:
    """
    Addresses and networks of one daemon's nodes.

    :param config: the configuration (groups and their networks).
    :param network: builds and removes VM networks on the host; ``None`` in
        a daemon without network support.
    """

    def __init__(self, config: Config, network: INodeNetwork | None) -> None:
        self._config = config
        self._network = network
        self._locks: dict[str, DeferredLock] = {}

    def lease(self, group: HostGroupConfig, wanted: str | None, used: Iterable[IPv4Address]) -> Lease | None:
        """
        The address of a new node of ``group``: ``wanted``, or the lowest free
        one (``None`` when the group has no network).

        :raise BadRequest: an address asked of a group without a network, or
            one the range cannot give.
        :raise Conflict: the address is taken, or the range is full.
        """
        if group.network is None:
            if wanted:
                raise BadRequest(f"field 'ip': host group {group.name!r} has no network", code="not_supported")
            return None
        return allocate(group.network, set(used), wanted)

    def _group(self, record: NodeRecord) -> HostGroupConfig | None:
        group = self._config.group(record.hostgroup)
        if group is None or group.network is None or not record.ip:
            return None
        return group

    async def attach(self, record: NodeRecord) -> NetSpec | None:
        """
        Build the node's network on the host, if its group has one.

        :raise Internal: (``network_failed``) it could not be built; nothing
            of it is left.
        """
        group = self._group(record)
        if group is None or group.network is None:
            return None
        network = self._network
        if network is None:
            raise Internal("this daemon has no network support", code="network_failed")
        lease = lease_of(group.network, IPv4Address(record.ip))
        try:
            spec: NetSpec = await self._lock(record.ip).run(
                lambda: Deferred.fromCoroutine(network.attach(group, lease))
            )
            return spec
        except Exception as error:
            raise Internal(
                f"cannot attach node {record.hostname!r} to its network: {error}", code="network_failed"
            ) from error

    async def take_tap(self, record: NodeRecord, tap: str) -> None:
        """
        Give the node (attached already, its group bridged) the tap ``tap`` of
        a spare VM instead of its own; on failure the node has no tap of its
        own any more (attach it again once that QEMU is gone).
        """
        group = self._group(record)
        network = self._network
        if group is None or group.network is None or network is None:
            raise Internal(f"node {record.hostname!r} has no network to take a tap into", code="network_failed")
        lease = lease_of(group.network, IPv4Address(record.ip))
        await self._lock(record.ip).run(lambda: Deferred.fromCoroutine(network.take_tap(group, lease, tap)))

    async def detach(self, record: NodeRecord) -> None:
        """Remove the node's network from the host (its address stays with the record); failures are logged."""
        group = self._group(record)
        network = self._network
        if network is None or group is None:
            return
        ip = IPv4Address(record.ip)
        try:
            await self._lock(record.ip).run(lambda: Deferred.fromCoroutine(network.detach(group.network, ip)))
        except Exception:
            log.failure("detaching node {hostname} from its network", hostname=record.hostname)

    async def clean_orphans(self, keep: Callable[[], Iterable[IPv4Address]]) -> list[str]:
        """Remove network leftovers of addresses not in ``keep()`` (after a crash); their names."""
        if self._network is None:
            return []
        return await self._network.clean_orphans(keep)

    async def close(self) -> None:
        """The daemon stops: remove what only running VMs needed."""
        if self._network is not None:
            await self._network.close()

    def _lock(self, ip: str) -> DeferredLock:
        """
        One lock per address: a detach still running (a VM that ended on its
        own) must finish before the next attach of that address (a relaunch,
        or a new node given the freed address) begins.
        """
        return self._locks.setdefault(ip, DeferredLock())


__all__ = ["Addressing"]
