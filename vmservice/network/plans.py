# -*- test-case-name: tests.network.test_plans,tests.integration.network.test_plans -*-
"""
What to run on the host to give one VM its network, and to take it away:
pure functions from a lease to lists of commands (``argv`` plus optional
standard input), so every command and the nftables ruleset are unit-tested
as text.  :mod:`.host` runs them.

Names are derived from the VM's address, which is unique on the host (the
ranges of groups and of daemons never overlap, see :mod:`.claims`), so two
tenants' ``demo-1`` never collide and every name fits Linux's 15-character
limit whatever the group is called:

========================  ============================  ==================
what                      name                          where
========================  ============================  ==================
network namespace         ``vms-<hex>``                 host
veth, host end            ``vmh<hex>`` (11 characters)  host
veth, namespace end       ``veth0``                     VM's namespace
tap of an isolated VM     ``tap0``                      VM's namespace
tap of a bridged VM       ``vmt<hex>``                  host, on the bridge
========================  ============================  ==================

``<hex>`` is the VM's IPv4 address as 8 hex digits (``10.77.0.6`` →
``0a4d0006``).

**Isolated** topology: ``VM eth0 — tap0 [namespace, gateway address,
nftables] veth0 — vmh<hex> [host]``.  The namespace routes: the VM's
gateway is the second address of its /30 on ``tap0``; the namespace's
default route leaves through ``veth0``, which answers ARP for the VM
(proxy ARP) so the host needs only a route to the /30 through ``vmh<hex>``.
The namespace's nftables table decides what may pass:

- replies to what the VM opened pass; connections *into* the VM never do;
- destinations in ``drop`` are dropped, then destinations in ``allow``
  accepted (so with both, ``drop`` carves holes out of ``allow``);
- with an ``allow`` list, everything else is dropped; without one, the
  host's own addresses and the daemon's ranges are dropped and everything
  else accepted;
- nothing reaches the namespace itself.
"""

from __future__ import annotations

import re
from ipaddress import IPv4Address, IPv4Network
from typing import Sequence

from attrs import frozen

from .ipam import Lease

#: Prefix of the network namespaces of isolated VMs.
NETNS_PREFIX = "vms-"
#: Prefix of the host ends of isolated VMs' veth pairs.
VETH_PREFIX = "vmh"
#: Prefix of bridged VMs' taps.
TAP_PREFIX = "vmt"
#: The tap inside an isolated VM's namespace, and the namespace end of its veth.
NS_TAP = "tap0"
NS_VETH = "veth0"
#: The nftables table in each isolated VM's namespace.
NFT_TABLE = "vmservice"


#: A name :func:`suffix` made: one of our prefixes and exactly 8 lowercase hex digits.
_OUR_NAME = re.compile(f"({NETNS_PREFIX}|{VETH_PREFIX}|{TAP_PREFIX})([0-9a-f]{{8}})")


@frozen
class Command:
    """One command to run: ``argv``, and bytes for its standard input."""

    argv: tuple[str, ...]
    stdin: bytes | None = None


def suffix(ip: IPv4Address) -> str:
    """``ip`` as 8 hex digits, the unique part of its VM's interface names."""
    return f"{int(ip):08x}"


def address_of(name: str) -> IPv4Address | None:
    """The VM address a namespace or interface name was derived from, or ``None`` if it is not ours."""
    match = _OUR_NAME.fullmatch(name)
    return IPv4Address(int(match.group(2), 16)) if match else None


def netns_name(ip: IPv4Address) -> str:
    """The network namespace of the isolated VM of ``ip``."""
    return NETNS_PREFIX + suffix(ip)


def veth_name(ip: IPv4Address) -> str:
    """The host end of the veth of the isolated VM of ``ip``."""
    return VETH_PREFIX + suffix(ip)


def tap_name(ip: IPv4Address) -> str:
    """The tap of the bridged VM of ``ip``."""
    return TAP_PREFIX + suffix(ip)


def mac_address(ip: IPv4Address) -> str:
    """The MAC address of the VM of ``ip`` (unique as the address is)."""
    return "52:54:" + ":".join(f"{byte:02x}" for byte in ip.packed)


def gateway_mac(ip: IPv4Address) -> str:
    """
    The MAC address of the gateway (``tap0``) of the VM of ``ip``: fixed, so
    that a VM restored from a snapshot, whose ARP cache still holds the
    gateway it had, finds it again on the new namespace's tap.
    """
    return "52:55:" + ":".join(f"{byte:02x}" for byte in ip.packed)


def _ip(*words: str) -> Command:
    return Command(("ip", *words))


def _in_netns(netns: str, *argv: str) -> Command:
    return Command(("ip", "netns", "exec", netns, *argv))


def _elements(networks: Sequence[IPv4Network]) -> str:
    return "{ " + ", ".join(str(network) for network in networks) + " }"


