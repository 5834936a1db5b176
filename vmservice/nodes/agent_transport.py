# -*- test-case-name: tests.nodes.test_agent_transport -*-
"""
Whether a node's VM gets a vhost-vsock device (:func:`machine_vsock`): its
group's ``agent_transport`` against what the host can do (``docs/vsock.md``).
"""

from __future__ import annotations

from ..config import HostGroupConfig
from ..errors import Conflict
from ..hypervisors.base import IHypervisor


def group_transport(group: HostGroupConfig | None) -> str:
    """The ``agent_transport`` of ``group``; a node of a group no longer configured keeps ``auto``."""
    return "auto" if group is None else group.agent_transport


def machine_vsock(transport: str, driver: IHypervisor) -> bool:
    """
    Whether a VM of a group whose ``agent_transport`` is ``transport`` gets a vsock device:
    ``auto`` where the host can, ``vsock`` always, ``virtio-serial`` never.

    :raise Conflict: (``vsock_unavailable``) the group asks for ``vsock`` and the host cannot
        (why, as the start-up log said it).
    """
    if transport == "virtio-serial":
        return False
    unusable: str | None = driver.vsock_unusable
    if transport == "vsock" and unusable is not None:
        raise Conflict(f"agent_transport is vsock, but this host has no usable vsock: {unusable}",
                       code="vsock_unavailable")
    return unusable is None


__all__ = ["group_transport", "machine_vsock"]
