# -*- test-case-name: tests.nodes.test_description -*-
"""
Everything a user needs to see of one node (``GET /vm/{hostname}``): its
record as clients see it, what its host group says of its storage, image and
network, and what is found on the host (its disk, its snapshot, its agent
connection).

Only facts the daemon knows are described: a fact it cannot know (the group
of the node is no longer configured, the disk file is gone) is left out, not
guessed.  There is no per-node network policy (create refuses ``network``),
so a node's effective policy is its group's.
"""

from __future__ import annotations

from ipaddress import IPv4Address

from attrs import frozen

from ..config import Config, HostGroupConfig
from ..errors import BadRequest
from ..network.ipam import lease_of
from ..network.plans import mac_address
from ..storage.interfaces import DiskInfo, IDisks
from .blocking import Blocking
from .model import NodeRecord, visible
from .runtime import NodeRuntime


@frozen
class NetworkFacts:
    """
    A node's network, from its group's configuration and its address.

    :ivar mode: ``none`` (the group has no network: no interface),
        ``isolated`` or ``bridge``.
    :ivar allow: the group's ``allow`` list (isolated mode).
    :ivar drop: the group's ``drop`` list (isolated mode).
    :ivar address: the node's address with its prefix (``10.77.0.6/30``).
    :ivar gateway: its default gateway.
    :ivar mac: its NIC's MAC address.
    :ivar bridge: the bridge its tap joins (bridge mode).
    """

    mode: str
    allow: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()
    address: str | None = None
    gateway: str | None = None
    mac: str | None = None
    bridge: str | None = None


@frozen
class NodeDescription:
    """
    One node described.

    :ivar record: its record as clients see it (:func:`~.model.visible`).
    :ivar storage: its group's storage kind (``image``: a qcow2 overlay on
        the image's root file system); ``None`` when the group is gone.
    :ivar image: the name of the image it was made from (its group's for
        nodes made before that was recorded; ``None`` then when the group
        is gone).
    :ivar network: its network; ``None`` when the group is gone.
    :ivar disk: its disk as read from the file; ``None`` when it is missing.
    :ivar snapshot: whether a suspend snapshot of it is on the disk.
    :ivar agent_connected: whether its guest agent's channel is up.
    """

    record: NodeRecord
    storage: str | None
    image: str | None
    network: NetworkFacts | None
    disk: DiskInfo | None
    snapshot: bool
    agent_connected: bool


def network_facts(group: HostGroupConfig, ip: str) -> NetworkFacts:
    """What ``group``'s configuration says of the network of its node of address ``ip`` (pure)."""
    network = group.network
    if network is None:
        return NetworkFacts("none")
    allow = tuple(str(n) for n in network.allow)
    drop = tuple(str(n) for n in network.drop)
    if not ip:
        return NetworkFacts(network.mode, allow, drop, bridge=network.bridge)
    address: str | None
    gateway: str | None
    try:
        lease = lease_of(network, IPv4Address(ip))
        address, gateway = str(lease.address), str(lease.gateway)
    except BadRequest:
        address = gateway = None  # the range was configured anew: the address no longer fits it
    return NetworkFacts(network.mode, allow, drop, address, gateway, mac_address(IPv4Address(ip)), network.bridge)


async def describe(node: NodeRuntime, config: Config, disks: IDisks, blocking: Blocking) -> NodeDescription:
    """
    Describe ``node``, of a host group of ``config``; its files are read off
    the reactor (``blocking``), its disk's facts through ``disks``.
    """
    paths = node.paths
    disk, snapshot = await blocking(lambda: (disks.info(paths.disk), paths.has_snapshot()))
    record = visible(node.record)
    group = config.group(record.hostgroup)
    agent = node.agent
    return NodeDescription(
        record=record,
        storage=group.storage if group is not None else None,
        image=record.image or (group.image if group is not None else None),
        network=network_facts(group, record.ip) if group is not None else None,
        disk=disk,
        snapshot=snapshot,
        agent_connected=agent is not None and agent.connected,
    )


__all__ = ["NetworkFacts", "NodeDescription", "describe", "network_facts"]
