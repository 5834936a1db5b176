# -*- test-case-name: tests.wire.test_adoption -*-
"""
The ``adopt`` request as a pure codec shared by the host and the guest (stdlib
only, like the rest of :mod:`vmservice.wire`).

A guest cloned from a template is the template until it *adopts* an identity of
its own: fresh entropy for the kernel's random generator, the wall clock, a
hostname, a machine-id and, with a network, eth0's MAC, address and default
route.  The request is one stream:

- the OPEN header ``{"op": "adopt", "hostname": ..., "machine_id": ...,
  "wall_clock_ns": N, "entropy_size": E, "net": {"mac", "address", "gateway"}
  or null}``;
- the body: the ``E`` bytes of entropy (kept out of the header, which may be
  logged);
- the answer: ``{"previous_ns": N}`` (the guest's wall clock before), or the
  step that failed: ``{"error": "adoption_failed", "step": ..., "message": ...}``.

``{"op": "adopt", "prepare": true}`` without a body only loads the guest's
handler (a template does it before it is frozen) and answers ``{"prepared": true}``.

Right after answering, the agent starts a new session (a new HELLO with a nonce
drawn after the reseed); ``docs/agent-protocol.md`` documents it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional

__all__ = [
    "PREPARE",
    "AdoptionError",
    "AdoptionRequest",
    "MAX_ENTROPY",
    "MIN_ENTROPY",
    "OP",
    "decode_adoption",
    "encode_adoption",
]

#: The operation's name in the OPEN header.
OP = "adopt"
#: The header that only loads the guest's handler.
PREPARE = {"op": OP, "prepare": True}
#: Fewest and most bytes of entropy a request carries.
MIN_ENTROPY = 32
MAX_ENTROPY = 512
#: Largest wall clock (the kernel keeps time in signed 64-bit nanoseconds).
_MAX_CLOCK_NS = 2**63 - 1
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\Z")
_MACHINE_ID = re.compile(r"[0-9a-f]{32}\Z")
_MAC = re.compile(r"[0-9a-f]{2}(?::[0-9a-f]{2}){5}\Z")


class AdoptionError(ValueError):
    """The request is not a valid ``adopt`` request; the message says why."""


@dataclass(frozen=True)
class AdoptionRequest:
    """
    What a guest adopts.

    :ivar hostname: a host name of at most 64 characters (``sethostname``'s limit).
    :ivar machine_id: 32 lowercase hex digits, not all zero.
    :ivar wall_clock_ns: the wall clock, nanoseconds since the epoch.
    :ivar entropy: :data:`MIN_ENTROPY` to :data:`MAX_ENTROPY` random bytes from the host.
    :ivar mac: eth0's new MAC (lowercase, a unicast address), or ``None`` without a network.
    :ivar address: eth0's address with its prefix (``10.0.0.5/24``), with ``mac``.
    :ivar gateway: the default route's gateway, or ``None`` for none.
    """

    hostname: str
    machine_id: str
    wall_clock_ns: int
    entropy: bytes
    mac: Optional[str] = None
    address: Optional[str] = None
    gateway: Optional[str] = None


def _ipv4(text: object) -> bool:
    if not isinstance(text, str):
        return False
    parts = text.split(".")
    return len(parts) == 4 and all(p.isdigit() and p.isascii() and len(p) <= 3 and int(p) <= 255 for p in parts)


def _check(request: AdoptionRequest) -> None:
    if not isinstance(request.hostname, str) or len(request.hostname) > 64 or not _HOSTNAME.match(request.hostname):
        raise AdoptionError(f"bad hostname {request.hostname!r}")
    if not isinstance(request.machine_id, str) or not _MACHINE_ID.match(request.machine_id) \
            or request.machine_id == "0" * 32:
        raise AdoptionError("machine_id must be 32 lowercase hex digits, not all zero")
    clock = request.wall_clock_ns
    if type(clock) is not int or not 0 < clock <= _MAX_CLOCK_NS:
        raise AdoptionError(f"wall_clock_ns must be a positive integer (nanoseconds), not {clock!r}")
    if not isinstance(request.entropy, bytes) or not MIN_ENTROPY <= len(request.entropy) <= MAX_ENTROPY:
        raise AdoptionError(f"entropy must be {MIN_ENTROPY} to {MAX_ENTROPY} bytes")
    if request.mac is None:
        if request.address is not None or request.gateway is not None:
            raise AdoptionError("an address or a gateway needs a mac")
        return
    if not isinstance(request.mac, str) or not _MAC.match(request.mac) or int(request.mac[:2], 16) & 1:
        raise AdoptionError(f"bad mac {request.mac!r}: six lowercase hex pairs, a unicast address")
    address, slash, prefix = request.address.partition("/") if isinstance(request.address, str) else ("", "", "")
    if not (_ipv4(address) and slash and prefix.isdigit() and prefix.isascii() and 0 <= int(prefix) <= 32
            and len(prefix) <= 2):
        raise AdoptionError(f"bad address {request.address!r}: an IPv4 address with its prefix")
    if request.gateway is not None and not _ipv4(request.gateway):
        raise AdoptionError(f"bad gateway {request.gateway!r}")


def encode_adoption(request: AdoptionRequest) -> tuple[dict[str, Any], bytes]:
    """
    The OPEN header and the body of ``request``.

    :raises AdoptionError: the request is not valid.
    """
    _check(request)
    net = None
    if request.mac is not None:
        net = {"mac": request.mac, "address": request.address, "gateway": request.gateway}
    header = {
        "op": OP,
        "hostname": request.hostname,
        "machine_id": request.machine_id,
        "wall_clock_ns": request.wall_clock_ns,
        "entropy_size": len(request.entropy),
        "net": net,
    }
    return header, request.entropy


def entropy_size(header: Mapping[str, Any]) -> int:
    """
    How many bytes of body the header announces.

    :raises AdoptionError: none that is valid.
    """
    size = header.get("entropy_size")
    if type(size) is not int or not MIN_ENTROPY <= size <= MAX_ENTROPY:
        raise AdoptionError(f"entropy_size must be {MIN_ENTROPY} to {MAX_ENTROPY}, not {size!r}")
    return size


def decode_adoption(header: Mapping[str, Any], body: bytes) -> AdoptionRequest:
    """
    The request an OPEN header and its body make.

    :raises AdoptionError: they are not a valid request.
    """
    if header.get("op") != OP:
        raise AdoptionError(f"not an {OP!r} request")
    if len(body) != entropy_size(header):
        raise AdoptionError("the body's length is not entropy_size")
    net = header.get("net")
    if net is not None and not isinstance(net, dict):
        raise AdoptionError("net must be an object or null")
    request = AdoptionRequest(
        hostname=header.get("hostname"),  # type: ignore[arg-type]  # checked below
        machine_id=header.get("machine_id"),  # type: ignore[arg-type]
        wall_clock_ns=header.get("wall_clock_ns"),  # type: ignore[arg-type]
        entropy=bytes(body),
        mac=net.get("mac") if net is not None else None,
        address=net.get("address") if net is not None else None,
        gateway=net.get("gateway") if net is not None else None,
    )
    if net is not None and request.mac is None:
        raise AdoptionError("net needs a mac")
    _check(request)
    return request
