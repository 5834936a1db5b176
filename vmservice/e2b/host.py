# -*- test-case-name: tests.e2b.test_host -*-
"""
What the sandboxes need of the fleet, as one narrow interface
(:class:`SandboxHost`), and :class:`FleetHost`, which implements it over
:class:`~vmservice.nodes.fleet.Fleet`: a sandbox's node is made with its id
as hostname and waits for its agent; a pause is the node's suspend, a
resume its restore; a kill its delete.
"""

from __future__ import annotations

from typing import Callable, Protocol

from twisted.internet.defer import Deferred

from ..guestport.guest import IGuest
from ..nodes.events import EventType, NodeEvent
from ..nodes.fleet import Fleet
from ..nodes.model import CreateRequest, NodeRecord, Status, Wait
from ..nodes.stats import Snapshot

#: The tag of every sandbox's node (the Slicer API shows which nodes are sandboxes).
SANDBOX_TAG = "e2b.dev/sandbox"
#: Seconds a sandbox's node may take to boot (or be restored) until its agent answers.
BOOT_TIMEOUT = 180.0


class SandboxHost(Protocol):
    """The nodes under the sandboxes."""

    def recovered(self) -> Deferred[None]:
        """Fires once the nodes found at the start are known."""

    def node(self, hostname: str) -> NodeRecord:
        """The node ``hostname`` as clients see it; :class:`~vmservice.errors.NotFound` when there is none."""

    def disk_bytes(self, group: str) -> int:
        """The disk size of group ``group``'s nodes."""

    async def create(self, group: str, hostname: str) -> NodeRecord:
        """A new node of ``group`` called ``hostname``, its agent answering."""

    async def delete(self, group: str, hostname: str) -> None:
        """Delete node ``hostname``."""

    async def suspend(self, hostname: str) -> None:
        """Suspend node ``hostname`` to disk."""

    async def restore(self, hostname: str) -> None:
        """Restore a suspended node, its agent answering."""

    async def snapshot(self, hostname: str) -> Snapshot | None:
        """A sample of the node's guest, ``None`` when none can be taken now."""

    async def guest(self, hostname: str) -> IGuest:
        """Node ``hostname``'s guest, its agent answering (woken first if its idle timer put it to sleep)."""

    def hold(self, hostname: str) -> Callable[[], None]:
        """Keep node ``hostname``'s idle timer still until the returned function is called."""

    def on_deleted(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call ``listener`` with every deleted node's hostname; returns a stop."""


def is_paused(record: NodeRecord) -> bool:
    """
    Whether a sandbox on node ``record`` is paused: its node is suspended, and
    not by a group's idle timer (such a node wakes at the next request: for E2B
    it runs).
    """
    return record.status is Status.SUSPENDED and not record.idle_suspended


class FleetHost:
    """:class:`SandboxHost` over the fleet."""

    def __init__(self, fleet: Fleet, boot_timeout: float = BOOT_TIMEOUT) -> None:
        self._fleet = fleet
        self._boot_timeout = boot_timeout

    def recovered(self) -> Deferred[None]:
        return self._fleet.recovered()

    def node(self, hostname: str) -> NodeRecord:
        return self._fleet.node(hostname)

    def disk_bytes(self, group: str) -> int:
        return self._fleet.group(group).storage_size

    async def create(self, group: str, hostname: str) -> NodeRecord:
        request = CreateRequest(hostname=hostname, tags=(SANDBOX_TAG,))
        return await self._fleet.create(group, request, Wait.AGENT, self._boot_timeout)

    async def delete(self, group: str, hostname: str) -> None:
        await self._fleet.delete(group, hostname)

    async def suspend(self, hostname: str) -> None:
        await self._fleet.snapshots.suspend(hostname)

    async def restore(self, hostname: str) -> None:
        await self._fleet.snapshots.restore(hostname, Wait.AGENT, self._boot_timeout)

    async def snapshot(self, hostname: str) -> Snapshot | None:
        return (await self._fleet.stats.one(hostname)).snapshot

    async def guest(self, hostname: str) -> IGuest:
        return await self._fleet.guest(hostname)

    def hold(self, hostname: str) -> Callable[[], None]:
        return self._fleet.hold(hostname)

    def on_deleted(self, listener: Callable[[str], None]) -> Callable[[], None]:
        def heard(event: NodeEvent) -> None:
            if event.type is EventType.DELETED:
                listener(event.hostname)

        return self._fleet.events.listen(heard)


__all__ = ["BOOT_TIMEOUT", "FleetHost", "SANDBOX_TAG", "SandboxHost", "is_paused"]
