# -*- test-case-name: tests.config.test_values -*-
"""
The values of the configuration file that are more than YAML's own types,
as the records' fields declare them: a size (:data:`Size`: an integer or
``2G``), a count of spare VMs (:data:`SpareCount`: a boolean or a number), a
PCI address in quotes (:data:`PciText`), an IPv4 network or an address with
its prefix length; and :data:`CONVERTER`, the strict converter that reads
each of them.

A field typed ``Size`` is an ``int`` to every reader of the record; the
annotation only tells the converter how the file writes it.
"""

from __future__ import annotations

import ipaddress
from ipaddress import IPv4Interface, IPv4Network
from typing import Annotated

import cattrs

from ..structuring import BadValue, describe, strict_converter
from ..wire.tunnelport import MAX_TUNNEL_PORTS
from .defaults import MAX_WARM_SPARE
from .units import SIZE_HINT, parse_size

#: A byte count written as an integer or a size string (see :func:`~vmservice.config.units.parse_size`).
Size = Annotated[int, "size"]

#: ``warm_spare``: a boolean (``true`` is 1, ``false`` 0) or a count from 0 to :data:`MAX_WARM_SPARE`.
SpareCount = Annotated[int, "spare count"]

#: ``tunnel_ports``: a count of tunnel ports from 0 to :data:`~vmservice.wire.tunnelport.MAX_TUNNEL_PORTS`.
TunnelPortCount = Annotated[int, "tunnel port count"]

#: A PCI address as written; YAML 1.1 reads an unquoted ``01:00.0`` as a
#: base-60 number, so the message says to quote it.
PciText = Annotated[str, "PCI address"]


def _structure_size(value: object, _type: object) -> int:
    """A :data:`Size`: a non-negative integer, or a size string (:func:`~vmservice.config.units.parse_size`)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise BadValue(f"bad size {value} (must not be negative)")
        return value
    if isinstance(value, str):
        try:
            return parse_size(value)
        except ValueError as error:
            raise BadValue(str(error)) from None
    raise BadValue(f"expected a size ({SIZE_HINT}), got {describe(value)}")


def _structure_spare_count(value: object, _type: object) -> int:
    """A :data:`SpareCount`: a boolean, or a count up to :data:`~vmservice.config.defaults.MAX_WARM_SPARE`."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        if not 0 <= value <= MAX_WARM_SPARE:
            raise BadValue(f"warm_spare {value} must be from 0 to {MAX_WARM_SPARE} (or true, false)")
        return value
    raise BadValue(f"expected a boolean or a count of spare VMs (0 to {MAX_WARM_SPARE}), got {describe(value)}")


def _structure_tunnel_port_count(value: object, _type: object) -> int:
    """A :data:`TunnelPortCount`: a count from 0 to :data:`~vmservice.wire.tunnelport.MAX_TUNNEL_PORTS`."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value <= MAX_TUNNEL_PORTS:
            raise BadValue(f"tunnel_ports {value} must be from 0 to {MAX_TUNNEL_PORTS}")
        return value
    raise BadValue(f"expected a count of tunnel ports (0 to {MAX_TUNNEL_PORTS}), got {describe(value)}")


def _structure_pci_text(value: object, _type: object) -> str:
    """A :data:`PciText`: a string (its form is checked as the group is resolved)."""
    if not isinstance(value, str):
        raise BadValue(f"expected a PCI address in quotes, e.g. \"0000:01:00.0\" (YAML reads one without quotes "
                       f"as a number), got {describe(value)}")
    return value


def _cidr_text(value: object) -> str:
    """``value`` if it is a string with a prefix length."""
    if not isinstance(value, str):
        raise BadValue(f"expected a CIDR such as 10.0.0.0/8, got {describe(value)}")
    if "/" not in value:
        raise BadValue(f"bad CIDR {value!r} (missing prefix length, e.g. {value}/32)")
    return value


def _ipv4_interface(value: object, what: str, example: str) -> IPv4Interface:
    """An IPv4 address with a prefix length (``10.0.0.0/8``); ``what`` names it in errors."""
    text = _cidr_text(value)
    try:
        interface = ipaddress.ip_interface(text)
    except ValueError:
        raise BadValue(f"bad {what} {text!r} (expected e.g. {example})") from None
    if interface.version != 4:
        raise BadValue(f"bad {what} {text!r} (only IPv4 is supported)")
    return IPv4Interface(interface)


def _structure_network(value: object, _type: object) -> IPv4Network:
    """An IPv4 network, its host bits clear (``10.0.0.0/8``)."""
    interface = _ipv4_interface(value, "CIDR", "10.0.0.0/8")
    if interface.ip != interface.network.network_address:
        raise BadValue(f"bad CIDR {str(interface)!r} (host bits set; did you mean {interface.network}?)")
    return interface.network


def _structure_interface(value: object, _type: object) -> IPv4Interface:
    """An IPv4 host address with its network's prefix length (``192.168.137.1/24``)."""
    interface = _ipv4_interface(value, "address", "192.168.137.1/24")
    network = interface.network
    if network.prefixlen < 31 and interface.ip in (network.network_address, network.broadcast_address):
        raise BadValue(f"bad address {str(interface)!r} (not a host address of {network})")
    return interface


def _make_converter() -> cattrs.Converter:
    """
    The strict converter with the configuration's own value types (sizes,
    CIDRs, addresses) registered before its first use.
    """
    converter = strict_converter()
    converter.register_structure_hook_func(lambda type_: type_ == Size, _structure_size)
    converter.register_structure_hook_func(lambda type_: type_ == PciText, _structure_pci_text)
    converter.register_structure_hook_func(lambda type_: type_ == SpareCount, _structure_spare_count)
    converter.register_structure_hook_func(lambda type_: type_ == TunnelPortCount, _structure_tunnel_port_count)
    converter.register_structure_hook(IPv4Network, _structure_network)
    converter.register_structure_hook(IPv4Interface, _structure_interface)
    return converter


#: The converter the configuration is read with (its hooks registered before its first use).
CONVERTER = _make_converter()