def ruleset(allow: Sequence[IPv4Network], drop: Sequence[IPv4Network], protected: Sequence[IPv4Network]) -> str:
    """
    The nftables ruleset of an isolated VM's namespace.

    :param allow: the group's ``allow`` list.
    :param drop: the group's ``drop`` list.
    :param protected: what the VM may not reach when there is no ``allow``
        list (the host's addresses, the daemon's ranges).
    """
    outbound = [f'iifname "{NS_TAP}" ip daddr {_elements(drop)} drop'] if drop else []
    if allow:
        outbound.append(f'iifname "{NS_TAP}" ip daddr {_elements(allow)} accept')
    else:
        if protected:
            outbound.append(f'iifname "{NS_TAP}" ip daddr {_elements(protected)} drop')
        outbound.append(f'iifname "{NS_TAP}" accept')
    rules = "\n".join(f"        {rule}" for rule in outbound)
    return f"""table inet {NFT_TABLE} {{
    chain input {{
        type filter hook input priority 0; policy drop;
        ct state established,related accept
    }}
    chain forward {{
        type filter hook forward priority 0; policy drop;
        ct state established,related accept
{rules}
    }}
}}
"""


def isolated_setup(
    lease: Lease, allow: Sequence[IPv4Network], drop: Sequence[IPv4Network], protected: Sequence[IPv4Network]
) -> list[Command]:
    """
    The commands that build an isolated VM's namespace, in order.

    :param lease: the VM's address and gateway.
    :param allow: the group's ``allow`` list.
    :param drop: the group's ``drop`` list.
    :param protected: what the VM may not reach without an ``allow`` list.
    """
    ip = lease.ip
    netns, veth = netns_name(ip), veth_name(ip)
    gateway = f"{lease.gateway}/{lease.address.network.prefixlen}"
    return [
        _ip("netns", "add", netns),
        _ip("link", "add", veth, "type", "veth", "peer", "name", NS_VETH, "netns", netns),
        _ip("link", "set", veth, "up"),
        # Proxy ARP on the host end too, so that the namespace's device
        # route reaches beyond the host's own addresses where the operator
        # lets the host forward (the daemon never turns forwarding on).
        Command(("sh", "-c", f"echo 1 > /proc/sys/net/ipv4/conf/{veth}/proxy_arp")),
        _ip("route", "replace", str(lease.address.network), "dev", veth),
        _ip("-n", netns, "link", "set", "lo", "up"),
        _ip("-n", netns, "link", "set", NS_VETH, "up"),
        _ip("-n", netns, "tuntap", "add", "dev", NS_TAP, "mode", "tap"),
        _ip("-n", netns, "link", "set", NS_TAP, "address", gateway_mac(ip)),
        _ip("-n", netns, "addr", "add", gateway, "dev", NS_TAP),
        _ip("-n", netns, "link", "set", NS_TAP, "up"),
        _ip("-n", netns, "route", "add", "default", "dev", NS_VETH),
        _in_netns(
            netns, "sh", "-c",
            f"echo 1 > /proc/sys/net/ipv4/ip_forward && echo 1 > /proc/sys/net/ipv4/conf/{NS_VETH}/proxy_arp",
        ),
        Command(("ip", "netns", "exec", netns, "nft", "-f", "-"), ruleset(allow, drop, protected).encode()),
    ]


def isolated_teardown(ip: IPv4Address) -> list[Command]:
    """
    The commands that remove the namespace of the isolated VM of ``ip`` (its
    tap, veth end and nftables table go with it; the host end of the veth and
    its route too).  Each may fail when the object is already gone; the caller ignores that.
    """
    return [_ip("netns", "delete", netns_name(ip)), _ip("link", "delete", veth_name(ip))]


def bridge_setup(lease: Lease, bridge: str) -> list[Command]:
    """The commands that give the bridged VM of ``lease`` its tap on ``bridge``."""
    tap = tap_name(lease.ip)
    return [
        _ip("tuntap", "add", "dev", tap, "mode", "tap"),
        _ip("link", "set", tap, "master", bridge),
        _ip("link", "set", tap, "up"),
    ]


def bridge_takeover(lease: Lease, bridge: str, tap: str) -> list[Command]:
    """
    The commands that give the bridged VM of ``lease`` the tap ``tap`` of an
    already running QEMU (a template's spare VM) in place of the one
    :func:`bridge_setup` made: that one removed, ``tap`` renamed while it is
    down (the QEMU holding it follows), put on ``bridge`` and brought up.
    """
    own = tap_name(lease.ip)
    return [
        _ip("link", "delete", own),
        _ip("link", "set", "dev", tap, "down"),
        _ip("link", "set", "dev", tap, "name", own),
        _ip("link", "set", own, "master", bridge),
        _ip("link", "set", own, "up"),
    ]


def bridge_teardown(ip: IPv4Address) -> list[Command]:
    """The command that removes the tap of the bridged VM of ``ip`` (it may be gone already)."""
    return [_ip("link", "delete", tap_name(ip))]


def bridge_create(bridge: str, gateway: str) -> list[Command]:
    """The commands that make a group's bridge with the gateway address on it."""
    return [
        _ip("link", "add", bridge, "type", "bridge"),
        _ip("addr", "add", gateway, "dev", bridge),
        _ip("link", "set", bridge, "up"),
    ]


__all__ = [
    "Command",
    "NETNS_PREFIX",
    "NFT_TABLE",
    "NS_TAP",
    "NS_VETH",
    "TAP_PREFIX",
    "VETH_PREFIX",
    "address_of",
    "bridge_takeover",
    "bridge_create",
    "bridge_setup",
    "bridge_teardown",
    "isolated_setup",
    "isolated_teardown",
    "gateway_mac",
    "mac_address",
    "netns_name",
    "ruleset",
    "suffix",
    "tap_name",
    "veth_name",
]
