# -*- test-case-name: tests.devices.test_assignment -*-
"""
Which PCI devices a new node gets: those it asks for by address, then
``gpu_count`` GPUs from its host group's list, none of them held by another
node.

The claims are the node records themselves (``pci_devices``, persisted with
them, as addresses are): a device is held from the create that gave it to the
node's removal, whether its VM runs or not (a stopped persistent node gets
its devices back when relaunched).  A device is also held when another
device of its IOMMU group is: a group is opened by one VM only.  The caller
decides and records in one step, with no wait in between, so two creates
never get one device.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from ..errors import BadRequest
from .pci import MAX_NODE_DEVICES, PciHost, normalise_address


def _holder(host: PciHost, address: str, claims: Mapping[str, str]) -> str | None:
    """Why ``address`` is held by another node (the device or its IOMMU group), or ``None``."""
    holder = claims.get(address)
    if holder is not None:
        return f"held by node {holder}"
    group = host.iommu_group(address)
    if group is not None:
        for member in host.group_members(group):
            holder = claims.get(member)
            if holder is not None:
                return f"its IOMMU group {group} is held by node {holder} ({member})"
    return None


def assign(
    host: PciHost,
    requested: Sequence[str],
    gpu_count: int,
    group: str,
    gpus: Sequence[str],
    claims: Mapping[str, str],
) -> tuple[str, ...]:
    """
    The devices of a new node of ``group``: ``requested``, then
    ``gpu_count`` of ``gpus`` (in their order, the first ones that are free
    and pass the checks of :meth:`PciHost.check`).

    :param requested: addresses the node asks for.
    :param gpus: the host group's GPU addresses.
    :param claims: the devices held by nodes: address to hostname.
    :raise BadRequest: ``invalid_pci_address``, ``too_many_pci_devices``,
        ``pci_device_in_use`` or a check's code for a requested device;
        ``not_enough_gpus`` when fewer than ``gpu_count`` GPUs are free and
        usable, naming why each other one is not.
    """
    wanted = tuple(dict.fromkeys(normalise_address(address) for address in requested))
    if len(wanted) + gpu_count > MAX_NODE_DEVICES:
        raise BadRequest(f"at most {MAX_NODE_DEVICES} PCI devices (pci_devices and gpu_count together) per node",
                         code="too_many_pci_devices")
    for address in wanted:
        held = _holder(host, address, claims)
        if held is not None:
            raise BadRequest(f"PCI device {address}: {held}", code="pci_device_in_use")
        host.check(address)
    if gpu_count <= 0:
        return wanted
    chosen: list[str] = []
    reasons: list[str] = []
    for address in gpus:
        if len(chosen) == gpu_count:
            break
        if address in wanted:
            continue
        held = _holder(host, address, claims)
        if held is not None:
            reasons.append(f"{address}: {held}")
            continue
        try:
            host.check(address)
        except BadRequest as error:
            reasons.append(error.message)
            continue
        chosen.append(address)
    if len(chosen) < gpu_count:
        configured = f"{len(gpus)} GPU(s) configured" if gpus else "no GPUs configured"
        why = f": {'; '.join(reasons)}" if reasons else ""
        raise BadRequest(
            f"gpu_count {gpu_count}: host group {group!r} has {configured}, {len(chosen)} free and usable{why}",
            code="not_enough_gpus",
        )
    return wanted + tuple(chosen)


__all__ = ["assign"]
