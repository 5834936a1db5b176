# -*- test-case-name: tests.nodes.test_fakes -*-
"""
What the node layer needs of the host's network: :class:`INodeNetwork`,
implemented by :class:`vmservice.network.host.HostNetwork` (and by the tests'
fakes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from ipaddress import IPv4Address

from zope.interface import Interface

from ..config import HostGroupConfig, NetworkConfig
from ..hypervisors.base import NetSpec
from .ipam import Lease


class INodeNetwork(Interface):
    """Attaches VMs to their group's network on the host and takes them off again."""

    async def attach(group: HostGroupConfig, lease: Lease) -> NetSpec:
        """Build the host side of one VM's network (all or nothing); how QEMU joins it."""

    async def take_tap(group: HostGroupConfig, lease: Lease, tap: str) -> None:
        """
        Give the VM of ``lease``, attached already, the tap ``tap`` that a
        running QEMU holds (a spare VM's) instead of its own; only for a
        group whose network is a bridge.
        """

    async def detach(network: NetworkConfig | None, ip: IPv4Address) -> None:
        """Remove what :meth:`attach` built for the VM with address ``ip``."""

    async def clean_orphans(keep: Callable[[], Iterable[IPv4Address]]) -> list[str]:
        """Remove this daemon's network objects of addresses not in ``keep()``; their names."""

    async def close() -> None:
        """The daemon stops: remove what is left that only running VMs needed (bridges)."""


__all__ = ["INodeNetwork"]
