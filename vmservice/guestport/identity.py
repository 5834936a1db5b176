# -*- test-case-name: tests.guestport.test_identity -*-
"""
A guest's identity: what makes a VM cloned from a template (or forked from a
running node) a node of its own rather than one more copy of its origin.

:class:`GuestIdentity` is what the guest adopts (fresh entropy for its random
generator, the wall clock, a hostname, a machine-id, and eth0's MAC, address and
gateway); :func:`new_identity` draws one; :class:`IAdoption` is what adopts it in
the guest (the agent connection, :class:`vmservice.agent.client.AgentClient`).
"""

from __future__ import annotations

import os
from typing import Callable

from attrs import frozen
from zope.interface import Interface

__all__ = ["ENTROPY_SIZE", "GuestIdentity", "GuestNet", "IAdoption", "new_identity"]

#: Bytes of entropy each identity carries for the guest's random generator.
ENTROPY_SIZE = 64


@frozen
class GuestNet:
    """
    eth0 of a guest.

    :ivar mac: its MAC, lowercase (``52:54:00:0a:00:05``).
    :ivar address: its address with the prefix (``10.0.0.5/24``).
    :ivar gateway: the default route's gateway, or ``None`` for none.
    """

    mac: str
    address: str
    gateway: str | None


@frozen
class GuestIdentity:
    """
    What a guest adopts to become a node of its own.

    :ivar hostname: the node's hostname.
    :ivar machine_id: ``/etc/machine-id``: 32 lowercase hex digits.
    :ivar entropy: :data:`ENTROPY_SIZE` random bytes for the guest's random generator.
    :ivar wall_clock_ns: the wall clock to set, nanoseconds since the epoch.
    :ivar net: eth0's identity, or ``None`` for a node without a network.
    """

    hostname: str
    machine_id: str
    entropy: bytes
    wall_clock_ns: int
    net: GuestNet | None


def new_identity(
    hostname: str,
    net: GuestNet | None,
    wall_clock_ns: int,
    urandom: Callable[[int], bytes] = os.urandom,
) -> GuestIdentity:
    """
    A new identity: a random machine-id (a version 4 UUID's digits, as
    ``systemd-machine-id-setup`` makes them) and fresh entropy.

    :param wall_clock_ns: the time to set, e.g. ``int(reactor.seconds() * 1e9)``
        (``time.time_ns()`` outside a reactor).
    :param urandom: where random bytes come from; tests replace it.
    """
    raw = bytearray(urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    return GuestIdentity(
        hostname=hostname,
        machine_id=raw.hex(),
        entropy=urandom(ENTROPY_SIZE),
        wall_clock_ns=wall_clock_ns,
        net=net,
    )


class IAdoption(Interface):
    """Makes a guest adopt an identity (the agent connection provides it)."""

    async def adopt(identity: GuestIdentity) -> None:
        """
        Make the guest adopt ``identity``: its random generator reseeded first of
        all, then its clock, hostname, machine-id and (with a net) eth0's MAC,
        address and default route.  Completes once the guest applied all of it
        *and* the agent connection is usable again in the guest's new session
        (a new guest nonce), so that provisioning, exec and the rest may follow
        at once.

        :raises vmservice.errors.AgentError: kind ``ADOPTION_FAILED`` when a step
            failed in the guest (the message names it), ``UNSUPPORTED`` for an
            agent without the operation, ``UNAVAILABLE`` when the agent is not
            connected or was lost meanwhile.
        :raises ValueError: ``identity`` is not valid (checked before anything
            is sent).
        """
