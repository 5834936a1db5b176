# -*- test-case-name: tests.nodes.test_cloning -*-
"""
What a new clone needs before anything else reaches it: an identity of its
own (:class:`ICloneAdoption`), since it continues the template's guest with
the template's random generator state, hostname, clock, machine-id and
network settings.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from zope.interface import Interface

from ..hypervisors.base import NetSpec
from .guest import IGuestConnection
from .model import NodeRecord


class ICloneAdoption(Interface):
    """Gives a new clone an identity of its own (see ``docs/warm-start.md``)."""

    def adopt(record: NodeRecord, net: NetSpec | None, agent: IGuestConnection) -> Deferred[None]:
        """
        Make the clone of ``record`` its own: reseed its random generator,
        set its clock, hostname, machine-id and network (``net``) through
        ``agent``; fires once the guest applied it all and ``agent`` may be
        used in the new guest session.
        """


__all__ = ["ICloneAdoption"]
