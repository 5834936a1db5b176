# -*- test-case-name: tests.nodes.warm.test_cloning -*-
"""
What a new clone needs before anything else reaches it: an identity of its
own (:class:`ICloneAdoption`), since it continues the template's guest with
the template's random generator state, hostname, clock, machine-id and
network settings.  :class:`IdentityAdoption` gives it one through its agent
connection (:class:`~.identity.IAdoption`).
"""

from __future__ import annotations

import os
from typing import Callable

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from zope.interface import Interface, implementer

from ...guestport.guest import IGuestConnection
from ...guestport.identity import GuestNet, IAdoption, new_identity
from ...hypervisors.base import NetSpec
from ..model import NodeRecord

log = Logger()


class ICloneAdoption(Interface):
    """Gives a new clone an identity of its own (see ``docs/warm-start.md``)."""

    def prepare(agent: IGuestConnection) -> Deferred[None]:
        """
        Make a template's guest load what adopting needs, adopting nothing,
        before it is frozen (so its clones adopt at once).
        """

    def adopt(record: NodeRecord, net: NetSpec | None, agent: IGuestConnection) -> Deferred[None]:
        """
        Make the clone of ``record`` its own: reseed its random generator,
        set its clock, hostname, machine-id and network (``net``) through
        ``agent`` once it answers; fires once the guest applied it all and
        ``agent`` may be used in the new guest session.
        """

    def rehearse(name: str, agent: IGuestConnection) -> Deferred[None]:
        """
        Make a spare VM's guest adopt a throwaway identity (host name ``name``,
        no network) ahead of its node, so that the node's adoption runs code
        that guest has run already (under TCG, code is translated anew in
        every VM at its first run).
        """


@implementer(ICloneAdoption)
class IdentityAdoption:
    """
    A new identity (:func:`~.identity.new_identity`) for each clone, adopted
    through its agent connection, which provides :class:`~.identity.IAdoption`.

    :param wall_clock: the time in nanoseconds since the epoch, set in the guest.
    :param urandom: where the machine-id and the entropy come from.
    """

    def __init__(self, wall_clock: Callable[[], int], urandom: Callable[[int], bytes] = os.urandom) -> None:
        self._wall_clock = wall_clock
        self._urandom = urandom

    def prepare(self, agent: IGuestConnection) -> Deferred[None]:
        # The agent connection's own preparation (not part of the guest interface).
        prepare: Callable[[], object] = getattr(agent, "prepare_adoption")
        return Deferred.fromCoroutine(_awaited(prepare))

    def adopt(self, record: NodeRecord, net: NetSpec | None, agent: IGuestConnection) -> Deferred[None]:
        return Deferred.fromCoroutine(self._adopt(record.hostname, net, agent))

    def rehearse(self, name: str, agent: IGuestConnection) -> Deferred[None]:
        return Deferred.fromCoroutine(self._adopt(name, None, agent))

    async def _adopt(self, hostname: str, net: NetSpec | None, agent: IGuestConnection) -> None:
        await agent.when_ready()
        guest_net = GuestNet(mac=net.mac.lower(), address=net.address, gateway=net.gateway) if net else None
        identity = new_identity(hostname, guest_net, self._wall_clock(), self._urandom)
        await IAdoption(agent).adopt(identity)


async def _awaited(call: Callable[[], object]) -> None:
    await call()  # type: ignore[misc]


async def prepare_children(hostname: str, agent: IGuestConnection | None, adoption: ICloneAdoption) -> None:
    """
    Have a fork's parent's guest (``agent``) load what adopting needs before
    it is frozen (as a template does), so its children adopt at once; one
    that cannot (no agent now, an older agent) is forked all the same, its
    children slower.
    """
    if agent is None or not agent.connected:
        return
    try:
        await adoption.prepare(agent)
    except Exception as error:
        log.info("node {hostname} could not prepare its children's adoption: {error}", hostname=hostname, error=error)


__all__ = ["ICloneAdoption", "IdentityAdoption", "prepare_children"]
