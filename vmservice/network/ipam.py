# -*- test-case-name: tests.network.test_ipam -*-
"""
Address management: which address a new VM of a host group gets.

Pure: the allocations are the node records' ``ip`` fields (persisted with
them), handed in as a set; nothing here touches the host.

- **isolated**: the range is cut into /30 blocks ``(network, gateway, VM,
  broadcast)``; the VM takes the third address of a block, the gateway (in
  the VM's own network namespace) the second.  A /22 gives 256 slots.
- **bridge**: every host address of the range (or of the gateway's network
  when there is no range) that is also a host address of the gateway's
  network, except the gateway's own.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from typing import AbstractSet, Iterator

from attrs import frozen

from ..config import ISOLATED_SLOT_PREFIX, NetworkConfig
from ..errors import BadRequest, Conflict


@frozen
class Lease:
    """
    One VM's place in its group's network.

    :ivar address: the VM's address with its prefix (``10.77.0.6/30``).
    :ivar gateway: the address the VM routes through.
    """

    address: IPv4Interface
    gateway: IPv4Address

    @property
    def ip(self) -> IPv4Address:
        """The VM's address without its prefix."""
        return self.address.ip


def pool(network: NetworkConfig) -> IPv4Network:
    """The network VM addresses come from."""
    if network.range is not None:
        return network.range
    assert network.gateway is not None, "bridge mode needs a gateway (checked by config)"
    return network.gateway.network


def lease_of(network: NetworkConfig, ip: IPv4Address) -> Lease:
    """
    The lease of ``ip`` in ``network``.

    :raise BadRequest: ``ip`` is not a VM address of the range.
    """
    if network.mode == "isolated":
        block = IPv4Network(f"{ip}/{ISOLATED_SLOT_PREFIX}", strict=False)
        if ip not in pool(network) or ip != block.network_address + 2:
            raise BadRequest(
                f"ip {ip} is not a VM address of {pool(network)} (each VM takes the third address of a /30)",
                code="ip_out_of_range",
            )
        return Lease(IPv4Interface(f"{ip}/{ISOLATED_SLOT_PREFIX}"), block.network_address + 1)
    addresses = pool(network)
    gateway = network.gateway
    assert gateway is not None, "bridge mode needs a gateway (checked by config)"
    link = gateway.network
    if not _bridge_address(addresses, link, gateway.ip, ip):
        raise BadRequest(f"ip {ip} is not a VM address of {addresses}", code="ip_out_of_range")
    return Lease(IPv4Interface(f"{ip}/{link.prefixlen}"), gateway.ip)


def _candidates(network: NetworkConfig) -> Iterator[IPv4Address]:
    addresses = pool(network)
    if network.mode == "isolated":
        for block in addresses.subnets(new_prefix=ISOLATED_SLOT_PREFIX):
            yield block.network_address + 2
        return
    assert network.gateway is not None
    link, gateway = network.gateway.network, network.gateway.ip
    for ip in addresses.hosts():
        if _bridge_address(addresses, link, gateway, ip):
            yield ip


def _bridge_address(addresses: IPv4Network, link: IPv4Network, gateway: IPv4Address, ip: IPv4Address) -> bool:
    """
    Whether ``ip`` may be a bridged VM's: a host address of the range (a /31
    or /32 range's every address) and of the gateway's network, not the gateway.
    """
    ends = (addresses.network_address, addresses.broadcast_address) if addresses.prefixlen < 31 else ()
    return ip in addresses and ip not in ends and ip not in (link.network_address, link.broadcast_address, gateway)


def allocate(network: NetworkConfig, used: AbstractSet[IPv4Address], wanted: str | None = None) -> Lease:
    """
    Choose a VM address of ``network`` that is not in ``used``: ``wanted``
    when given, else the lowest free one.

    :raise BadRequest: ``wanted`` is not an IPv4 address of the range
        (``ip_out_of_range``, ``invalid_ip``).
    :raise Conflict: ``wanted`` is taken (``ip_taken``), or every address
        is (``no_free_address``).
    """
    if wanted:
        try:
            ip = IPv4Interface(wanted).ip
        except ValueError:
            raise BadRequest(f"ip {wanted!r} is not an IPv4 address", code="invalid_ip") from None
        lease = lease_of(network, ip)
        if ip in used:
            raise Conflict(f"ip {ip} is taken by another node", code="ip_taken")
        return lease
    for ip in _candidates(network):
        if ip not in used:
            return lease_of(network, ip)
    raise Conflict(f"every address of {pool(network)} is taken", code="no_free_address")


def slots(network: NetworkConfig) -> int:
    """How many VMs the range of ``network`` holds."""
    return sum(1 for _ in _candidates(network))


__all__ = ["Lease", "allocate", "lease_of", "pool", "slots"]
